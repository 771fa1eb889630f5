//! Who may call the server: API keys when configured, foreign hosts refused, cross-origin
//! reads only for configured origins (the simulated engine).

use crate::api_fake::{Setup, chat, error_of, server};
use strata_desk::config::AppSettings;

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
