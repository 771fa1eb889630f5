//! The HTTP API over the real engine and model (SmolLM2-135M, one thread, greedy).

use crate::api_fake::{Setup, chat, server, sse_data, streamed_text};
use crate::support::{model_path, real_model};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use strata_desk::engine_worker::WorkerOptions;
use strata_desk::scheduler::SchedulerSettings;
use strata_desk::service::SlotStatus;

fn real(ctx: u32) -> Option<WorkerOptions> {
    Some(WorkerOptions::of(strata_desk::protocol::EngineSettings {
        ctx_tokens: ctx,
        threads: 1,
        ..strata_desk::protocol::EngineSettings::for_model(model_path())
    }))
}

fn story(priority: i64, max_tokens: u32) -> Value {
    let mut body = chat("Write a long story about a lighthouse keeper.", max_tokens);
    body["priority"] = json!(priority);
    body
}

#[tokio::test]
async fn the_engine_view_names_the_models_file_its_size_and_the_prompt_rate_it_measured() {
    let _serial = real_model();
    let server = server(Setup {
        real: real(4096),
        ..Setup::default()
    })
    .await;
    let engine = server.service.snapshot().engine;
    let model = crate::support::model_path();
    assert_eq!(
        engine.model_file,
        model.file_name().unwrap().to_string_lossy()
    );
    assert_eq!(
        engine.model_file_bytes,
        std::fs::metadata(&model).unwrap().len()
    );
    assert!(engine.prompt_tokens_per_sec > 0.0, "{engine:?}");
    // the test model: SmolLM2-135M, Q4_1; its KV cell at F16 is 30 layers x 3 heads x
    // (64 + 64) x 2 bytes
    assert_eq!(engine.quantization, "Q4_1");
    assert!(
        (130_000_000..140_000_000).contains(&engine.model_params),
        "{engine:?}"
    );
    assert!(
        engine.weights_bytes > 0 && engine.weights_bytes < engine.model_file_bytes,
        "{engine:?}"
    );
    assert_eq!(
        engine.kv_pool_bytes,
        23_040 * u64::from(engine.kv_cells_total)
    );
    // the engine process holds at least its weights
    let rss = engine.worker_rss_bytes.expect("no RSS read on Linux");
    assert!(rss > engine.weights_bytes, "{engine:?}");

    // clients see the file's stem as the id, no spaces; the header's name is kept apart
    let models: serde_json::Value = reqwest::get(format!("{}/v1/models", server.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "SmolLM2-135M-Instruct.Q4_1");
    assert_eq!(models["data"][0]["name"], engine.model.as_str());
    assert!(engine.model.contains(' '), "{engine:?}");
}

#[tokio::test]
async fn stream_and_non_stream_agree_under_greedy_decoding() {
    let _serial = real_model();
    let server = server(Setup {
        real: real(4096),
        ..Setup::default()
    })
    .await;
    let plain: Value = server
        .post(&story(0, 48))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut body = story(0, 48);
    body["stream"] = json!(true);
    let events = sse_data(
        &server
            .post(&body)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    let text = plain["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.len() > 40, "{plain}");
    assert_eq!(streamed_text(&events), text);
}

#[tokio::test]
async fn with_solo_priority_a_short_request_runs_while_a_long_stream_is_parked_and_the_long_text_is_unchanged()
 {
    let _serial = real_model();
    let server = server(Setup {
        real: real(4096),
        scheduler: SchedulerSettings {
            solo_priority: true,
            min_run_quantum_secs: 1.0,
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let alone: Value = server
        .post(&story(0, 400))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let alone = alone["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut body = story(0, 400);
    body["stream"] = json!(true);
    let long = server.post(&body).send().await.unwrap();
    let mut long_stream = long.bytes_stream();
    let mut long_text =
        String::from_utf8_lossy(&long_stream.next().await.unwrap().unwrap()).into_owned();
    // past the quantum; 400 tokens take 4 s or more at one thread (160 took 1.5 s here)
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let mut short = chat("What is 2 + 2?", 8);
    short["priority"] = json!(5);
    short["stream"] = json!(true);
    let sent = Instant::now();
    let response = server.post(&short).send().await.unwrap();
    let mut short_stream = response.bytes_stream();
    let mut first_token_parked = None;
    let mut short_text = String::new();
    while let Some(chunk) = short_stream.next().await {
        let chunk = String::from_utf8_lossy(&chunk.unwrap()).into_owned();
        if first_token_parked.is_none()
            && chunk.contains("\"content\":\"")
            && !chunk.contains("\"role\"")
        {
            let snapshot = server.service.snapshot();
            first_token_parked = Some((snapshot.parked.len(), sent.elapsed()));
        }
        short_text.push_str(&chunk);
    }
    let (parked, ttft) = first_token_parked.expect("the short request produced a token");
    assert_eq!(
        parked, 1,
        "the long stream was not parked when the short one's first token came"
    );
    assert!(
        ttft < Duration::from_secs(3),
        "short time to first token {ttft:?}"
    );
    assert!(sse_data(&short_text).last().is_some_and(|d| d == "[DONE]"));

    while let Some(chunk) = long_stream.next().await {
        long_text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert_eq!(
        streamed_text(&sse_data(&long_text)),
        alone,
        "the paused stream's text changed"
    );
    let counters = server.service.snapshot().counters;
    assert!(
        counters.pauses >= 1 && counters.resumes >= 1,
        "{counters:?}"
    );
    assert_eq!(counters.processed_prefix_losses, 0);
}

#[tokio::test]
async fn a_short_request_arriving_during_a_long_prompt_read_gets_its_first_token_within_about_a_chunk()
 {
    let _serial = real_model();
    let server = server(Setup {
        real: real(4096),
        scheduler: SchedulerSettings {
            chunk_tokens: Some(128),
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let long_prompt = crate::support::long_text(90);
    let long = tokio::spawn(server.post(&chat(&long_prompt, 4)).send());
    server
        .until("the long read is under way", |s| {
            s.slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Reading && slot.read_tokens > 0)
        })
        .await;
    let sent = Instant::now();
    let mut short = chat("Hi!", 4);
    short["stream"] = json!(true);
    let response = server.post(&short).send().await.unwrap();
    let mut stream = response.bytes_stream();
    let mut ttft = None;
    let mut long_reading_then = false;
    while let Some(chunk) = stream.next().await {
        let chunk = String::from_utf8_lossy(&chunk.unwrap()).into_owned();
        if ttft.is_none() && chunk.contains("\"content\":\"") && !chunk.contains("\"role\"") {
            ttft = Some(sent.elapsed());
            long_reading_then = server.service.snapshot().parked.len() == 1;
        }
    }
    let ttft = ttft.expect("a token");
    let long = long.await.unwrap().unwrap();
    assert_eq!(long.status(), 200);
    let long_total = sent.elapsed();
    let long_answer: Value = long.json().await.unwrap();
    let gave_way = server.service.snapshot().counters.give_ways_shorter_left;
    // The long answer is what it is alone (one engine thread, same chunk boundaries): a fresh
    // engine, so nothing of the first run is reused (audit: this test checked only the TTFT).
    server.service.restart_engine().await.unwrap();
    server
        .until("the new engine is ready", |s| {
            s.engine.status == strata_desk::service::EngineStatus::Ready
        })
        .await;
    let alone: Value = server
        .post(&chat(&long_prompt, 4))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        long_answer["choices"][0]["message"]["content"], alone["choices"][0]["message"]["content"],
        "the read that gave way answered differently"
    );
    assert_eq!(alone["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert!(
        long_reading_then,
        "the long read had not given way when the short answered"
    );
    assert!(
        ttft * 3 < long_total,
        "short TTFT {ttft:?} vs the long read finishing after {long_total:?}"
    );
    assert!(gave_way >= 1, "the long read never gave way");
}

#[tokio::test]
async fn killing_the_worker_mid_stream_gives_an_error_event_and_the_next_request_succeeds() {
    let _serial = real_model();
    let server = server(Setup {
        real: real(4096),
        ..Setup::default()
    })
    .await;
    let mut body = story(0, 200);
    body["stream"] = json!(true);
    let response = server.post(&body).send().await.unwrap();
    let mut stream = response.bytes_stream();
    let mut text = String::from_utf8_lossy(&stream.next().await.unwrap().unwrap()).into_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let model = model_path().display().to_string();
    // This test's own worker (a child of this process): another server's may be running.
    let pids = std::process::Command::new("pgrep")
        .args([
            "-P",
            &std::process::id().to_string(),
            "-f",
            // the app passes the worker its options as one JSON object, the model path in it
            &format!("engine-worker --options-json .*{model}"),
        ])
        .output()
        .unwrap();
    let pid = String::from_utf8_lossy(&pids.stdout)
        .lines()
        .next()
        .expect("the worker runs")
        .to_owned();
    let killed_at = Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    while let Some(chunk) = stream.next().await {
        let chunk = String::from_utf8_lossy(&chunk.unwrap()).into_owned();
        if chunk.contains("\"error\"") {
            assert!(
                killed_at.elapsed() < Duration::from_secs(2),
                "error after {:?}",
                killed_at.elapsed()
            );
        }
        text.push_str(&chunk);
    }
    let events = sse_data(&text);
    assert!(
        events.iter().any(|e| e.contains("\"error\"")),
        "no error event: {events:?}"
    );
    let next = server.post(&chat("Say hi.", 4)).send().await.unwrap();
    assert_eq!(next.status(), 200);
    assert!(server.service.snapshot().engine.restarts >= 1);
}

#[tokio::test]
async fn a_json_schema_response_format_yields_json_that_follows_the_schema() {
    let _serial = real_model();
    let server = server(Setup {
        real: real(2048),
        ..Setup::default()
    })
    .await;
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "likes_tea": {"type": "boolean"},
            "pet": {"enum": ["cat", "dog", "none"]},
        },
        "required": ["name", "age", "likes_tea", "pet"],
        "additionalProperties": false,
    });
    let mut body = chat("Describe a lighthouse keeper as JSON.", 120);
    body["response_format"] =
        json!({"type": "json_schema", "json_schema": {"name": "keeper", "schema": schema}});
    let answer: Value = server
        .post(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "stop", "{answer}");
    let text = choice["message"]["content"].as_str().unwrap();
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let object = v.as_object().unwrap();
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["age", "likes_tea", "name", "pet"], "{text}");
    assert!(
        v["name"].as_str().is_some_and(|n| n.chars().count() <= 16),
        "{text}"
    );
    assert!(v["age"].as_u64().is_some_and(|a| a <= 120), "{text}");
    assert!(v["likes_tea"].is_boolean(), "{text}");
    assert!(
        ["cat", "dog", "none"].contains(&v["pet"].as_str().unwrap()),
        "{text}"
    );
}

#[tokio::test]
async fn a_required_tool_call_on_the_real_model_is_a_valid_call_to_an_offered_tool() {
    let _serial = real_model();
    let server = server(Setup {
        real: real(4096),
        ..Setup::default()
    })
    .await;
    let mut body = chat("What is the weather in Paris?", 120);
    body["tools"] = json!([{"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]},
    }}]);
    body["tool_choice"] = json!("required");
    let answer: Value = server
        .post(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{answer}");
    let call = &choice["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{args}");
}

#[tokio::test]
async fn the_official_clients_use_responses_and_messages_on_the_headless_server() {
    let _serial = real_model();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let model = model_path();
    let mut headless = tokio::process::Command::new(crate::support::worker_exe())
        .args(["--headless", "--threads", "1", "--ctx", "2048", "--port"])
        .arg(port.to_string())
        .arg("--model")
        .arg(&model)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    loop {
        let ready = reqwest::get(format!("{base}/health"))
            .await
            .is_ok_and(|r| r.status() == 200);
        if ready {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let base_arg = base.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(crate::support::test_python())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/python/agents_real.py"
            ))
            .arg(base_arg)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let _ = headless.start_kill();
    assert!(
        out.status.success(),
        "a client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["responses"];
    let output_tokens = r["created"]["output_tokens"].as_u64().unwrap();
    let status = if output_tokens == 24 {
        "incomplete"
    } else {
        "completed"
    };
    assert_eq!(r["created"]["status"], status, "{v}");
    assert!(!r["created"]["text"].as_str().unwrap().is_empty());
    assert_eq!(r["streamed"]["text"], r["streamed"]["deltas"]);
    let m = &v["messages"];
    assert!(!m["created"]["text"].as_str().unwrap().is_empty());
    assert_eq!(m["counted"], m["created"]["input_tokens"], "{v}");
    // 32000 asked of a 2048 context: clamped, never refused.
    assert!(
        ["end_turn", "max_tokens"].contains(&m["streamed"]["stop_reason"].as_str().unwrap()),
        "{v}"
    );
    assert_eq!(m["streamed"]["text"], m["streamed"]["stream_text"]);
}
