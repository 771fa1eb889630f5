//! The host pipelines decode steps (a step ahead before the last reply arrives) over the
//! simulated engine: the engine goes from one step to the next, and a step the scheduler did
//! not ask for (at a finish) is rewound.

use crate::api_fake::{Server, Setup, chat, server};
use serde_json::Value;
use strata_desk::engine_worker::{FakeOptions, WorkerOptions};

#[tokio::test]
async fn a_decoding_stream_takes_its_steps_ahead_and_its_finish_rewinds_the_one_not_wanted() {
    let server = server(Setup::default()).await;
    let response = server.chat_json(&chat("go on for a while", 40)).await;
    let completion = response["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(completion >= 10, "{response}");
    server
        .until("the finish is published", |s| {
            s.engine.steps_ahead_rewound > 0
        })
        .await;
    let scheduler: Value = reqwest::get(format!("{}/v1/scheduler", server.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let engine = &scheduler["engine"];
    let taken = engine["steps_ahead_taken"].as_u64().unwrap();
    let rewound = engine["steps_ahead_rewound"].as_u64().unwrap();
    // the first token comes from the prompt's last chunk, the first decode step is sent as a
    // step, every later one was already running when the scheduler asked for it
    assert_eq!(taken, completion - 2, "{engine}");
    assert_eq!(rewound, 1, "the step ahead after the last token: {engine}");
}

/// A long request decoding in one of two slots, and a second one admitted beside it (the
/// admission rewinds the long one's step ahead first); `fault` goes to the simulated engine.
async fn long_with_a_second_admitted(fault: Option<&str>) -> (Server, Value, Value) {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 200.0,
            faults: fault.map(str::to_owned).into_iter().collect(),
            ..FakeOptions::instant()
        },
        worker: |w: &mut WorkerOptions| w.slots = 2,
        ..Setup::default()
    })
    .await;
    let long = tokio::spawn({
        let request = server.post(&chat("tell me a long story about the sea", 150));
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    });
    server
        .until("the long request decodes", |s| {
            s.slots.iter().any(|slot| slot.generated_tokens >= 5)
        })
        .await;
    let short = server.chat_json(&chat("a quick question", 4)).await;
    (server, long.await.unwrap(), short)
}

#[tokio::test]
async fn a_rewind_the_engine_refuses_before_an_admission_loses_the_engine_not_the_newcomer() {
    let (_, clean, _) = long_with_a_second_admitted(None).await;
    let clean_text = clean["choices"][0]["message"]["content"].as_str().unwrap();

    let (server, long, _short) = long_with_a_second_admitted(Some("error-at-rewind:1")).await;
    // Were the refusal the newcomer's alone, the step ahead would stand and the long
    // request would go on from a token the host never counted: a changed text.
    assert!(
        long.get("error").is_some(),
        "the long request ran on past a refused rewind: {long} (clean: {clean_text:?})"
    );
    let after = server.chat_json(&chat("and after the fault?", 4)).await;
    assert!(
        after["choices"][0]["message"]["content"].is_string(),
        "{after}"
    );
    assert!(server.service.snapshot().engine.generation >= 2);
}
