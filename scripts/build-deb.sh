#!/usr/bin/env bash
# Builds the Debian package: target/package/debian/strata-desk_<version>_amd64.deb
#   ./scripts/build-deb.sh
# CPU code: llama.cpp's CPU backend in ggml's 14 x86 variants (x64 ... haswell, skylakex, zen4,
# alderlake, sapphirerapids), each a module in /usr/lib/strata-desk; the engine loads the best
# one the CPU runs at start (the `cpu-variants` feature, src/engine_worker/modules.rs). So the
# program is built for plain x86-64 (no `-C target-cpu`: llama-cpp-sys-2 would pass it on as
# `-march` to every variant), and runs on any x86-64 CPU; llama.cpp's shared libraries go in
# /usr/lib/strata-desk beside the modules, found by the program's rpath.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo deb --version >/dev/null 2>&1; then
    echo "installing cargo-deb"
    cargo install cargo-deb --locked
fi
if ! command -v desktop-file-validate >/dev/null 2>&1; then
    apt-get install -y desktop-file-utils
fi
desktop-file-validate assets/strata-desk.desktop

# A target folder of its own, so that the package's build never mixes with the tests' build.
export CARGO_TARGET_DIR=target/package
# The rpath names only the package's folder, not this machine's build folder (build.rs).
export STRATA_RELOCATABLE=1
cargo build --release --locked
scripts/check-llama-patch.sh "${CARGO_TARGET_DIR:-target}/release"
# llama.cpp's libraries (by the `.so.0` names the program loads) and the CPU variants, from
# llama-cpp-sys-2's build folder, staged where Cargo.toml's deb assets take them.
out=$(dirname "$(ls -d target/package/release/build/llama-cpp-sys-2-*/out/backends | head -1)")
stage=target/package/release/lib-strata-desk
rm -rf "$stage" && mkdir -p "$stage"
for lib in "$out"/lib/lib*.so.0; do cp -L "$lib" "$stage/"; done
cp "$out"/backends/*.so "$stage/"
echo "llama.cpp's libraries and modules: $(ls "$stage" | wc -l) files, $(du -sh "$stage" | cut -f1)"
# cargo-deb reads `target/release/...` in Cargo.toml's assets from CARGO_TARGET_DIR.
rm -f target/package/debian/*.deb
cargo deb --no-build --output target/package/debian/
deb=$(ls target/package/debian/*.deb)
# The shared libraries the program, llama.cpp's libraries and the CPU variants link, from
# dpkg-shlibdeps with llama.cpp's own libraries found in the staging folder (cargo-deb's
# `$auto` stops at them: they are in no installed package), added to the package's Depends.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/shlibs/debian" && touch "$work/shlibs/debian/control"
libs=$(cd "$work/shlibs" && LD_LIBRARY_PATH="$OLDPWD/$stage" dpkg-shlibdeps -O --ignore-missing-info \
    -xlibgcc "$OLDPWD/target/package/release/strata-desk" "$OLDPWD/$stage"/*.so* 2>/dev/null |
    sed -n 's/^shlibs:Depends=//p')
[ -n "$libs" ] || { echo "build-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
dpkg-deb -R "$deb" "$work/root"
sed -i "s/^Depends: /Depends: $libs, /" "$work/root/DEBIAN/control"
dpkg-deb --root-owner-group -Zxz -b "$work/root" "$deb" >/dev/null
echo "Depends: $(sed -n 's/^Depends: //p' "$work/root/DEBIAN/control")"
ls -l target/package/debian/*.deb
