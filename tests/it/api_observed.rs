//! The one observation stream over HTTP (simulated engine): `/v1/scheduler/events` sends each
//! event of the service once, typed, in `seq` order, as `observed` events between the
//! snapshots; the log, `finished[]` and `/metrics` say what those events say.

use crate::api_observe::{get_json, preempting_server, scrape, streaming};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The Server-Sent Events in `body` as (name, data) pairs.
fn named_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let name = block.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((name.to_owned(), serde_json::from_str(data).ok()?))
        })
        .collect()
}

fn of<'a>(events: &'a [Value], client_id: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["client_id"] == client_id)
        .collect()
}

#[tokio::test]
async fn the_event_stream_sends_each_observed_event_once_in_order_and_the_views_agree_with_it() {
    let server = preempting_server(0.3).await;
    let response = reqwest::get(format!("{}/v1/scheduler/events", server.base))
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    let mut seen = String::new();
    let mut requests = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_secs(5), stream.next()).await
        else {
            break;
        };
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        let events = named_events(&seen);
        let snapshots: Vec<&Value> = events
            .iter()
            .filter(|(n, _)| n == "snapshot")
            .map(|(_, v)| v)
            .collect();
        if requests.is_empty() && !snapshots.is_empty() {
            // a long stream, then a short higher-priority one that pauses it
            let long = server.post(&streaming("a long story", 120)).send();
            requests.push(tokio::spawn(long));
            tokio::time::sleep(Duration::from_millis(800)).await;
            let mut short = streaming("a quick question", 20);
            short["priority"] = json!(5);
            requests.push(tokio::spawn(server.post(&short).send()));
        }
        if snapshots
            .last()
            .is_some_and(|s| s["counters"]["finished"] == 2)
        {
            break;
        }
    }
    for request in requests {
        let body = request.await.unwrap().unwrap().text().await.unwrap();
        assert!(body.contains("[DONE]"), "{body}");
    }
    let events = named_events(&seen);
    assert_eq!(events[0].0, "snapshot", "the first event is the snapshot");
    let first_next = events[0].1["log"]
        .as_array()
        .unwrap()
        .last()
        .map_or(0, |e| e["seq"].as_u64().unwrap() + 1);
    let observed: Vec<Value> = events
        .iter()
        .filter(|(n, _)| n == "observed")
        .map(|(_, v)| v.clone())
        .collect();

    // once each, in order, none left out
    let seqs: Vec<u64> = observed
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (first_next..first_next + seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "each event once, in order");

    // typed: the long one's life, and the pause names its winner by its client id
    let types = |id: &str| -> Vec<String> {
        of(&observed, id)
            .iter()
            .map(|e| e["event"]["type"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        types("chatcmpl-1"),
        ["arrived", "admitted", "paused", "resumed", "ended"],
        "{observed:#?}"
    );
    assert_eq!(types("chatcmpl-2"), ["arrived", "admitted", "ended"]);
    let long = of(&observed, "chatcmpl-1");
    assert_eq!(
        long[0]["event"]["prompt_tokens"].as_u64().map(|n| n > 0),
        Some(true)
    );
    let pause = &long[2]["event"];
    assert_eq!(pause["paused_for"]["client_id"], "chatcmpl-2", "{pause}");
    assert_eq!(pause["paused_for"]["priority"], 5);
    assert_eq!(pause["parked_in"], "spare");
    assert_eq!(long[2]["kind"], "paused");

    // the views: the log's lines are these events, finished[] holds the ended events' figures
    let v = get_json(&server, "/v1/scheduler").await;
    for entry in v["log"].as_array().unwrap() {
        if let Some(sent) = observed.iter().find(|e| e["seq"] == entry["seq"]) {
            assert_eq!(sent, entry, "the log's entry and the streamed event differ");
        }
    }
    for id in ["chatcmpl-1", "chatcmpl-2"] {
        let ended = &of(&observed, id).last().unwrap()["event"];
        let record = v["finished"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["client_id"] == id)
            .unwrap();
        assert_eq!(&ended["figures"], record, "{id}");
    }
    let figures = &long[4]["event"]["figures"];
    assert_eq!(
        (figures["parks"].as_u64(), figures["pauses"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(figures["outcome"], "length");
    // /metrics counts the ended events' parks and pauses
    let m = scrape(&server).await;
    assert_eq!(m[r#"strata_request_pauses_sum{priority="normal"}"#], 1.0);
    let parked = m[r#"strata_request_parked_seconds_sum{priority="normal"}"#];
    assert!(
        (parked - figures["parked_secs"].as_f64().unwrap()).abs() < 1e-6,
        "{parked} against {figures}"
    );
}

#[tokio::test]
async fn an_idle_service_wakes_no_watcher_while_only_its_clock_moves_and_a_token_wakes_it() {
    let server = preempting_server(0.3).await;
    let mut rx = server.service.watch();
    // the engine's start and the first ticks settle; from here on only the clock moves
    tokio::time::sleep(Duration::from_millis(600)).await;
    rx.borrow_and_update();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(
        !rx.has_changed().unwrap(),
        "idle for 1.2 s (about five ticks): nothing but the clock changed, no watcher is woken"
    );
    let answer = server.post(&streaming("wake up", 3)).send();
    let answer = tokio::spawn(answer);
    tokio::time::timeout(Duration::from_secs(5), rx.changed())
        .await
        .expect("a request wakes the watchers")
        .unwrap();
    assert_eq!(answer.await.unwrap().unwrap().status(), 200);
}

/// #62 item 1, on the simulated engine: a priority-0 request aged above a priority-0 stream is
/// told it waits for the stream to finish (R7 never pauses an equal for aging alone), the
/// stream's why says the same, and the stream is indeed never paused. (It was told "to be
/// paused at the next token" for minutes.)
#[tokio::test]
async fn a_request_aged_above_a_stream_of_its_own_priority_is_told_it_waits_and_no_pause_comes() {
    let server = crate::api_fake::server(crate::api_fake::Setup {
        fake: strata_desk::engine_worker::FakeOptions {
            decode_steps_per_sec: 40.0,
            ..strata_desk::engine_worker::FakeOptions::instant()
        },
        scheduler: strata_desk::scheduler::SchedulerSettings {
            solo_priority: true,
            min_run_quantum_secs: 0.0,
            aging_interval_secs: 0.2,
            ..strata_desk::scheduler::SchedulerSettings::default()
        },
        ..crate::api_fake::Setup::default()
    })
    .await;
    let mut long = streaming("a long story", 120);
    long["priority"] = json!(0);
    let long = tokio::spawn(server.post(&long).send());
    server
        .until("the stream decodes", |s| {
            s.slots.iter().any(|x| x.generated_tokens > 0)
        })
        .await;
    let mut second = streaming("a question", 4);
    second["priority"] = json!(0);
    let second = tokio::spawn(server.post(&second).send());
    server
        .until("the second one has aged past the stream", |s| {
            s.waiting.iter().any(|w| w.aging >= 2)
        })
        .await;
    let v = get_json(&server, "/v1/scheduler").await;
    let why = |id: &str| {
        v["requests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["client_id"] == id)
            .map(|r| r["why"].as_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(
        why("chatcmpl-2"),
        "waits for chatcmpl-1 to finish: same priority; aging moves it up the queue but does \
         not pause a stream",
        "{v}"
    );
    assert!(why("chatcmpl-1").contains("waits for it to finish"), "{v}");
    assert_eq!(v["pause_outlook"]["verdict"], "same_class", "{v}");
    assert_eq!(long.await.unwrap().unwrap().status(), 200);
    assert_eq!(second.await.unwrap().unwrap().status(), 200);
    assert_eq!(server.service.snapshot().counters.pauses, 0);
}

/// #62 item 9: a fresh start logged nothing when its engine came up; it says so, with the
/// model and the context, as the headless ready line does.
#[tokio::test]
async fn a_fresh_start_logs_that_the_engine_is_ready_with_its_model_and_context() {
    let server = crate::api_fake::server(crate::api_fake::Setup::default()).await;
    server
        .until("the log says the engine is ready", |s| {
            s.log
                .iter()
                .any(|e| e.text.starts_with("engine ready: ") && e.text.contains(" tokens"))
        })
        .await;
}
