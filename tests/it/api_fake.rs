//! The HTTP API on 127.0.0.1:0 over the simulated engine (a real worker process, `--fake`).

use crate::support::worker_exe;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_desk::api::{ApiState, Prompts};
use strata_desk::config::{AppSettings, Config};
use strata_desk::control::{Control, Unit};
use strata_desk::engine::WorkerLaunch;
use strata_desk::engine_worker::{FakeOptions, WorkerOptions};
use strata_desk::scheduler::SchedulerSettings;
use strata_desk::service::{self, EngineStatus, ServiceHandle, ServiceOptions};
use strata_desk::tokenizer::Tokenizer;

pub struct Server {
    pub base: String,
    pub service: ServiceHandle,
    /// The control plane over `service` (it cannot start another engine: no binary given).
    pub control: Control,
    client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub struct Setup {
    /// A real engine's options; `None` runs the simulated engine with `fake`.
    pub real: Option<WorkerOptions>,
    pub fake: FakeOptions,
    pub app: AppSettings,
    pub scheduler: SchedulerSettings,
    pub wait_ready: bool,
    /// Changes to the worker's options (slots, cache bound) before it starts.
    pub worker: fn(&mut WorkerOptions),
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            real: None,
            fake: FakeOptions {
                prompt_tokens_per_sec: 20_000.0,
                decode_steps_per_sec: 200.0,
                ..FakeOptions::instant()
            },
            app: AppSettings::default(),
            scheduler: SchedulerSettings::default(),
            wait_ready: true,
            worker: |_| {},
        }
    }
}

pub async fn server(setup: Setup) -> Server {
    let (mut options, tokenizer) = match setup.real {
        Some(options) => {
            let model = options.model.clone().expect("a real engine needs a model");
            (options, Tokenizer::load(&model).unwrap())
        }
        None => (WorkerOptions::simulated(setup.fake), Tokenizer::simulated()),
    };
    (setup.worker)(&mut options);
    let launch = WorkerLaunch::new(worker_exe(), options);
    let service = service::spawn(ServiceOptions {
        launch,
        settings: setup.scheduler.clone(),
        observation: service::Observation::default(),
    })
    .unwrap();
    let prompts = Prompts::new(tokenizer)
        .unwrap()
        .with_tool_call_format(setup.app.tool_call_format);
    // a control plane over this service (it cannot start another engine: no binary given)
    let control = Control::over(
        Unit {
            service: service.clone(),
            prompts: Arc::new(prompts),
            config: Config {
                app: setup.app,
                scheduler: setup.scheduler,
                source: None,
                sim_faults: Vec::new(),
                sim_script: None,
            },
            generation: 1,
        },
        None,
        None,
    );
    let state = ApiState::new(control.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown_service = service.clone();
    tokio::spawn(strata_desk::api::serve(listener, state, async move {
        let _ = stopped.await;
        shutdown_service.shutdown().await;
    }));
    if setup.wait_ready {
        let started = Instant::now();
        while service.snapshot().engine.status != EngineStatus::Ready {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the engine never became ready"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Server {
        base,
        service,
        control,
        client: reqwest::Client::new(),
        stop: Some(stop),
    }
}

impl Server {
    pub fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}/v1/chat/completions", self.base))
            .json(body)
    }

    pub fn post_raw(&self, body: impl Into<reqwest::Body>) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}/v1/chat/completions", self.base))
            .header("content-type", "application/json")
            .body(body)
    }

    /// A chat completion's JSON answer, whatever its status.
    pub async fn chat_json(&self, body: &Value) -> Value {
        self.post(body).send().await.unwrap().json().await.unwrap()
    }

    /// Waits until `check` holds for the service's snapshot.
    pub async fn until(
        &self,
        what: &str,
        check: impl Fn(&strata_desk::service::ServiceSnapshot) -> bool,
    ) {
        let started = Instant::now();
        while !check(&self.service.snapshot()) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "timed out waiting until {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

pub fn chat(text: &str, max_tokens: u32) -> Value {
    json!({"model": "anything", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0})
}

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

pub fn streamed_text(events: &[String]) -> String {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

pub async fn error_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn a_streamed_completion_is_framed_as_openai_chunks_ending_with_done() {
    let server = server(Setup::default()).await;
    let mut body = chat("hello", 8);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let response = server.post(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = sse_data(&response.text().await.unwrap());
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 8);
    assert_eq!(
        streamed_text(&events).len(),
        8,
        "one byte per simulated token"
    );

    // The same request without streaming says the same.
    let plain: Value = server
        .post(&chat("hello", 8))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        plain["choices"][0]["message"]["content"],
        streamed_text(&events)
    );
    assert_eq!(plain["choices"][0]["finish_reason"], "length");
    assert!(
        plain["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0,
        "{plain}"
    );
}

#[tokio::test]
async fn bad_input_gets_an_openai_shaped_4xx_and_leaves_a_running_request_untouched() {
    let server = server(Setup {
        app: AppSettings {
            body_limit_mib: 1,
            ..AppSettings::default()
        },
        fake: FakeOptions {
            kv_cells: 2048,
            prompt_tokens_per_sec: 20_000.0,
            decode_steps_per_sec: 100.0,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let alone: Value = server
        .post(&chat("a story", 60))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();

    let mut body = chat("a story", 60);
    body["stream"] = json!(true);
    let running = tokio::spawn(server.post(&body).send());

    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (server.post_raw("{\"messages\": ["), 400, "not valid JSON"),
        (server.post(&json!({"messages": "hi"})), 400, "messages"),
        (
            server.post(
                &json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}),
            ),
            400,
            "max_tokens",
        ),
        (
            server.post(&json!({"messages": [{"role": "wizard", "content": "x"}]})),
            400,
            "wizard",
        ),
        (
            server.post(&json!({"messages": []})),
            400,
            "must not be empty",
        ),
        (
            server.post(&json!({"messages": [{"role": "user", "content": "x"}], "temperature": 9})),
            400,
            "temperature",
        ),
        (
            server.post(&chat(&"x".repeat(3000), 10)),
            400,
            "maximum context length is 2047 tokens",
        ),
        (
            server.post_raw(vec![b' '; 2 * 1024 * 1024]),
            413,
            "larger than the 1 MiB limit",
        ),
    ];
    for (request, status, needle) in cases {
        let (got, body) = error_of(request.send().await.unwrap()).await;
        assert_eq!(got, status, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{needle:?} not in {body}");
        assert!(body["error"]["type"].is_string(), "{body}");
    }
    let (_, too_long) = error_of(
        server
            .post(&chat(&"x".repeat(3000), 10))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(too_long["error"]["code"], "context_length_exceeded");
    assert!(
        too_long["error"]["message"].as_str().unwrap().contains("3"),
        "{too_long}"
    );

    let events = sse_data(&running.await.unwrap().unwrap().text().await.unwrap());
    assert_eq!(
        streamed_text(&events),
        alone["choices"][0]["message"]["content"].as_str().unwrap()
    );
}

#[tokio::test]
async fn a_full_queue_answers_429_with_retry_after() {
    let server = server(Setup {
        scheduler: SchedulerSettings {
            queue_max: 1,
            ..SchedulerSettings::default()
        },
        fake: FakeOptions {
            decode_steps_per_sec: 50.0,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let first = tokio::spawn(server.post(&chat("one", 100)).send());
    server
        .until("the first runs", |s| {
            s.slots.iter().any(|slot| slot.request_id.is_some())
        })
        .await;
    let second = tokio::spawn(server.post(&chat("two", 5)).send());
    server
        .until("the second waits", |s| s.waiting.len() == 1)
        .await;
    let third = server.post(&chat("three", 5)).send().await.unwrap();
    assert_eq!(third.status(), 429);
    assert_eq!(third.headers()["retry-after"], "5");
    let (_, body) = error_of(third).await;
    assert_eq!(body["error"]["code"], "queue_full");
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert_eq!(second.await.unwrap().unwrap().status(), 200);
}

#[tokio::test]
async fn max_tokens_over_the_room_left_is_clamped_and_ends_with_length() {
    let server = server(Setup {
        fake: FakeOptions {
            kv_cells: 256,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let response: Value = server
        .post(&chat("fill the context", 100_000))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        response["choices"][0]["finish_reason"], "length",
        "{response}"
    );
    let prompt = response["usage"]["prompt_tokens"].as_u64().unwrap();
    let completion = response["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(prompt + completion <= 256, "{response}");
    assert!(completion > 100, "{response}");
}

#[tokio::test]
async fn the_models_and_health_routes_describe_the_simulated_engine() {
    let server = server(Setup::default()).await;
    let models: Value = reqwest::get(format!("{}/v1/models", server.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "simulated");
    assert_eq!(models["data"][0]["context_length"], 16_384);
    let health: Value = reqwest::get(format!("{}/health", server.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["engine"]["status"]["state"], "ready");
    assert_eq!(health["engine"]["state"], "ready");
    assert_eq!(health["engine"]["simulated"], true);
}
