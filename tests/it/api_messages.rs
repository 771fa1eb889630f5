//! Anthropic Messages over the simulated engine: text, tool use and thinking follow the event
//! grammar streamed and not; limits, errors, stop sequences, count_tokens and the root probe.

use crate::api_agents::{events, grammar, post, scripted};
use serde_json::{Value, json};
use strata_desk::engine_worker::FakeOptions;

#[tokio::test]
async fn anthropic_text_tool_use_and_thinking_follow_the_event_grammar_streamed_and_not() {
    let server = scripted(FakeOptions::instant()).await;
    let body = |text: &str, stream: bool| {
        json!({
            "model": "claude-sonnet", "max_tokens": 32000, "stream": stream,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.0; cch=1;"}, {"type": "text", "text": "Be brief."}],
            "messages": [{"role": "user", "content": text}],
            "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                      {"type": "web_search_20250305", "name": "web_search"}],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "metadata": {"user_id": "u"},
        })
    };
    let stream = |text: &'static str| {
        let body = body(text, true);
        let server = &server;
        async move {
            events(
                &post(server, "/v1/messages", &body)
                    .await
                    .text()
                    .await
                    .unwrap(),
            )
        }
    };
    let evs = stream("hello").await;
    assert_eq!(
        grammar(&evs),
        [
            "message_start",
            "content_block_start",
            "content_block_delta+",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(evs[1].1["content_block"]["type"], "text");
    let delta = &evs[evs.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 21);

    let evs = stream("weather in Paris?").await;
    assert_eq!(evs[1].1["content_block"]["type"], "tool_use");
    assert_eq!(evs[1].1["content_block"]["name"], "get_weather");
    assert!(
        evs[1].1["content_block"]["id"]
            .as_str()
            .unwrap()
            .starts_with("toolu_")
    );
    let json: String = evs
        .iter()
        .filter(|(n, d)| n == "content_block_delta" && d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json).unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(evs[evs.len() - 2].1["delta"]["stop_reason"], "tool_use");

    let evs = stream("plan a trip").await;
    assert_eq!(
        grammar(&evs),
        [
            "message_start",
            "content_block_start",
            "content_block_delta+",
            "content_block_stop",
            "content_block_start",
            "content_block_delta+",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    assert_eq!(evs[1].1["content_block"]["type"], "thinking");
    assert_eq!(evs[2].1["delta"]["type"], "thinking_delta");
    let starts: Vec<(u64, &str)> = evs
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| {
            (
                d["index"].as_u64().unwrap(),
                d["content_block"]["type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(starts, [(0, "thinking"), (1, "text")]);
    assert!(
        evs[0].1["message"]["usage"]["input_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    let whole: Value = post(&server, "/v1/messages", &body("weather in Paris?", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole["type"], "message");
    assert_eq!(whole["stop_reason"], "tool_use");
    assert_eq!(whole["content"][0]["type"], "tool_use");
    assert_eq!(whole["content"][0]["input"], json!({"city": "Paris"}));
    let whole: Value = post(&server, "/v1/messages", &body("plan a trip", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole["content"][0]["thinking"], "look at a map");
    assert_eq!(whole["content"][1]["text"], "Go north.");
}

#[tokio::test]
async fn anthropic_limits_errors_stop_sequences_count_tokens_and_the_root_probe() {
    let server = scripted(FakeOptions {
        kv_cells: 2048,
        ..FakeOptions::instant()
    })
    .await;
    let client = reqwest::Client::new();
    let head = client
        .head(format!("{}/", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);

    // 32000 asked, the context has 2048: clamped, and the answer ends at the limit.
    let long = json!({"model": "m", "max_tokens": 32000, "messages": [{"role": "user", "content": "go on forever"}]});
    let whole: Value = post(&server, "/v1/messages", &long)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole["stop_reason"], "max_tokens", "{whole}");

    let too_long = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x".repeat(3000)}]});
    let response = post(&server, "/v1/messages", &too_long).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("prompt is too long: ") && message.ends_with(" maximum"),
        "{message}"
    );

    let no_limit = json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]});
    let response = post(&server, "/v1/messages", &no_limit).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens")
    );

    let stop = json!({"model": "m", "max_tokens": 50, "stop_sequences": ["friend"], "messages": [{"role": "user", "content": "hello"}]});
    let whole: Value = post(&server, "/v1/messages", &stop)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&whole["stop_reason"], &whole["stop_sequence"]),
        (&json!("stop_sequence"), &json!("friend"))
    );
    assert_eq!(whole["content"][0]["text"], "Hello there, ");

    let count_body = json!({"model": "m", "system": "Be brief.", "messages": [{"role": "user", "content": "hello"}]});
    let counted: Value = post(&server, "/v1/messages/count_tokens", &count_body)
        .await
        .json()
        .await
        .unwrap();
    let mut asked = count_body.clone();
    asked["max_tokens"] = json!(5);
    let answered: Value = post(&server, "/v1/messages", &asked)
        .await
        .json()
        .await
        .unwrap();
    let prompt = answered["usage"]["input_tokens"].as_u64().unwrap()
        + answered["usage"]["cache_read_input_tokens"]
            .as_u64()
            .unwrap();
    assert_eq!(counted["input_tokens"].as_u64().unwrap(), prompt);
}
