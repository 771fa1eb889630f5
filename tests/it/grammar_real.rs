//! Grammars on the real engine and the test model: a grammar past its budget fails its own
//! request with an error that says so, and the request decoding beside it, the engine and the
//! next request are untouched.

use crate::api_fake::{Setup, chat, server};
use serde_json::{Value, json};
use strata_desk::engine_worker::WorkerOptions;

/// A call of `pick` required: its grammar refuses the model's first draw, so the masking runs
/// (and with no budget at all, stops at once).
fn forced_call(text: &str) -> Value {
    let mut body = chat(text, 24);
    body["tools"] = json!([{"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}}]);
    body["tool_choice"] = json!("required");
    body
}

#[tokio::test]
async fn a_grammar_past_its_budget_fails_its_request_alone() {
    let _serial = crate::support::real_model();
    let server = server(Setup {
        real: Some(WorkerOptions {
            ctx_tokens: 2048,
            slots: 2,
            grammar_ms_per_token: 0,
            ..WorkerOptions::for_model(crate::support::model_path())
        }),
        ..Setup::default()
    })
    .await;
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
