#!/usr/bin/env bash
# The GPU path, run here: builds the app with llama.cpp's Vulkan backend (`--features vulkan`)
# and runs scripts/check-gpu.py against it on Mesa's software Vulkan device (lavapipe): the
# real device code of llama.cpp, slowly (docs/TESTING.md, "The GPU path on lavapipe").
#   scripts/check-gpu.sh [--only device|host-ram|cpu]
# Needs the test model (`strata-desk fetch-model`); installs what the build needs
# (scripts/setup-vulkan.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-debian.sh
export PATH="$HOME/.cargo/bin:$PATH"
eval "$(scripts/setup-vulkan.sh)"
target="${CARGO_TARGET_DIR:-target}"
started=$(date +%s)
# A build of its own only where the features differ: llama.cpp with Vulkan (its shaders
# included), llama-cpp-2 and this crate; every other dependency is the tests' build's.
# llama.cpp's objects that the tests' build made through ccache (the CPU variants: the same
# files with the same flags) come from its cache (scripts/ccache-env.sh).
scripts/clean-llama-links.sh "$target"
(
  eval "$(scripts/ccache-env.sh)"
  command -v ccache >/dev/null 2>&1 && ccache --zero-stats >/dev/null
  cargo build --locked --features vulkan --bin strata-desk
  if command -v ccache >/dev/null 2>&1; then
    echo "check-gpu: ccache, the Vulkan build's compilations:"
    ccache --show-stats | grep -iE 'hits|misses' || true
  fi
)
cp "$target/debug/strata-desk" "$target/debug/strata-desk-vulkan"
echo "check-gpu: the Vulkan build took $(( $(date +%s) - started )) s"
# The plain binary again where it was (the tests' build: nothing is compiled, it is copied).
cargo build --locked --workspace --tests
started=$(date +%s)
python3 scripts/check-gpu.py --exe "$target/debug/strata-desk-vulkan" "$@"
echo "check-gpu: the checks took $(( $(date +%s) - started )) s"
