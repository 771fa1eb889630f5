//! `strata-desk bench` against the simulated engine behind the real HTTP API: the records it
//! writes, the checks the soak makes, and the loopback guard.

use crate::api_fake::{Setup, server};
use crate::support::worker_exe;
use serde_json::Value;
use strata_desk::engine_worker::FakeOptions;

pub(crate) async fn bench(args: &[&str]) -> (std::process::Output, Option<Value>) {
    // one file per run: tests in this process run at the same time
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let json = std::env::temp_dir().join(format!("strata-bench-{}-{run}.json", std::process::id()));
    let output = tokio::process::Command::new(worker_exe())
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .await
        .unwrap();
    let report = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    (output, report)
}

pub(crate) fn summary(report: &Value, name: &str) -> Option<f64> {
    report["summary"]
        .as_array()?
        .iter()
        .find(|l| l["name"] == name)?["value"]
        .as_f64()
}

#[tokio::test]
async fn solo_long_short_records_every_request_and_prints_the_table() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 100.0,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let (output, report) = bench(&[
        "solo-long-short",
        "--base-url",
        &format!("{}/v1", server.base),
        "--rounds",
        "2",
        "--long-prompt-tokens",
        "64",
        "--long-max-tokens",
        "40",
        "--delay-secs",
        "0.1",
        "--ignore-eos",
        "--label",
        "sim",
    ])
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("short TTFT, median"), "{stdout}");
    let report = report.expect("the JSON report");
    assert_eq!(report["label"], "sim");
    let records = report["records"].as_array().unwrap();
    assert_eq!(records.len(), 4);
    for record in records {
        assert!(record["error"].is_null(), "{record}");
        assert!(record["ttft_secs"].as_f64().is_some(), "{record}");
    }
    let longs: Vec<&Value> = records.iter().filter(|r| r["label"] == "long").collect();
    // --ignore-eos: each long ran to its max_tokens.
    assert!(
        longs.iter().all(|r| r["completion_tokens"] == 40),
        "{longs:?}"
    );
    assert!(summary(&report, "long tokens/s, median").is_some());
}

#[tokio::test]
async fn a_short_soak_with_disconnects_loses_nothing_and_leaves_nothing_behind() {
    let server = server(Setup::default()).await;
    let (output, report) = bench(&[
        "soak",
        "--base-url",
        &server.base,
        "--minutes",
        "0.05",
        "--concurrency",
        "3",
        "--disconnect-share",
        "0.5",
    ])
    .await;
    assert!(output.status.success(), "{output:?}");
    let report = report.expect("the JSON report");
    assert!(summary(&report, "requests").unwrap() >= 3.0);
    assert!(summary(&report, "dropped by the client on purpose").unwrap() >= 1.0);
    assert_eq!(summary(&report, "failed otherwise"), Some(0.0), "{report}");
    assert_eq!(summary(&report, "processed-prefix losses"), Some(0.0));
    assert_eq!(summary(&report, "left waiting"), Some(0.0));
    assert_eq!(summary(&report, "left parked"), Some(0.0));
}

#[tokio::test]
async fn the_bench_refuses_a_server_beyond_loopback_unless_told() {
    let (output, report) = bench(&["solo-long-short", "--base-url", "http://192.0.2.7:8080"]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--allow-remote"), "{stderr}");
    assert!(report.is_none());
}
