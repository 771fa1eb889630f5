/* TEST-ONLY, never shipped: Wine 8 lacks ProcessPrng in bcryptprimitives.dll, which Rust's std
 * imports, so every Rust program fails to start under it (status c0000135).
 * scripts/check-windows.sh builds this as bcryptprimitives.dll into its own Wine prefix. */
#include <windows.h>
#include <ntsecapi.h>
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    return RtlGenRandom(data, (ULONG)len);
}
