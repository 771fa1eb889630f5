#!/usr/bin/env bash
# Builds the Windows program from Linux (x86_64-pc-windows-gnu, MinGW-w64, CPU llama.cpp):
# installs mingw-w64 and the Rust target if missing, then `cargo build` for that target with
# the arguments given (e.g. --release). scripts/test.sh runs it (`--profile link-check`: nothing
# optimised, no debug info) so CI catches code that does not compile or link for Windows;
# scripts/check-windows.sh runs the release.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/windows/install-mingw.sh
rustup target list --installed | grep -qx x86_64-pc-windows-gnu ||
    rustup target add x86_64-pc-windows-gnu
source scripts/windows/env.sh
cargo build --locked --target x86_64-pc-windows-gnu --bin strata-desk "$@"

# llama.cpp's DLLs beside the program, where Windows looks first: libllama.dll,
# libllama-common.dll and ggml's (the program imports them), and the backend modules it loads
# itself (src/engine_worker/modules.rs): each CPU variant, `ggml-cpu-<variant>.dll`, and with
# `--features vulkan` `ggml-vulkan.dll`. llama-cpp-sys-2 puts them in its build folder only
# (OUT_DIR/bin and OUT_DIR/backends): the one whose build script ran last is this build's.
dir=debug
for ((i = 1; i <= $#; i++)); do
    case ${!i} in
    --release) dir=release ;;
    --profile) j=$((i + 1)) && dir=${!j} && [ "$dir" != dev ] || dir=debug ;;
    --profile=*) dir=${!i#--profile=} && [ "$dir" != dev ] || dir=debug ;;
    esac
done
bin_dir=target/x86_64-pc-windows-gnu/$dir
out=$(ls -t "$bin_dir"/build/llama-cpp-sys-2-*/output 2>/dev/null | while read -r f; do
    [ -d "$(dirname "$f")/out/backends" ] && dirname "$f" && break
done)
out=${out:+$out/out}
[ -n "$out" ] || { echo "no llama.cpp build with backends under $bin_dir/build" >&2; exit 1; }
rm -f "$bin_dir"/*.dll
cp "$out"/bin/*.dll "$out"/backends/*.dll "$bin_dir/"
scripts/check-llama-patch.sh "$bin_dir"
echo "beside $bin_dir/strata-desk.exe: $(cd "$bin_dir" && ls ./*.dll | sed 's|^\./||' | tr '\n' ' ')"
