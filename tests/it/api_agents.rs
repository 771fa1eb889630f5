//! The Responses API (and Messages where both share a rule) over the simulated engine: every
//! event sequence (text, tool calls, reasoning, errors mid-stream, keep-alives while parked),
//! streamed and not; tool round trips with the official `openai` and `anthropic` packages.
//! Messages' own event grammar and limits: api_messages.rs.

use crate::api_fake::{Server, Setup, server};
use crate::support::script;
use serde_json::{Value, json};
use std::time::Duration;
use strata_desk::engine_worker::FakeOptions;
use strata_desk::scheduler::SchedulerSettings;
use strata_desk::service::SlotStatus;

const WEATHER_CALL: &str =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

fn rules() -> Vec<(&'static str, &'static str)> {
    vec![
        // The tools' descriptions mention the weather: the call answers the question only.
        ("<tool_response>", "It is sunny in Paris."),
        ("plan", "<think>look at a map</think>\nGo north."),
        ("hello", "Hello there, friend."),
        ("in Paris?", WEATHER_CALL),
    ]
}

pub(crate) async fn scripted(fake: FakeOptions) -> Server {
    server(Setup {
        fake: FakeOptions {
            script: Some(script(&rules())),
            ..fake
        },
        ..Setup::default()
    })
    .await
}

pub(crate) async fn post(server: &Server, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", server.base))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// `(event name, data)` of an SSE body.
pub(crate) fn events(body: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut name = String::new();
    for line in body.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_owned();
        } else if let Some(d) = line.strip_prefix("data: ") {
            out.push((name.clone(), serde_json::from_str(d).unwrap()));
        }
    }
    out
}

/// The event names with consecutive repeats folded (`a, b+, c`).
pub(crate) fn grammar(events: &[(String, Value)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (name, _) in events {
        let folded = format!("{name}+");
        match out.last_mut() {
            Some(last) if *last == *name => *last = folded,
            Some(last) if *last == folded => {}
            _ => out.push(name.clone()),
        }
    }
    out
}

fn tools_responses() -> Value {
    json!([
        {"type": "function", "name": "get_weather", "description": "Weather in a city",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        {"type": "web_search"},
        {"type": "namespace", "name": "mcp"},
    ])
}

fn responses_body(input: Value, stream: bool) -> Value {
    json!({
        "model": "anything", "input": input, "stream": stream, "tools": tools_responses(),
        "store": false, "include": ["reasoning.encrypted_content"], "reasoning": {"effort": "low"},
        "prompt_cache_key": "abc",
    })
}

async fn responses_stream(server: &Server, input: Value) -> Vec<(String, Value)> {
    let response = post(server, "/v1/responses", &responses_body(input, true)).await;
    assert_eq!(response.status(), 200);
    let evs = events(&response.text().await.unwrap());
    for (i, (name, data)) in evs.iter().enumerate() {
        assert_eq!(data["type"], name.as_str());
        assert_eq!(data["sequence_number"], i, "{name}");
    }
    evs
}

#[tokio::test]
async fn responses_text_follows_the_event_grammar_streamed_and_matches_the_whole_answer() {
    let server = scripted(FakeOptions::instant()).await;
    let evs = responses_stream(&server, json!("hello")).await;
    assert_eq!(
        grammar(&evs),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta+",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let item_id = evs[2].1["item"]["id"].clone();
    let deltas: String = evs
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| {
            assert_eq!(d["item_id"], item_id);
            assert_eq!(
                (d["output_index"].as_u64(), d["content_index"].as_u64()),
                (Some(0), Some(0))
            );
            d["delta"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(deltas, "Hello there, friend.");
    let completed = &evs.last().unwrap().1["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["output"][0]["content"][0]["text"], deltas);

    let whole: Value = post(
        &server,
        "/v1/responses",
        &responses_body(json!("hello"), false),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(whole["object"], "response");
    assert_eq!(whole["status"], "completed");
    assert_eq!(whole["output"][0]["type"], "message");
    assert_eq!(whole["output"][0]["content"][0]["text"], deltas);
    assert!(whole["usage"]["input_tokens"].as_u64().unwrap() > 0);
    // The text's 20 tokens and the end-of-generation token.
    assert_eq!(whole["usage"]["output_tokens"], 21);
}

#[tokio::test]
async fn responses_tool_calls_and_reasoning_follow_the_event_grammar() {
    let server = scripted(FakeOptions::instant()).await;
    let evs = responses_stream(&server, json!("weather in Paris?")).await;
    assert_eq!(
        grammar(&evs),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta+",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let added = &evs[2].1["item"];
    assert_eq!(
        (added["type"].as_str(), added["name"].as_str()),
        (Some("function_call"), Some("get_weather"))
    );
    let done = &evs[evs.len() - 2].1["item"];
    assert_eq!(done["call_id"], added["call_id"]);
    let args: Value = serde_json::from_str(done["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));

    let evs = responses_stream(&server, json!("plan a trip")).await;
    assert_eq!(
        grammar(&evs),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta+",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta+",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let output = &evs.last().unwrap().1["response"]["output"];
    assert_eq!(output[0]["summary"][0]["text"], "look at a map");
    assert_eq!(output[1]["content"][0]["text"], "Go north.");
    let added: Vec<u64> = evs
        .iter()
        .filter(|(n, _)| n == "response.output_item.added")
        .map(|(_, d)| d["output_index"].as_u64().unwrap())
        .collect();
    assert_eq!(added, [0, 1]);

    // The round trip as items: the call and its output go back; reasoning items are dropped.
    let input = json!([
        {"role": "user", "content": "weather in Paris?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call_output", "call_id": "call_9", "output": "sunny"},
    ]);
    let whole: Value = post(&server, "/v1/responses", &responses_body(input, false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        whole["output"][0]["content"][0]["text"], "It is sunny in Paris.",
        "{whole}"
    );
}

#[tokio::test]
async fn a_failure_mid_stream_is_an_error_event_on_both_apis() {
    let server = scripted(FakeOptions {
        decode_steps_per_sec: 100.0,
        faults: vec!["die:6".into()],
        ..FakeOptions::instant()
    })
    .await;
    let evs = responses_stream(&server, json!("hello")).await;
    let (name, last) = evs.last().unwrap();
    assert_eq!(name, "response.failed");
    assert_eq!(last["response"]["status"], "failed");
    assert!(
        last["response"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("engine")
    );

    let server2 = scripted(FakeOptions {
        decode_steps_per_sec: 100.0,
        faults: vec!["die:6".into()],
        ..FakeOptions::instant()
    })
    .await;
    let body = json!({"model": "x", "max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "hello"}]});
    let text = post(&server2, "/v1/messages", &body)
        .await
        .text()
        .await
        .unwrap();
    let evs = events(&text);
    let (name, last) = evs.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(last["error"]["type"], "overloaded_error");
}

#[tokio::test]
async fn parked_and_waiting_streams_get_keep_alives_on_both_apis() {
    let server = server(Setup {
        fake: FakeOptions {
            script: Some(script(&rules())),
            decode_steps_per_sec: 20.0,
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
    let base = server.base.clone();
    let responses = tokio::spawn({
        let base = base.clone();
        async move {
            let body = json!({"input": "tell me more", "stream": true, "max_output_tokens": 40});
            reqwest::Client::new()
                .post(format!("{base}/v1/responses"))
                .json(&body)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    });
    server
        .until("the responses stream decodes", |s| {
            s.slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Decoding)
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let anthropic = tokio::spawn({
        let base = base.clone();
        async move {
            let body = json!({"max_tokens": 5, "stream": true, "messages": [{"role": "user", "content": "wait"}]});
            reqwest::Client::new()
                .post(format!("{base}/v1/messages"))
                .json(&body)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    });
    // A priority request parks the Responses stream and runs 13 s; the Anthropic one waits.
    let mut urgent = crate::api_fake::chat("urgent", 260);
    urgent["priority"] = json!(90);
    let urgent = tokio::spawn({
        let request = server.post(&urgent);
        async move { request.send().await.unwrap().status() }
    });
    server
        .until("the stream is parked", |s| s.parked.len() == 1)
        .await;
    assert_eq!(urgent.await.unwrap(), 200);
    let evs = events(&responses.await.unwrap());
    let in_progress = evs
        .iter()
        .filter(|(n, _)| n == "response.in_progress")
        .count();
    assert!(
        in_progress >= 2,
        "no keep-alive while parked: {in_progress}"
    );
    assert_eq!(evs.last().unwrap().0, "response.incomplete");
    let evs = events(&anthropic.await.unwrap());
    assert!(
        evs.iter().any(|(n, _)| n == "ping"),
        "no ping while waiting"
    );
    assert_eq!(evs.last().unwrap().0, "message_stop");
}

#[tokio::test]
async fn the_official_clients_run_a_tool_round_trip_on_responses_and_messages() {
    let server = scripted(FakeOptions {
        decode_steps_per_sec: 200.0,
        ..FakeOptions::instant()
    })
    .await;
    let base = server.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(crate::support::test_python())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/python/agents_tools.py"
            ))
            .arg(base)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "a client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["responses"]["call"]["name"], "get_weather", "{v}");
    assert_eq!(
        v["responses"]["call"]["arguments"],
        json!({"city": "Paris"})
    );
    assert_eq!(v["responses"]["final"], "It is sunny in Paris.");
    assert_eq!(v["messages"]["call"]["name"], "get_weather");
    assert_eq!(v["messages"]["call"]["input"], json!({"city": "Paris"}));
    assert_eq!(v["messages"]["stop_reason"], "tool_use");
    assert_eq!(v["messages"]["final"], "It is sunny in Paris.");
}

#[tokio::test]
async fn a_codex_shaped_history_and_a_claude_code_shaped_one_replay_without_a_400() {
    let server = server(Setup {
        fake: FakeOptions {
            script: Some(script(&[
                ("mcp_search", "Searched."),
                ("screenshot", "Seen."),
            ])),
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    // A developer note mid-history, a namespace of MCP tools, a call cut before its arguments
    // closed (kept by the client as an incomplete item), text parts of both kinds.
    let body = json!({
        "model": "gpt-5-codex", "stream": false, "store": false,
        "instructions": "You are Codex.",
        "tools": [{"type": "namespace", "name": "mcp", "tools": [
            {"type": "function", "name": "mcp_search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
        ]}],
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: read-only."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "find it"}]},
            {"type": "function_call", "call_id": "c1", "name": "mcp_search", "arguments": "{\"q\": \"it"},
            {"type": "function_call_output", "call_id": "c1", "output": "nothing"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Nothing found."}]},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Approval policy changed."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}, {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
        ],
    });
    let response = post(&server, "/v1/responses", &body).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer["output"][0]["content"][0]["text"], "Searched.",
        "the namespace's tool was offered"
    );

    let claude = json!({
        "model": "claude", "max_tokens": 100,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "text", "text": "what is on this screenshot?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        ]}],
    });
    let response = post(&server, "/v1/messages", &claude).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["content"][0]["text"], "Seen.");
}
