//! Who may call the server and what each caller may do (the simulated engine): API keys when
//! configured, their roles and priority caps, foreign hosts refused, web pages refused,
//! cross-origin reads only for configured origins.

use crate::api_fake::{Setup, chat, error_of, server};
use crate::api_observe::running_id;
use serde_json::{Value, json};
use strata_desk::config::{ApiKey, ApiKeyEntry, AppSettings};
use strata_desk::engine_worker::FakeOptions;

#[tokio::test]
async fn api_keys_are_required_when_configured_and_foreign_hosts_are_refused() {
    let server = server(Setup {
        app: AppSettings {
            api_keys: vec![strata_desk::config::ApiKeyEntry::Plain(
                "secret-key-1".into(),
            )],
            ..AppSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let (status, body) = error_of(server.post(&chat("hi", 2)).send().await.unwrap()).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["type"], "authentication_error");
    let wrong = server
        .post(&chat("hi", 2))
        .bearer_auth("secret-key-2")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let bearer = server
        .post(&chat("hi", 2))
        .bearer_auth("secret-key-1")
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 200);
    let header = server
        .post(&chat("hi", 2))
        .header("x-api-key", "secret-key-1")
        .send()
        .await
        .unwrap();
    assert_eq!(header.status(), 200);

    // DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends its own Host.
    let rebound = server
        .post(&chat("hi", 2))
        .bearer_auth("secret-key-1")
        .header("host", "evil.example:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
    // a name with non-ASCII bytes is no allowed name either (it once passed as no Host)
    let non_ascii = server
        .post(&chat("hi", 2))
        .bearer_auth("secret-key-1")
        .header(
            "host",
            reqwest::header::HeaderValue::from_bytes(b"\xc3\xa9vil.example").unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(non_ascii.status(), 403);
    // the scheme is case-insensitive
    let lowercase = server
        .post(&chat("hi", 2))
        .header("authorization", "bearer secret-key-1")
        .send()
        .await
        .unwrap();
    assert_eq!(lowercase.status(), 200);
    // `-1` names no request (it once read as request 1)
    let minus_one = reqwest::Client::new()
        .delete(format!("{}/v1/requests/-1", server.base))
        .bearer_auth("secret-key-1")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(minus_one.status(), 400);
    // one JSON value and nothing after it
    let trailing = server
        .post_raw(format!("{}x", chat("hi", 2)))
        .bearer_auth("secret-key-1")
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(trailing).await;
    assert_eq!(status, 400, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("trailing"),
        "{error}"
    );
}

#[tokio::test]
async fn cross_origin_reads_are_allowed_only_for_configured_origins() {
    let plain = server(Setup::default()).await;
    let response = reqwest::Client::new()
        .get(format!("{}/v1/models", plain.base))
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert!(
        response
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );

    let configured = server(Setup {
        app: AppSettings {
            cors_origins: vec!["https://app.example".into()],
            ..AppSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let allowed = reqwest::Client::new()
        .get(format!("{}/v1/models", configured.base))
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let other = reqwest::Client::new()
        .get(format!("{}/v1/models", configured.base))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn a_web_page_cannot_drive_generation_a_foreign_origin_is_403_and_a_body_must_be_json() {
    // The attack: a page the user visits posts `text/plain` (no CORS preflight) with a
    // high priority. Agents send JSON and no Origin (tests/fixtures/agents: all six).
    let server = server(Setup::default()).await;
    let client = reqwest::Client::new();
    let url = |path: &str| format!("{}{path}", server.base);
    let body = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                      "priority": 100})
    .to_string();
    let page = client
        .post(url("/v1/chat/completions"))
        .header("origin", "https://evil.example")
        .header("content-type", "text/plain")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(page).await;
    assert_eq!(status, 403);
    assert_eq!(error["error"]["code"], "origin_not_allowed");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("https://evil.example"),
        "{error}"
    );
    // The same body without an Origin but as text/plain: 415, on each generation route.
    for path in [
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
    ] {
        let plain = client
            .post(url(path))
            .header("content-type", "text/plain")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let (status, error) = error_of(plain).await;
        assert_eq!(status, 415, "{path}: {error}");
        let kind = if path.starts_with("/v1/messages") {
            &error["error"]["type"]
        } else {
            &error["error"]["code"]
        };
        assert!(
            kind == "unsupported_media_type" || kind == "invalid_request_error",
            "{path}: {error}"
        );
    }
    // A read with a foreign Origin is refused too; without one it answers.
    for path in ["/v1/models", "/v1/scheduler", "/metrics", "/health"] {
        let read = client
            .get(url(path))
            .header("origin", "https://evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), 403, "{path}");
        assert_eq!(
            client.get(url(path)).send().await.unwrap().status(),
            200,
            "{path}"
        );
    }
    // Nothing reached the scheduler.
    let snapshot = server.service.snapshot();
    let c = &snapshot.counters;
    assert_eq!((c.finished, c.failed, c.refusals), (0, 0, 0), "{c:?}");
    let cache = &snapshot.conversation_cache;
    assert_eq!(
        cache.hits + cache.misses,
        0,
        "nothing was admitted: {cache:?}"
    );
    // What agents send still works.
    let agent = server.post(&chat("hello", 2)).send().await.unwrap();
    assert_eq!(agent.status(), 200);
}

#[tokio::test]
async fn a_configured_cors_origin_may_post_json_from_its_page() {
    let server = server(Setup {
        app: AppSettings {
            cors_origins: vec!["https://my.tool.example".into()],
            ..AppSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.base))
        .header("origin", "https://my.tool.example")
        .json(&chat("hello", 2))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "https://my.tool.example"
    );
}

#[tokio::test]
async fn a_key_without_admin_acts_only_on_its_own_requests_and_its_max_priority_caps_what_it_asks()
{
    let agent = ApiKeyEntry::WithPriority(ApiKey {
        key: "agent-key".into(),
        name: Some("codex".into()),
        priority: None,
        max_priority: Some(5),
        admin: Some(false),
    });
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..FakeOptions::instant()
        },
        app: AppSettings {
            // an entry written before `admin` existed: an admin key
            api_keys: vec![ApiKeyEntry::with_priority("boss-key", None), agent],
            ..AppSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let client = reqwest::Client::new();
    let send = |key: &'static str, body: Value| {
        client
            .post(format!("{}/v1/chat/completions", server.base))
            .bearer_auth(key)
            .json(&body)
            .send()
    };
    let control = |key: &'static str, method: reqwest::Method, path: String, body: Value| {
        client
            .request(method, format!("{}{path}", server.base))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    // the boss's long request runs; the agent's waits, asking priority 100
    let boss = tokio::spawn(send("boss-key", chat("boss", 60)));
    server
        .until("the boss runs", |s| running_id(s).is_some())
        .await;
    let boss_id = running_id(&server.service.snapshot()).unwrap();
    let mut asked = chat("agent", 3);
    asked["priority"] = json!(100);
    let agent_request = tokio::spawn(send("agent-key", asked));
    server
        .until("the agent waits", |s| s.waiting.len() == 1)
        .await;
    let waiting = server.service.snapshot().waiting[0].clone();
    assert_eq!(waiting.priority, 5, "max_priority caps the body's 100");
    let agent_id = waiting.request_id.0;

    // the agent key may not touch the boss's request, nor the engine or settings
    let (status, body) = {
        let r = control(
            "agent-key",
            reqwest::Method::DELETE,
            format!("/v1/requests/{boss_id}"),
            json!({}),
        )
        .await
        .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    };
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("own requests")
    );
    for (method, path, body) in [
        (
            reqwest::Method::POST,
            "/v1/engine/restart".to_owned(),
            json!({}),
        ),
        (
            reqwest::Method::PATCH,
            "/v1/settings".to_owned(),
            json!({"solo_priority": true}),
        ),
    ] {
        let r = control("agent-key", method, path.clone(), body)
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path}");
    }
    // ... but re-prioritises and cancels its own, within its cap
    let r = control(
        "agent-key",
        reqwest::Method::PATCH,
        format!("/v1/requests/{agent_id}"),
        json!({"priority": 100}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["priority"], 5, "capped");
    let r = control(
        "agent-key",
        reqwest::Method::PATCH,
        format!("/v1/requests/{agent_id}"),
        json!({"priority": 2}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["priority"], 2);
    let r = control(
        "agent-key",
        reqwest::Method::DELETE,
        format!("/v1/requests/{agent_id}"),
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    // the admin key may act on anyone's
    let r = control(
        "boss-key",
        reqwest::Method::DELETE,
        format!("/v1/requests/{boss_id}"),
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let _ = boss.await.unwrap();
    let _ = agent_request.await.unwrap();
    assert_eq!(
        server.service.snapshot().engine.generation,
        1,
        "nothing restarted"
    );
}

/// An unknown path is a 404 and a wrong method a 405, in the OpenAI error shape, whatever the
/// request's Content-Type or Origin (they once got 415 and 403: the guards ran before the
/// routing did).
#[tokio::test]
async fn an_unknown_path_is_404_and_a_wrong_method_is_405_whatever_the_headers() {
    let server = server(Setup::default()).await;
    let client = reqwest::Client::new();
    let url = |path: &str| format!("{}{path}", server.base);
    let cases = [
        (reqwest::Method::GET, "/v1/nothing-here", None, None, 404),
        (
            reqwest::Method::POST,
            "/v1/nothing-here",
            Some("text/plain"),
            None,
            404,
        ),
        (
            reqwest::Method::POST,
            "/nope",
            None,
            Some("https://evil.example"),
            404,
        ),
        (
            reqwest::Method::GET,
            "/v1/chat/completions",
            None,
            None,
            405,
        ),
        (
            reqwest::Method::PUT,
            "/v1/models",
            Some("text/plain"),
            None,
            405,
        ),
        (
            reqwest::Method::DELETE,
            "/v1/models",
            None,
            Some("https://evil.example"),
            405,
        ),
        (reqwest::Method::PUT, "/v1/settings", None, None, 405),
    ];
    for (method, path, content_type, origin, want) in cases {
        let mut request = client.request(method.clone(), url(path));
        if let Some(t) = content_type {
            request = request.header("content-type", t).body("x");
        }
        if let Some(o) = origin {
            request = request.header("origin", o);
        }
        let (status, body) = error_of(request.send().await.unwrap()).await;
        assert_eq!(status, want, "{method} {path}: {body}");
        let code = if want == 404 {
            "not_found"
        } else {
            "method_not_allowed"
        };
        assert_eq!(body["error"]["code"], code, "{method} {path}: {body}");
    }
}
