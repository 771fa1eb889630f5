//! A fault at every message (hardening issue, item 9, with item 6 in it): a scripted workload
//! on the simulated engine runs once cleanly, then once per protocol message k with a fault
//! injected at message k (`--fake-fault KIND-at-message:k`: the worker dies, answers a
//! malformed line, or answers an error; hanging costs the 10 s reply deadline a run, so it is
//! run at a few messages here and at every one with `STRATA_FAULTS_FULL=1`). Every run must
//! show: each request either finished with exactly the clean run's text or failed with a
//! structured error (never hung: every stream ends); nothing left waiting, reading or parked;
//! the next request succeeds.
//!
//! The workload, one slot with `solo_priority` on and a small pool: a long stream L; a short
//! high-priority request S that pauses L (L parked to host RAM); L restored; then a follow-up
//! turn of S's conversation F (a kept conversation continued while L's is saved to host RAM);
//! then a stream C its client drops midway (a cancellation).

use crate::api_fake::{Server, Setup, chat, server, sse_data, streamed_text};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use strata_desk::engine_worker::FakeOptions;
use strata_desk::scheduler::SchedulerSettings;
use strata_desk::service::EngineStatus;

/// What a client got: the text of a request that finished, or the error of one that failed.
#[derive(Debug, Clone, PartialEq)]
enum Ending {
    Text(String),
    Error(Value),
}

/// Every stream must end within this (a lost end event is the bug this finds).
const END_WITHIN: Duration = Duration::from_secs(60);

fn post(base: &str, body: &Value) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(body)
}

async fn stream(base: &str, mut body: Value) -> Ending {
    body["stream"] = json!(true);
    let run = async {
        let response = post(base, &body).send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        if status != 200 {
            let error: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            return Ending::Error(error);
        }
        let events = sse_data(&text);
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{text}");
        let failed = events
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(e).ok())
            .find(|v| v.get("error").is_some());
        match failed {
            Some(error) => Ending::Error(error),
            None => Ending::Text(streamed_text(&events)),
        }
    };
    tokio::time::timeout(END_WITHIN, run)
        .await
        .expect("a stream never ended")
}

async fn whole(base: &str, body: &Value) -> Ending {
    let run = async {
        let response = post(base, body).send().await.unwrap();
        let status = response.status().as_u16();
        let value: Value = response.json().await.unwrap();
        if status == 200 {
            Ending::Text(
                value["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        } else {
            Ending::Error(value)
        }
    };
    tokio::time::timeout(END_WITHIN, run)
        .await
        .expect("a request never ended")
}

fn long_body() -> Value {
    chat("tell me a long story about the sea and the ships on it", 48)
}

const SHORT_QUESTION: &str = "a quick question about the ships: which one is the fastest?";

fn short_body() -> Value {
    let mut body = chat(SHORT_QUESTION, 4);
    body["priority"] = json!(10);
    body
}

/// The next turn of the short request's conversation.
fn follow_up(answer: &str) -> Value {
    json!({"messages": [
        {"role": "user", "content": SHORT_QUESTION},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "and then?"},
    ], "max_tokens": 4, "temperature": 0})
}

const KV_CELLS: u32 = 128;

async fn faulty_server(fault: Option<String>) -> Server {
    server(Setup {
        fake: FakeOptions {
            // slow enough decoding that the short request arrives while the long one runs
            decode_steps_per_sec: 200.0,
            // a small pool: the pause parks L to host RAM and kept conversations are saved
            kv_cells: KV_CELLS,
            faults: fault.into_iter().collect(),
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            solo_priority: true,
            min_run_quantum_secs: 0.02,
            ..SchedulerSettings::default()
        },
        worker: |w| w.slots = 1,
        ..Setup::default()
    })
    .await
}

/// Runs the workload; the endings of L, S and F.
async fn workload(server: &Server, clean_short: Option<&str>) -> [Ending; 3] {
    let long = {
        let base = server.base.clone();
        tokio::spawn(async move { stream(&base, long_body()).await })
    };
    // S arrives once L decodes (or after a moment, if L failed first)
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let s = server.service.snapshot();
        if s.slots.iter().any(|slot| slot.slot.generated_tokens > 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let short = stream(&server.base, short_body()).await;
    let long = long.await.unwrap();
    // F continues S's conversation as the clean run answered it (the same prompt either way)
    let answer = match (&short, clean_short) {
        (_, Some(clean)) => clean.to_owned(),
        (Ending::Text(t), None) => t.clone(),
        (Ending::Error(_), None) => panic!("the clean run failed"),
    };
    let follow = whole(&server.base, &follow_up(&answer)).await;
    cancelled_midway(&server.base).await;
    [long, short, follow]
}

/// A stream its client drops after a few events (or at its end, if a fault ends it first).
async fn cancelled_midway(base: &str) {
    use futures_util::StreamExt;
    let mut body = chat("a question nobody waits for", 40);
    body["stream"] = json!(true);
    let run = async {
        let response = post(base, &body).send().await.unwrap();
        let mut bytes = response.bytes_stream();
        let mut seen = String::new();
        while let Some(Ok(piece)) = bytes.next().await {
            seen.push_str(&String::from_utf8_lossy(&piece));
            if seen.matches("data: ").count() >= 3 {
                break;
            }
        }
    };
    tokio::time::timeout(END_WITHIN, run)
        .await
        .expect("a stream never ended");
}

/// After a run: nothing waits or is parked, and the next request succeeds with its text. When
/// the fault did not fire during the workload (its k lies past this run's messages: how many
/// steps a cancellation takes varies), it fires in the first probe, which may then fail with a
/// structured error; the second must succeed (a fault fires once).
async fn settles_and_serves(server: &Server, probe_text: &str, what: &str, fault_fired: bool) {
    let started = Instant::now();
    loop {
        let s = server.service.snapshot();
        let idle = s.waiting.is_empty() && s.parked.is_empty();
        let busy = s.slots.iter().any(|slot| slot.slot.request_id.is_some());
        if idle && !busy {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{what}: requests left behind: waiting {:?}, parked {:?}",
            s.waiting,
            s.parked
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut probe = whole(&server.base, &chat("probe", 3)).await;
    if !fault_fired && let Ending::Error(e) = &probe {
        assert!(structured(e), "{what}: the probe: {e}");
        probe = whole(&server.base, &chat("probe", 3)).await;
    }
    assert_eq!(
        probe,
        Ending::Text(probe_text.to_owned()),
        "{what}: the next request"
    );
}

fn structured(error: &Value) -> bool {
    let e = &error["error"];
    e["message"].as_str().is_some_and(|m| !m.is_empty())
        && (e["type"].is_string() || e["code"].is_string())
}

/// Whether the fault fired: the engine died (a new generation, or not ready now), or a
/// request failed.
async fn fired(server: &Server, endings: &[Ending]) -> bool {
    // a death at the last message shows once the host reads the worker's end of file
    tokio::time::sleep(Duration::from_millis(100)).await;
    let s = server.service.snapshot();
    s.engine.generation > 1
        || s.engine.status != EngineStatus::Ready
        || endings.iter().any(|e| matches!(e, Ending::Error(_)))
}

#[tokio::test]
async fn a_fault_at_every_protocol_message_loses_no_token_leaves_nothing_behind_and_the_next_request_succeeds()
 {
    let clean_server = faulty_server(None).await;
    let clean = workload(&clean_server, None).await;
    let Ending::Text(clean_short) = clean[1].clone() else {
        panic!("the clean run failed: {clean:?}");
    };
    for ending in &clean {
        assert!(
            matches!(ending, Ending::Text(t) if !t.is_empty()),
            "{clean:?}"
        );
    }
    // S really paused L in the clean run (the workload exercises park and restore)
    clean_server
        .until("the dropped stream is cancelled", |s| {
            s.counters.cancellations + s.counters.finished >= 4
        })
        .await;
    let counters = clean_server.service.snapshot().counters;
    let cache = clean_server.service.snapshot().conversation_cache;
    // the workload parks to host RAM and restores, saves a conversation there, continues one,
    // and cancels one
    assert!(
        counters.pauses >= 1 && counters.parks_to_host >= 1,
        "{counters:?}"
    );
    assert!(cache.entries >= 1 && cache.hits >= 1, "{cache:?}");
    assert_eq!(counters.cancellations, 1, "{counters:?}");
    // each pause counted once in what it cost and what it saved (api_cost.rs has the move of
    // a paused stream to host RAM, which once credited the winner a second pause)
    let finished = clean_server.service.snapshot().finished;
    let paused_others: u64 = finished.iter().map(|f| u64::from(f.paused_others)).sum();
    let pauses: u64 = finished.iter().map(|f| u64::from(f.pauses)).sum();
    assert_eq!(
        (paused_others, pauses),
        (counters.pauses, counters.pauses),
        "{finished:?}"
    );
    let probe = whole(&clean_server.base, &chat("probe", 3)).await;
    let Ending::Text(probe_text) = probe else {
        panic!("{probe:?}")
    };
    drop(clean_server);

    // one fault alone, to look into a failure: STRATA_FAULT_ONLY=error-at-message:7
    if let Ok(only) = std::env::var("STRATA_FAULT_ONLY") {
        let server = faulty_server(Some(only.clone())).await;
        let endings = workload(&server, Some(&clean_short)).await;
        check_endings(&clean, &endings, &only);
        let hit = fired(&server, &endings).await;
        settles_and_serves(&server, &probe_text, &only, hit).await;
        return;
    }
    let full = std::env::var_os("STRATA_FAULTS_FULL").is_some();
    let started = Instant::now();
    let mut runs = 0;
    let mut messages = 0;
    // the die scan finds how many messages the workload sends: the first k that never fires
    for k in 1.. {
        eprintln!("fault run: die-at-message:{k}");
        let server = faulty_server(Some(format!("die-at-message:{k}"))).await;
        let endings = workload(&server, Some(&clean_short)).await;
        let what = format!("die at message {k}");
        check_endings(&clean, &endings, &what);
        runs += 1;
        if !fired(&server, &endings).await {
            // k lies past the workload's messages (it would fire in the probe)
            messages = k - 1;
            break;
        }
        settles_and_serves(&server, &probe_text, &what, true).await;
        assert!(k < 500, "the workload never stopped sending");
    }
    assert!(
        messages >= 10,
        "only {messages} messages: the scan is broken"
    );
    let hang_at: Vec<u64> = if full {
        (1..=messages).collect()
    } else {
        vec![1, messages / 2, messages]
    };
    for (kind, ks) in [
        ("malformed", (1..=messages).collect::<Vec<_>>()),
        ("error", (1..=messages).collect()),
        ("hang", hang_at),
    ] {
        for k in ks {
            eprintln!("fault run: {kind}-at-message:{k}");
            let server = faulty_server(Some(format!("{kind}-at-message:{k}"))).await;
            let endings = workload(&server, Some(&clean_short)).await;
            let what = format!("{kind} at message {k}");
            check_endings(&clean, &endings, &what);
            let hit = fired(&server, &endings).await;
            settles_and_serves(&server, &probe_text, &what, hit).await;
            runs += 1;
        }
    }
    eprintln!(
        "fault at every message: {messages} messages, {runs} runs (hang at {} of them), {:.1} s",
        if full { messages } else { 3 },
        started.elapsed().as_secs_f64()
    );
}

fn check_endings(clean: &[Ending; 3], got: &[Ending; 3], what: &str) {
    for (i, (clean, got)) in clean.iter().zip(got).enumerate() {
        match got {
            Ending::Text(_) => assert_eq!(got, clean, "{what}: request {i} changed its text"),
            Ending::Error(e) => assert!(structured(e), "{what}: request {i}: {e}"),
        }
    }
}
