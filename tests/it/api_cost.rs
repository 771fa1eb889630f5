//! What preemption cost and saved, as `/v1/scheduler` (`finished[]`, `cost`, `requests[]`)
//! and `/metrics` report it, against what the clients measured themselves: a long stream
//! paused for a short higher-priority request on the simulated engine at fixed timings.

use crate::api_observe::{get_json, preempting_server, scrape, streaming};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use strata_desk::service::SlotStatus;

/// When each non-empty content delta of a streamed answer arrived, and when it ended.
async fn delta_times(mut response: reqwest::Response) -> (Vec<Instant>, Instant) {
    let mut times = Vec::new();
    let mut buffer = String::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        let now = Instant::now();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let Some(data) = event.trim().strip_prefix("data: ") else {
                continue;
            };
            if data == "[DONE]" {
                continue;
            }
            let v: Value = serde_json::from_str(data).unwrap();
            let content = v["choices"][0]["delta"]["content"].as_str().unwrap_or("");
            if !content.is_empty() {
                times.push(now);
            }
        }
    }
    (times, Instant::now())
}

fn finished<'a>(v: &'a Value, client_id: &str) -> &'a Value {
    v["finished"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["client_id"] == client_id)
        .unwrap_or_else(|| panic!("{client_id} not in finished[]: {v}"))
}

/// The service's interval lies inside the client's (it starts once the request has arrived
/// and ends before the last byte reaches the client; time parked sits inside the stream's
/// silence): over what the client measured by no more than delivery jitter, under it by the
/// HTTP round trip and a token's step. Within 0.1 s on a quiet machine (the figures are
/// printed); 0.1 s over (a late chunk before the pause shortens the silence the client saw)
/// and 0.25 s under are allowed for a loaded CI runner.
fn close(what: &str, reported: f64, measured: f64) {
    eprintln!(
        "{what}: reported {reported:.3} s, the client measured {measured:.3} s ({:+.3} s)",
        reported - measured
    );
    assert!(
        reported <= measured + 0.1 && reported >= measured - 0.25,
        "{what}: reported {reported:.3} s, the client measured {measured:.3} s"
    );
}

#[tokio::test]
async fn a_paused_streams_time_parked_and_end_to_end_match_what_its_client_measured() {
    let server = preempting_server(0.5).await;
    let long_sent = Instant::now();
    let long = server
        .post(&streaming("a long story", 160))
        .send()
        .await
        .unwrap();
    let long = tokio::spawn(delta_times(long));
    server
        .until("the long one decodes", |s| {
            s.slots.iter().any(|x| x.state == SlotStatus::Decoding)
        })
        .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut short = streaming("a quick question", 40);
    short["priority"] = json!(5);
    let short_sent = Instant::now();
    let short = server.post(&short).send().await.unwrap();
    let short = tokio::spawn(delta_times(short));
    server
        .until("the long one is parked", |s| s.parked.len() == 1)
        .await;
    // while parked, its row counts the park so far
    let v = get_json(&server, "/v1/scheduler").await;
    let row = v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["client_id"] == "chatcmpl-1")
        .unwrap();
    assert_eq!(row["parks"], 1, "{v}");

    let (short_times, short_end) = short.await.unwrap();
    let (long_times, long_end) = long.await.unwrap();
    server.until("both ended", |s| s.finished.len() == 2).await;
    let v = get_json(&server, "/v1/scheduler").await;

    // the paused stream: its longest silence is the pause its client sat through
    let f = finished(&v, "chatcmpl-1");
    let gap = long_times
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64())
        .fold(0.0, f64::max);
    assert!(gap > 0.5, "the long stream was never held up: {gap:.3} s");
    assert_eq!(
        (f["parks"].as_u64(), f["pauses"].as_u64()),
        (Some(1), Some(1)),
        "{f}"
    );
    assert_eq!(f["give_ways"], 0);
    assert_eq!(f["outcome"], "length");
    close("time parked", f["parked_secs"].as_f64().unwrap(), gap);
    let measured = long_end.duration_since(long_sent).as_secs_f64();
    close(
        "end to end",
        f["end_to_end_secs"].as_f64().unwrap(),
        measured,
    );

    // the short one: its first token, and the estimate of the wait the pause saved it (the
    // stream's tokens left when it was paused, at the rate it was streaming)
    let s = finished(&v, "chatcmpl-2");
    assert_eq!(
        (s["parks"].as_u64(), s["paused_others"].as_u64()),
        (Some(0), Some(1)),
        "{s}"
    );
    let ttft = short_times[0].duration_since(short_sent).as_secs_f64();
    close(
        "time to first token",
        s["ttft_secs"].as_f64().unwrap(),
        ttft,
    );
    let measured = short_end.duration_since(short_sent).as_secs_f64();
    close(
        "end to end",
        s["end_to_end_secs"].as_f64().unwrap(),
        measured,
    );
    // in steps: some tokens show no text of their own, so the client counts the engine's
    // steps (the usual gap between content deltas) to know the tokens sent and the rate
    let before: Vec<Instant> = long_times
        .iter()
        .copied()
        .filter(|t| *t < short_times[0])
        .collect();
    let mut gaps: Vec<f64> = before
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64())
        .filter(|gap| *gap > 0.005)
        .collect();
    gaps.sort_by(f64::total_cmp);
    assert!(
        before.len() >= 2 && !gaps.is_empty(),
        "too few tokens before the pause to count steps: {long_times:?}"
    );
    let step_secs = gaps[gaps.len() / 2];
    let decoding_secs = before[before.len() - 1]
        .duration_since(before[0])
        .as_secs_f64();
    let sent = (decoding_secs / step_secs).round() + 1.0;
    let expected = (160.0 - sent) * step_secs;
    let estimate = s["gained_secs_estimate"].as_f64().unwrap();
    assert!(
        (estimate - expected).abs() <= 0.25 * expected,
        "saved {estimate:.2} s by the estimate, expected about {expected:.2} s"
    );

    // the sums by priority say the same
    let classes = v["cost"]["by_priority"].as_array().unwrap();
    assert_eq!(classes[0]["priority"], 5, "{v}");
    assert_eq!(classes[0]["interrupting"], 1);
    assert_eq!(classes[1]["priority"], 0);
    assert_eq!(classes[1]["interrupted"], 1);
    assert_eq!(classes[1]["parked_secs"], f["parked_secs"]);

    // and /metrics: one normal-priority request paused once, and its time parked
    let m = scrape(&server).await;
    assert_eq!(
        m[r#"strata_request_pauses_sum{priority="normal"}"#], 1.0,
        "{m:?}"
    );
    assert_eq!(m[r#"strata_request_pauses_count{priority="high"}"#], 1.0);
    assert_eq!(m[r#"strata_request_pauses_sum{priority="high"}"#], 0.0);
    close(
        "parked seconds in /metrics",
        m[r#"strata_request_parked_seconds_sum{priority="normal"}"#],
        gap,
    );
}

#[tokio::test]
async fn a_paused_stream_moved_to_host_ram_is_one_park_and_one_pause_to_the_one_that_paused_it() {
    // a pool where the short one's output needs the cells the paused stream keeps
    let server = crate::api_fake::server(crate::api_fake::Setup {
        fake: strata_desk::engine_worker::FakeOptions {
            kv_cells: 400,
            decode_steps_per_sec: 40.0,
            ..strata_desk::engine_worker::FakeOptions::instant()
        },
        scheduler: strata_desk::scheduler::SchedulerSettings {
            solo_priority: true,
            min_run_quantum_secs: 0.3,
            aging_interval_secs: 0.0,
            output_reserve_tokens: 32,
            ..strata_desk::scheduler::SchedulerSettings::default()
        },
        worker: |w| w.slots = 1,
        ..crate::api_fake::Setup::default()
    })
    .await;
    let long = server
        .post(&streaming("a long story", 200))
        .send()
        .await
        .unwrap();
    let long = tokio::spawn(delta_times(long));
    server
        .until("the long one decodes", |s| {
            s.slots.iter().any(|x| x.state == SlotStatus::Decoding)
        })
        .await;
    // past the 0.3 s quantum, while the stream's cells and the short one's still fit the pool
    tokio::time::sleep(Duration::from_millis(350)).await;
    let mut short = streaming(&"x".repeat(280), 80);
    short["priority"] = json!(5);
    let short = tokio::spawn(delta_times(server.post(&short).send().await.unwrap()));
    let _ = short.await.unwrap();
    let _ = long.await.unwrap();
    server.until("both ended", |s| s.finished.len() == 2).await;
    let v = get_json(&server, "/v1/scheduler").await;
    assert!(
        v["counters"]["parks_to_host"].as_u64().unwrap() >= 1,
        "the paused stream was never moved to host RAM: {}",
        v["counters"]
    );
    let l = finished(&v, "chatcmpl-1");
    assert_eq!(
        (l["parks"].as_u64(), l["pauses"].as_u64()),
        (Some(1), Some(1)),
        "{l}"
    );
    let s = finished(&v, "chatcmpl-2");
    assert_eq!(s["paused_others"], 1, "{s}");
    let texts: Vec<&str> = v["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.contains("was paused for"))
            .count(),
        1,
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("chatcmpl-1, parked, was moved to host RAM")),
        "{texts:?}"
    );
}
