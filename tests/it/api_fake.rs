//! The HTTP API on 127.0.0.1:0 over the simulated engine (a real worker process, `--fake`).

use crate::support::worker_exe;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_desk::api::{ApiState, Prompts};
use strata_desk::config::AppSettings;
use strata_desk::engine::WorkerLaunch;
use strata_desk::engine_worker::{FakeOptions, WorkerOptions};
use strata_desk::scheduler::SchedulerSettings;
use strata_desk::service::SlotStatus;
use strata_desk::service::{self, EngineStatus, ServiceHandle, ServiceOptions};
use strata_desk::tokenizer::Tokenizer;

pub struct Server {
    pub base: String,
    pub service: ServiceHandle,
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
    })
    .unwrap();
    let state = ApiState {
        service: service.clone(),
        prompts: Arc::new(Prompts::new(tokenizer).unwrap()),
        app: Arc::new(setup.app),
        scheduler: Arc::new(setup.scheduler),
    };
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

async fn error_of(response: reqwest::Response) -> (u16, Value) {
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
async fn the_engine_dying_mid_stream_gives_an_error_event_shows_failed_while_nothing_waits_and_the_next_request_restarts_it()
 {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 50.0,
            faults: vec!["die:20".into()],
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let mut body = chat("doomed", 200);
    body["stream"] = json!(true);
    let response = server.post(&body).send().await.unwrap();
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    let mut last_piece_at = Instant::now();
    while let Some(chunk) = stream.next().await {
        let chunk = String::from_utf8_lossy(&chunk.unwrap()).into_owned();
        if chunk.contains("\"error\"") {
            assert!(
                last_piece_at.elapsed() < Duration::from_secs(2),
                "the error came {:?} after the last token",
                last_piece_at.elapsed()
            );
        } else {
            last_piece_at = Instant::now();
        }
        text.push_str(&chunk);
    }
    let events = sse_data(&text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let error: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert!(
        error["error"]["message"].as_str().unwrap().contains("died"),
        "{error}"
    );
    // Nothing waits, so nothing restarts the engine yet (R10): the status says it is down and
    // why, not `restarting` (regression: it said `restarting` until the next request).
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        let status = server.service.snapshot().engine.status;
        if matches!(status, EngineStatus::Failed(_)) || Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let EngineStatus::Failed(reason) = status else {
        panic!("the idle dead engine shows {status:?}");
    };
    assert!(reason.contains("injected fault"), "{reason}");
    assert!(reason.contains("next request"), "{reason}");

    // The next request (short enough to end before the new worker's own step 20) succeeds.
    let next = server.post(&chat("after", 5)).send().await.unwrap();
    assert_eq!(next.status(), 200);
    let next: Value = next.json().await.unwrap();
    assert_eq!(next["choices"][0]["finish_reason"], "length");
    assert!(server.service.snapshot().engine.restarts >= 1);
}

#[tokio::test]
async fn an_engine_that_cannot_start_answers_503_with_its_last_words() {
    let server = server(Setup {
        fake: FakeOptions {
            faults: vec!["nonsense".into()],
            ..FakeOptions::instant()
        },
        wait_ready: false,
        ..Setup::default()
    })
    .await;
    server
        .until("the starts failed", |s| {
            matches!(s.engine.status, EngineStatus::Failed(_))
        })
        .await;
    // R10's policy for the first start too: three attempts, then down.
    assert_eq!(server.service.snapshot().engine.generation, 3);
    let response = server.post(&chat("hi", 5)).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let (_, body) = error_of(response).await;
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--fake-fault"), "{message}");
    let health = reqwest::get(format!("{}/health", server.base))
        .await
        .unwrap();
    assert_eq!(health.status(), 503);
    // That request started the engine again (the next request tries again).
    assert_eq!(server.service.snapshot().engine.generation, 4);
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

#[tokio::test]
async fn api_keys_are_required_when_configured_and_foreign_hosts_are_refused() {
    let server = server(Setup {
        app: AppSettings {
            api_keys: vec![strata_desk::config::ApiKeyEntry::Plain(
                "secret-key-1".into(),
            )],
            ..AppSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let (status, body) = error_of(server.post(&chat("hi", 2)).send().await.unwrap()).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["type"], "authentication_error");
    let wrong = server
        .post(&chat("hi", 2))
        .bearer_auth("secret-key-2")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let bearer = server
        .post(&chat("hi", 2))
        .bearer_auth("secret-key-1")
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 200);
    let header = server
        .post(&chat("hi", 2))
        .header("x-api-key", "secret-key-1")
        .send()
        .await
        .unwrap();
    assert_eq!(header.status(), 200);

    // DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends its own Host.
    let rebound = server
        .post(&chat("hi", 2))
        .bearer_auth("secret-key-1")
        .header("host", "evil.example:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
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
async fn a_request_while_the_engine_loads_gets_503_with_retry_after() {
    let server = server(Setup {
        fake: FakeOptions {
            load_secs: 3.0,
            ..FakeOptions::instant()
        },
        wait_ready: false,
        ..Setup::default()
    })
    .await;
    let response = server.post(&chat("hi", 2)).send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "5");
    let (_, body) = error_of(response).await;
    assert_eq!(body["error"]["code"], "engine_starting");
    let health: Value = reqwest::get(format!("{}/health", server.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["engine"]["status"]["state"], "loading");
    server
        .until("the engine is ready", |s| {
            s.engine.status == EngineStatus::Ready
        })
        .await;
    assert_eq!(
        server.post(&chat("hi", 2)).send().await.unwrap().status(),
        200
    );
}

#[tokio::test]
async fn cross_origin_reads_are_allowed_only_for_configured_origins() {
    let plain = server(Setup::default()).await;
    let response = reqwest::Client::new()
        .get(format!("{}/v1/models", plain.base))
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert!(
        response
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );

    let configured = server(Setup {
        app: AppSettings {
            cors_origins: vec!["https://app.example".into()],
            ..AppSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let allowed = reqwest::Client::new()
        .get(format!("{}/v1/models", configured.base))
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let other = reqwest::Client::new()
        .get(format!("{}/v1/models", configured.base))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
}

/// Regression: the actor re-armed the step's full deadline on every loop turn (a tick comes
/// every 250 ms), so a silent engine was never noticed.
#[tokio::test]
async fn a_silent_engine_is_stopped_at_its_step_deadline_and_the_stream_fails() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 100.0,
            faults: vec!["hang:10".into()],
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let started = Instant::now();
    let response = server.post(&chat("hangs", 50)).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let (_, body) = error_of(response).await;
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("died"), "{message}");
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(20), "noticed after {waited:?}");
    // The next request starts a new engine (it ends before that engine's own step 10).
    let next = server.post(&chat("after", 4)).send().await.unwrap();
    assert_eq!(next.status(), 200);
    assert!(server.service.snapshot().engine.restarts >= 1);
}

/// After an engine death with conversations cached and a request waiting, the waiting request
/// is served by the restarted engine. (Written for a bug where clean-up actions reaching a
/// missing engine counted as failed starts; this workload does not put conversations in the
/// host cache, so it checks the outcome, not that path.)
#[tokio::test]
async fn an_engine_death_with_earlier_conversations_still_serves_the_waiting_request() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 50.0,
            faults: vec!["die:16".into()],
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    // Three conversations in turn through the one slot.
    for text in ["first topic", "second topic", "third topic"] {
        let done = server.post(&chat(text, 3)).send().await.unwrap();
        assert_eq!(done.status(), 200);
    }
    let mut long = chat("the long one", 100);
    long["stream"] = json!(true);
    let long = server.post(&long).send().await.unwrap();
    let waiting = tokio::spawn(server.post(&chat("waits its turn", 3)).send());
    let events = sse_data(&long.text().await.unwrap());
    assert!(
        events.iter().any(|e| e.contains("\"error\"")),
        "the long one did not fail: {events:?}"
    );
    let waiting = waiting.await.unwrap().unwrap();
    assert_eq!(waiting.status(), 200, "{}", waiting.text().await.unwrap());
}
