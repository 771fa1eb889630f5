#!/usr/bin/env bash
# The Vulkan "SDK" the MinGW cross-build of the Vulkan backend needs, made on Linux: the
# Vulkan 1.4 headers scripts/setup-vulkan.sh unpacks and the host's SPIR-V headers (Include:
# the MinGW compiler does not search /usr/include), the host's glslc (Bin), and an
# import library for the loader, vulkan-1.dll (Lib/libvulkan-1.a), generated with MinGW's
# dlltool from the functions the headers declare (core and Win32; a program imports only those
# it calls, all of them exported by the loader, which comes with every GPU driver on Windows).
# Installs MinGW when its dlltool is missing. Prints `export VULKAN_SDK=...` for
# llama-cpp-sys-2 and CMake's FindVulkan (not inside `eval "$(...)"`, which hides a failure):
#
#   sdk=$(scripts/windows/vulkan-sdk.sh) && eval "$sdk"
#   scripts/windows/cross-build.sh --features vulkan
set -euo pipefail
cd "$(dirname "$0")/../.."
eval "$(scripts/setup-vulkan.sh)" >/dev/null
headers=$VULKAN_SDK/include
sdk=${STRATA_VULKAN_MINGW:-$HOME/.cache/strata-desk/vulkan-mingw}
mkdir -p "$sdk/Lib" "$sdk/Bin" "$sdk/Include"
for dir in "$headers"/* /usr/include/spirv; do
    ln -sfn "$dir" "$sdk/Include/$(basename "$dir")"
done
ln -sf "$(command -v glslc)" "$sdk/Bin/glslc"
if [ ! -s "$sdk/Lib/libvulkan-1.a" ]; then
    # MinGW's dlltool: on a fresh machine this script runs before the cross-build does
    # (regression: CI's first run on a clean machine had no dlltool here, and the build then
    # failed for want of VULKAN_SDK).
    scripts/windows/install-mingw.sh
    {
        echo "LIBRARY vulkan-1.dll"
        echo "EXPORTS"
        cat "$headers/vulkan/vulkan_core.h" "$headers/vulkan/vulkan_win32.h" |
            grep -o 'VKAPI_CALL vk[A-Za-z0-9]*(' | sed 's/VKAPI_CALL //; s/($//' | sort -u
    } >"$sdk/vulkan-1.def"
    x86_64-w64-mingw32-dlltool -d "$sdk/vulkan-1.def" -l "$sdk/Lib/libvulkan-1.a" -D vulkan-1.dll
fi
echo "export VULKAN_SDK=$sdk"
