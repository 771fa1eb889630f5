#!/usr/bin/env bash
# The Windows program with llama.cpp's Vulkan backend, cross-built from here and run under
# Wine on Mesa's software Vulkan device (lavapipe, reached through Wine's winevulkan):
#   1. the MinGW cross-build with `--features vulkan` (headers, glslc and the loader's import
#      library: scripts/windows/vulkan-sdk.sh), copied to strata-desk-vulkan.exe;
#   2. `--version` names the Vulkan backend, and the program imports vulkan-1.dll (the loader
#      every GPU driver installs: no CUDA toolkit, no DLL of ours);
#   3. `--headless` under Xvfb with GGML_VK_VISIBLE_DEVICES=0 (ggml skips a CPU-type device
#      unless named): /health names llvmpipe (Vulkan) with the test model's layers on it, and
#      a chat completion is answered;
#   4. the same without a display, where Wine's winevulkan has no graphics driver to reach the
#      device: the program says the CPU, and answers;
#   5. the installer with both programs (packaging/windows/strata-desk.nsi with CPU_EXE): the
#      Vulkan program as strata-desk.exe, the CPU program beside it with a Start menu entry of
#      its own; installed silently, both run, uninstalled, nothing left. Needs the CPU program
#      of the same profile built first (scripts/windows/cross-build.sh), as ./scripts/test.sh
#      and scripts/check-windows.sh do.
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
CPU_EXE=target/$TARGET/$dir/strata-desk-cpu.exe
# the CPU program of this profile, if the last build here was one (it imports no vulkan-1.dll)
if [ -f "target/$TARGET/$dir/strata-desk.exe" ] &&
    ! x86_64-w64-mingw32-objdump -p "target/$TARGET/$dir/strata-desk.exe" |
    grep -c 'DLL Name: vulkan-1.dll' >/dev/null; then
    cp "target/$TARGET/$dir/strata-desk.exe" "$CPU_EXE"
fi
eval "$(scripts/windows/vulkan-sdk.sh)"
scripts/windows/cross-build.sh "${profile[@]}" --features vulkan
EXE=target/$TARGET/$dir/strata-desk-vulkan.exe
cp "target/$TARGET/$dir/strata-desk.exe" "$EXE"
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
headers=$(x86_64-w64-mingw32-objdump -p "$EXE")
grep -q 'DLL Name: vulkan-1.dll' <<<"$headers" || fail "the program does not import vulkan-1.dll"
echo "imports vulkan-1.dll: ok"

MODEL=${STRATA_TEST_MODEL:-$HOME/.local/share/strata-desk/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$MODEL" ] || fail "no test model at $MODEL (strata-desk fetch-model)"
MODEL_WIN=$(winepath -w "$MODEL" 2>/dev/null)

serve() { # LOG [env...]: the app headless on the test model; prints its /health device
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
print(d["backend"], d["name"], d["gpu_layers"], d["model_layers"], d["picked_by"], sep="|")'
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
IFS='|' read -r backend name layers model_layers picked <<<"$device"
echo "device: $name ($backend), $layers of $model_layers layers on it ($picked)"
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
device=$(serve "$WORK/vulkan-nodisplay.log" -u DISPLAY GGML_VK_VISIBLE_DEVICES=0)
IFS='|' read -r backend name layers model_layers picked <<<"$device"
echo "device: $name ($backend), $layers of $model_layers layers on a GPU ($picked)"
[ "$backend" = CPU ] && [ "$layers" = 0 ] || fail "expected the CPU without a display: $device"
text=$(answer) || fail "the chat completion on the CPU failed"
echo "answer on the CPU: $text"
stop

echo "== Windows + Vulkan 5. the installer with both programs"
if [ ! -f "$CPU_EXE" ]; then
    echo "SKIPPED: no CPU program of this profile (scripts/windows/cross-build.sh ${profile[*]} first)"
else
    VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
    SETUP=$WORK/strata-desk-$VERSION-vulkan-setup.exe
    # zlib, not the script's solid lzma: two 100 MB test programs pack in seconds
    makensis -V2 -X"SetCompressor /FINAL zlib" -DVERSION="$VERSION" -DEXE="$PWD/$EXE" \
        -DCPU_EXE="$PWD/$CPU_EXE" -DOUT="$SETUP" packaging/windows/strata-desk.nsi
    INSTALLED=$WINEPREFIX/drive_c/Program\ Files/Strata\ Desk
    MENU=$WINEPREFIX/drive_c/ProgramData/Microsoft/Windows/Start\ Menu/Programs
    wine "$SETUP" /S
    wineserver -w
    [ -f "$MENU/Strata Desk.lnk" ] && [ -f "$MENU/Strata Desk (CPU only).lnk" ] ||
        fail "the Start menu entries are missing: $(ls "$MENU")"
    gpu=$(wine 'C:\Program Files\Strata Desk\strata-desk.exe' --version | tr -d '\r')
    cpu=$(wine 'C:\Program Files\Strata Desk\strata-desk-cpu.exe' --version | tr -d '\r')
    echo "installed: $(ls "$INSTALLED" | tr '\n' ' ')"
    echo "strata-desk.exe: $gpu; strata-desk-cpu.exe: $cpu"
    [[ $gpu == *"backends: CPU, Vulkan);"* ]] && [[ $cpu == *"backends: CPU);"* ]] ||
        fail "the installed programs are not the Vulkan and the CPU ones"
    wine 'C:\Program Files\Strata Desk\Uninstall.exe' /S
    wineserver -w
    for _ in $(seq 1 60); do [ -e "$INSTALLED" ] || break; sleep 1; done
    [ ! -e "$INSTALLED" ] || fail "left behind: $(ls "$INSTALLED")"
    [ ! -e "$MENU/Strata Desk (CPU only).lnk" ] || fail "the CPU entry is left behind"
    echo "uninstalled: both programs and both Start menu entries are gone"
fi
echo "== Windows + Vulkan: passed"
