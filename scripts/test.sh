#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what is missing, fetches the test model
# (SmolLM2-135M-Instruct, checked by SHA-256) once, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-debian.sh
export PATH="$HOME/.cargo/bin:$PATH"

# One build for everything: the tests' build also makes the binary (a plain `cargo run` would
# resolve features without the dev-dependencies and compile llama.cpp a second time).
# llama.cpp compiled through ccache, so that the GPU check's build below takes its CPU variants
# from the cache (scripts/ccache-env.sh says why); only for this build.
(eval "$(scripts/ccache-env.sh)" && cargo build --locked --workspace --tests)
scripts/check-llama-patch.sh "${CARGO_TARGET_DIR:-target}/debug"
model="$("${CARGO_TARGET_DIR:-target}/debug/strata-desk" fetch-model)"
# The chat-template corpus of the tool-call tests (checked by SHA-256, cached).
STRATA_TEST_TEMPLATES="$(scripts/fetch-templates.sh)"
export STRATA_TEST_TEMPLATES
# The second real GGUF (Gemma 3 270M: the hub client's and the fitting's tests), checked by
# SHA-256, cached.
STRATA_TEST_GEMMA="$(scripts/fetch-gemma.sh)"
export STRATA_TEST_GEMMA

# The official Python clients some tests drive (the Prometheus text parser, ...).
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt
export STRATA_TEST_PYTHON="$PWD/.venv/bin/python"
# The recurrent model of the checkpoint tests: a tiny Mamba with random weights and the test
# model's vocabulary, written once with the `gguf` package (scripts/make-mamba-gguf.py).
STRATA_TEST_MAMBA="$(scripts/make-mamba.sh "$model" .venv/bin/python)"
export STRATA_TEST_MAMBA
# llama-server from the same llama.cpp, linked to the one just built (about 2 minutes): the
# `engine: upstream` tests run through it (tests/it/upstream_real.rs, upstream_scenarios.rs).
STRATA_TEST_LLAMA_SERVER="$(scripts/build-llama-server.sh --cargo-build "${CARGO_TARGET_DIR:-target}/debug")"
export STRATA_TEST_LLAMA_SERVER
cargo test --locked --workspace "$@"
# Four coding-agent CLIs (pinned npm versions) run a whole tool loop against the simulated
# engine (docs/DEPLOYMENT.md, "The agents' tool loop"); it prints why when it skips.
if [ "${STRATA_SKIP_AGENTS_LOOP:-0}" = 1 ]; then
  echo "SKIPPED agents loop: STRATA_SKIP_AGENTS_LOOP=1"
else
  SERVER_BIN="${CARGO_TARGET_DIR:-target}/debug/strata-desk" scripts/agents-loop.sh
fi
# The GPU path on a software Vulkan device (lavapipe): the app built with `--features vulkan`,
# checked on the real device code of llama.cpp (scripts/check-gpu.sh; docs/TESTING.md, "The
# GPU path on lavapipe"); STRATA_SKIP_GPU_CHECK=1 skips it.
if [ "${STRATA_SKIP_GPU_CHECK:-0}" = 1 ]; then
  echo "SKIPPED GPU check: STRATA_SKIP_GPU_CHECK=1"
else
  scripts/check-gpu.sh
fi
# The Windows program (one for every machine: the CPU variants and the Vulkan backend as
# modules beside it), cross-built from here in the link-check profile (Cargo.toml: nothing of
# ours optimised, no debug info; llama.cpp's own Release build), then run under Wine on the
# software Vulkan device, without it, and installed (scripts/windows/check-vulkan.sh;
# docs/TESTING.md, sections 11 and 11a); STRATA_SKIP_WINDOWS_VULKAN=1 (or
# STRATA_SKIP_WINDOWS_BUILD=1) skips it.
if [ "${STRATA_SKIP_WINDOWS_BUILD:-0}" = 1 ] || [ "${STRATA_SKIP_WINDOWS_VULKAN:-0}" = 1 ]; then
  echo "SKIPPED Windows check"
else
  STRATA_TEST_MODEL="$("${CARGO_TARGET_DIR:-target}/debug/strata-desk" fetch-model)" \
    scripts/windows/check-vulkan.sh
fi
