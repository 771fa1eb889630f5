//! The scheduler's guarantees over a real llama-server (`engine: upstream`, the test model, one
//! thread, greedy): a stream parked for a short request resumes with the same text, and the
//! seeds' scenarios (`strata-desk bench`) run through it and lose nothing. The llama-server is
//! the one scripts/test.sh builds (`STRATA_TEST_LLAMA_SERVER`, tests/it/upstream_real.rs).

use crate::api_fake::{Setup, chat, server, sse_data, streamed_text};
use crate::bench::{bench, summary};
use crate::support::real_model;
use crate::upstream_real::{llama_server, over};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;
use strata_desk::scheduler::SchedulerSettings;

/// A story that runs to `max_tokens` (long enough to outlast the short request).
fn story(max_tokens: u32) -> Value {
    let mut body = chat("Write a long story about a lighthouse keeper.", max_tokens);
    body["ignore_eos"] = json!(true);
    body
}

#[tokio::test]
async fn over_llama_server_a_greedy_stream_parked_for_a_short_request_resumes_with_the_same_text() {
    let _serial = real_model();
    let upstream = llama_server(2).await;
    let server = server(Setup {
        real: over(&upstream),
        scheduler: SchedulerSettings {
            solo_priority: true,
            min_run_quantum_secs: 0.5,
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let alone = server.chat_json(&story(600)).await;
    let alone = alone["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut body = story(600);
    body["stream"] = json!(true);
    let long = server.post(&body).send().await.unwrap();
    let mut long_stream = long.bytes_stream();
    let mut long_text = String::new();
    // some tokens out, past the run quantum
    while !long_text.contains("\"content\":\"") {
        long_text.push_str(&String::from_utf8_lossy(
            &long_stream.next().await.unwrap().unwrap(),
        ));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;

    let mut short = chat("What is 2 + 2?", 32);
    short["ignore_eos"] = json!(true);
    short["priority"] = json!(5);
    short["stream"] = json!(true);
    let response = server.post(&short).send().await.unwrap();
    let mut short_stream = response.bytes_stream();
    let mut parked_at_first_token = None;
    let mut upstream_stopped_the_long = false;
    let mut short_text = String::new();
    while let Some(chunk) = short_stream.next().await {
        let chunk = String::from_utf8_lossy(&chunk.unwrap()).into_owned();
        if parked_at_first_token.is_none()
            && chunk.contains("\"content\":\"")
            && !chunk.contains("\"role\"")
        {
            parked_at_first_token = Some(server.service.snapshot().parked.len());
            // the upstream stopped generating for the parked stream: one slot busy, the short's
            upstream_stopped_the_long = busy_upstream_slots_reach(&upstream.url, 1).await;
        }
        short_text.push_str(&chunk);
    }
    assert_eq!(
        parked_at_first_token,
        Some(1),
        "the long stream was not parked when the short one's first token came"
    );
    assert!(
        upstream_stopped_the_long,
        "the upstream kept decoding the parked stream while the short one ran"
    );
    assert!(sse_data(&short_text).last().is_some_and(|d| d == "[DONE]"));

    while let Some(chunk) = long_stream.next().await {
        long_text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert_eq!(
        streamed_text(&sse_data(&long_text)),
        alone,
        "the parked stream's text changed"
    );
    let counters = server.service.snapshot().counters;
    assert!(
        counters.pauses >= 1 && counters.resumes >= 1,
        "{counters:?}"
    );
    assert_eq!(counters.processed_prefix_losses, 0);
}

/// Whether the upstream's `/slots` shows at most `busy` slots processing within 0.2 s.
async fn busy_upstream_slots_reach(url: &str, busy: usize) -> bool {
    for _ in 0..5 {
        let slots: Vec<Value> = reqwest::get(format!("{url}/slots"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if slots.iter().filter(|s| s["is_processing"] == true).count() <= busy {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Runs `strata-desk bench ARGS` against `base` and checks that every request it recorded
/// finished without an error; returns the report.
async fn scenario(base: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--base-url", base, "--ignore-eos", "--max-secs", "240"]);
    let (output, report) = bench(&all).await;
    assert!(output.status.success(), "{args:?}: {output:?}");
    let report = report.unwrap_or_else(|| panic!("{args:?}: no JSON report"));
    let records = report["records"].as_array().unwrap();
    assert!(!records.is_empty(), "{args:?}: {report}");
    for record in records {
        assert!(record["error"].is_null(), "{args:?}: {record}");
    }
    report
}

/// The seeds' scenarios after solo-long-short, small enough for CI: each argument list of
/// `strata-desk bench`.
const OTHER_SCENARIOS: &[&[&str]] = &[
    &[
        "followup-vs-fresh",
        "--rounds",
        "1",
        "--history-tokens",
        "400",
        "--fresh-prompt-tokens",
        "200",
        "--max-tokens",
        "8",
        "--gap-secs",
        "0.2",
    ],
    &[
        "burst-priority",
        "--long-count",
        "2",
        "--waiting",
        "2",
        "--long-prompt-tokens",
        "64",
        "--long-max-tokens",
        "24",
    ],
    &[
        "agent-replay",
        "--agents",
        "2",
        "--turns",
        "2",
        "--system-tokens",
        "200",
        "--max-tokens",
        "8",
        "--think-secs",
        "0.2",
        "--side-every",
        "2",
        "--side-priority",
        "5",
    ],
];

#[tokio::test]
async fn over_llama_server_the_seeds_scenarios_run_and_lose_nothing() {
    let _serial = real_model();
    let upstream = llama_server(2).await;
    let server = server(Setup {
        real: over(&upstream),
        scheduler: SchedulerSettings {
            solo_priority: true,
            chunk_tokens: Some(64),
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let base = server.base.as_str();
    let solo = scenario(
        base,
        &[
            "solo-long-short",
            "--rounds",
            "1",
            "--long-prompt-tokens",
            "600",
            "--long-max-tokens",
            "32",
            "--delay-secs",
            "0.3",
            "--short-priority",
            "5",
        ],
    )
    .await;
    // the long read gave way to the short request at a chunk boundary (it has priority)
    assert!(server.service.snapshot().counters.give_ways >= 1, "{solo}");
    for args in OTHER_SCENARIOS {
        scenario(base, args).await;
    }
    let soak = scenario(
        base,
        &[
            "soak",
            "--minutes",
            "0.2",
            "--concurrency",
            "3",
            "--disconnect-share",
            "0.5",
        ],
    )
    .await;
    assert_eq!(summary(&soak, "failed otherwise"), Some(0.0), "{soak}");
    assert_eq!(summary(&soak, "processed-prefix losses"), Some(0.0));
    assert_eq!(summary(&soak, "left waiting"), Some(0.0));
    assert_eq!(summary(&soak, "left parked"), Some(0.0));
}
