//! A client that goes away (the simulated engine): only its own request is cancelled, in every
//! state, parked included; a waiting stream is kept alive meanwhile.

use crate::api_fake::{Setup, chat, server, sse_data, streamed_text};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use strata_desk::engine_worker::FakeOptions;
use strata_desk::scheduler::SchedulerSettings;
use strata_desk::service::SlotStatus;

#[tokio::test]
async fn a_disconnect_cancels_only_its_own_request_while_waiting_reading_or_decoding() {
    let server = server(Setup {
        fake: FakeOptions {
            prompt_tokens_per_sec: 400.0,
            decode_steps_per_sec: 40.0,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            chunk_tokens: Some(64),
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let snapshot = |s: &strata_desk::service::ServiceSnapshot| s.clone();
    let alone: Value = server
        .post(&chat("keep going", 80))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();

    // The survivor decodes throughout.
    let mut body = chat("keep going", 80);
    body["stream"] = json!(true);
    let survivor = server.post(&body).send().await.unwrap();
    let mut survivor_stream = survivor.bytes_stream();
    let first = survivor_stream.next().await.unwrap().unwrap();
    let mut survivor_text = String::from_utf8_lossy(&first).into_owned();

    // Waiting: queued behind the survivor, then dropped.
    let waiting = tokio::spawn(server.post(&chat("w", 5)).send());
    server
        .until("one waits", |s| snapshot(s).waiting.len() == 1)
        .await;
    waiting.abort();
    server
        .until("the waiting one left", |s| snapshot(s).waiting.is_empty())
        .await;

    // Decoding and reading happen after the survivor; each is dropped in its state.
    let survivor_task = tokio::spawn(async move {
        while let Some(chunk) = survivor_stream.next().await {
            survivor_text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        survivor_text
    });
    let text = survivor_task.await.unwrap();
    assert_eq!(
        streamed_text(&sse_data(&text)),
        alone["choices"][0]["message"]["content"].as_str().unwrap()
    );

    let long = tokio::spawn(server.post(&chat(&"r".repeat(2000), 5)).send());
    server
        .until("a long read is under way", |s| {
            snapshot(s)
                .slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Reading)
        })
        .await;
    long.abort();
    server
        .until("the read was released", |s| {
            let s = snapshot(s);
            s.slots.iter().all(|slot| slot.request_id.is_none()) && s.waiting.is_empty()
        })
        .await;

    let decoding = tokio::spawn(server.post(&chat("d", 400)).send());
    server
        .until("one decodes", |s| {
            snapshot(s)
                .slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Decoding)
        })
        .await;
    decoding.abort();
    server
        .until("nothing runs", |s| {
            let s = snapshot(s);
            s.slots.iter().all(|slot| slot.request_id.is_none())
                && s.waiting.is_empty()
                && s.parked.is_empty()
        })
        .await;
    let cancelled = snapshot(&server.service.snapshot())
        .counters
        .cancellations_by_state;
    assert_eq!(
        (cancelled.waiting, cancelled.reading, cancelled.decoding),
        (1, 1, 1),
        "{cancelled:?}"
    );

    // And the server still serves.
    let after: Value = server
        .post(&chat("keep going", 80))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        after["choices"][0]["message"]["content"],
        alone["choices"][0]["message"]["content"]
    );
}

#[tokio::test]
async fn a_disconnect_while_parked_drops_the_parked_state_and_the_preempting_request_finishes() {
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
    let mut long = chat("long", 400);
    long["stream"] = json!(true);
    // A streaming response is returned as soon as its headers are: holding it keeps the client
    // connected, dropping it disconnects.
    let long = server.post(&long).send().await.unwrap();
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
        .until("the long one is parked", |s| s.parked.len() == 1)
        .await;
    drop(long);
    let short = short.await.unwrap().unwrap();
    assert_eq!(short.status(), 200);
    server
        .until("nothing is parked or waiting", |s| {
            s.parked.is_empty()
                && s.waiting.is_empty()
                && s.slots.iter().all(|slot| slot.request_id.is_none())
        })
        .await;
    let cancelled = server.service.snapshot().counters.cancellations_by_state;
    assert_eq!(cancelled.parked, 1, "{cancelled:?}");
}

#[tokio::test]
async fn a_waiting_stream_gets_keep_alives_at_least_every_ten_seconds() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 20.0,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let hog = tokio::spawn(server.post(&chat("hog", 300)).send());
    server
        .until("the hog runs", |s| {
            s.slots.iter().any(|slot| slot.request_id.is_some())
        })
        .await;
    let mut body = chat("waits", 2);
    body["stream"] = json!(true);
    let response = server.post(&body).send().await.unwrap();
    let mut stream = response.bytes_stream();
    let started = Instant::now();
    let mut seen = String::new();
    while started.elapsed() < Duration::from_secs(12) && !seen.lines().any(|l| l.starts_with(':')) {
        if let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_secs(12), stream.next()).await
        {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    }
    assert!(
        seen.lines().any(|l| l.starts_with(':')),
        "no keep-alive comment in 12 s: {seen:?}"
    );
    assert!(
        server.service.snapshot().waiting.len() == 1,
        "it was still waiting"
    );
    drop(stream);
    hog.abort();
}
