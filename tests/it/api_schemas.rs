//! Every schema an agent sends (the simulated engine): an MCP server's tool (Pydantic's
//! `$defs` and `#/$defs/...` refs, captured from the official MCP Python SDK) is served on the
//! three APIs, alone and beside other tools; `tool_choice: "auto"` with no tools asks for
//! nothing; a ref to another document, and a Responses `tool_choice` that is neither a string
//! nor a function, are 400s naming what is wrong.

use crate::api_fake::{Server, Setup, chat, server};
use serde_json::{Value, json};

/// The MCP tool as its server lists it (`name`, `description`, `inputSchema`).
pub fn mcp_tool() -> Value {
    let text = include_str!("../fixtures/schemas/mcp-create-issue-tool.json");
    serde_json::from_str(text).unwrap()
}

async fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.base))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// The MCP tool as each API takes a function tool, beside one plain tool.
fn chat_tools() -> Value {
    let t = mcp_tool();
    json!([
        {"type": "function", "function": {"name": "read_file", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}}}}},
        {"type": "function", "function": {
            "name": t["name"], "description": t["description"], "parameters": t["inputSchema"]}},
    ])
}

fn messages_tools() -> Value {
    let t = mcp_tool();
    json!([{"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]}])
}

fn responses_tools() -> Value {
    let t = mcp_tool();
    json!([{"type": "function", "name": t["name"], "description": t["description"],
            "parameters": t["inputSchema"]}])
}

#[tokio::test]
async fn an_mcp_tool_with_defs_and_refs_is_served_on_every_api() {
    let server = server(Setup::default()).await;
    for choice in [json!("auto"), json!("required")] {
        let mut body = chat("file an issue", 4);
        body["tools"] = chat_tools();
        body["tool_choice"] = choice.clone();
        let (status, v) = post(&server, "/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "chat, tool_choice {choice}: {v}");
    }
    let body = json!({"model": "m", "max_tokens": 4, "tools": messages_tools(),
                      "messages": [{"role": "user", "content": "file an issue"}]});
    let (status, v) = post(&server, "/v1/messages", &body).await;
    assert_eq!(status, 200, "messages: {v}");
    let body = json!({"model": "m", "max_output_tokens": 4, "tools": responses_tools(),
                      "input": "file an issue"});
    let (status, v) = post(&server, "/v1/responses", &body).await;
    assert_eq!(status, 200, "responses: {v}");
}

#[tokio::test]
async fn tool_choice_auto_without_tools_asks_for_nothing_on_every_api() {
    let server = server(Setup::default()).await;
    let mut body = chat("hello", 4);
    body["tool_choice"] = json!("auto");
    let (status, v) = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "chat: {v}");
    let body = json!({"model": "m", "max_tokens": 4, "tool_choice": {"type": "auto"},
                      "messages": [{"role": "user", "content": "hello"}]});
    let (status, v) = post(&server, "/v1/messages", &body).await;
    assert_eq!(status, 200, "messages: {v}");
    let body = json!({"model": "m", "max_output_tokens": 4, "tool_choice": "auto",
                      "input": "hello"});
    let (status, v) = post(&server, "/v1/responses", &body).await;
    assert_eq!(status, 200, "responses: {v}");
}

#[tokio::test]
async fn a_remote_ref_and_a_tool_choice_of_another_type_are_400s_naming_them() {
    let server = server(Setup::default()).await;
    let mut body = chat("hello", 4);
    body["tools"] = json!([{"type": "function", "function": {"name": "fetch", "parameters": {
        "type": "object", "properties": {"page": {"$ref": "https://example.com/page.json"}}}}}]);
    let (status, v) = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(status, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"fetch\"") && message.contains("https://example.com/page.json"),
        "{v}"
    );
    assert_eq!(v["error"]["param"], "tools[0].function.parameters");

    let body = json!({"model": "m", "max_output_tokens": 4, "tool_choice": 1, "input": "hello"});
    let (status, v) = post(&server, "/v1/responses", &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "tool_choice", "{v}");
}

/// A captured agent request's tools, their descriptions left out (the fixtures' are placeholder
/// text of the real length, and Claude Code's 21 tools with them fill more than the test
/// model's 8K context; the schemas are whole).
fn fixture_tools(file: &str) -> Value {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, _)| k.as_str() != "description")
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    let path = format!(
        "{}/tests/fixtures/agents/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let capture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    strip(&capture["body"]["tools"])
}

/// The real test model with each agent's tool set and a forced call: the grammar built from
/// their schemas (the MCP tool's `$defs` and refs, Claude Code's 21 tools, Codex's) constrains
/// SmolLM2's sampling, and the call it writes is parsed into the API's tool call.
#[tokio::test]
async fn agents_tool_sets_are_served_with_their_grammars_on_the_real_model() {
    let _serial = crate::support::real_model();
    let server = server(Setup {
        real: Some(strata_desk::engine_worker::WorkerOptions::of(
            strata_desk::protocol::EngineSettings {
                ctx_tokens: 8192,
                ..strata_desk::protocol::EngineSettings::for_model(crate::support::model_path())
            },
        )),
        ..Setup::default()
    })
    .await;
    let started = std::time::Instant::now();
    // the MCP tool on Chat Completions
    let mut body = chat("File an issue titled 'crash on start'.", 160);
    body["tools"] = chat_tools();
    body["tool_choice"] = json!({"type": "function", "function": {"name": "create_issue"}});
    // greedy SmolLM2 repeats itself inside the labels array until the budget runs out; a
    // frequency penalty (as an agent would set) lets the call close
    body["frequency_penalty"] = json!(1.0);
    let (status, v) = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "create_issue", "{v}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["title"].is_string(), "{v}");
    eprintln!("mcp tool: {:.1} s", started.elapsed().as_secs_f64());

    // Claude Code's 21 tools on Messages, a call required
    let started = std::time::Instant::now();
    let tools = fixture_tools("claude-messages-21tools.json");
    let names: Vec<Value> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    let body = json!({"model": "m", "max_tokens": 400, "tools": tools, "temperature": 0,
        "tool_choice": {"type": "any"},
        "messages": [{"role": "user", "content": "List the files in this folder."}]});
    let (status, v) = post(&server, "/v1/messages", &body).await;
    assert_eq!(status, 200, "{v}");
    let used = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use: {v}"));
    assert!(names.contains(&used["name"]), "{used}");
    assert!(used["input"].is_object(), "{used}");
    eprintln!(
        "claude code's tools: {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Codex's tools on Responses, a call required
    let started = std::time::Instant::now();
    // greedy: with sampling at temperature 1 the call's command sometimes ran past the output
    // limit, and a cut call is an `incomplete` item (CI failed on it once)
    let body = json!({"model": "m", "max_output_tokens": 400, "temperature": 0,
        "tools": fixture_tools("codex-responses.json"), "tool_choice": "required",
        "input": "List the files in this folder."});
    let (status, v) = post(&server, "/v1/responses", &body).await;
    assert_eq!(status, 200, "{v}");
    let call = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["type"] == "function_call")
        .unwrap_or_else(|| panic!("no function_call: {v}"));
    assert_eq!(call["status"], "completed", "{v}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args.is_object(), "{call}");
    eprintln!("codex's tools: {:.1} s", started.elapsed().as_secs_f64());
}
