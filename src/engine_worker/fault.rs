//! A fault the real engine worker can be told to raise, for the tests of what the app does when
//! llama.cpp's CPU code crashes on a CPU (`engine::cpu_code`): an illegal instruction at the
//! start of the warm-up, when the CPU variant loaded is one [`CRASH_VAR`] names. The simulated
//! engine's faults are its options (`--fake-fault`); this one is an environment variable, so
//! that it reaches the worker through the app, the CLI and the tests alike.

/// Comma-separated CPU variants (`zen4,icelake`, or `*` for every one) whose warm-up executes
/// an illegal instruction.
pub const CRASH_VAR: &str = "STRATA_FAULT_CPU_CRASH";

/// Executes an illegal instruction (`ud2`: SIGILL on Linux, STATUS_ILLEGAL_INSTRUCTION on
/// Windows) when [`CRASH_VAR`] names `variant`, as a CPU variant built for instructions this
/// CPU lacks would.
pub fn crash_if_told(variant: &str) {
    let Some(told) = std::env::var_os(CRASH_VAR) else {
        return;
    };
    let told = told.to_string_lossy();
    if !told
        .split(',')
        .any(|v| v.trim() == variant || v.trim() == "*")
    {
        return;
    }
    eprintln!("injected fault ({CRASH_VAR}): an illegal instruction in the {variant} warm-up");
    illegal_instruction();
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn illegal_instruction() {
    // SAFETY: `ud2` touches no memory; it raises the CPU's invalid-opcode exception, which ends
    // the process, as the fault is meant to.
    unsafe { std::arch::asm!("ud2") };
}

#[cfg(not(target_arch = "x86_64"))]
fn illegal_instruction() {
    // No portable illegal instruction: the nearest is an abort (SIGABRT), which the app does
    // not take for a CPU fault; the test that uses this runs on x86-64.
    std::process::abort();
}
