//! One validation step for every API: the same bad knob gets the same check on Chat
//! Completions, Responses and Messages, named as each API names the field and in its own error
//! shape; each API's own ranges (Anthropic's `temperature` 0-1) stay its own.

use crate::api_agents::post;
use crate::api_fake::{Setup, server};
use serde_json::{Value, json};

/// A request of `extra` on each API: (path, body).
fn on_each_api(extra: &Value) -> Vec<(&'static str, Value)> {
    let mut chat = json!({"model": "m", "max_tokens": 4,
                          "messages": [{"role": "user", "content": "hello"}]});
    let mut responses = json!({"model": "m", "max_output_tokens": 4, "input": "hello"});
    let mut messages = json!({"model": "m", "max_tokens": 4,
                              "messages": [{"role": "user", "content": "hello"}]});
    for (key, value) in extra.as_object().unwrap() {
        for body in [&mut chat, &mut responses, &mut messages] {
            body[key] = value.clone();
        }
    }
    vec![
        ("/v1/chat/completions", chat),
        ("/v1/responses", responses),
        ("/v1/messages", messages),
    ]
}

/// The status and, for a 400, the error's message and `param` (Anthropic's shape has no
/// `param`: its message names the field).
async fn answer(server: &crate::api_fake::Server, path: &str, body: &Value) -> (u16, String) {
    let response = post(server, path, body).await;
    let status = response.status().as_u16();
    let v: Value = response.json().await.unwrap();
    let said = if path == "/v1/messages" {
        assert!(status == 200 || v["type"] == "error", "{path}: {v}");
        v["error"]["message"].as_str().unwrap_or("").to_owned()
    } else {
        format!("{} [{}]", v["error"]["message"], v["error"]["param"])
    };
    (status, said)
}

#[tokio::test]
async fn a_bad_knob_gets_the_same_check_on_every_api_named_in_its_words() {
    let server = server(Setup::default()).await;
    // (what is sent, the name each API's error gives it: chat, responses, messages)
    let cases = [
        (json!({"top_p": 1.5}), ["top_p", "top_p", "top_p"]),
        (json!({"top_p": -0.1}), ["top_p", "top_p", "top_p"]),
        (
            json!({"max_tokens": 0, "max_output_tokens": 0}),
            ["max_tokens", "max_output_tokens", "max_tokens"],
        ),
        (
            json!({"priority": "high"}),
            ["priority", "priority", "priority"],
        ),
    ];
    for (extra, names) in cases {
        for ((path, body), name) in on_each_api(&extra).into_iter().zip(names) {
            let (status, said) = answer(&server, path, &body).await;
            assert_eq!(status, 400, "{path} {extra}: {said}");
            assert!(
                said.contains(&format!("`{name}`")),
                "{path} {extra}: {said}"
            );
        }
    }
}

#[tokio::test]
async fn each_api_keeps_its_own_temperature_range() {
    let server = server(Setup::default()).await;
    let statuses: Vec<u16> = {
        let mut out = Vec::new();
        for (path, body) in on_each_api(&json!({"temperature": 1.5})) {
            out.push(answer(&server, path, &body).await.0);
        }
        out
    };
    // OpenAI's APIs take 0-2, Anthropic's 0-1
    assert_eq!(statuses, [200, 200, 400]);
}

#[tokio::test]
async fn a_broken_tool_schema_is_named_as_each_api_names_a_tool_s_schema() {
    let server = server(Setup::default()).await;
    let remote = json!({"type": "object", "properties": {
        "page": {"$ref": "https://example.com/page.json"}}});
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"type": "function", "function": {"name": "fetch", "parameters": remote}}]}),
            "tools[0].function.parameters",
        ),
        (
            "/v1/responses",
            json!({"model": "m", "max_output_tokens": 4, "input": "hi",
                   "tools": [{"type": "function", "name": "fetch", "parameters": remote}]}),
            "tools[0].parameters",
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"name": "fetch", "input_schema": remote}]}),
            "tools[0].input_schema",
        ),
    ];
    for (path, body, name) in cases {
        let (status, said) = answer(&server, path, &body).await;
        assert_eq!(status, 400, "{path}: {said}");
        assert!(
            said.contains(name) && said.contains("https://example.com/page.json"),
            "{path}: {said}"
        );
    }
}

#[tokio::test]
async fn a_tool_s_error_names_its_place_in_the_body_when_others_were_left_out() {
    let server = server(Setup::default()).await;
    let remote = json!({"type": "object", "properties": {
        "page": {"$ref": "https://example.com/page.json"}}});
    let cases = [
        (
            "/v1/responses",
            json!({"model": "m", "max_output_tokens": 4, "input": "hi", "tools": [
                {"type": "web_search"},
                {"type": "namespace", "name": "mcp", "tools": [
                    {"type": "function", "name": "ok", "parameters": {"type": "object"}},
                    {"type": "function", "name": "fetch", "parameters": remote}]}]}),
            "tools[1].tools[1].parameters",
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"type": "web_search_20250305", "name": "web_search"},
                             {"name": "fetch", "input_schema": remote}]}),
            "tools[1].input_schema",
        ),
    ];
    for (path, body, name) in cases {
        let (status, said) = answer(&server, path, &body).await;
        assert_eq!(status, 400, "{path}: {said}");
        assert!(said.contains(name), "{path}: {said}");
    }
}
