#!/usr/bin/env bash
# The Windows program, one for every machine: llama.cpp as DLLs beside strata-desk.exe, ggml's
# CPU code once per instruction-set level (`ggml-cpu-<variant>.dll`, the best loaded at start)
# and the Vulkan backend as one more module (`ggml-vulkan.dll`), cross-built from here and run
# under Wine, on Mesa's software Vulkan device (lavapipe, reached through Wine's winevulkan)
# and without it:
#   1. the MinGW cross-build with `--features vulkan` (headers, glslc and the loader's import
#      library: scripts/windows/vulkan-sdk.sh), its DLLs copied beside it;
#   2. `--version` names the Vulkan backend and the CPU variant Wine's CPU gets; the program
#      itself does not import vulkan-1.dll (it starts on a machine with no GPU driver), the
#      Vulkan module does (the loader every GPU driver installs: no CUDA toolkit); no file
#      needs a MinGW runtime DLL;
#   3. `--headless` under Xvfb with GGML_VK_VISIBLE_DEVICES=0 (ggml skips a CPU-type device
#      unless named): /health names llvmpipe (Vulkan) with the test model's layers on it, and
#      a chat completion is answered;
#   4. the same without a display, where Wine's winevulkan has no graphics driver to reach the
#      device: the program says the CPU, and answers;
#   5. no Vulkan driver at all (Wine's vulkan-1.dll disabled): the Vulkan module does not load,
#      /health says why, and the engine answers on the CPU;
#   6. the installer (packaging/windows/strata-desk.nsi with DLL_DIR): installed silently, the
#      installed program runs and picks its CPU variant from Program Files, registered in
#      Apps & features; uninstalled, nothing of it left and the user's config kept.
# Usage: scripts/windows/check-vulkan.sh [cargo profile flags: --profile link-check (default),
# --release]. Needs the test model (`strata-desk fetch-model`, or STRATA_TEST_MODEL);
# installs Wine, Xvfb and NSIS when missing. ./scripts/test.sh runs it (STRATA_SKIP_WINDOWS_VULKAN=1
# skips); scripts/check-windows.sh runs it with --release.
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET=x86_64-pc-windows-gnu
WORK=${STRATA_WINDOWS_WORK:-$HOME/.cache/strata-desk/windows-check}
PORT=18239
DISPLAY_NUM=:79
mkdir -p "$WORK"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wineserver -k 2>/dev/null || true
}
trap cleanup EXIT
fail() {
    echo "FAILED: $*" >&2
    exit 1
}

profile=("$@")
[ ${#profile[@]} -gt 0 ] || profile=(--profile link-check)
dir=link-check
[[ " ${profile[*]} " == *" --release "* ]] && dir=release

echo "== Windows + Vulkan 1. the cross-build (${profile[*]})"
missing=()
for pkg in wine wine64 xvfb nsis; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    echo "installing: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
started=$(date +%s)
# Its own step, not inside `eval "$(...)"`, where its failure would go unseen.
vulkan_sdk=$(scripts/windows/vulkan-sdk.sh) || fail "scripts/windows/vulkan-sdk.sh failed"
eval "$vulkan_sdk"
scripts/windows/cross-build.sh "${profile[@]}" --features vulkan
BIN_DIR=target/$TARGET/$dir
EXE=$BIN_DIR/strata-desk.exe
echo "built $EXE in $(($(date +%s) - started)) s"

echo "== Windows + Vulkan 2. --version, and the DLLs it imports"
export WINEPREFIX=$WORK/prefix WINEARCH=win64 WINEDEBUG=-all
# The test-only ProcessPrng shim (scripts/windows/prng-shim.c) before Wine's own DLL.
export WINEDLLOVERRIDES="bcryptprimitives=n,b;mscoree,mshtml="
if [ ! -f "$WINEPREFIX/system.reg" ]; then
    wine wineboot --init >/dev/null 2>&1
    wineserver -w
fi
x86_64-w64-mingw32-gcc -O2 -shared -o "$WORK/bcryptprimitives.dll" scripts/windows/prng-shim.c \
    -ladvapi32
cp "$WORK/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
version=$(wine "$EXE" --version | tr -d '\r')
echo "$version"
[[ $version == *"backends: CPU, Vulkan"* ]] || fail "--version does not name Vulkan: $version"
[[ $version == *"CPU code for this CPU: "* ]] || fail "--version names no CPU variant: $version"
imports() { x86_64-w64-mingw32-objdump -p "$1" | sed -n 's/^\tDLL Name: //p' | sort -fu | tr '\n' ' '; }
echo "strata-desk.exe imports: $(imports "$EXE")"
for file in "$EXE" "$BIN_DIR"/*.dll; do
    if imports "$file" | grep -qiE 'lib(stdc|gomp|gcc|winpthread)'; then
        fail "$(basename "$file") needs a MinGW runtime DLL: $(imports "$file")"
    fi
done
if imports "$EXE" | grep -qi vulkan-1.dll; then
    fail "the program itself imports vulkan-1.dll: it would not start without a GPU driver"
fi
[ -f "$BIN_DIR/ggml-vulkan.dll" ] || fail "no ggml-vulkan.dll beside the program"
imports "$BIN_DIR/ggml-vulkan.dll" | grep -qi vulkan-1.dll ||
    fail "ggml-vulkan.dll does not import vulkan-1.dll"
echo "ggml-vulkan.dll imports: $(imports "$BIN_DIR/ggml-vulkan.dll")"
echo "CPU variants beside it: $(cd "$BIN_DIR" && ls ggml-cpu-*.dll | sed 's/^ggml-cpu-//; s/\.dll$//' | tr '\n' ' ')"
echo "no file needs a MinGW runtime DLL: ok"

MODEL=${STRATA_TEST_MODEL:-$HOME/.local/share/strata-desk/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$MODEL" ] || fail "no test model at $MODEL (strata-desk fetch-model)"
MODEL_WIN=$(winepath -w "$MODEL" 2>/dev/null)

serve() { # LOG [env...]: the app headless on the test model; prints its /health device
    # (backend|name|layers|model layers|picked by|CPU variant|backends not loaded)
    local log=$1
    shift
    env "$@" wine "$EXE" --headless --port $PORT --model "$MODEL_WIN" --ctx 2048 >"$log" 2>&1 &
    local app=$!
    PIDS+=("$app")
    local deadline=$(($(date +%s) + 300))
    until curl -s "http://127.0.0.1:$PORT/v1/scheduler" 2>/dev/null | grep -q '"state":"ready"'; do
        [ "$(date +%s)" -lt "$deadline" ] || { tail -20 "$log"; fail "not ready in 300 s"; }
        kill -0 "$app" 2>/dev/null || { tail -20 "$log"; fail "the app exited"; }
        sleep 1
    done
    curl -s "http://127.0.0.1:$PORT/health" | python3 -c '
import json, sys
d = json.load(sys.stdin)["engine"]["device"]
print(d["backend"], d["name"], d["gpu_layers"], d["model_layers"], d["picked_by"],
      d["cpu_variant"], "; ".join(d["backends_not_loaded"]), sep="|")'
}

answer() {
    curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'content-type: application/json' \
        -d '{"model":"any","max_tokens":12,"messages":[{"role":"user","content":"Say hello to Windows."}]}' |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])'
}

stop() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    PIDS=()
    wineserver -k 2>/dev/null || true
    sleep 1
}

echo "== Windows + Vulkan 3. on lavapipe through winevulkan (Xvfb $DISPLAY_NUM)"
Xvfb $DISPLAY_NUM -screen 0 1024x768x24 >/dev/null 2>&1 &
XVFB=$!
sleep 1
device=$(serve "$WORK/vulkan-device.log" DISPLAY=$DISPLAY_NUM GGML_VK_VISIBLE_DEVICES=0)
IFS='|' read -r backend name layers model_layers picked variant _ <<<"$device"
echo "device: $name ($backend), $layers of $model_layers layers on it ($picked); CPU code: $variant"
[ -n "$variant" ] && [ "$variant" != built-in ] || fail "no CPU variant in /health: $device"
grep -a "ready on" "$WORK/vulkan-device.log" || true
if [ "$backend" = Vulkan ]; then
    [[ $name == llvmpipe* ]] && [ "$layers" = "$model_layers" ] ||
        fail "the layers are not on the device: $device"
    text=$(answer) || fail "the chat completion on the device failed"
    echo "answer on the device: $text"
    [ -n "$text" ] || fail "an empty answer"
else
    # what was seen is said; the rest of the check still runs
    echo "Wine did not reach the Vulkan device (this Wine or its Vulkan driver): $device"
    grep -a "ggml_vulkan" "$WORK/vulkan-device.log" | head -3 || true
fi
stop
kill "$XVFB" 2>/dev/null || true

echo "== Windows + Vulkan 4. no display: no device for winevulkan, the CPU"
device=$(serve "$WORK/vulkan-nodisplay.log" -u DISPLAY GGML_VK_VISIBLE_DEVICES=0 \
    STRATA_LOG=warn,strata_desk::machine::modules=info)
IFS='|' read -r backend name layers model_layers picked variant _ <<<"$device"
echo "device: $name ($backend), $layers of $model_layers layers on a GPU ($picked); CPU code: $variant"
[ "$backend" = CPU ] && [ "$layers" = 0 ] || fail "expected the CPU without a display: $device"
# the variant picked, among which, and what loading the modules cost at start
grep -a "llama.cpp's CPU code:" "$WORK/vulkan-nodisplay.log" | head -1 | sed 's/^.*modules: //' ||
    fail "the log does not say which CPU variant was loaded"
text=$(answer) || fail "the chat completion on the CPU failed"
echo "answer on the CPU: $text"
# llama.cpp's JSON-schema converter is C++ in libllama-common.dll, called from the program
# (each file has its own static libstdc++): a schema it converts constrains the answer, and
# one it rejects (an exception thrown in the DLL, caught in the program) is a 400 that leaves
# the server answering
schema_request() { # SCHEMA -> the HTTP status, then the body
    curl -s -w '\n%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" \
        -H 'content-type: application/json' -d '{"model":"any","max_tokens":32,
        "messages":[{"role":"user","content":"Is the sky blue? Answer in JSON."}],
        "response_format":{"type":"json_schema","json_schema":{"name":"a","schema":'"$1"'}}}'
}
reply=$(schema_request '{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}')
json=$(head -1 <<<"$reply" | python3 -c 'import json,sys
r = json.load(sys.stdin); c = r["choices"][0]["message"]["content"]
assert isinstance(json.loads(c)["ok"], bool), c; print(c)') ||
    fail "the JSON-schema answer is not the schema's JSON: $reply"
echo "JSON-schema answer: $json"
reply=$(schema_request '{"type":"object","properties":{"a":{"$ref":"#/definitions/missing"}}}')
[ "$(tail -1 <<<"$reply")" = 400 ] && grep -q 'cannot be turned into a grammar' <<<"$reply" ||
    fail "a schema llama.cpp rejects did not get its 400: $reply"
echo "a schema llama.cpp rejects: 400, $(head -1 <<<"$reply" | cut -c1-160)"
text=$(answer) || fail "no answer after the rejected schema"
echo "and the server still answers: $text"
stop

echo "== Windows + Vulkan 5. no Vulkan driver (Wine's vulkan-1.dll disabled): the CPU"
device=$(serve "$WORK/vulkan-nodriver.log" \
    WINEDLLOVERRIDES="$WINEDLLOVERRIDES;vulkan-1=d" GGML_VK_VISIBLE_DEVICES=0)
IFS='|' read -r backend name layers model_layers picked variant not_loaded <<<"$device"
echo "device: $name ($backend), $layers layers on a GPU ($picked); CPU code: $variant"
echo "not loaded: $not_loaded"
# the system's own reason (the module's import, vulkan-1.dll, missing), not step 4's "no
# usable device"
[ "$backend" = CPU ] && [[ $not_loaded == "vulkan: LoadLibraryExW failed"* ]] ||
    fail "expected the CPU and the Vulkan module not loadable (no driver): $device"
grep -a "vulkan backend did not load" "$WORK/vulkan-nodriver.log" | head -1 ||
    fail "the log does not say the Vulkan backend did not load"
text=$(answer) || fail "the chat completion without a Vulkan driver failed"
echo "answer on the CPU: $text"
stop

echo "== Windows + Vulkan 6. the installer: the program and its DLLs"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
SETUP=$WORK/strata-desk-$VERSION-setup-$dir.exe
# zlib, not the script's solid lzma: a 100 MB test program packs in seconds
makensis -V2 -X"SetCompressor /FINAL zlib" -DVERSION="$VERSION" -DEXE="$PWD/$EXE" \
    -DDLL_DIR="$PWD/$BIN_DIR" -DOUT="$SETUP" packaging/windows/strata-desk.nsi
echo "installer: $SETUP ($(du -m "$SETUP" | cut -f1) MiB)"
INSTALLED=$WINEPREFIX/drive_c/Program\ Files/Strata\ Desk
MENU=$WINEPREFIX/drive_c/ProgramData/Microsoft/Windows/Start\ Menu/Programs
UNINSTALL_KEY='HKLM\Software\Microsoft\Windows\CurrentVersion\Uninstall\StrataDesk'
# The user's settings, which an uninstall leaves in place.
WIN_USER=$(wine cmd /c 'echo %USERNAME%' 2>/dev/null | tr -d '\r')
CONFIG=$WINEPREFIX/drive_c/users/$WIN_USER/AppData/Roaming/strata/strata-desk/config/config.json
mkdir -p "$(dirname "$CONFIG")"
MADE_CONFIG=0
[ -f "$CONFIG" ] || { echo '{"port": 18233}' >"$CONFIG" && MADE_CONFIG=1; }
wine "$SETUP" /S
wineserver -w
[ -f "$MENU/Strata Desk.lnk" ] || fail "the Start menu entry is missing: $(ls "$MENU")"
wine reg query "$UNINSTALL_KEY" /v DisplayVersion | grep -q "$VERSION" ||
    fail "not registered in Apps & features"
for file in "$BIN_DIR"/*.dll; do
    [ -f "$INSTALLED/$(basename "$file")" ] || fail "not installed: $(basename "$file")"
done
echo "installed: $(ls "$INSTALLED" | tr '\n' ' ')"
installed=$(env -u DISPLAY wine 'C:\Program Files\Strata Desk\strata-desk.exe' --version | tr -d '\r')
echo "the installed program: $installed"
[[ $installed == *"backends: CPU, Vulkan);"* ]] && [[ $installed == *"CPU code for this CPU: "* ]] ||
    fail "the installed program does not find its modules: $installed"
wine 'C:\Program Files\Strata Desk\Uninstall.exe' /S
wineserver -w
for _ in $(seq 1 60); do [ -e "$INSTALLED" ] || break; sleep 1; done
[ ! -e "$INSTALLED" ] || fail "left behind: $(ls "$INSTALLED")"
[ ! -e "$MENU/Strata Desk.lnk" ] || fail "the Start menu entry is left behind"
if wine reg query "$UNINSTALL_KEY" >/dev/null 2>&1; then
    fail "the uninstall entry is left behind"
fi
[ -f "$CONFIG" ] || fail "the uninstaller removed the user's config"
echo "uninstalled: the program, its DLLs, its Start menu entry and its registry entry are gone;" \
    "the user's config stays"
[ $MADE_CONFIG = 0 ] || rm "$CONFIG"
echo "== Windows + Vulkan: passed"
