/* Force-included into the C++ of the x86_64-pc-windows-gnu cross-build (mingw-c++), where it
   does something only in code built for AMX (ggml's `sapphirerapids` CPU variant, amx/mmq.cpp):
   GCC 12's AMX tile intrinsics pass the row stride as `long`, 32 bits on Windows (LLP64), so
   the assembler gets a 32-bit index register and rejects `tileloadd (%rax,%edi,1)`. GCC 13
   passes `__PTRDIFF_TYPE__`; these are GCC 12's own macros (amxtileintrin.h) with that one
   change. */
#if defined(__AMX_TILE__) && defined(__MINGW64__) && defined(__cplusplus) && __GNUC__ < 13
#include <immintrin.h>
#undef _tile_loadd_internal
#undef _tile_stream_loadd_internal
#undef _tile_stored_internal
#define _tile_loadd_internal(dst, base, stride)                                                \
    __asm__ volatile("{tileloadd\t(%0,%1,1), %%tmm" #dst "|tileloadd\t%%tmm" #dst ", [%0+%1*1]}" \
                     ::"r"((const void *)(base)), "r"((__PTRDIFF_TYPE__)(stride)))
#define _tile_stream_loadd_internal(dst, base, stride)                                         \
    __asm__ volatile("{tileloaddt1\t(%0,%1,1), %%tmm" #dst "|tileloaddt1\t%%tmm" #dst            \
                     ", [%0+%1*1]}" ::"r"((const void *)(base)),                                \
                     "r"((__PTRDIFF_TYPE__)(stride)))
#define _tile_stored_internal(src, base, stride)                                               \
    __asm__ volatile("{tilestored\t%%tmm" #src ", (%0,%1,1)|tilestored\t[%0+%1*1], %%tmm" #src   \
                     "}" ::"r"((void *)(base)), "r"((__PTRDIFF_TYPE__)(stride))                  \
                     : "memory")
#endif
