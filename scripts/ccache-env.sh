#!/usr/bin/env bash
# Prints the environment that puts ccache in front of the C and C++ compilers of llama.cpp's
# CMake builds (llama-cpp-sys-2 hands CMAKE_* variables to CMake), installing ccache if it is
# missing; prints nothing if it cannot be had (the builds then run as before).
#   eval "$(scripts/ccache-env.sh)"
# Why: the GPU check's build (`--features vulkan`, scripts/check-gpu.sh) compiles llama.cpp a
# second time in a folder of its own, with the same 14 CPU variants as the tests' build, file
# for file and flag for flag; with the tests' build run through ccache, the second build takes
# them from its cache. CCACHE_BASEDIR makes the paths under this folder (our patched copies of
# llama.cpp files, in each build folder) relative, so the two builds' commands are the same.
# The variables do not make cargo rebuild llama.cpp (llama-cpp-sys-2 watches GGML_*, not
# CMAKE_*).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v ccache >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq ccache; } >&2 ||
    echo "ccache-env: ccache could not be installed; building without it" >&2
fi
if command -v ccache >/dev/null 2>&1; then
  echo "export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache"
  echo "export CCACHE_BASEDIR=$(printf '%q' "$PWD")"
fi
