# Sourced: the environment of the x86_64-pc-windows-gnu cross-build (MinGW-w64), for
# scripts/windows/cross-build.sh and scripts/check-windows.sh.
#  - C: the compat wrapper (mingw-cc: posix threads, bookworm's missing declarations);
#    C++: the posix-threads g++ (the win32-threads default lacks std::mutex).
#  - One .exe with no MinGW DLLs beside it: libgcc and winpthread static (crt-static, and
#    build.rs passes -static; no libgomp: Cargo.toml), libstdc++ static
#    (the cc crate links what CXXSTDLIB names; rustc bundles the archive from the compiler's
#    folder).
#  - The x86-64-v3 baseline (AVX2, FMA, F16C: CPUs from 2013-2015 on), as the .deb and the
#    Windows workflow: without a target CPU llama-cpp-sys-2 builds ggml for plain x86-64 there,
#    about six times slower.
_strata_windows_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CC_x86_64_pc_windows_gnu=$_strata_windows_dir/mingw-cc
export CXX_x86_64_pc_windows_gnu=x86_64-w64-mingw32-g++-posix
export AR_x86_64_pc_windows_gnu=x86_64-w64-mingw32-ar
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc-posix
export CXXSTDLIB_x86_64_pc_windows_gnu=static=stdc++
_strata_stdcxx_dir=$(dirname "$(x86_64-w64-mingw32-g++-posix --print-file-name=libstdc++.a)")
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUSTFLAGS="-C target-cpu=x86-64-v3 -C target-feature=+crt-static -L native=$_strata_stdcxx_dir"
