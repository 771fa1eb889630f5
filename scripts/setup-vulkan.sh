#!/usr/bin/env bash
# Installs what building Strata Desk with `--features vulkan` (llama.cpp's Vulkan backend)
# needs on Debian 12 (bookworm), and what running it on Mesa's software device (lavapipe)
# needs. Run as root (or with sudo available). Idempotent. Prints the line to eval:
#   eval "$(scripts/setup-vulkan.sh)"
#
# bookworm's Vulkan headers (1.3.239) are too old for ggml-vulkan.cpp (vk::LayerSettingEXT,
# ...), so the headers of Debian trixie's libvulkan-dev 1.4.309 are unpacked, headers only,
# into $PREFIX (nothing in /usr is replaced; bookworm's libvulkan-dev is NOT installed).
# CMake's FindVulkan finds them through VULKAN_SDK (searched before the system paths), and
# llama-cpp-sys-2's build.rs adds $VULKAN_SDK/lib to the link path, where a libvulkan.so
# link points at the system's loader (libvulkan1 1.3.239; the loader's ABI is stable).
set -euo pipefail

PREFIX=${PREFIX:-/opt/vulkan-headers-1.4}
DEB_VERSION=1.4.309.0-1
DEB_URL=http://deb.debian.org/debian/pool/main/v/vulkan-loader/libvulkan-dev_${DEB_VERSION}_amd64.deb
DEB_SHA256=8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# 1. bookworm packages: the shader compiler, SPIR-V headers (CMake config), the loader and
#    Mesa's Vulkan drivers (lavapipe), vulkaninfo for checking the device.
need=()
for p in glslc spirv-headers libvulkan1 mesa-vulkan-drivers vulkan-tools curl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-vulkan-deps: installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >&2
fi

# 2. trixie's Vulkan headers, unpacked (not installed) into $PREFIX.
if [ ! -f "$PREFIX/.libvulkan-dev-$DEB_VERSION" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "install-vulkan-deps: fetching $DEB_URL" >&2
  curl -fsSL -o "$tmp/libvulkan-dev.deb" "$DEB_URL"
  echo "$DEB_SHA256  $tmp/libvulkan-dev.deb" | sha256sum -c --quiet -
  dpkg-deb -x "$tmp/libvulkan-dev.deb" "$tmp/x"
  $sudo rm -rf "$PREFIX"
  $sudo mkdir -p "$PREFIX/lib" "$PREFIX/share"
  $sudo cp -a "$tmp/x/usr/include" "$PREFIX/include"
  $sudo cp -a "$tmp/x/usr/share/cmake" "$PREFIX/share/cmake"
  $sudo touch "$PREFIX/.libvulkan-dev-$DEB_VERSION"
fi
loader=$(ls /usr/lib/*-linux-gnu/libvulkan.so.1 | head -1)
$sudo ln -sfn "$loader" "$PREFIX/lib/libvulkan.so"

# 3. What to export before `cargo build --features vulkan` (on a newer Debian or Ubuntu whose
#    libvulkan-dev is 1.4 or later, installing it is enough and VULKAN_SDK is not needed).
cat <<EOF
export VULKAN_SDK=$PREFIX
EOF
