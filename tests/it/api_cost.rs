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

fn close(what: &str, reported: f64, measured: f64) {
    assert!(
        (reported - measured).abs() <= 0.1,
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
    // stream's tokens left when it was paused, at 40 tokens a second)
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
    let sent_before_pause = long_times.iter().filter(|t| **t < short_times[0]).count();
    let expected = (160 - sent_before_pause) as f64 / 40.0;
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
