#!/usr/bin/env bash
# Fails unless every llama.cpp built in the cargo profile folder given (target/debug,
# target/x86_64-pc-windows-gnu/link-check, ...) carries our patch (patches/llama.cpp/): CMake's
# configure prints how many ggml-cpu targets it patched, into the output cargo keeps of
# llama-cpp-sys-2's build script. A build made before the patch came, or with
# CMAKE_PROJECT_INCLUDE overridden, lacks it.
set -euo pipefail
dir=${1:?usage: scripts/check-llama-patch.sh TARGET_PROFILE_DIR}
pattern="strata-desk: flash attention in whole Q tiles in [1-9][0-9]* ggml-cpu target(s)"
builds=0
for output in "$dir"/build/llama-cpp-sys-2-*/output; do
    # only the build script runs that configured llama.cpp
    grep -q "Build files have been written" "$output" 2>/dev/null || continue
    builds=$((builds + 1))
    if ! line=$(grep -o "$pattern" "$output"); then
        echo "llama.cpp in $(dirname "$output") was built without patches/llama.cpp/ggml-cpu.cmake;" \
            "run: cargo clean -p llama-cpp-sys-2 (with the same --target/--profile) and build again" >&2
        exit 1
    fi
    echo "llama.cpp patched ($(dirname "$output")): ${line#strata-desk: }"
done
[ "$builds" -gt 0 ] || { echo "no llama.cpp build found under $dir/build" >&2; exit 1; }
