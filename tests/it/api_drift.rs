//! The engine and the scheduler never drift apart unnoticed (SCHEDULING.md R8), and a model
//! whose cache cannot be cut is served without engine deaths: over HTTP, with the simulated
//! engine and injected faults.

use crate::api_fake::{Setup, chat, server};
use serde_json::{Value, json};
use strata_desk::engine_worker::{FakeOptions, WorkerOptions};

fn long_text(n: usize) -> String {
    (0..n)
        .map(|i| format!("line {i} of a long prompt. "))
        .collect()
}

/// Regression (audit): chunks named no start, the worker silently kept what it held, and the
/// host checked none of the counts, so a lost chunk was never noticed.
#[tokio::test]
async fn a_chunk_the_engine_lost_fails_that_request_alone_and_counts_a_prefix_loss() {
    let server = server(Setup {
        fake: FakeOptions {
            // the long request's third step loses its chunk
            faults: vec!["drop-chunk:3".into()],
            decode_steps_per_sec: 100.0,
            ..FakeOptions::instant()
        },
        worker: |w: &mut WorkerOptions| w.slots = 2,
        ..Setup::default()
    })
    .await;
    let long = tokio::spawn(server.post(&chat(&long_text(200), 5)).send());
    let short = server.post(&chat("a short one", 20)).send().await.unwrap();
    assert_eq!(short.status(), 200);
    let long = long.await.unwrap().unwrap();
    let status = long.status();
    let body: Value = long.json().await.unwrap();
    // the engine is up: a failure of this request alone, not "engine unavailable"
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["code"], "request_failed", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("could not serve this request"),
        "{message}"
    );
    assert!(message.contains("counted"), "{message}");
    let snapshot = server.service.snapshot();
    assert!(
        snapshot.counters.processed_prefix_losses > 0,
        "{:?}",
        snapshot.counters
    );
    assert_eq!(snapshot.engine.restarts, 0, "the engine was restarted");
    // the engine serves on
    let next = server.post(&chat("after", 4)).send().await.unwrap();
    assert_eq!(next.status(), 200);
}

#[tokio::test]
async fn an_engine_that_cannot_cut_its_cache_continues_whole_conversations_and_others_from_a_checkpoint()
 {
    let server = server(Setup {
        fake: FakeOptions {
            non_trimmable: true,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let system = json!({"role": "system", "content": long_text(40)});
    let first =
        json!({"messages": [system, {"role": "user", "content": "first"}], "max_tokens": 6});
    let answer: Value = server
        .post(&first)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let said = answer["choices"][0]["message"]["content"].clone();
    let first_prompt = answer["usage"]["prompt_tokens"].as_u64().unwrap();
    // its next turn continues the whole conversation
    let next = json!({"messages": [
        system,
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": said},
        {"role": "user", "content": "second"},
    ], "max_tokens": 4});
    let follow_up: Value = server
        .post(&next)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cached = follow_up["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= first_prompt, "{cached} < {first_prompt}");
    // another conversation sharing only the system prompt continues from no place the cache
    // cannot cut to: only from the checkpoint inside that system prompt, taken 4 + 512 (the
    // default ubatch) tokens before the first prompt's end
    let other =
        json!({"messages": [system, {"role": "user", "content": "another"}], "max_tokens": 4});
    let response = server.post(&other).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let other: Value = response.json().await.unwrap();
    assert!(first_prompt > 600, "the system prompt holds the checkpoint");
    assert_eq!(
        other["usage"]["prompt_tokens_details"]["cached_tokens"],
        first_prompt - 516
    );
    let snapshot = server.service.snapshot();
    assert_eq!(snapshot.counters.failed, 0);
    assert_eq!(snapshot.engine.restarts, 0);
}

/// An agent re-renders its last answer: the next prompt departs from the kept conversation
/// right where the last prompt ended. The engine cannot cut inside a sequence, but it kept a
/// checkpoint 4 tokens before the end of that prompt: the turn continues from it, and the
/// window's and `/metrics`' figures say so.
#[tokio::test]
async fn a_re_rendered_turn_continues_from_the_checkpoint_4_tokens_before_the_last_prompt_s_end_and_is_counted()
 {
    let server = server(Setup {
        fake: FakeOptions {
            non_trimmable: true,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let system = json!({"role": "system", "content": long_text(40)});
    let user = json!({"role": "user", "content": "first"});
    let first = json!({"messages": [system, user], "max_tokens": 6});
    let answer: Value = server
        .post(&first)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let first_prompt = answer["usage"]["prompt_tokens"].as_u64().unwrap();
    // 4 and 4 + 512 (the default ubatch) tokens before the prompt's end, where it has them
    let near_end = if first_prompt > 516 { 2 } else { 1 };
    let restored_at = first_prompt - 4;
    let kept = &server.service.snapshot().conversations;
    assert!(
        kept.len() == 1 && kept[0].checkpoints == near_end,
        "{kept:?}"
    );
    assert!(kept[0].checkpoint_bytes > 0);

    let next = json!({"messages": [
        system,
        user,
        {"role": "assistant", "content": "the answer, as the agent renders it"},
        {"role": "user", "content": "second"},
    ], "max_tokens": 4});
    let follow_up: Value = server
        .post(&next)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cached = &follow_up["usage"]["prompt_tokens_details"]["cached_tokens"];
    assert_eq!(cached.as_u64(), Some(restored_at), "{follow_up}");

    let counters = server.service.snapshot().counters;
    assert_eq!(counters.checkpoint_restores, 1);
    assert_eq!(counters.checkpoint_tokens_saved, restored_at);
    let metrics = reqwest::get(format!("{}/metrics", server.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("strata_checkpoint_restores_total 1\n"),
        "{metrics}"
    );
    let saved = format!("strata_checkpoint_tokens_saved_total {restored_at}\n");
    assert!(metrics.contains(&saved), "{metrics}");
    assert!(
        !metrics.contains("strata_checkpoint_bytes 0\n"),
        "{metrics}"
    );
}
