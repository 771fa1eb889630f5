//! The router answers each front end's clients in their error shape: the guards' refusals by
//! the router that mounts the route, a front end's own errors by its route; and a front end's
//! body passes the one request function (no engine: these never reach it).

use super::{ApiState, router};
use crate::config::{ApiKeyEntry, AppSettings, Config, EngineKind};
use crate::control::Control;
use axum::body::Body;
use axum::http::{Method, Request};
use serde_json::Value;
use tower_service::Service;

const KEY: &str = "key-1";

/// A router over the simulated engine's control plane whose worker never starts (no such
/// binary): nothing here reaches it.
fn app() -> axum::Router {
    let config = Config {
        app: AppSettings {
            api_keys: vec![ApiKeyEntry::Plain(KEY.into())],
            engine: EngineKind::Sim,
            ..AppSettings::default()
        },
        scheduler: crate::service::SchedulerSettings::default(),
        source: None,
        sim_faults: Vec::new(),
        sim_script: None,
    };
    let nowhere = std::env::temp_dir().join("strata-desk-router-tests-no-such-file");
    let control = Control::start(config, Some(nowhere.join("config.toml")), nowhere).unwrap();
    router(ApiState::new(control))
}

/// The status and the body of `method path` with `body` (JSON unless `content_type` says
/// otherwise), with the API key when `keyed`.
async fn ask(
    method: Method,
    path: &str,
    keyed: bool,
    content_type: &str,
    body: &str,
) -> (u16, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type);
    if keyed {
        request = request.header("x-api-key", KEY);
    }
    let request = request.body(Body::from(body.to_owned())).unwrap();
    let response = app().call(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn anthropic_shaped(body: &Value) -> bool {
    body["type"] == "error" && body["error"]["type"].is_string() && body["error"]["code"].is_null()
}

fn openai_shaped(body: &Value) -> bool {
    body.get("type").is_none() && body["error"]["message"].is_string()
}

const JSON: &str = "application/json";

#[tokio::test]
async fn guards_refuse_in_the_shape_of_the_router_that_mounts_the_route() {
    type Case = (Method, &'static str, bool, &'static str, u16, bool);
    // (method, path, keyed, content type, status, Anthropic-shaped)
    let cases: [Case; 10] = [
        (Method::POST, "/v1/messages", false, JSON, 401, true),
        (
            Method::POST,
            "/v1/messages/count_tokens",
            false,
            JSON,
            401,
            true,
        ),
        (Method::POST, "/v1/messages", true, "text/plain", 415, true),
        (Method::GET, "/v1/messages", false, JSON, 401, true),
        // the 405 itself is the app's own answer
        (Method::GET, "/v1/messages", true, JSON, 405, false),
        (
            Method::POST,
            "/v1/chat/completions",
            false,
            JSON,
            401,
            false,
        ),
        (
            Method::POST,
            "/v1/responses",
            true,
            "text/plain",
            415,
            false,
        ),
        (Method::POST, "/infill", false, JSON, 401, false),
        (Method::GET, "/v1/nothing", false, JSON, 401, false),
        (Method::GET, "/v1/nothing", true, JSON, 404, false),
    ];
    for (method, path, keyed, content_type, status, anthropic) in cases {
        let (got, body) = ask(method.clone(), path, keyed, content_type, "{}").await;
        assert_eq!(got, status, "{method} {path}: {body}");
        let shaped = if anthropic {
            anthropic_shaped(&body)
        } else {
            openai_shaped(&body)
        };
        assert!(shaped, "{method} {path}: {body}");
    }
}

#[tokio::test]
async fn a_front_end_s_own_errors_come_in_its_shape_naming_its_fields() {
    let messages = r#"{"max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]}"#;
    let (status, body) = ask(Method::POST, "/v1/messages", true, JSON, messages).await;
    assert_eq!(status, 400, "{body}");
    assert!(anthropic_shaped(&body), "{body}");
    assert_eq!(
        body["error"]["message"],
        "`max_tokens` must be at least 1, got 0"
    );
    let chat = r#"{"messages": [], "temperature": "hot"}"#;
    let (status, body) = ask(Method::POST, "/v1/chat/completions", true, JSON, chat).await;
    assert_eq!(status, 400, "{body}");
    assert!(openai_shaped(&body), "{body}");
    assert_eq!(body["error"]["param"], "temperature");
    let infill = r#"{"input_prefix": "a", "n_predict": 0}"#;
    let (status, body) = ask(Method::POST, "/infill", true, JSON, infill).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "n_predict");
    let completion = r#"{"prompt": "", "max_tokens": 3}"#;
    let (status, body) = ask(Method::POST, "/v1/fim/completions", true, JSON, completion).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "prompt");
    let responses = r#"{"input": "hi", "temperature": 3}"#;
    let (status, body) = ask(Method::POST, "/v1/responses", true, JSON, responses).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "temperature");
}
