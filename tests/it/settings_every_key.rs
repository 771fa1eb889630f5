//! Every config key changes while the app runs, through `PATCH /v1/settings` (the one path for
//! every kind), and takes effect as its schema entry says: a live switch at once, a new
//! engine's key with a new engine (the HTTP server stays), a key of the app's start saved to
//! the config file and named in `applies_at_restart`. Each key is changed and then put back,
//! on the simulated engine.

use crate::support::{until, worker_exe};
use serde_json::{Value, json};
use strata_desk::config::{Config, Overrides};
use strata_desk::service::EngineStatus;

/// A valid value other than the default for each key. A key without one fails the test: a new
/// setting is added here too, so no key goes unchecked.
fn another_value(key: &str, default: &Value) -> Value {
    match key {
        "model" => json!("/models/other.gguf"),
        "engine" => json!("llama"),
        "upstream_url" => json!("http://127.0.0.1:8081"),
        "upstream_api_key" => json!("an-upstream-key"),
        "upstream_kind" => json!("llama-server"),
        "host" => json!("127.0.0.2"),
        "kv_sequences" => json!(24),
        "ctx" => json!(4096),
        "gpu_layers" => json!(12),
        "gpu_memory_limit" => json!(6144),
        "device" => json!("cpu"),
        "flash_attn" => json!("off"),
        "kv_type" => json!("q8_0"),
        "cpu_code" => json!("x64"),
        "api_keys" => json!(["a-new-key-123"]),
        "model_aliases" => json!({"gpt-4o": "local"}),
        "fim_priority" => json!(7),
        "tool_call_format" => json!("hermes"),
        "allowed_hosts" => json!(["desk.example"]),
        "cors_origins" => json!(["http://localhost:3000"]),
        "renderer" => json!("wgpu"),
        "recent_models" => json!(["/models/a.gguf"]),
        "chunk_tokens" => json!(256),
        "priority_range" => json!({"min": -50, "max": 50}),
        "priority_order" => json!("lower_first"),
        "give_way" => json!("whole"),
        "max_tokens_over_context" => json!("reject"),
        "max_output_tokens_default" => json!(512),
        "max_output_tokens_cap" => json!(1024),
        _ => match default {
            Value::Bool(b) => json!(!b),
            Value::Number(n) if n.is_u64() => json!(n.as_u64().unwrap() + 1),
            Value::Number(n) => json!(n.as_f64().unwrap() * 2.0),
            other => panic!("`{key}` (default {other}) has no other value in this test"),
        },
    }
}

/// `upstream_url` without `engine: upstream` (here the simulated engine's): a 400 that says so.
async fn upstream_url_alone_is_refused(client: &reqwest::Client, base: &str, value: &Value) {
    let answer = client
        .patch(format!("{base}/v1/settings"))
        .json(&json!({ "upstream_url": value }))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    let error: Value = answer.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`engine` is `sim`"), "{error}");
}

async fn settings(client: &reqwest::Client, base: &str) -> Value {
    let answer = client
        .get(format!("{base}/v1/settings"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.json().await.unwrap()
}

async fn patch(client: &reqwest::Client, base: &str, key: &str, value: &Value) -> Value {
    let answer = client
        .patch(format!("{base}/v1/settings"))
        .json(&json!({ key: value }))
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let body: Value = answer.json().await.unwrap();
    assert_eq!(status, 200, "`{key}` = {value}: {body}");
    body
}

/// The app's server on the simulated engine, with its config file in `dir`; once ready.
async fn serve_sim(
    dir: &tempfile::TempDir,
) -> (strata_desk::server::Running, String, std::path::PathBuf) {
    let path = dir.path().join("config.json");
    std::fs::write(&path, json!({"engine": "sim"}).to_string()).unwrap();
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let running =
        strata_desk::server::start_on(listener, &config, Some(path.clone()), worker_exe()).unwrap();
    let control = running.control.clone();
    until("ready", || {
        control.service().snapshot().engine.status == EngineStatus::Ready
    })
    .await;
    (running, base, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_changes_while_the_app_runs_and_takes_effect_as_its_schema_says() {
    let dir = tempfile::tempdir().unwrap();
    let (running, base, path) = serve_sim(&dir).await;
    let control = running.control.clone();
    let ready = || control.service().snapshot().engine.status == EngineStatus::Ready;
    let client = reqwest::Client::new();

    let described = settings(&client, &base).await;
    let keys = described["keys"].as_array().unwrap().clone();
    assert!(keys.len() > 50, "{described}");
    let mut applies_seen = std::collections::BTreeSet::new();
    for entry in &keys {
        let key = entry["name"].as_str().unwrap();
        let applies = entry["applies"].as_str().unwrap();
        applies_seen.insert(applies.to_owned());
        let before = described["settings"][key].clone();
        let value = another_value(key, &entry["default"]);
        assert_ne!(
            before, value,
            "`{key}`: the test's value is the one in force"
        );
        let generation = control.unit().generation;
        if key == "upstream_url" {
            upstream_url_alone_is_refused(&client, &base, &value).await;
            continue;
        }
        let answer = patch(&client, &base, key, &value).await;
        let now = settings(&client, &base).await["settings"][key].clone();
        let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        match applies {
            "live" => {
                assert_eq!(now, value, "`{key}` is not in force: {answer}");
                assert_eq!(control.unit().generation, generation, "`{key}`");
            }
            "new_engine" => {
                assert_eq!(answer["applied"], json!([key]), "`{key}`: {answer}");
                assert_eq!(now, value, "`{key}` is not in force: {answer}");
                assert_eq!(
                    control.unit().generation,
                    generation + 1,
                    "`{key}`: no new engine"
                );
                until("the new engine is ready", ready).await;
            }
            "restart" => {
                assert_eq!(
                    answer["applies_at_restart"],
                    json!([key]),
                    "`{key}`: {answer}"
                );
                if key != "api_keys" {
                    // the keys' names are shown, never the keys
                    assert_eq!(now, before, "`{key}` took effect before a restart");
                }
                assert_eq!(control.unit().generation, generation, "`{key}`");
            }
            other => panic!("`{key}` applies {other:?}"),
        }
        assert_eq!(file[key], value, "`{key}` was not saved: {file}");
        assert_eq!(answer["saved"], true, "`{key}`: {answer}");
        // the value in force goes back (a restart key: only the file)
        if key != "api_keys" {
            patch(&client, &base, key, &before).await;
            if applies == "new_engine" {
                until("the engine is back", ready).await;
            }
        }
    }
    assert_eq!(
        applies_seen.into_iter().collect::<Vec<_>>(),
        ["live", "new_engine", "restart"]
    );

    // a new engine's keys reach the engine itself: its slots and its pool
    patch(&client, &base, "parallel", &json!(2)).await;
    until("ready", ready).await;
    let snapshot = control.service().snapshot();
    assert_eq!(snapshot.slots.len(), 2);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_patch_changes_nothing_and_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let (running, base, path) = serve_sim(&dir).await;
    let control = running.control.clone();
    let client = reqwest::Client::new();
    for (body, param, needle) in [
        (
            json!({"no_such_key": 1}),
            "no_such_key",
            "unknown key `no_such_key`",
        ),
        (json!({"parallel": 0}), "parallel", "between 1 and 64"),
        // the whole body is checked first: the good key is not applied either
        (json!({"give_way": "whole", "port": 0}), "port", "`port`"),
        (json!({"ctx": "big"}), "", "`ctx`"),
    ] {
        let answer = client
            .patch(format!("{base}/v1/settings"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400, "{body}");
        let error: Value = answer.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
        if !param.is_empty() {
            assert_eq!(error["error"]["param"], param, "{body}: {error}");
        }
    }
    assert_eq!(control.unit().generation, 1);
    assert_eq!(
        settings(&client, &base).await["settings"]["give_way"],
        "left"
    );
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(file, json!({"engine": "sim"}));
    running.stop().await;
}
