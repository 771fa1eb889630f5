#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what is missing, fetches the test model
# (SmolLM2-135M-Instruct, checked by SHA-256) once, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-debian.sh
export PATH="$HOME/.cargo/bin:$PATH"

cargo run --quiet -- fetch-model
cargo test --locked "$@"
