//! Windows: the console a command-line run prints to.
//!
//! The binary is built for the Windows subsystem (`main.rs`), so the window started from the
//! Start menu opens no console beside it. A run from a terminal (`--headless`, `generate`,
//! `bench`, `--help`, `--version`) then has no console of its own: [`attach_parent`] attaches
//! it to the terminal's. Chosen over a second, console-subsystem binary: one program to ship,
//! sign and put in the Start menu, and the worker (this same binary) opens no console window.
//! The cost: cmd.exe does not wait for a Windows-subsystem program, so its prompt comes back
//! at once (`start /wait strata-desk ...` waits; PowerShell's `Start-Process -Wait
//! -NoNewWindow` too). Handles a caller already redirected (a pipe, a file) are kept.
//! Elsewhere this does nothing.

/// Attaches to the parent process's console, if it has one, for whichever of stdout and
/// stderr are not already redirected.
#[cfg(windows)]
#[allow(unsafe_code)]
pub fn attach_parent() {
    use windows_sys::Win32::Foundation::{
        GENERIC_READ, GENERIC_WRITE, HANDLE, INVALID_HANDLE_VALUE,
    };
    use windows_sys::Win32::Storage::FileSystem::{
        CreateFileW, FILE_SHARE_READ, FILE_SHARE_WRITE, OPEN_EXISTING,
    };
    use windows_sys::Win32::System::Console::{
        ATTACH_PARENT_PROCESS, AttachConsole, GetStdHandle, STD_ERROR_HANDLE, STD_OUTPUT_HANDLE,
        SetStdHandle,
    };
    let unset = |h: HANDLE| h.is_null() || h == INVALID_HANDLE_VALUE;
    // SAFETY: Win32 calls with valid arguments (a NUL-terminated UTF-16 name, null security
    // attributes and template); the handles set are live console handles the process keeps.
    unsafe {
        let (out, err) = (
            GetStdHandle(STD_OUTPUT_HANDLE),
            GetStdHandle(STD_ERROR_HANDLE),
        );
        if !unset(out) && !unset(err) {
            return;
        }
        if AttachConsole(ATTACH_PARENT_PROCESS) == 0 {
            return; // started from Explorer or the Start menu: no console, none wanted
        }
        let name: Vec<u16> = "CONOUT$\0".encode_utf16().collect();
        let console = CreateFileW(
            name.as_ptr(),
            GENERIC_READ | GENERIC_WRITE,
            FILE_SHARE_READ | FILE_SHARE_WRITE,
            std::ptr::null(),
            OPEN_EXISTING,
            0,
            std::ptr::null_mut(),
        );
        if unset(console) {
            return;
        }
        if unset(out) {
            SetStdHandle(STD_OUTPUT_HANDLE, console);
        }
        if unset(err) {
            SetStdHandle(STD_ERROR_HANDLE, console);
        }
    }
}

/// Elsewhere a program has the console it was started from.
#[cfg(not(windows))]
pub fn attach_parent() {}
