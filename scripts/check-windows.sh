#!/usr/bin/env bash
# The Windows build, checked from this Linux machine (Debian/Ubuntu, x86-64): cross-builds the
# release for x86_64-pc-windows-gnu (GNU toolchain; llama.cpp's DLLs beside the program: a CPU
# backend per instruction-set level and the Vulkan backend, loaded at start), then under Wine:
#   1. `--version`, and `--help` naming the real %APPDATA% / %LOCALAPPDATA% paths;
#   2. `--headless --engine sim` answering a chat completion sent from the Linux side;
#   3. the worker dies with the app: a simulated worker that ignores stdin EOF
#      (`--sim-fault ignore-stdin-eof`, test only) is gone once the app is killed (job object);
#   4. the real default model: `generate` (tokens/s beside the Linux build, same threads) and a
#      headless chat completion;
#   5. the window under Xvfb, a screenshot (docs/windows-dashboard.png), and a second start
#      refused by the instance lock;
#   6. the same program on Mesa's software Vulkan device through Wine's winevulkan, without
#      a device and without a Vulkan driver, and its NSIS installer: installed silently, the
#      installed program run, uninstalled, and what is left checked (the user's config stays,
#      the program, its DLLs and its registry entry go) (scripts/windows/check-vulkan.sh
#      --release; STRATA_WINDOWS_SKIP_VULKAN=1 skips it, and with it the installer).
# Idempotent: installs what it needs (apt, rustup target), keeps its Wine prefix and build.
# Wine, not Windows: MSVC, CUDA and a real desktop are not checked here (README, Windows).
#
#   scripts/check-windows.sh            # everything
#   STRATA_WINDOWS_SKIP_GUI=1 ...       # no window check (no Xvfb)
#   STRATA_LINUX_EXE=path ...           # the Linux binary to compare `generate` with
#                                       # [default: target/release/strata-desk, built if absent]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=x86_64-pc-windows-gnu
WORK=${STRATA_WINDOWS_WORK:-$HOME/.cache/strata-desk/windows-check}
THREADS=${STRATA_WINDOWS_THREADS:-2}
mkdir -p "$WORK"
export WINEPREFIX=$WORK/prefix WINEARCH=win64 WINEDEBUG=-all
# The test-only ProcessPrng shim (scripts/windows/prng-shim.c) before Wine's own DLL.
export WINEDLLOVERRIDES="bcryptprimitives=n,b;mscoree,mshtml="
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    wineserver -k 2>/dev/null || true
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
fail() {
    echo "FAILED: $*" >&2
    exit 1
}
secs_since() { echo $(($(date +%s) - $1)); }

wait_http() { # URL SECONDS
    local deadline=$(($(date +%s) + $2))
    until curl -sf -o /dev/null "$1"; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.5
    done
}

wait_gone() { # PID SECONDS
    local deadline=$(($(date +%s) + $2))
    while kill -0 "$1" 2>/dev/null; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# The Linux PID of a Wine process whose command line holds all the given words.
wine_pid_of() {
    local pid cmd
    for pid in $(pgrep -f "$1" || true); do
        cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
        local all=1
        for word in "$@"; do [[ $cmd == *"$word"* ]] || all=0; done
        [ $all = 1 ] && echo "$pid" && return 0
    done
    return 1
}

wait_ready() { # PORT LOG: /health answers, then says the engine is ready
    wait_http "http://127.0.0.1:$1/health" 180 || { cat "$2"; fail "no /health on port $1"; }
    for _ in $(seq 1 120); do
        curl -s "http://127.0.0.1:$1/health" | grep -q '"ready"' && return 0
        sleep 1
    done
    cat "$2"
    fail "the engine on port $1 never became ready"
}

chat() { # PORT -> the completion's text
    curl -sf --max-time 300 "http://127.0.0.1:$1/v1/chat/completions" \
        -H 'content-type: application/json' \
        -d '{"model":"any","max_tokens":24,"messages":[{"role":"user","content":"Say hello to Windows."}]}' |
        python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["choices"][0]["message"]["content"])'
}

step "0. what this needs"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
missing=()
for pkg in wine wine64 nsis xvfb imagemagick curl python3; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
wine --version

step "1. cross-build (release, $TARGET)"
start=$(date +%s)
# Its own step, not inside `eval "$(...)"`, where its failure would go unseen.
vulkan_sdk=$(scripts/windows/vulkan-sdk.sh) || fail "scripts/windows/vulkan-sdk.sh failed"
eval "$vulkan_sdk"
scripts/windows/cross-build.sh --release --features vulkan
BUILD_SECS=$(secs_since "$start")
EXE=$ROOT/target/$TARGET/release/strata-desk.exe
DLL_DIR=$(dirname "$EXE")
echo "built $EXE ($(du -m "$EXE" | cut -f1) MiB, with $(du -cm "$DLL_DIR"/*.dll | tail -1 | cut -f1) MiB of DLLs) in ${BUILD_SECS} s (incremental if it was built before)"
HEADERS=$(x86_64-w64-mingw32-objdump -p "$EXE")
grep -q 'Subsystem.*(Windows GUI)' <<<"$HEADERS" ||
    fail "the program is not a Windows-subsystem (GUI) program"
for file in "$EXE" "$DLL_DIR"/*.dll; do
    if x86_64-w64-mingw32-objdump -p "$file" | grep -qiE 'DLL Name: lib(stdc|gomp|gcc|winpthread)'; then
        fail "$(basename "$file") needs MinGW runtime DLLs"
    fi
done
echo "subsystem: Windows GUI (no console window); DLLs it imports:"
sed -n 's/^\tDLL Name: /  /p' <<<"$HEADERS" | sort -fu | tr '\n' ' '
echo

step "Wine prefix ($WINEPREFIX)"
if [ ! -f "$WINEPREFIX/system.reg" ]; then
    wine wineboot --init >/dev/null 2>&1
    wineserver -w
fi
SHIM=$WORK/bcryptprimitives.dll
x86_64-w64-mingw32-gcc -O2 -shared -o "$SHIM" scripts/windows/prng-shim.c -ladvapi32
cp "$SHIM" "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
WIN_USER=$(wine cmd /c 'echo %USERNAME%' 2>/dev/null | tr -d '\r')
APPDATA_UNIX=$WINEPREFIX/drive_c/users/$WIN_USER/AppData/Roaming
LOCALAPPDATA_UNIX=$WINEPREFIX/drive_c/users/$WIN_USER/AppData/Local

step "2. --version and --help"
wine "$EXE" --version | tee "$WORK/version.txt"
grep -q "^strata-desk " "$WORK/version.txt" || fail "--version printed nothing"
wine "$EXE" --help >"$WORK/help.txt"
sed -n '/Paths on this machine/,$p' "$WORK/help.txt"
grep -qF 'AppData\Roaming\strata\strata-desk\config\config.json' "$WORK/help.txt" ||
    fail "--help does not name the config file under %APPDATA%"
grep -qF 'AppData\Local\strata\strata-desk' "$WORK/help.txt" ||
    fail "--help does not name the instance locks under %LOCALAPPDATA%"

step "3. --headless --engine sim, a chat completion from Linux"
PORT=18231
wine "$EXE" --headless --engine sim --port $PORT >"$WORK/sim.log" 2>&1 &
APP=$!
PIDS+=("$APP")
wait_http "http://127.0.0.1:$PORT/health" 120 || { cat "$WORK/sim.log"; fail "no /health"; }
answer=$(chat $PORT) || { cat "$WORK/sim.log"; fail "the chat completion failed"; }
echo "answer (simulated engine): $answer"
[ -n "$answer" ] || fail "an empty answer"
curl -s "http://127.0.0.1:$PORT/health"
echo
# the engine process's memory, read on Windows from its working set
rss=$(curl -s "http://127.0.0.1:$PORT/v1/scheduler" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["engine"]["worker_rss_bytes"] or 0)')
echo "engine process's working set: $rss bytes"
[ "$rss" -gt 0 ] || fail "worker_rss_bytes is not read on Windows"
if curl -s --max-time 2 -o /dev/null "http://$(hostname -I | awk '{print $1}'):$PORT/health"; then
    fail "the server answers beyond loopback by default"
fi
echo "not reachable beyond loopback by default: ok"
kill "$APP" 2>/dev/null || true
wait "$APP" 2>/dev/null || true

step "4. the worker dies with the app (job object), a worker that ignores stdin EOF"
wine "$EXE" --headless --engine sim --port $PORT --sim-fault ignore-stdin-eof >"$WORK/job.log" 2>&1 &
APP=$!
PIDS+=("$APP")
wait_http "http://127.0.0.1:$PORT/health" 120 || { cat "$WORK/job.log"; fail "no /health"; }
WORKER=$(wine_pid_of engine-worker ignore-stdin-eof) || fail "no worker process found"
echo "app pid $APP, worker pid $WORKER; killing the app (SIGKILL: a crash)"
kill -9 "$APP"
if wait_gone "$WORKER" 20; then
    echo "the worker is gone with the app: ok"
else
    fail "the worker outlived the app by 20 s"
fi

step "5. the real default model"
MODEL=${STRATA_TEST_MODEL:-$HOME/.local/share/strata-desk/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$MODEL" ] || MODEL=$(target/release/strata-desk fetch-model 2>/dev/null || cargo run -q --release -- fetch-model)
MODELS_WIN=$APPDATA_UNIX/strata/strata-desk/data/models
mkdir -p "$MODELS_WIN"
cp -u "$MODEL" "$MODELS_WIN/"
PROMPT="Write a short story about a lighthouse keeper."
LINUX_EXE=${STRATA_LINUX_EXE:-$ROOT/target/release/strata-desk}
[ -x "$LINUX_EXE" ] || cargo build --release --locked
SPEEDS=""
for threads in 1 "$THREADS"; do
    wine "$EXE" generate "$PROMPT" --max-tokens 128 --threads "$threads" \
        >"$WORK/generate-wine.txt" 2>"$WORK/generate-wine.err" || {
        cat "$WORK/generate-wine.err"
        fail "generate under Wine"
    }
    "$LINUX_EXE" generate "$PROMPT" --model "$MODEL" --max-tokens 128 --threads "$threads" \
        >"$WORK/generate-linux.txt" 2>"$WORK/generate-linux.err"
    wine_stats=$(grep -a 'tokens/s' "$WORK/generate-wine.err" | tail -1)
    linux_stats=$(grep -a 'tokens/s' "$WORK/generate-linux.err" | tail -1)
    same=$(python3 -c 'import sys
a, b = (open(p, encoding="utf-8", errors="replace").read() for p in sys.argv[1:])
n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
print("the same text" if a == b else f"the same first {n} of {len(a)} characters")' \
        "$WORK/generate-wine.txt" "$WORK/generate-linux.txt")
    echo "$threads thread(s): Wine  $wine_stats"
    echo "$threads thread(s): Linux $linux_stats ($LINUX_EXE)"
    echo "$threads thread(s): greedy output: $same"
    SPEEDS+="  $threads thread(s): Wine $wine_stats"$'\n'"  $threads thread(s): Linux $linux_stats"$'\n'
done
wine "$EXE" --headless --port $PORT --threads "$THREADS" >"$WORK/real.log" 2>&1 &
APP=$!
PIDS+=("$APP")
wait_ready $PORT "$WORK/real.log"
answer=$(chat $PORT) || { cat "$WORK/real.log"; fail "the chat completion on the real model failed"; }
echo "answer (SmolLM2-135M under Wine): $answer"
kill "$APP" 2>/dev/null || true
wait "$APP" 2>/dev/null || true

if [ "${STRATA_WINDOWS_SKIP_GUI:-0}" != 1 ]; then
    step "6. the window under Xvfb, and a second start refused"
    DISPLAY_NUM=:77
    # A screen larger than the window, so that Xvfb's pointer (at its centre) lies off the
    # window and opens no tooltip; the shot is trimmed to the window.
    Xvfb $DISPLAY_NUM -screen 0 2400x1600x24 >/dev/null 2>&1 &
    PIDS+=("$!")
    sleep 2
    GUI_PORT=18232
    DISPLAY=$DISPLAY_NUM wine "$EXE" --port $GUI_PORT --threads "$THREADS" >"$WORK/gui.log" 2>&1 &
    GUI=$!
    PIDS+=("$GUI")
    wait_ready $GUI_PORT "$WORK/gui.log"
    # Something to show: a long stream and a short request behind it.
    curl -s -o /dev/null --max-time 60 "http://127.0.0.1:$GUI_PORT/v1/chat/completions" \
        -H 'content-type: application/json' \
        -d '{"model":"any","max_tokens":400,"stream":true,"messages":[{"role":"user","content":"Tell a long story."}]}' &
    sleep 2
    curl -s -o /dev/null --max-time 60 "http://127.0.0.1:$GUI_PORT/v1/chat/completions" \
        -H 'content-type: application/json' -H 'x-priority: 5' \
        -d '{"model":"any","max_tokens":16,"messages":[{"role":"user","content":"Hi"}]}' &
    sleep 4
    import -display $DISPLAY_NUM -window root png:- |
        convert png:- -trim +repage "$ROOT/docs/windows-dashboard.png"
    echo "screenshot: docs/windows-dashboard.png ($(identify -format '%wx%h' "$ROOT/docs/windows-dashboard.png"))"
    # A second start on the same config is refused: it names the process holding it on stderr
    # (and in its window, which stays open to say it) and serves nothing.
    SECOND_PORT=$((GUI_PORT + 1))
    DISPLAY=$DISPLAY_NUM wine "$EXE" --port $SECOND_PORT >"$WORK/second.log" 2>&1 &
    SECOND=$!
    PIDS+=("$SECOND")
    for _ in $(seq 60); do
        grep -q "is running with this config" "$WORK/second.log" && break
        kill -0 "$SECOND" 2>/dev/null || break
        sleep 1
    done
    cat "$WORK/second.log"
    grep -q "is running with this config" "$WORK/second.log" ||
        fail "a second start did not say that the instance lock refused it"
    sleep 3
    if curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$SECOND_PORT/health"; then
        fail "the refused second start serves on port $SECOND_PORT"
    fi
    kill "$SECOND" 2>/dev/null || true
    wait "$SECOND" 2>/dev/null || true
    echo "second start refused: ok (said why, nothing on port $SECOND_PORT)"
    GUI_WORKER=$(wine_pid_of engine-worker) || fail "no worker process of the window found"
    kill -9 "$GUI"
    wait_gone "$GUI_WORKER" 20 || fail "the window's worker outlived the app"
    echo "the window's worker is gone with the app: ok"
    wineserver -k 2>/dev/null || true
fi

if [ "${STRATA_WINDOWS_SKIP_VULKAN:-0}" != 1 ]; then
    step "7. the Vulkan program (release) on the software Vulkan device through winevulkan"
    STRATA_TEST_MODEL=$MODEL STRATA_WINDOWS_WORK=$WORK scripts/windows/check-vulkan.sh --release
fi

step "summary"
echo "cross-build: ${BUILD_SECS} s"
echo "generate, 128 tokens, the same prompt and greedy sampling:"
printf '%s' "$SPEEDS"
echo "all Windows checks passed"
