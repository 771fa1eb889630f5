//! Observability and control over HTTP with the simulated engine: `/v1/scheduler` and its
//! event stream, `/metrics` (parsed by the official Python `prometheus-client`), priority
//! sources, live settings, cancel and re-prioritise by id, engine restart, admin refusals.

use crate::api_fake::{Server, Setup, chat, server, sse_data, streamed_text};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use strata_desk::config::{ApiKeyEntry, AppSettings};
use strata_desk::engine_worker::FakeOptions;
use strata_desk::scheduler::{PriorityOrder, PriorityRange, SchedulerSettings};
use strata_desk::service::ServiceSnapshot;
use strata_desk::service::{ParkKind, SlotStatus};

/// Text that must never appear in the snapshot (no prompt text).
const SECRET: &str = "zebra-secret-prompt";

async fn get_json(server: &Server, path: &str) -> Value {
    reqwest::get(format!("{}{path}", server.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// An admin call with a JSON content type (and `body`, if any).
async fn admin(
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

fn streaming(text: &str, max_tokens: u32) -> Value {
    let mut body = chat(text, max_tokens);
    body["stream"] = json!(true);
    body
}

/// The id of the request the snapshot shows in its only busy slot.
fn running_id(s: &ServiceSnapshot) -> Option<u64> {
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
        snapshots = sse_data(&seen)
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
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

async fn scrape(server: &Server) -> HashMap<String, f64> {
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

#[tokio::test]
async fn priority_comes_from_the_body_then_the_header_then_the_key_and_is_clamped() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 20.0,
            ..FakeOptions::instant()
        },
        app: AppSettings {
            api_keys: vec![ApiKeyEntry::WithPriority {
                key: "k3".into(),
                priority: Some(3),
            }],
            ..AppSettings::default()
        },
        scheduler: SchedulerSettings {
            priority_range: PriorityRange { min: -10, max: 10 },
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let client = reqwest::Client::new();
    let send = |body: Value, header: Option<&'static str>| {
        let mut request = client
            .post(format!("{}/v1/chat/completions", server.base))
            .bearer_auth("k3")
            .json(&body);
        if let Some(h) = header {
            request = request.header("x-priority", h);
        }
        tokio::spawn(request.send())
    };
    let hog = send(chat("hog", 300), None);
    server
        .until("the hog runs", |s| running_id(s).is_some())
        .await;
    let mut body_wins = chat("a", 2);
    body_wins["priority"] = json!(50);
    let cases: Vec<(Value, Option<&'static str>, i32)> = vec![
        (body_wins, Some("2"), 10),
        (chat("b", 2), Some("-40"), -10),
        (chat("c", 2), None, 3),
    ];
    let mut pending = Vec::new();
    for (i, (body, header, expected)) in cases.into_iter().enumerate() {
        pending.push(send(body, header));
        server.until("it waits", |s| s.waiting.len() == i + 1).await;
        let snapshot = server.service.snapshot();
        let newest = snapshot
            .waiting
            .iter()
            .max_by_key(|w| w.request_id)
            .unwrap();
        assert_eq!(newest.priority, expected, "case {i}");
    }
    hog.abort();
    for p in pending {
        assert_eq!(p.await.unwrap().unwrap().status(), 200);
    }
}

#[tokio::test]
async fn a_priority_that_is_not_an_integer_is_a_400_naming_its_source_in_every_api() {
    let server = server(Setup::default()).await;
    let client = reqwest::Client::new();
    let routes = [
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}),
        ),
        (
            "/v1/responses",
            json!({"input": "x", "max_output_tokens": 2}),
        ),
        (
            "/v1/messages",
            json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}),
        ),
    ];
    for (route, body) in routes {
        for bad in [json!("high"), json!(1.5), json!(true)] {
            let mut body = body.clone();
            body["priority"] = bad.clone();
            let response = client
                .post(format!("{}{route}", server.base))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 400, "{route} {bad}");
            let text = response.text().await.unwrap();
            assert!(
                text.contains("priority") && text.contains("integer"),
                "{route}: {text}"
            );
        }
        let response = client
            .post(format!("{}{route}", server.base))
            .header("x-priority", "not a number")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{route} x-priority");
        let text = response.text().await.unwrap();
        assert!(text.contains("x-priority"), "{route}: {text}");
        // The same body with an integer priority is served.
        let mut good = body.clone();
        good["priority"] = json!(2);
        let response = client
            .post(format!("{}{route}", server.base))
            .json(&good)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{route}");
    }
}

#[tokio::test]
async fn with_lower_first_order_a_smaller_priority_number_ranks_higher() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 20.0,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            priority_order: PriorityOrder::LowerFirst,
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let hog = tokio::spawn(server.post(&chat("hog", 300)).send());
    server
        .until("the hog runs", |s| running_id(s).is_some())
        .await;
    let mut urgent = chat("urgent", 2);
    urgent["priority"] = json!(-4);
    let urgent = tokio::spawn(server.post(&urgent).send());
    server.until("it waits", |s| s.waiting.len() == 1).await;
    assert_eq!(server.service.snapshot().waiting[0].priority, 4);
    hog.abort();
    assert_eq!(urgent.await.unwrap().unwrap().status(), 200);
}

#[tokio::test]
async fn solo_priority_and_give_way_change_live_and_turning_preemption_off_loses_nothing() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            min_run_quantum_secs: 0.2,
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let alone: Value = server
        .post(&chat("the long one", 120))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        server.service.snapshot().mode,
        strata_desk::scheduler::Mode::Solo
    );

    let (status, body) = admin(
        &server,
        reqwest::Method::PATCH,
        "/v1/settings",
        Some(json!({"solo_priority": true, "give_way": "whole"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["settings"]["solo_priority"], true);
    assert_eq!(body["settings"]["give_way"], "whole");
    let v = get_json(&server, "/v1/scheduler").await;
    assert_eq!(
        (&v["mode"], &v["solo_priority"], &v["give_way"]),
        (&json!("solo_priority"), &json!(true), &json!("whole"))
    );

    let long = server
        .post(&streaming("the long one", 120))
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
    let mut short = chat("short", 60);
    short["priority"] = json!(5);
    let short = tokio::spawn(server.post(&short).send());
    server
        .until("the long one is paused", |s| s.parked.len() == 1)
        .await;
    // Rollback while it is parked: no new pauses, the parked stream resumes, nothing lost.
    let (status, body) = admin(
        &server,
        reqwest::Method::PATCH,
        "/v1/settings",
        Some(json!({"solo_priority": false})),
    )
    .await;
    assert_eq!(
        (status, &body["settings"]["solo_priority"]),
        (200, &json!(false))
    );
    assert_eq!(short.await.unwrap().unwrap().status(), 200);
    let text = long.text().await.unwrap();
    assert_eq!(
        streamed_text(&sse_data(&text)),
        alone["choices"][0]["message"]["content"].as_str().unwrap()
    );
    let after = server.service.snapshot();
    assert_eq!(after.counters.pauses, 1);
    assert_eq!(after.counters.resumes, 1);
    assert!(after.parked.is_empty());

    // Bad changes are 400s that name what is wrong.
    let cases = [
        (json!({"give_way": "sideways"}), "give_way"),
        (json!({"solo_priority": "yes"}), "solo_priority"),
        (
            json!({"parallel": 2}),
            "only `solo_priority` and `give_way` change live",
        ),
    ];
    for (patch, needle) in cases {
        let (status, body) =
            admin(&server, reqwest::Method::PATCH, "/v1/settings", Some(patch)).await;
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message}");
    }
}

#[tokio::test]
async fn a_request_is_cancelled_or_reprioritised_by_id_and_unknown_ids_are_404() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let hog = tokio::spawn(server.post(&chat("hog", 60)).send());
    server
        .until("the hog runs", |s| running_id(s).is_some())
        .await;
    let hog_id = running_id(&server.service.snapshot()).unwrap();
    let first = tokio::spawn(server.post(&chat("first", 3)).send());
    server.until("one waits", |s| s.waiting.len() == 1).await;
    let second = tokio::spawn(server.post(&chat("second", 40)).send());
    server.until("two wait", |s| s.waiting.len() == 2).await;
    let ids: Vec<u64> = server
        .service
        .snapshot()
        .waiting
        .iter()
        .map(|w| w.request_id.0)
        .collect();
    let (first_id, second_id) = (ids[0], ids[1]);

    // The later arrival is raised (as `chatcmpl-N`, the id a response carries).
    let (status, body) = admin(
        &server,
        reqwest::Method::PATCH,
        &format!("/v1/requests/chatcmpl-{second_id}"),
        Some(json!({"priority": 500})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "waiting");
    assert_eq!(body["priority"], 100, "clamped to priority_range");
    let hog = hog.await.unwrap().unwrap();
    assert_eq!(hog.status(), 200);
    assert_eq!(hog.headers()["x-request-id"], hog_id.to_string());
    server
        .until("the next one runs", |s| {
            running_id(s).is_some_and(|id| id != hog_id)
        })
        .await;
    assert_eq!(running_id(&server.service.snapshot()), Some(second_id));

    // The earlier one is cancelled while it waits: its client hears so.
    let (status, body) = admin(
        &server,
        reqwest::Method::DELETE,
        &format!("/v1/requests/{first_id}"),
        None,
    )
    .await;
    assert_eq!((status, &body["state"]), (200, &json!("waiting")), "{body}");
    let first: Value = first.await.unwrap().unwrap().json().await.unwrap();
    assert_eq!(first["choices"][0]["finish_reason"], "cancelled");
    assert_eq!(second.await.unwrap().unwrap().status(), 200);
    assert_eq!(
        server
            .service
            .snapshot()
            .counters
            .cancellations_by_state
            .waiting,
        1
    );

    for method in [reqwest::Method::DELETE, reqwest::Method::PATCH] {
        let (status, body) = admin(
            &server,
            method,
            "/v1/requests/999",
            Some(json!({"priority": 1})),
        )
        .await;
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["error"]["code"], "not_found");
    }
    let (status, body) = admin(
        &server,
        reqwest::Method::PATCH,
        &format!("/v1/requests/{first_id}"),
        Some(json!({"priority": "high"})),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "priority");
}

#[tokio::test]
async fn a_user_restart_fails_what_runs_with_engine_restarted_and_keeps_the_waiting() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let running = server.post(&streaming("runs", 400)).send().await.unwrap();
    server
        .until("one runs", |s| {
            s.slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Decoding)
        })
        .await;
    let running_id = running_id(&server.service.snapshot()).unwrap();
    let waiting = tokio::spawn(server.post(&chat("waits", 5)).send());
    server.until("one waits", |s| s.waiting.len() == 1).await;
    let waiting_id = server.service.snapshot().waiting[0].request_id.0;

    let (status, body) = admin(&server, reqwest::Method::POST, "/v1/engine/restart", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["failed_requests"], json!([running_id]));
    assert_eq!(body["waiting_requests"], json!([waiting_id]));
    let text = running.text().await.unwrap();
    let events = sse_data(&text);
    let error: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("engine restarted"),
        "{error}"
    );
    assert_eq!(waiting.await.unwrap().unwrap().status(), 200);
    let after = server.service.snapshot();
    assert_eq!(after.counters.engine_restarts, 1);
    assert_eq!(after.engine.restarts, 1);
    assert!(after.engine.generation >= 2);
}

#[tokio::test]
async fn admin_routes_refuse_a_foreign_origin_and_a_body_that_is_not_json() {
    let server = server(Setup::default()).await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/engine/restart", server.base);
    let page = client
        .post(&url)
        .header("content-type", "application/json")
        .header("origin", "https://some.page.example")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 403);
    let body: Value = page.json().await.unwrap();
    assert_eq!(body["error"]["code"], "admin_forbidden");
    // A form post (what a page can send without a preflight) is refused.
    let form = client
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("a=1")
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 415);
    let bare = client
        .delete(format!("{}/v1/requests/1", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 415);
    // Nothing was restarted.
    assert_eq!(server.service.snapshot().engine.generation, 1);
    // Reads are not admin routes: a page's Origin does not matter to them.
    let read = client
        .get(format!("{}/v1/scheduler", server.base))
        .header("origin", "https://some.page.example")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
}

#[tokio::test]
async fn a_conversation_too_big_for_the_engines_cache_is_read_again_not_restored() {
    // The simulated engine keeps 1 KiB of state per token and its cache holds 1 MiB: a
    // 1,100-token conversation saved there is dropped at once. Its follow-up must read the
    // prompt again; asking the engine to restore it failed the engine before.
    let server = server(Setup {
        fake: FakeOptions {
            kv_cells: 3000,
            ..FakeOptions::instant()
        },
        worker: |w| {
            w.slots = 2;
            w.conversation_cache_mib = 1;
        },
        ..Setup::default()
    })
    .await;
    let topic = "t".repeat(1100);
    let first: Value = server
        .post(&chat(&topic, 5))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answer = first["choices"][0]["message"]["content"].clone();
    // A long prompt needs the cells: the idle conversation goes to the host-RAM cache.
    let big = server
        .post(&chat(&"b".repeat(2400), 5))
        .send()
        .await
        .unwrap();
    assert_eq!(big.status(), 200);
    let follow_up = json!({"messages": [
        {"role": "user", "content": topic},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "and then?"},
    ], "max_tokens": 5});
    let response = server.post(&follow_up).send().await.unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let after = server.service.snapshot();
    assert_eq!(after.engine.restarts, 0, "the engine was lost");
    assert_eq!(after.conversation_cache.entries, 0);
    assert_eq!(after.conversation_cache.bytes, 0);
}
