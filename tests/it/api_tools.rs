//! Tool calls, reasoning and structured output on Chat Completions, with the simulated engine
//! scripting outputs (one byte per token, so every call is split across many tokens).

use crate::api_fake::{Server, Setup, chat, server, sse_data};
use crate::support::script;
use serde_json::{Value, json};
use strata_desk::engine_worker::FakeOptions;
use strata_desk::scheduler::SchedulerSettings;
use strata_desk::service::SlotStatus;

const WEATHER_CALL: &str =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

async fn scripted(rules: &[(&str, &str)], decode_steps_per_sec: f64) -> Server {
    server(Setup {
        fake: FakeOptions {
            script: Some(script(rules)),
            decode_steps_per_sec,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await
}

fn weather_tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }}])
}

fn with_tools(text: &str, max_tokens: u32) -> Value {
    let mut body = chat(text, max_tokens);
    body["tools"] = weather_tools();
    body
}

async fn answer(server: &Server, body: &Value) -> Value {
    let response = server.post(body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// A streamed answer as a client assembles it.
#[derive(Debug, Default)]
struct Streamed {
    content: String,
    reasoning: String,
    /// (id, name, arguments, argument deltas)
    calls: Vec<(String, String, String, usize)>,
    finish: Option<String>,
}

async fn stream(server: &Server, body: &Value) -> Streamed {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let text = server
        .post(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut out = Streamed::default();
    for data in sse_data(&text) {
        if data == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(&data).unwrap();
        let choice = &chunk["choices"][0];
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str() {
            out.content.push_str(t);
        }
        if let Some(t) = delta["reasoning_content"].as_str() {
            out.reasoning.push_str(t);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap() as usize;
            if let Some(id) = call["id"].as_str() {
                assert_eq!(index, out.calls.len(), "a call starts once, in order");
                let name = call["function"]["name"].as_str().unwrap().to_owned();
                out.calls.push((id.to_owned(), name, String::new(), 0));
            } else {
                let entry = &mut out.calls[index];
                entry
                    .2
                    .push_str(call["function"]["arguments"].as_str().unwrap());
                entry.3 += 1;
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            out.finish = Some(reason.to_owned());
        }
    }
    out
}

#[tokio::test]
async fn a_scripted_call_is_a_tool_call_streamed_name_first_then_argument_pieces_and_whole() {
    let server = scripted(&[("weather", WEATHER_CALL)], 0.0).await;
    let body = with_tools("What is the weather in Paris?", 200);
    let whole = answer(&server, &body).await;
    let choice = &whole["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{whole}");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));

    let streamed = stream(&server, &body).await;
    assert_eq!(streamed.finish.as_deref(), Some("tool_calls"));
    assert_eq!(streamed.content, "");
    assert_eq!(streamed.calls.len(), 1);
    let (_, name, arguments, pieces) = &streamed.calls[0];
    assert_eq!(name, "get_weather");
    assert_eq!(serde_json::from_str::<Value>(arguments).unwrap(), args);
    assert!(*pieces > 3, "the arguments came in {pieces} pieces");
}

#[tokio::test]
async fn parallel_calls_come_back_with_their_own_index_and_id() {
    let two = format!(
        "{WEATHER_CALL}\n<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Oslo\"}}}}\n</tool_call>"
    );
    let server = scripted(&[("weather", &two)], 0.0).await;
    let body = with_tools("weather in Paris and Oslo?", 300);
    let whole = answer(&server, &body).await;
    let calls = whole["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap();
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0]["id"], calls[1]["id"]);
    assert!(
        calls[1]["function"]["arguments"]
            .as_str()
            .unwrap()
            .contains("Oslo")
    );
    let streamed = stream(&server, &body).await;
    assert_eq!(streamed.calls.len(), 2);
    assert_eq!(streamed.finish.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn a_call_split_across_a_pause_streams_the_same_as_without_one() {
    let server = server(Setup {
        fake: FakeOptions {
            script: Some(script(&[("weather", WEATHER_CALL)])),
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
    let body = with_tools("What is the weather in Paris?", 200);
    let alone = stream(&server, &body).await;
    let paused = {
        let server = &server;
        let long = tokio::spawn({
            let body = body.clone();
            let base = server.base.clone();
            async move {
                let mut body = body;
                body["stream"] = json!(true);
                reqwest::Client::new()
                    .post(format!("{base}/v1/chat/completions"))
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
            .until("the call is being written", |s| {
                s.slots
                    .iter()
                    .any(|slot| slot.state == SlotStatus::Decoding && slot.generated_tokens > 20)
            })
            .await;
        let mut short = chat("short", 5);
        short["priority"] = json!(50);
        assert_eq!(server.post(&short).send().await.unwrap().status(), 200);
        long.await.unwrap()
    };
    assert!(
        server.service.snapshot().counters.pauses >= 1,
        "no pause happened"
    );
    let mut reassembled = Streamed::default();
    for data in sse_data(&paused) {
        if let Ok(chunk) = serde_json::from_str::<Value>(&data) {
            for call in chunk["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if let Some(name) = call["function"]["name"].as_str() {
                    reassembled
                        .calls
                        .push((String::new(), name.to_owned(), String::new(), 0));
                } else {
                    reassembled.calls[0]
                        .2
                        .push_str(call["function"]["arguments"].as_str().unwrap());
                }
            }
            if let Some(reason) = chunk["choices"][0]["finish_reason"].as_str() {
                reassembled.finish = Some(reason.to_owned());
            }
        }
    }
    assert_eq!(reassembled.finish.as_deref(), Some("tool_calls"));
    assert_eq!(reassembled.calls.len(), 1);
    assert_eq!(reassembled.calls[0].1, alone.calls[0].1);
    assert_eq!(reassembled.calls[0].2, alone.calls[0].2);
}

#[tokio::test]
async fn a_malformed_call_is_content_and_a_cut_call_is_length_never_a_call() {
    let server = scripted(
        &[
            ("broken", "<tool_call>this is not json</tool_call>"),
            ("weather", WEATHER_CALL),
        ],
        0.0,
    )
    .await;
    let broken = answer(&server, &with_tools("broken please", 100)).await;
    let choice = &broken["choices"][0];
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(
        choice["message"]["content"],
        "<tool_call>this is not json</tool_call>"
    );
    assert!(choice["message"].get("tool_calls").is_none());

    // 55 tokens end inside the arguments.
    let cut_body = with_tools("What is the weather in Paris?", 55);
    let cut = answer(&server, &cut_body).await;
    let choice = &cut["choices"][0];
    assert_eq!(choice["finish_reason"], "length", "{cut}");
    assert!(choice["message"].get("tool_calls").is_none(), "{cut}");
    let streamed = stream(&server, &cut_body).await;
    assert_eq!(streamed.finish.as_deref(), Some("length"));
    assert_eq!(streamed.calls.len(), 1, "the call had started");
    assert!(serde_json::from_str::<Value>(&streamed.calls[0].2).is_err());
}

#[tokio::test]
async fn a_reasoning_block_streams_as_reasoning_content_and_stays_out_of_the_content() {
    let server = scripted(
        &[("plan", "<think>check the map first</think>\n\nIt is sunny.")],
        0.0,
    )
    .await;
    let body = chat("plan a trip", 100);
    let whole = answer(&server, &body).await;
    let message = &whole["choices"][0]["message"];
    assert_eq!(message["reasoning_content"], "check the map first");
    assert_eq!(message["content"], "It is sunny.");
    let streamed = stream(&server, &body).await;
    assert_eq!(streamed.reasoning, "check the map first");
    assert_eq!(streamed.content, "It is sunny.");
    assert_eq!(streamed.finish.as_deref(), Some("stop"));
}

#[tokio::test]
async fn a_tool_round_trip_reuses_the_first_turn_as_a_cached_prefix() {
    let server = scripted(
        &[
            ("<tool_response>", "It is sunny in Paris."),
            ("weather", WEATHER_CALL),
        ],
        0.0,
    )
    .await;
    let first = answer(&server, &with_tools("What is the weather in Paris?", 200)).await;
    let call = first["choices"][0]["message"]["tool_calls"][0].clone();
    let first_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    let mut next = with_tools("What is the weather in Paris?", 200);
    next["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": null, "tool_calls": [call.clone()]}),
        json!({"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"}),
    ]);
    let second = answer(&server, &next).await;
    assert_eq!(
        second["choices"][0]["message"]["content"],
        "It is sunny in Paris."
    );
    assert_eq!(second["choices"][0]["finish_reason"], "stop");
    // The call is rendered back exactly as the model wrote it (no id in the prompt), so the
    // whole first turn, prompt and answer, is reused.
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    let first_output = first["usage"]["completion_tokens"].as_u64().unwrap();
    // All of the first turn but its last sampled token, which the cache never holds.
    assert!(
        cached + 1 >= first_prompt + first_output,
        "cached {cached} of a first turn of {first_prompt} + {first_output}"
    );
}

#[tokio::test]
async fn tool_choice_none_leaves_tags_as_text_and_bad_tool_input_is_a_400_naming_the_field() {
    let server = scripted(&[("weather", WEATHER_CALL)], 0.0).await;
    let mut none = with_tools("What is the weather in Paris?", 200);
    none["tool_choice"] = json!("none");
    let answer = answer(&server, &none).await;
    assert_eq!(answer["choices"][0]["message"]["content"], WEATHER_CALL);
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");

    let mut bad_name = with_tools("x", 5);
    bad_name["tools"][0]["function"]["name"] = json!("get weather");
    let mut bad_schema = with_tools("x", 5);
    bad_schema["tools"][0]["function"]["parameters"] =
        json!({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}});
    let mut unknown_choice = with_tools("x", 5);
    unknown_choice["tool_choice"] = json!({"type": "function", "function": {"name": "other"}});
    let mut bad_args = chat("x", 5);
    bad_args["messages"] = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]},
    ]);
    let mut orphan = chat("x", 5);
    orphan["messages"] = json!([
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "nobody", "content": "result"},
    ]);
    let mut bad_format = chat("x", 5);
    bad_format["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "x"}});
    let cases = [
        (bad_name, "tools[0].function.name"),
        (bad_schema, "tools[0].function.parameters"),
        (unknown_choice, "tool_choice.function.name"),
        (bad_args, "messages[1].tool_calls[0].function.arguments"),
        (orphan, "messages[1].tool_call_id"),
        (bad_format, "response_format.json_schema.schema"),
    ];
    for (body, param) in cases {
        let response = server.post(&body).send().await.unwrap();
        assert_eq!(response.status(), 400, "{param}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{error}");
    }
}

#[tokio::test]
async fn the_official_openai_client_runs_a_tool_round_trip_and_parses_every_event() {
    let server = scripted(
        &[
            ("<tool_response>", "It is sunny in Paris."),
            ("weather", WEATHER_CALL),
        ],
        200.0,
    )
    .await;
    let base = server.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(crate::support::test_python())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/python/openai_tools.py"
            ))
            .arg(base)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the openai client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["streamed_finish"], "tool_calls", "{v}");
    assert_eq!(v["streamed"][0]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(v["streamed"][0]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    assert!(v["chunks"].as_u64().unwrap() > 5);
    assert_eq!(v["whole"]["name"], "get_weather");
    assert_eq!(v["whole"]["arguments"], json!({"city": "Paris"}));
    assert_eq!(v["whole"]["finish"], "tool_calls");
    assert_eq!(v["final"]["content"], "It is sunny in Paris.");
    assert_eq!(v["final"]["finish"], "stop");
}
