/* Force-included into every C file llama.cpp compiles for x86_64-pc-windows-gnu
 * (scripts/windows/mingw-cc). Debian bookworm's mingw-w64 10 headers lack the thread power
 * throttling declarations (Windows 8+, winbase.h/processthreadsapi.h in newer mingw-w64),
 * which ggml-cpu.c uses under _WIN32_WINNT >= 0x0602. Newer headers define them; this header
 * then defines nothing. */
#ifndef STRATA_MINGW_COMPAT_H
#define STRATA_MINGW_COMPAT_H
#include <windows.h>
#ifndef THREAD_POWER_THROTTLING_CURRENT_VERSION
#define THREAD_POWER_THROTTLING_CURRENT_VERSION 1
#define THREAD_POWER_THROTTLING_EXECUTION_SPEED 0x1
#define ThreadPowerThrottling ((THREAD_INFORMATION_CLASS)3)
typedef struct _THREAD_POWER_THROTTLING_STATE {
    ULONG Version;
    ULONG ControlMask;
    ULONG StateMask;
} THREAD_POWER_THROTTLING_STATE;
#endif
#endif
