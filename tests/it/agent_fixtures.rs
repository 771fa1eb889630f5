//! Real agents' captured requests (`tests/fixtures/agents/`, from `scripts/agents-check.sh`),
//! replayed against the simulated engine: every one gets a 200 and a complete event stream,
//! so a change that breaks a real agent's request fails here.

use crate::api_fake::{Setup, server};
use serde_json::Value;
use std::path::PathBuf;
use strata_desk::engine_worker::FakeOptions;
use strata_desk::service::SchedulerSettings;

fn fixtures() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, serde_json::from_str(&text).unwrap())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The last event a complete stream of this route ends with.
fn complete(path: &str, text: &str) -> Result<(), String> {
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    let last = data.last().copied().unwrap_or("");
    if data
        .iter()
        .any(|d| d.contains("\"error\"") && !d.contains("\"error\":null"))
    {
        return Err(format!("an error event: {text}"));
    }
    let ok = if path.starts_with("/v1/chat/completions")
        || path.starts_with("/v1/completions")
        || path.starts_with("/v1/fim/completions")
    {
        last == "[DONE]" && data.iter().any(|d| d.contains("\"finish_reason\":\""))
    } else if path.starts_with("/v1/responses") {
        last.contains("\"response.completed\"") || last.contains("\"response.incomplete\"")
    } else {
        last.contains("\"message_stop\"")
    };
    if ok {
        Ok(())
    } else {
        Err(format!("the stream ended with {last:?}"))
    }
}

#[tokio::test]
async fn every_captured_agent_request_gets_a_200_and_a_complete_stream() {
    let all = fixtures();
    assert!(all.len() >= 4, "fixtures missing: {all:?}");
    let agents: Vec<&str> = all
        .iter()
        .filter_map(|(_, f)| f["agent"].as_str())
        .collect();
    for agent in ["claude", "codex", "aider", "opencode"] {
        assert!(
            agents.iter().any(|a| a.starts_with(agent)),
            "no {agent} fixture"
        );
    }
    // The simulated vocabulary is bytes: an agent's prompt is tens of thousands of tokens.
    let server = server(Setup {
        fake: FakeOptions {
            kv_cells: 262_144,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            max_output_tokens_cap: Some(16),
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let client = reqwest::Client::new();
    let mut failures = Vec::new();
    for (name, fixture) in &all {
        let path = fixture["path"].as_str().unwrap();
        let mut request = client
            .post(format!("{}{path}", server.base))
            .json(&fixture["body"]);
        for (key, value) in fixture["headers"].as_object().unwrap() {
            if let Some(value) = value.as_str()
                && key != "content-length"
                && key != "host"
            {
                request = request.header(key.as_str(), value);
            }
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        if status != 200 {
            failures.push(format!("{name}: {status}: {text}"));
            continue;
        }
        if fixture["body"]["stream"] == Value::Bool(true)
            && let Err(e) = complete(path, &text)
        {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
