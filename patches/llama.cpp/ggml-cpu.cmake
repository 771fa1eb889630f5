# Patches to the llama.cpp that llama-cpp-sys-2 builds, applied while CMake configures it: each
# replaces one exact piece of a source file in a copy under the build folder and compiles the copy
# in place of the original. The crate's sources stay as they are (they are shared by every
# project on the machine). Cargo hands this file to CMake as CMAKE_PROJECT_INCLUDE
# (.cargo/config.toml; llama-cpp-sys-2 passes CMAKE_* variables through). After editing it, run
# `cargo clean -p llama-cpp-sys-2`: cargo does not know that llama.cpp's build depends on it.
#
# A patch whose piece is not found (a newer llama.cpp) stops the build: check whether upstream
# made it unneeded, then update or drop it here.
#
# 1. ggml-cpu, flash attention over a batch (ops.cpp): split the work between threads in whole
#    Q tiles of one head. Upstream splits it in rows, 4 chunks per thread, and the tiled kernel
#    cuts a tile at every chunk and head boundary; each piece converts and multiplies the whole
#    K/V range as a full tile does. With our 64-token prompt chunks (docs/SCHEDULING.md, R3) a
#    batch of 9 heads on 2 threads ran 16 tiles where 9 do: reading a 6,931-token prompt took
#    1.29x as long (profiles and figures: docs/BENCHMARKS.md, "Where the chunk cost went").
#    Each row's result is the same: a tile's rows are independent.
# 2. ggml-cpu, the `sapphirerapids` variant built without AMX (-mno-amx-*, last on its command
#    line, so __AMX_INT8__ is undefined and ggml's AMX matrix code, amx/mmq.cpp, is not
#    compiled in). On an Intel Xeon with AMX (Sapphire Rapids, 2 cores, Linux) that code died
#    of SIGILL at the first `tileloadd`, at every start; llama-server of the same llama.cpp
#    built natively died the same way, and built with -mno-amx-* worked. Upstream's open fix
#    (ggml-org/llama.cpp pull request 26954: the tile-data permission asked per thread, the
#    tile configuration kept out of the optimiser's reach) could not be verified here (no AMX
#    machine), so AMX is off rather than patched. The variant's score (its `-feats` object)
#    keeps AMX_TILE and AMX_INT8: it is still chosen on AMX CPUs only, with the AVX-512 VNNI
#    and BF16 code that zen4 has. docs/BENCHMARKS.md ("AMX") says what AMX buys where it works.
include_guard(GLOBAL)

set(_strata_fa_old [==[
        int current_chunk = ith;

        while (current_chunk < nchunk) {
            const int64_t ir0 = dr * current_chunk;
            const int64_t ir1 = MIN(ir0 + dr, nr);

            if (use_tiled) {
                ggml_compute_forward_flash_attn_ext_tiled(params, dst, ir0, ir1);
            } else {
                ggml_compute_forward_flash_attn_ext_f16_one_chunk(params, dst, ir0, ir1, 0, nek1, nullptr, 0);
            }
]==])
set(_strata_fa_new [==[
        if (use_tiled) {
            // Work in whole Q tiles of one head: row chunks of dr rows cut tiles at chunk and
            // head boundaries, and each partial tile converts and multiplies the whole K/V
            // range as a full one does (a 64-token batch of 9 heads on 2 threads: 16 tiles
            // where 9 do).
            const int64_t tiles_per_head = (neq1 + Q_TILE_SZ - 1) / Q_TILE_SZ;
            const int64_t n_tiles        = tiles_per_head*neq2*neq3;

            int64_t tile = ith;
            while (tile < n_tiles) {
                const int64_t head_row = tile / tiles_per_head;
                const int64_t ir0 = head_row*neq1 + (tile % tiles_per_head)*Q_TILE_SZ;
                const int64_t ir1 = MIN(ir0 + Q_TILE_SZ, (head_row + 1)*neq1);

                ggml_compute_forward_flash_attn_ext_tiled(params, dst, ir0, ir1);

                tile = ggml_threadpool_chunk_add(params->threadpool, 1);
            }
            return;
        }

        int current_chunk = ith;

        while (current_chunk < nchunk) {
            const int64_t ir0 = dr * current_chunk;
            const int64_t ir1 = MIN(ir0 + dr, nr);

            ggml_compute_forward_flash_attn_ext_f16_one_chunk(params, dst, ir0, ir1, 0, nek1, nullptr, 0);
]==])

function(strata_patch_source target_dir relative old new out_var)
    set(source "${CMAKE_SOURCE_DIR}/${target_dir}/${relative}")
    file(READ "${source}" text)
    # This file may have been checked out with CRLF line ends; llama.cpp's sources have LF.
    string(REPLACE "\r\n" "\n" old "${old}")
    string(REPLACE "\r\n" "\n" new "${new}")
    string(FIND "${text}" "${old}" at)
    if(at EQUAL -1)
        message(FATAL_ERROR "strata-desk: the patch to ${relative} no longer applies "
            "(patches/llama.cpp/ggml-cpu.cmake): update it for this llama.cpp or drop it")
    endif()
    string(REPLACE "${old}" "${new}" text "${text}")
    set(copy "${CMAKE_BINARY_DIR}/strata-patched/${target_dir}/${relative}")
    set(current "")
    if(EXISTS "${copy}")
        file(READ "${copy}" current)
    endif()
    if(NOT current STREQUAL text)
        file(WRITE "${copy}" "${text}")
    endif()
    set(${out_var} "${copy}" PARENT_SCOPE)
endfunction()

function(strata_patch_ggml_cpu)
    strata_patch_source(ggml/src ggml-cpu/ops.cpp "${_strata_fa_old}" "${_strata_fa_new}" ops)
    get_property(targets DIRECTORY "${CMAKE_SOURCE_DIR}/ggml/src" PROPERTY BUILDSYSTEM_TARGETS)
    set(patched 0)
    foreach(target IN LISTS targets)
        if(NOT target MATCHES "^ggml-cpu")
            continue()
        endif()
        get_target_property(sources ${target} SOURCES)
        set(replaced "")
        set(found 0)
        foreach(source IN LISTS sources)
            # as target_sources was given it: relative to ggml/src, or absolute
            if(source MATCHES "(^|/)ggml-cpu/ops\\.cpp$")
                set(source "${ops}")
                set(found 1)
            endif()
            list(APPEND replaced "${source}")
        endforeach()
        if(found)
            set_property(TARGET ${target} PROPERTY SOURCES "${replaced}")
            math(EXPR patched "${patched} + 1")
        endif()
    endforeach()
    message(STATUS "strata-desk: flash attention in whole Q tiles in ${patched} ggml-cpu target(s)")
    strata_no_amx()
endfunction()

function(strata_no_amx)
    set(target ggml-cpu-sapphirerapids)
    if(NOT TARGET ${target})
        # a build without GGML_CPU_ALL_VARIANTS (the MSVC workflow's): no such variant
        return()
    endif()
    target_compile_options(${target} PRIVATE -mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
    get_target_property(definitions ${target} COMPILE_DEFINITIONS)
    list(FILTER definitions EXCLUDE REGEX "^(__)?(GGML_)?AMX_")
    set_property(TARGET ${target} PROPERTY COMPILE_DEFINITIONS "${definitions}")
    message(STATUS "strata-desk: ${target} built without AMX")
endfunction()

# After every target is defined: at the end of llama.cpp's top-level CMakeLists.txt.
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL strata_patch_ggml_cpu)
