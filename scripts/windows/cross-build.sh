#!/usr/bin/env bash
# Builds the Windows program from Linux (x86_64-pc-windows-gnu, MinGW-w64, CPU llama.cpp):
# installs mingw-w64 and the Rust target if missing, then `cargo build` for that target with
# the arguments given (e.g. --release). scripts/test.sh runs it (`--profile link-check`: nothing
# optimised, no debug info) so CI catches code that does not compile or link for Windows;
# scripts/check-windows.sh runs the release.
set -euo pipefail
cd "$(dirname "$0")/../.."
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
if ! dpkg -s mingw-w64 >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mingw-w64 >/dev/null
fi
rustup target list --installed | grep -qx x86_64-pc-windows-gnu ||
    rustup target add x86_64-pc-windows-gnu
source scripts/windows/env.sh
# One static program, without the default `cpu-variants` (llama.cpp as DLLs with ggml's CPU
# variants beside the .exe is not built for MinGW yet: docs/DEPLOYMENT.md, Packages).
cargo build --locked --target x86_64-pc-windows-gnu --no-default-features --bin strata-desk "$@"
