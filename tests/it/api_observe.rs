//! Observability over HTTP with the simulated engine: `/v1/scheduler` and its event stream,
//! `/metrics` (parsed by the official Python `prometheus-client`). Control is in api_control.rs.

use crate::api_fake::{Server, Setup, chat, server, sse_data};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use strata_desk::engine_worker::FakeOptions;
use strata_desk::scheduler::SchedulerSettings;
use strata_desk::service::ServiceSnapshot;
use strata_desk::service::{ParkKind, SlotStatus};

/// Text that must never appear in the snapshot (no prompt text).
const SECRET: &str = "zebra-secret-prompt";

pub(crate) async fn get_json(server: &Server, path: &str) -> Value {
    reqwest::get(format!("{}{path}", server.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// An admin call with a JSON content type (and `body`, if any).
pub(crate) async fn admin(
    server: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let request = reqwest::Client::new()
        .request(method, format!("{}{path}", server.base))
        .header("content-type", "application/json");
    let request = match body {
        Some(body) => request.body(body.to_string()),
        None => request,
    };
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A server on the simulated engine decoding 40 tokens a second, with `solo_priority` on,
/// the given quantum and no aging.
pub(crate) async fn preempting_server(min_run_quantum_secs: f64) -> Server {
    server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            solo_priority: true,
            min_run_quantum_secs,
            aging_interval_secs: 0.0,
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await
}

pub(crate) fn streaming(text: &str, max_tokens: u32) -> Value {
    let mut body = chat(text, max_tokens);
    body["stream"] = json!(true);
    body
}

/// The id of the request the snapshot shows in its only busy slot.
pub(crate) fn running_id(s: &ServiceSnapshot) -> Option<u64> {
    s.slots
        .iter()
        .find_map(|slot| slot.request_id.map(|id| id.0))
}

#[tokio::test]
async fn the_snapshot_shows_every_field_with_a_parked_stream_and_an_aging_waiter_and_no_prompt_text()
 {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            solo_priority: true,
            min_run_quantum_secs: 0.2,
            aging_interval_secs: 0.5,
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let long = server
        .post(&streaming(&format!("long {SECRET}"), 400))
        .send()
        .await
        .unwrap();
    server
        .until("the long one decodes", |s| {
            s.slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Decoding)
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Priority 100: the aging waiter (+2 a second) must not overtake it while the test looks.
    let mut short = chat(&format!("short {SECRET}"), 200);
    short["priority"] = json!(100);
    let short = tokio::spawn(server.post(&short).send());
    server
        .until("the long one is parked", |s| s.parked.len() == 1)
        .await;
    let waiter = tokio::spawn(server.post(&chat(&format!("waits {SECRET}"), 5)).send());
    server
        .until("a waiter has aged", |s| {
            s.waiting.len() == 1 && s.waiting[0].aging >= 1
        })
        .await;
    server
        .until("the short one has a rate", |s| {
            s.slots[0].tokens_per_sec.is_some()
        })
        .await;

    let raw = reqwest::get(format!("{}/v1/scheduler", server.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!raw.contains(SECRET), "prompt text in the snapshot: {raw}");
    let v: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(v["mode"], "solo_priority");
    assert_eq!(v["solo_priority"], true);
    assert_eq!(v["give_way"], "left");
    let engine = &v["engine"];
    assert_eq!(engine["state"], "ready");
    assert_eq!(engine["simulated"], true);
    assert_eq!(engine["restarts"], 0);
    assert!(
        engine["model"].as_str().unwrap().contains("simulated"),
        "{engine}"
    );
    assert!(engine["kv_cells_total"].as_u64().unwrap() > 0);
    assert!(engine["kv_cells_used"].as_u64().unwrap() > 0);

    let slot = &v["slots"][0];
    assert_eq!(slot["id"], 0);
    assert_eq!(slot["state"], "decoding");
    assert_eq!(slot["priority"], 100);
    let short_id = slot["request_id"].as_u64().unwrap();
    for field in [
        "prompt_tokens",
        "held_tokens",
        "read_tokens",
        "generated_tokens",
    ] {
        assert!(slot[field].as_u64().unwrap() > 0, "{field}: {slot}");
    }
    assert!(slot["tokens_per_sec"].as_f64().unwrap() > 0.0, "{slot}");

    let parked = &v["parked"][0];
    let long_id = parked["request_id"].as_u64().unwrap();
    assert_ne!(long_id, short_id);
    assert_eq!(parked["priority"], 0);
    assert_eq!(parked["pauses"], 1);
    assert_eq!(parked["kind"], "decode");
    assert!(parked["generated_tokens"].as_u64().unwrap() > 0);
    assert!(parked["parked_secs"].as_f64().unwrap() > 0.0);

    let waiting = &v["waiting"][0];
    assert_eq!(waiting["priority"], 0);
    let aging = waiting["aging"].as_i64().unwrap();
    assert!(aging >= 1);
    // The waiter gave no priority: solo_priority's small-request boost applies.
    assert_eq!(waiting["boost"], 1);
    assert_eq!(waiting["effective_priority"].as_i64().unwrap(), 1 + aging);
    assert!(waiting["waited_secs"].as_f64().unwrap() >= 0.5);
    assert!(waiting["tokens_left_to_read"].as_u64().unwrap() > 0);

    for field in ["entries", "bytes", "hits", "misses"] {
        assert!(v["conversation_cache"][field].is_u64(), "{field}");
    }
    assert!(v["conversation_cache"]["misses"].as_u64().unwrap() >= 1);
    let counters = &v["counters"];
    assert_eq!(counters["pauses"], 1);
    for field in [
        "give_ways",
        "resumes",
        "processed_prefix_losses",
        "cancellations",
        "engine_restarts",
    ] {
        assert_eq!(counters[field], 0, "{field}: {counters}");
    }
    let ttft = v["ttft"].as_array().unwrap();
    let sample = ttft
        .iter()
        .find(|t| t["request_id"] == long_id)
        .expect("the long one's first token");
    assert_eq!(sample["priority"], 0);
    assert!(sample["ttft_secs"].as_f64().unwrap() > 0.0);
    assert!(sample["at_secs"].as_f64().unwrap() <= v["uptime_secs"].as_f64().unwrap());

    // A parked request can be re-prioritised; it says so.
    let (status, body) = admin(
        &server,
        reqwest::Method::PATCH,
        &format!("/v1/requests/{long_id}"),
        Some(json!({"priority": -3})),
    )
    .await;
    assert_eq!((status, &body["state"]), (200, &json!("parked")), "{body}");
    server
        .until("the parked one shows its new priority", |s| {
            s.parked.first().is_some_and(|p| p.priority == -3)
        })
        .await;
    drop(long);
    assert_eq!(short.await.unwrap().unwrap().status(), 200);
    assert_eq!(waiter.await.unwrap().unwrap().status(), 200);
}

#[tokio::test]
async fn a_read_that_gave_way_shows_as_parked_with_its_give_way_counted() {
    let server = server(Setup {
        fake: FakeOptions {
            prompt_tokens_per_sec: 1000.0,
            decode_steps_per_sec: 10.0,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            chunk_tokens: Some(64),
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let long = tokio::spawn(server.post(&chat(&"r".repeat(3000), 3)).send());
    server
        .until("the long prompt is read", |s| {
            s.slots.iter().any(|slot| slot.state == SlotStatus::Reading)
        })
        .await;
    let short = tokio::spawn(server.post(&chat("s", 30)).send());
    server
        .until("the long read gave way", |s| {
            s.parked.first().is_some_and(|p| p.kind == ParkKind::Read)
        })
        .await;
    let v = get_json(&server, "/v1/scheduler").await;
    assert_eq!(v["parked"][0]["kind"], "read");
    assert_eq!(v["counters"]["give_ways"], 1);
    assert_eq!(v["counters"]["give_ways_shorter_left"], 1);
    assert_eq!(v["counters"]["give_ways_higher_priority"], 0);
    assert_eq!(short.await.unwrap().unwrap().status(), 200);
    assert_eq!(long.await.unwrap().unwrap().status(), 200);
    let after = server.service.snapshot();
    assert_eq!(after.counters.processed_prefix_losses, 0);
    assert!(after.parked.is_empty() && after.waiting.is_empty());
}

#[tokio::test]
async fn the_events_stream_sends_the_snapshot_then_one_event_per_change_at_most_ten_a_second() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 100.0,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let response = reqwest::get(format!("{}/v1/scheduler/events", server.base))
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = response.bytes_stream();
    let mut seen = String::new();
    let mut snapshots: Vec<Value> = Vec::new();
    let started = Instant::now();
    let mut sent = false;
    let mut request = None;
    while started.elapsed() < Duration::from_secs(20) {
        let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_secs(5), stream.next()).await
        else {
            break;
        };
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        // the snapshots (the `observed` events between them are api_observed.rs's)
        snapshots = seen
            .split("\n\n")
            .filter(|block| block.starts_with("event: snapshot"))
            .flat_map(sse_data)
            .map(|d| serde_json::from_str(&d).unwrap())
            .collect();
        if !sent && !snapshots.is_empty() {
            // Idle: the first event is the current snapshot; nothing runs.
            assert_eq!(snapshots[0]["counters"]["finished"], 0);
            sent = true;
            request = Some(tokio::spawn(server.post(&chat("observe me", 100)).send()));
        }
        if snapshots
            .last()
            .is_some_and(|s| s["counters"]["finished"] == 1)
        {
            break;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(seen.contains("event: snapshot"), "{seen}");
    let last = snapshots.last().expect("events");
    assert_eq!(last["counters"]["finished"], 1, "never saw the request end");
    assert!(
        snapshots
            .iter()
            .any(|s| s["slots"][0]["state"] == "decoding"),
        "never saw the request decode"
    );
    // 100 tokens at 100 a second change the snapshot about 100 times: the stream sends at
    // most ten events a second (plus the first).
    let limit = 1.0 + elapsed * f64::from(strata_desk::api::EVENTS_PER_SEC_MAX) + 1.0;
    assert!(
        (snapshots.len() as f64) <= limit,
        "{} events in {elapsed:.2} s",
        snapshots.len()
    );
    assert!(snapshots.len() >= 3, "{} events", snapshots.len());
    assert_eq!(request.unwrap().await.unwrap().unwrap().status(), 200);
}

/// Parses OpenMetrics text with the official Python `prometheus-client` and returns every
/// sample as `name{label="value",...}` → value (labels sorted).
fn parse_metrics(text: &str) -> HashMap<String, f64> {
    use std::io::Write;
    let python = crate::support::test_python();
    let script = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        out[f"{s.name}{{{labels}}}"] = s.value
print(json.dumps(out))
"#;
    let mut child = std::process::Command::new(python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the Python parser");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser refused the text: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub(crate) async fn scrape(server: &Server) -> HashMap<String, f64> {
    let response = reqwest::get(format!("{}/metrics", server.base))
        .await
        .unwrap();
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
    );
    parse_metrics(&response.text().await.unwrap())
}

#[tokio::test]
async fn metrics_parse_with_the_official_prometheus_parser_and_move_with_the_work() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            solo_priority: true,
            min_run_quantum_secs: 0.2,
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let before = scrape(&server).await;
    let model = server.service.snapshot().engine.model;
    let get = |m: &HashMap<String, f64>, key: &str| m.get(key).copied().unwrap_or(0.0);
    assert_eq!(get(&before, "strata_preemptions_total{}"), 0.0);
    assert!(before.contains_key(&format!(
        "vllm:num_requests_waiting{{model_name=\"{model}\"}}"
    )));

    // A long stream paused for a priority request, and a waiter cancelled by id.
    let long = tokio::spawn(server.post(&chat("long", 120)).send());
    server
        .until("the long one decodes", |s| {
            s.slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Decoding)
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut short = chat("short", 40);
    short["priority"] = json!(5);
    let short = tokio::spawn(server.post(&short).send());
    server
        .until("the long one is parked", |s| s.parked.len() == 1)
        .await;
    let waiter = tokio::spawn(server.post(&chat("waiter", 5)).send());
    server.until("one waits", |s| s.waiting.len() == 1).await;
    let during = scrape(&server).await;
    assert_eq!(get(&during, "strata_num_requests_parked{}"), 1.0);
    assert_eq!(get(&during, "strata_num_requests_waiting{}"), 1.0);
    assert_eq!(get(&during, "strata_num_requests_running{}"), 1.0);
    let vllm_waiting = format!("vllm:num_requests_waiting{{model_name=\"{model}\"}}");
    assert_eq!(get(&during, &vllm_waiting), 1.0);
    let waiter_id = server.service.snapshot().waiting[0].request_id.0;
    let (status, _) = admin(
        &server,
        reqwest::Method::DELETE,
        &format!("/v1/requests/{waiter_id}"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(long.await.unwrap().unwrap().status(), 200);
    assert_eq!(short.await.unwrap().unwrap().status(), 200);
    let _ = waiter.await.unwrap().unwrap();
    server
        .until("all is quiet", |s| {
            s.waiting.is_empty() && s.parked.is_empty() && running_id(s).is_none()
        })
        .await;

    let after = scrape(&server).await;
    let moved = |key: &str| get(&after, key) - get(&before, key);
    assert_eq!(moved("strata_preemptions_total{}"), 1.0);
    assert_eq!(
        moved(&format!(
            "vllm:num_preemptions_total{{model_name=\"{model}\"}}"
        )),
        1.0
    );
    assert_eq!(moved("strata_resumes_total{}"), 1.0);
    assert_eq!(moved("strata_cancellations_total{state=\"waiting\"}"), 1.0);
    assert_eq!(moved("strata_processed_prefix_losses_total{}"), 0.0);
    assert_eq!(
        moved("strata_time_to_first_token_seconds_count{priority=\"high\"}"),
        1.0
    );
    assert_eq!(
        moved("strata_time_to_first_token_seconds_count{priority=\"normal\"}"),
        1.0
    );
    assert_eq!(
        moved(&format!(
            "vllm:time_to_first_token_seconds_count{{model_name=\"{model}\"}}"
        )),
        2.0
    );
    assert_eq!(moved("strata_generation_tokens_total{}"), 160.0);
    assert_eq!(
        moved("strata_requests_finished_total{reason=\"length\"}"),
        2.0
    );
    assert_eq!(get(&after, "strata_num_requests_parked{}"), 0.0);
    assert_eq!(get(&after, "strata_num_requests_waiting{}"), 0.0);
    assert_eq!(get(&after, "strata_engine_up{}"), 1.0);
}
