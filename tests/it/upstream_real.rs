//! `engine: upstream` over a real llama-server (the llama.cpp this app builds, from
//! scripts/build-llama-server.sh, named by `STRATA_TEST_LLAMA_SERVER`) serving the test model:
//! our scheduler and API front ends in front of it. scripts/test.sh builds it sharing the app's
//! llama.cpp (`scripts/build-llama-server.sh --cargo-build target/debug`, about 2 minutes);
//! by hand: `STRATA_TEST_LLAMA_SERVER=$(scripts/build-llama-server.sh --cargo-build
//! target/debug) cargo test --test it upstream_`.

use crate::api_fake::{Setup, chat, server, sse_data, streamed_text};
use crate::support::{model_path, real_model};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use strata_desk::engine_worker::WorkerOptions;
use strata_desk::protocol::UpstreamTarget;

/// A llama-server with the test model on a free loopback port, killed when dropped.
pub(crate) struct LlamaServer {
    child: Child,
    pub(crate) url: String,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn llama_server(slots: u32) -> LlamaServer {
    let exe = std::env::var_os("STRATA_TEST_LLAMA_SERVER")
        .expect("STRATA_TEST_LLAMA_SERVER names llama-server (scripts/build-llama-server.sh)");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(exe)
        .args(["-m", &model_path().display().to_string()])
        .args(["--port", &port.to_string(), "--host", "127.0.0.1"])
        .args(["-np", &slots.to_string(), "-c", &(2048 * slots).to_string()])
        .args(["-t", "1", "--metrics"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // killed and waited for when dropped, also if it never answers
    let server = LlamaServer {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let client = reqwest::Client::new();
    for _ in 0..300 {
        if let Ok(answer) = client.get(format!("{}/health", server.url)).send().await
            && answer.status() == 200
        {
            return server;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("llama-server did not start on {}", server.url);
}

pub(crate) fn over(upstream: &LlamaServer) -> Option<WorkerOptions> {
    Some(WorkerOptions {
        upstream: Some(UpstreamTarget {
            url: upstream.url.clone(),
            kind: "auto".into(),
        }),
        ..WorkerOptions::of(strata_desk::protocol::EngineSettings {
            threads: 1,
            ..strata_desk::protocol::EngineSettings::for_model(model_path())
        })
    })
}

/// Responses, Messages and Completions each give text.
async fn the_other_front_ends_answer(base: &str) {
    for (path, body, field) in [
        (
            "/v1/responses",
            json!({"input": "Name three colors.", "max_output_tokens": 24, "temperature": 0}),
            "/output/0/content/0/text",
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 24, "temperature": 0,
                   "messages": [{"role": "user", "content": "Name three colors."}]}),
            "/content/0/text",
        ),
        (
            "/v1/completions",
            json!({"prompt": "def add(a, b):", "max_tokens": 12, "temperature": 0}),
            "/choices/0/text",
        ),
    ] {
        let answer = reqwest::Client::new()
            .post(format!("{base}{path}"))
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        let answer: Value = answer.json().await.unwrap();
        let text = answer
            .pointer(field)
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(!text.is_empty(), "{path}: {answer}");
    }
}

#[tokio::test]
async fn over_llama_server_the_api_front_ends_answer_and_stream_and_whole_agree() {
    let _serial = real_model();
    let upstream = llama_server(2).await;
    let server = server(Setup {
        real: over(&upstream),
        ..Setup::default()
    })
    .await;
    let engine = server.service.snapshot().engine;
    assert!(!engine.simulated, "{engine:?}");

    let whole = server.chat_json(&chat("Name three colors.", 24)).await;
    let text = whole["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!text.is_empty(), "{whole}");
    let mut body = chat("Name three colors.", 24);
    body["stream"] = json!(true);
    let streamed = server
        .post(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(streamed_text(&sse_data(&streamed)), text);

    the_other_front_ends_answer(&server.base).await;
    // the upstream's own figures, read from its /slots and /metrics, in /v1/scheduler
    let upstream_view = upstream_figures(&server.base, |u| u["error"].is_null()).await;
    assert_eq!(upstream_view["kind"], "llama-server", "{upstream_view}");
    assert_eq!(upstream_view["slots"].as_array().map(Vec::len), Some(2));
    assert_eq!(upstream_view["metrics"], true, "{upstream_view}");
    assert!(
        upstream_view["load"]["prefix_cache_hit_tokens"].is_u64(),
        "{upstream_view}"
    );
    // the same greedy chat as before: the same text (the upstream's cache holds its prompt)
    let again = server.chat_json(&chat("Name three colors.", 24)).await;
    assert_eq!(again["choices"][0]["message"]["content"], json!(text));
    drop(server);
    // and the text our own engine gives at one thread, greedy
    let local = crate::api_fake::server(Setup {
        real: Some(WorkerOptions::of(strata_desk::protocol::EngineSettings {
            threads: 1,
            ..strata_desk::protocol::EngineSettings::for_model(model_path())
        })),
        ..Setup::default()
    })
    .await;
    let ours = local.chat_json(&chat("Name three colors.", 24)).await;
    assert_eq!(ours["choices"][0]["message"]["content"], json!(text));
}

#[tokio::test]
async fn a_killed_upstream_ends_the_open_stream_with_an_error_event() {
    let _serial = real_model();
    let mut upstream = llama_server(1).await;
    let server = server(Setup {
        real: over(&upstream),
        ..Setup::default()
    })
    .await;
    let mut body = chat("Write a long story about a lighthouse keeper.", 400);
    body["stream"] = json!(true);
    let mut response = server.post(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut text = String::new();
    // a first token, then the upstream dies (SIGKILL, as a crashed machine)
    while !text.contains("\"content\":\"") {
        text.push_str(&String::from_utf8_lossy(
            &response.chunk().await.unwrap().unwrap(),
        ));
    }
    upstream.child.kill().unwrap();
    while let Some(bytes) = response.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    let events = sse_data(&text);
    assert!(
        events.iter().any(|e| e.contains("\"error\"")),
        "no error event: {text}"
    );
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    // the worker saw the upstream go and exited saying so (not stopped by the host's step
    // deadline, which would say it did not answer): the snapshot's log has its last words
    let snapshot = reqwest::get(format!("{}/v1/scheduler", server.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        snapshot.contains("the upstream at http://127.0.0.1:") && snapshot.contains("went away"),
        "{snapshot}"
    );
    // and its own figures say it is not answering
    let gone = upstream_figures(&server.base, |u| !u["error"].is_null()).await;
    assert!(
        gone["error"].as_str().unwrap().contains("connection"),
        "{gone}"
    );
}

/// `/v1/scheduler`'s `upstream` once `ready` holds of it (within 10 s).
async fn upstream_figures(base: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..100 {
        let snapshot: Value = reqwest::get(format!("{base}/v1/scheduler"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        last = snapshot["upstream"].clone();
        if !last.is_null() && ready(&last) {
            return last;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the upstream's figures never got there: {last}");
}
