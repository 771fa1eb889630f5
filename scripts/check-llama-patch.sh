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
    if ! grep -q "strata-desk: ggml-cpu-sapphirerapids built without AMX" "$output" &&
        grep -q "Adding CPU backend variant ggml-cpu-sapphirerapids" "$output"; then
        echo "llama.cpp in $(dirname "$output") built the sapphirerapids variant with AMX" \
            "(patches/llama.cpp/ggml-cpu.cmake, patch 2); run: cargo clean -p llama-cpp-sys-2" >&2
        exit 1
    fi
    # and the module holds no AMX instruction (patch 2: they crashed on AMX machines)
    for module in "$(dirname "$output")"/out/backends/*ggml-cpu-sapphirerapids.*; do
        [ -f "$module" ] || continue
        amx=$(objdump -d "$module" | grep -cE '\b(ldtilecfg|tileloadd|tdpbusd|tdpbf16ps)\b' || true)
        if [ "$amx" != 0 ]; then
            echo "$module holds $amx AMX instructions (patch 2 did not take)" >&2
            exit 1
        fi
        echo "no AMX instruction in $(basename "$module")"
    done
    echo "llama.cpp patched ($(dirname "$output")): ${line#strata-desk: }; sapphirerapids without AMX"
done
[ "$builds" -gt 0 ] || { echo "no llama.cpp build found under $dir/build" >&2; exit 1; }
