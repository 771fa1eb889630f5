#!/usr/bin/env bash
# Builds the Debian package: target/package/debian/strata-desk_<version>_amd64.deb
#   ./scripts/build-deb.sh
# CPU baseline: x86-64-v3 (AVX2, FMA, BMI2, F16C: Intel Haswell / AMD Excavator, 2013-2015, and
# later). The Rust code and llama.cpp are both compiled for it (llama-cpp-sys-2 passes
# `-C target-cpu` on as `-march` with GGML_NATIVE off), never for the build machine's own CPU,
# so the package does not die with SIGILL on another machine of that baseline. Override with
# STRATA_CPU_BASELINE=x86-64-v2 (SSE4.2, slower) for older CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
baseline=${STRATA_CPU_BASELINE:-x86-64-v3}

if ! cargo deb --version >/dev/null 2>&1; then
    echo "installing cargo-deb"
    cargo install cargo-deb --locked
fi
if ! command -v desktop-file-validate >/dev/null 2>&1; then
    apt-get install -y desktop-file-utils
fi
desktop-file-validate assets/strata-desk.desktop

# A target folder of its own: other RUSTFLAGS would rebuild the test build's dependencies.
export CARGO_TARGET_DIR=target/package
export RUSTFLAGS="-C target-cpu=$baseline"
cargo build --release --locked
# cargo-deb reads `target/release/...` in Cargo.toml's assets from CARGO_TARGET_DIR.
cargo deb --no-build --output target/package/debian/
ls -l target/package/debian/*.deb
