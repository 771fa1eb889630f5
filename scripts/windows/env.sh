# Sourced: the environment of the x86_64-pc-windows-gnu cross-build (MinGW-w64), for
# scripts/windows/cross-build.sh and scripts/check-windows.sh.
#  - C: the compat wrapper (mingw-cc: posix threads, bookworm's missing declarations);
#    C++: the posix-threads g++ (the win32-threads default lacks std::mutex), wrapped
#    (mingw-c++: GCC 12's AMX intrinsics on Windows, for the `sapphirerapids` variant).
#  - No MinGW runtime DLL to ship: libgcc and winpthread static (crt-static; build.rs adds
#    -static for the static build without `cpu-variants`; no libgomp: Cargo.toml), libstdc++
#    static (the cc crate links what CXXSTDLIB names; rustc bundles the archive from the
#    compiler's folder); llama.cpp's own DLLs (`cpu-variants`: libllama.dll,
#    libllama-common.dll, ggml*.dll, the CPU variants and GPU modules) each link
#    them statically too (CMAKE_*_LINKER_FLAGS, which llama-cpp-sys-2 hands to CMake on its
#    first configure: a build folder configured before keeps its flags) and exports none of
#    their functions (--exclude-libs: ld's own list of runtime archives left out of a DLL's
#    automatic exports lacks libgcc_eh and winpthreads, and the next DLL then met
#    `_Unwind_Resume` and `pthread_once` twice). Each file has its own libstdc++: libllama.dll's
#    and ggml's interfaces are C, but llama-cpp-2's wrapper in the program calls
#    libllama-common.dll's C++ (the JSON-schema converter: std::string, and an exception
#    caught across the two copies), which scripts/windows/check-vulkan.sh runs under Wine.
#  - No target CPU: the program's Rust code is plain x86-64, and llama.cpp's CPU code is built
#    once per instruction-set level (ggml's variants, `cpu-variants`), the best loaded at run
#    time. (`-C target-cpu` would reach every variant as `-march`: llama-cpp-sys-2 passes it
#    on.)
_strata_windows_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CC_x86_64_pc_windows_gnu=$_strata_windows_dir/mingw-cc
export CXX_x86_64_pc_windows_gnu=$_strata_windows_dir/mingw-c++
export AR_x86_64_pc_windows_gnu=x86_64-w64-mingw32-ar
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc-posix
export CXXSTDLIB_x86_64_pc_windows_gnu=static=stdc++
_strata_stdcxx_dir=$(dirname "$(x86_64-w64-mingw32-g++-posix --print-file-name=libstdc++.a)")
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUSTFLAGS="-C target-feature=+crt-static -L native=$_strata_stdcxx_dir"
_strata_runtime_archives=libgcc.a:libgcc_eh.a:libstdc++.a:libsupc++.a:libwinpthread.a:libpthread.a
export CMAKE_SHARED_LINKER_FLAGS="-static -Wl,--exclude-libs,$_strata_runtime_archives"
export CMAKE_MODULE_LINKER_FLAGS=$CMAKE_SHARED_LINKER_FLAGS
