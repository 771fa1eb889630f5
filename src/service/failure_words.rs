//! An engine that could not start, in words a user can act on: the window's banner and the
//! headless server's line.

/// What the failure was, in a line: from the worker's end and its last words.
pub fn failure_headline(reason: &str) -> &'static str {
    if reason.contains("every CPU code crashed") {
        "the engine worker crashed on every CPU code this CPU runs: not the CPU code's fault"
    } else if reason.contains("SIGILL") || reason.contains("ILLEGAL_INSTRUCTION") {
        "llama.cpp's CPU code used an instruction this CPU or its system does not run"
    } else if reason.contains("SIGSEGV")
        || reason.contains("SIGBUS")
        || reason.contains("ACCESS_VIOLATION")
    {
        "the engine worker crashed (an invalid memory access in llama.cpp)"
    } else if reason.contains("SIGKILL") {
        "the engine worker was killed (by the system when memory ran out?)"
    } else if reason.contains("did not finish loading") {
        "the model did not finish loading in time"
    } else {
        "the engine worker could not start"
    }
}

/// What to try, for the failure `reason`.
pub fn what_to_try(reason: &str, cpu_code: &str) -> String {
    let mut steps = vec!["Retry (after a fix, or to see it happen again)".to_owned()];
    if reason.contains("SIGILL") || reason.contains("ILLEGAL_INSTRUCTION") {
        steps.push(format!(
            "set cpu_code in Settings and model to another variant (now {cpu_code}; `x64` runs on \
             every x86-64 CPU, slowest)"
        ));
    }
    if reason.contains("every CPU code crashed") || reason.contains("SIGBUS") {
        steps.push("check the model file (a download cut short?) or choose another".to_owned());
    } else {
        steps.push("choose another model or smaller settings in Settings and model".to_owned());
    }
    steps.push("the log below has each attempt; STRATA_LOG=info shows llama.cpp's own".to_owned());
    steps.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIGILL: &str = "the engine worker exited (killed by signal 4, SIGILL: an illegal \
         instruction (llama.cpp's CPU code used an instruction this CPU or its system does not \
         run)); its last words: ";

    #[test]
    fn an_illegal_instruction_is_named_and_points_at_cpu_code() {
        assert!(failure_headline(SIGILL).contains("instruction this CPU"));
        let steps = what_to_try(SIGILL, "sapphirerapids");
        assert!(
            steps.contains("cpu_code") && steps.contains("now sapphirerapids"),
            "{steps}"
        );
        assert!(steps.starts_with("Retry"));
    }

    #[test]
    fn a_crash_on_every_variant_points_at_the_model_not_the_cpu_code() {
        let reason =
            format!("{SIGILL} | every CPU code crashed (zen4, x64): not the CPU code's fault");
        assert!(failure_headline(&reason).contains("not the CPU code's fault"));
        assert!(what_to_try(&reason, "auto").contains("check the model file"));
    }

    #[test]
    fn other_failures_get_a_plain_headline() {
        assert_eq!(
            failure_headline("cannot start the engine worker /x: No such file"),
            "the engine worker could not start"
        );
    }
}
