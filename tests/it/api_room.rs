//! Room in the pool, end to end over the simulated engine (a real worker process with the
//! worker's own room checks): a pool filled to its last cell keeps the engine (the step ahead
//! that does not fit is not run), and the refusals nobody planned for (a step ahead, a
//! conversation load) fail at most their own request, never the engine. The pool-wide check
//! counts a mismatch and goes on. A priority set past the range is kept clamped.

use crate::api_fake::{Server, Setup, chat, server};
use serde_json::{Value, json};
use strata_desk::engine_worker::FakeOptions;
use strata_desk::scheduler::SchedulerSettings;

const KV_CELLS: u32 = 400;
const RESERVE: u32 = 32;

async fn small_pool(faults: &[&str]) -> Server {
    server(Setup {
        fake: FakeOptions {
            kv_cells: KV_CELLS,
            decode_steps_per_sec: 400.0,
            faults: faults.iter().map(|f| (*f).to_owned()).collect(),
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            output_reserve_tokens: RESERVE,
            ..SchedulerSettings::default()
        },
        worker: |w| w.slots = 1,
        ..Setup::default()
    })
    .await
}

fn usage(v: &Value, field: &str) -> u32 {
    v["usage"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("no usage.{field}: {v}")) as u32
}

fn healthy(server: &Server) {
    let engine = server.service.snapshot().engine;
    assert_eq!(engine.generation, 1, "the engine was restarted: {engine:?}");
    assert_eq!(engine.kv_pool_mismatches, 0, "{engine:?}");
}

/// The audit's first finding, through HTTP: a kept conversation and a request whose prompt and
/// first share of output take every free cell. The decode that fills the last cell is followed
/// by a step ahead that does not fit; the worker answers it "not run" (it once refused it, and
/// the host lost the engine: every request failed, every conversation was dropped).
#[tokio::test]
async fn a_pool_filled_to_its_last_cell_keeps_the_engine_and_the_stream_goes_on() {
    let server = small_pool(&[]).await;
    let first = server.chat_json(&chat("a", 20)).await;
    let overhead = usage(&first, "prompt_tokens") - 1;
    server
        .until("the first conversation is kept", |s| {
            s.conversations.len() == 1
        })
        .await;
    let kept = server.service.snapshot().conversations[0].tokens;
    // the prompt and its first share of output fill the pool exactly
    let prompt_tokens = KV_CELLS - RESERVE - kept;
    let text = "b".repeat((prompt_tokens - overhead) as usize);
    let second = server.chat_json(&chat(&text, 50)).await;
    assert_eq!(usage(&second, "prompt_tokens"), prompt_tokens, "{second}");
    assert_eq!(usage(&second, "completion_tokens"), 50, "{second}");
    let engine = server.service.snapshot().engine;
    assert!(
        engine.steps_ahead_not_run >= 1,
        "the pool never came to its last cell: {engine:?}"
    );
    healthy(&server);
}

/// A step ahead the worker refuses did not run: the step runs as itself and the stream's text
/// is the one a run without the fault gives.
#[tokio::test]
async fn a_refused_step_ahead_is_not_run_and_the_stream_is_unchanged() {
    let clean = small_pool(&[]).await.chat_json(&chat("tell me", 30)).await;
    let server = small_pool(&["error-at-ahead:3"]).await;
    let faulted = server.chat_json(&chat("tell me", 30)).await;
    assert_eq!(
        faulted["choices"][0]["message"]["content"], clean["choices"][0]["message"]["content"],
        "{faulted}"
    );
    assert_eq!(server.service.snapshot().engine.steps_ahead_not_run, 1);
    healthy(&server);
}

const QUESTION: &str = "a question long enough that its conversation is worth keeping: \
                        which of the ships in the harbour sails first tomorrow morning?";

/// A conversation load the worker refuses fails the request that needed it, with the engine's
/// words; the engine, and the next request, go on.
#[tokio::test]
async fn a_refused_conversation_load_fails_only_its_request() {
    let server = small_pool(&["error-at-load:1"]).await;
    let first = server.chat_json(&chat(QUESTION, 20)).await;
    let answer = first["choices"][0]["message"]["content"].as_str().unwrap();
    // a long prompt that needs the first conversation's cells: it goes to host RAM
    let long = server.chat_json(&chat(&"z".repeat(250), 10)).await;
    assert_eq!(usage(&long, "completion_tokens"), 10, "{long}");
    server
        .until("the first conversation is in host RAM", |s| {
            s.conversation_cache.entries == 1
        })
        .await;
    let follow_up = json!({"messages": [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "and then?"},
    ], "max_tokens": 5, "temperature": 0});
    let response = server.post(&follow_up).send().await.unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 500, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("injected error"), "{body}");
    let next = server.chat_json(&chat("and the next one", 5)).await;
    assert_eq!(usage(&next, "completion_tokens"), 5, "{next}");
    healthy(&server);
}

/// The pool-wide check: a step after which the engine reports other cells than the scheduler
/// counts is a logged diagnostic and a counter (snapshot and `/metrics`), and the engine goes
/// on serving.
#[tokio::test]
async fn a_pool_mismatch_is_counted_and_logged_and_never_stops_the_engine() {
    let server = small_pool(&["miscount-cells:4"]).await;
    let answer = server.chat_json(&chat("count with me", 12)).await;
    assert_eq!(usage(&answer, "completion_tokens"), 12, "{answer}");
    let snapshot = server.service.snapshot();
    assert_eq!(
        snapshot.engine.kv_pool_mismatches, 1,
        "{:?}",
        snapshot.engine
    );
    assert_eq!(snapshot.engine.generation, 1);
    assert!(
        snapshot
            .log
            .iter()
            .any(|e| e.text.contains("the scheduler counts")),
        "the mismatch is in the log"
    );
    let metrics = reqwest::get(format!("{}/metrics", server.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("strata_kv_pool_mismatches_total 1"),
        "{metrics}"
    );
}

/// Regression (the dashboard's +1 past the range): a priority past `priority_range` is kept as
/// the scheduler keeps it, clamped, in what the service records of the request.
#[tokio::test]
async fn a_priority_set_past_the_range_is_kept_clamped() {
    let server = small_pool(&[]).await;
    let long = tokio::spawn({
        let request = server.post(&chat("a long one", 150));
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    });
    server
        .until("the long one decodes", |s| {
            s.slots.iter().any(|slot| slot.generated_tokens > 0)
        })
        .await;
    let waiting = tokio::spawn({
        let request = server.post(&chat("waits", 3));
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    });
    server
        .until("the second one waits", |s| s.waiting.len() == 1)
        .await;
    let id = server.service.snapshot().waiting[0].request_id;
    server.service.set_priority(id, 1000).await.unwrap();
    waiting.await.unwrap();
    long.await.unwrap();
    let sample = server
        .service
        .snapshot()
        .ttft
        .iter()
        .find(|s| s.request_id == id)
        .cloned()
        .expect("its first token was recorded");
    assert_eq!(sample.priority, 100, "{sample:?}");
}
