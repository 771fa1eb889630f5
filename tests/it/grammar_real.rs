//! Grammars on the real engine and the test model: a grammar past its budget fails its own
//! request with an error that says so, and the request decoding beside it, the engine and the
//! next request are untouched; a pattern that would stall every token (#61) is refused on
//! every route while a stream decodes beside it, or sits parked in host RAM.

use crate::api_fake::{Server, Setup, chat, server, sse_data, streamed_text};
use serde_json::{Value, json};
use strata_desk::engine_worker::WorkerOptions;
use strata_desk::scheduler::SchedulerSettings;

/// A call of `pick` required: its grammar refuses the model's first draw, so the masking runs
/// (and with no budget at all, stops at once).
fn forced_call(text: &str) -> Value {
    let mut body = chat(text, 24);
    body["tools"] = json!([{"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}}]);
    body["tool_choice"] = json!("required");
    body
}

/// The real engine with two slots, `change`d.
async fn two_slots(change: impl FnOnce(&mut WorkerOptions)) -> Server {
    let mut options = WorkerOptions::of(strata_desk::protocol::EngineSettings {
        ctx_tokens: 2048,
        slots: 2,
        ..strata_desk::protocol::EngineSettings::for_model(crate::support::model_path())
    });
    change(&mut options);
    server(Setup {
        real: Some(options),
        ..Setup::default()
    })
    .await
}

#[tokio::test]
async fn a_grammar_past_its_budget_fails_its_request_alone() {
    let _serial = crate::support::real_model();
    let server = two_slots(|o| o.grammar_ms_per_token = 0).await;
    let plain = tokio::spawn(
        server
            .post(&chat("Count from one to twenty in words.", 24))
            .send(),
    );
    let constrained = server.post(&forced_call("Open the parser's file.")).send();
    let constrained = constrained.await.unwrap();
    let status = constrained.status();
    let body: Value = constrained.json().await.unwrap();
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["code"], "request_failed", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("grammar_ms_per_token"), "{message}");
    let plain = plain.await.unwrap().unwrap();
    assert_eq!(plain.status(), 200);
    let plain: Value = plain.json().await.unwrap();
    let content = plain["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!content.is_empty(), "{plain}");
    let snapshot = server.service.snapshot();
    assert_eq!(snapshot.engine.restarts, 0, "the engine was restarted");
    assert_eq!(snapshot.counters.failed, 1, "{:?}", snapshot.counters);
    // the engine serves on
    let next = server.post(&chat("Say hi.", 4)).send().await.unwrap();
    assert_eq!(next.status(), 200);
}

/// The request of #61: a pattern that repeats what can match empty, nested. Before the
/// estimate counted patterns, it reached the engine, whose grammar took seconds a token, and
/// the worker was stopped with every request in it.
const HOSTILE: &str = "^((a?){0,12}){0,12}$";

fn hostile_schema() -> Value {
    json!({"type": "object", "properties": {"x": {"type": "string", "pattern": HOSTILE}},
        "required": ["x"]})
}

/// The hostile pattern on every route: each a 400 naming where the pattern sits.
async fn refuses_on_every_route(server: &Server) {
    let client = reqwest::Client::new();
    let mut format = chat("Give me an x.", 4);
    format["response_format"] = json!({"type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "string", "pattern": HOSTILE}}});
    let mut tool = chat("Give me an x.", 4);
    tool["tools"] = json!([{"type": "function",
        "function": {"name": "pick", "parameters": hostile_schema()}}]);
    tool["tool_choice"] = json!("required");
    let responses = json!({"model": "m", "input": "Give me an x.", "max_output_tokens": 4,
        "text": {"format": {"type": "json_schema", "name": "x",
            "schema": hostile_schema()}}});
    let messages = json!({"model": "m", "max_tokens": 4,
        "messages": [{"role": "user", "content": "Give me an x."}],
        "tools": [{"name": "pick", "input_schema": hostile_schema()}],
        "tool_choice": {"type": "any"}});
    let cases = [
        (
            "/v1/chat/completions",
            format,
            "response_format.json_schema.schema.pattern",
        ),
        (
            "/v1/chat/completions",
            tool,
            "tools[0].function.parameters.properties.x.pattern",
        ),
        (
            "/v1/responses",
            responses,
            "text.format.schema.properties.x.pattern",
        ),
        (
            "/v1/messages",
            messages,
            "tools[0].input_schema.properties.x.pattern",
        ),
    ];
    for (path, body, param) in cases {
        let response = client
            .post(format!("{}{path}", server.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(param), "{path}: {message}");
        assert!(message.contains("(a?){0,12}"), "{message}");
        if path != "/v1/messages" {
            assert_eq!(body["error"]["param"], param, "{body}");
        }
    }
}

#[tokio::test]
async fn a_pattern_that_would_stall_every_token_is_refused_on_every_route_while_a_stream_goes_on() {
    let _serial = crate::support::real_model();
    let server = two_slots(|_| {}).await;
    let mut long = chat("Write a long story about a lighthouse keeper.", 160);
    long["stream"] = json!(true);
    let mut stream = server.post(&long).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    // the stream's chunks, with when each came
    let reader = tokio::spawn(async move {
        let mut chunks = Vec::new();
        while let Some(bytes) = stream.chunk().await.unwrap() {
            chunks.push((std::time::Instant::now(), bytes));
        }
        chunks
    });
    server
        .until("the stream decodes", |s| {
            s.slots.iter().any(|slot| slot.generated_tokens > 2)
        })
        .await;

    refuses_on_every_route(&server).await;
    let refused_at = std::time::Instant::now();

    let chunks = reader.await.unwrap();
    let text: String = chunks
        .iter()
        .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
        .collect();
    let events = sse_data(&text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{text}");
    assert!(!text.contains("\"error\""), "{text}");
    // its tokens kept coming after the refusals
    let after = chunks
        .iter()
        .filter(|(at, b)| *at > refused_at && String::from_utf8_lossy(b).contains("\"content\""))
        .count();
    assert!(after > 0, "no token after the refusals: {text}");
    let snapshot = server.service.snapshot();
    assert_eq!(snapshot.engine.restarts, 0, "the engine was restarted");
    assert_eq!(snapshot.counters.failed, 0, "{:?}", snapshot.counters);
}

/// A benchmark, run by hand (docs/BENCHMARKS.md, "Grammars: patterns"): an unrelated stream's
/// tokens per second alone, beside a plain request, and beside a request whose pattern is the
/// costliest the estimate takes (found by the fuzz test), in interleaved rounds.
/// `cargo test --test it grammar_real::costliest -- --ignored --nocapture`
#[tokio::test]
#[ignore = "a benchmark, run by hand"]
async fn costliest_pattern_taken_beside_a_stream() {
    let _serial = crate::support::real_model();
    let server = two_slots(|_| {}).await;
    let pattern = std::env::var("STRATA_BENCH_PATTERN")
        .unwrap_or_else(|_| "^(((a|aa){1,6}){1,6}){1,6}$".to_owned());
    let plain = chat("Write the letter a many times.", 64);
    let mut constrained = plain.clone();
    constrained["response_format"] = json!({"type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "string", "pattern": pattern}}});
    let stream_rate = |server: &Server| {
        let mut long = chat("Write a long story about a lighthouse keeper.", 96);
        long["stream"] = json!(true);
        let request = server.post(&long);
        async move {
            let started = std::time::Instant::now();
            let text = request.send().await.unwrap().text().await.unwrap();
            let tokens = sse_data(&text)
                .iter()
                .filter_map(|e| serde_json::from_str::<Value>(e).ok())
                .filter(|v| {
                    v["choices"][0]["delta"]["content"]
                        .as_str()
                        .is_some_and(|c| !c.is_empty())
                })
                .count();
            tokens as f64 / started.elapsed().as_secs_f64()
        }
    };
    let mut rates: [Vec<f64>; 3] = Default::default();
    let mut beside_tokens = [0u64; 2];
    for _ in 0..5 {
        rates[0].push(stream_rate(&server).await);
        for (arm, body) in [&plain, &constrained].into_iter().enumerate() {
            let other = tokio::spawn(server.post(body).send());
            rates[arm + 1].push(stream_rate(&server).await);
            let answer: Value = other.await.unwrap().unwrap().json().await.unwrap();
            beside_tokens[arm] += answer["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        }
    }
    let ratio = |arm: usize| -> Vec<f64> {
        rates[0]
            .iter()
            .zip(&rates[arm])
            .map(|(a, b)| b / a)
            .collect()
    };
    println!(
        "{pattern}: stream tokens/s alone {:.1?}, beside a plain request {:.1?} ({} tokens in \
         all), beside the pattern {:.1?} ({} tokens); ratios plain {:.2?}, pattern {:.2?}",
        rates[0],
        rates[1],
        beside_tokens[0],
        rates[2],
        beside_tokens[1],
        ratio(1),
        ratio(2)
    );
}

/// #61, not probed before: a stream parked to host RAM under a full pool while the hostile
/// pattern comes on every route; the refusals touch nothing, and the stream resumes with the
/// text it has alone.
#[tokio::test]
async fn a_stream_parked_to_host_ram_under_a_full_pool_resumes_unchanged_beside_hostile_patterns() {
    let _serial = crate::support::real_model();
    let server = server(Setup {
        real: Some(WorkerOptions::of(strata_desk::protocol::EngineSettings {
            ctx_tokens: 640,
            slots: 1,
            threads: 1,
            ..strata_desk::protocol::EngineSettings::for_model(crate::support::model_path())
        })),
        scheduler: SchedulerSettings {
            solo_priority: true,
            min_run_quantum_secs: 0.3,
            aging_interval_secs: 0.0,
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let story = chat("Write a long story about a lighthouse keeper.", 200);
    let alone: Value = server
        .post(&story)
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

    let mut long = story.clone();
    long["stream"] = json!(true);
    let long = tokio::spawn(server.post(&long).send().await.unwrap().text());
    server
        .until("the long one decodes", |s| {
            s.slots.iter().any(|slot| slot.generated_tokens > 20)
        })
        .await;
    // a prompt that needs the cells the paused stream holds
    let mut short = chat(&crate::support::long_text(26), 8);
    short["priority"] = json!(5);
    let short = tokio::spawn(server.post(&short).send());
    server
        .until("the long one is parked", |s| !s.parked.is_empty())
        .await;
    refuses_on_every_route(&server).await;
    assert_eq!(short.await.unwrap().unwrap().status(), 200);
    let long = long.await.unwrap().unwrap();
    assert_eq!(
        streamed_text(&sse_data(&long)),
        alone,
        "the parked stream's text changed"
    );
    let snapshot = server.service.snapshot();
    assert!(
        snapshot.counters.parks_to_host >= 1,
        "{:?}",
        snapshot.counters
    );
    assert_eq!(snapshot.engine.restarts, 0);
    assert_eq!(snapshot.counters.failed, 0, "{:?}", snapshot.counters);
}
