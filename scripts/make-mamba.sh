#!/usr/bin/env bash
# The tests' recurrent model: a tiny Mamba with random weights and the test model's vocabulary
# (scripts/make-mamba-gguf.py says why), made once into the cache with the `gguf` package of the
# given Python (pinned in tests/python/requirements.txt). Prints the file's path. Idempotent:
# a new script or vocabulary source makes a new file.
#
# Usage: make-mamba.sh VOCAB_SOURCE.gguf PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."
source_gguf="$1"
python="$2"
key="$(cat scripts/make-mamba-gguf.py "$source_gguf" | sha256sum | cut -c1-16)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/strata-desk/test-mamba-$key"
model="$cache/strata-test-mamba.gguf"
if [ ! -f "$model" ]; then
  mkdir -p "$cache"
  "$python" scripts/make-mamba-gguf.py "$source_gguf" "$model.partial" >&2
  mv "$model.partial" "$model"
fi
echo "$model"
