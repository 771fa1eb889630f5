#!/usr/bin/env bash
# Removes the dangling links llama-cpp-sys-2 leaves beside the program with the default
# `cpu-variants` build: it hard-links its shared libraries' `.so` names into the target folder,
# and those are symlinks to `.so.0` files it does not link there. A second build of it with
# other features (`--features vulkan`, clippy's) then fails on them ("File exists": it checks
# whether the link exists through the dangling symlink). The program does not use them (its
# rpath names the build's own folder: build.rs). Run before such a build:
#   scripts/clean-llama-links.sh [TARGET_DIR]
set -euo pipefail
target="${1:-${CARGO_TARGET_DIR:-target}}"
[ -d "$target" ] || exit 0
find "$target" -maxdepth 3 -xtype l \( -name 'libllama*.so' -o -name 'libggml*.so' \) -delete
