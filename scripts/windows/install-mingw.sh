#!/usr/bin/env bash
# Installs MinGW-w64 (the cross compilers and dlltool) when it is missing. cross-build.sh and
# vulkan-sdk.sh both need it, and on a fresh machine either may run first. Writes nothing to
# stdout: vulkan-sdk.sh's stdout is the `export` its caller evaluates.
set -euo pipefail
if dpkg -s mingw-w64 >/dev/null 2>&1 && command -v x86_64-w64-mingw32-dlltool >/dev/null; then
    exit 0
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mingw-w64 >/dev/null
