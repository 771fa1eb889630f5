//! The binary as a user runs it.

use crate::support::{real_model, worker_exe};
use std::process::Command;

#[test]
fn generate_streams_text_from_the_default_model() {
    let _serial = real_model();
    // The default model path is used unless --model is given; the test suite's setup fetched it.
    let mut command = Command::new(worker_exe());
    command.args([
        "generate",
        "--max-tokens",
        "24",
        "--threads",
        "1",
        "Name a color.",
    ]);
    if let Some(model) = std::env::var_os("STRATA_TEST_MODEL") {
        command.arg("--model").arg(model);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stderr: {stderr}");
    assert!(
        stdout.trim().len() >= 2,
        "no text streamed: {stdout:?} / {stderr}"
    );
    assert!(stderr.contains("generated"), "no summary line: {stderr}");
}

#[test]
fn an_unknown_subcommand_is_a_usage_error() {
    let output = Command::new(worker_exe()).arg("fly").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unrecognized subcommand"));
}
