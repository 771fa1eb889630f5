//! The watch against a stand-in upstream that answers the routes with what llama-server b11434
//! and vLLM 0.20.2 answered (`tests/fixtures/upstream/`), and the words the window shows.

use super::*;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;

fn fixture(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upstream")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// A stand-in upstream on loopback answering `routes` (path, fixture), each only with the
/// bearer key `secret`; its address and a sender that stops it.
async fn stand_in(
    routes: &[(&'static str, &'static str)],
) -> (String, tokio::sync::oneshot::Sender<()>) {
    let mut app = axum::Router::new();
    for &(path, file) in routes {
        let body = fixture(file);
        app = app.route(
            path,
            get(move |headers: HeaderMap| async move {
                let authorised = headers
                    .get("authorization")
                    .is_some_and(|v| v.as_bytes() == b"Bearer secret");
                if authorised {
                    (StatusCode::OK, body)
                } else {
                    (StatusCode::UNAUTHORIZED, String::new())
                }
            }),
        );
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (format!("http://{address}"), stop)
}

fn key_env() -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    vec![(UPSTREAM_API_KEY_ENV.into(), "secret".into())]
}

/// The next reading the watch sends, within ten seconds.
async fn next_reading(rx: &mut mpsc::UnboundedReceiver<ServiceCommand>) -> UpstreamView {
    let command = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a reading within 10 s")
        .expect("the watch is running");
    match command {
        ServiceCommand::Upstream(view) => view,
        _ => panic!("the watch sends readings only"),
    }
}

#[tokio::test]
async fn a_llama_server_s_slots_and_metrics_reach_the_actor_as_its_own_figures() {
    let (url, _stop) = stand_in(&[
        ("/props", "llama-server-b11434/props.json"),
        ("/slots", "llama-server-b11434/slots-busy.json"),
        ("/metrics", "llama-server-b11434/metrics-busy.txt"),
    ])
    .await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let target = UpstreamTarget {
        url: url.clone(),
        kind: "auto".into(),
    };
    spawn_watch(&target, &key_env(), tx.downgrade());
    let view = next_reading(&mut rx).await;
    assert_eq!(view.error, None);
    assert_eq!(view.kind, UpstreamKind::LlamaServer, "found from /props");
    let busy: Vec<bool> = view
        .slots
        .as_ref()
        .expect("its /slots")
        .iter()
        .map(|s| s.busy)
        .collect();
    assert_eq!(busy, [true, false]);
    assert!(view.metrics);
    assert_eq!(view.load.requests_running, Some(1));
    assert_eq!(
        upstream_words(&view),
        format!(
            "llama-server at {url}: 1 of 2 slots busy; 0 waiting, 1 running; its prefix cache \
             served 0 prompt tokens"
        )
    );
}

#[tokio::test]
async fn a_vllm_s_queue_and_kv_use_come_from_its_metrics_and_it_has_no_slots() {
    let (url, _stop) = stand_in(&[
        ("/version", "vllm-0.20.2/version.json"),
        ("/metrics", "vllm-0.20.2/metrics.txt"),
    ])
    .await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let target = UpstreamTarget {
        url,
        kind: "auto".into(),
    };
    spawn_watch(&target, &key_env(), tx.downgrade());
    let view = next_reading(&mut rx).await;
    assert_eq!(view.kind, UpstreamKind::Vllm);
    assert_eq!(view.slots, None);
    assert_eq!(view.load.requests_waiting, Some(5));
    assert_eq!(view.load.kv_used_ratio, Some(0.8734));
    assert!(
        upstream_words(&view).contains("KV 87 % used; "),
        "{}",
        upstream_words(&view)
    );
}

#[tokio::test]
async fn an_upstream_that_stops_answering_shows_why_and_no_stale_figures() {
    let (url, stop) = stand_in(&[
        ("/props", "llama-server-b11434/props.json"),
        ("/slots", "llama-server-b11434/slots-busy.json"),
    ])
    .await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let target = UpstreamTarget {
        url,
        kind: "llama-server".into(),
    };
    spawn_watch(&target, &key_env(), tx.downgrade());
    let view = next_reading(&mut rx).await;
    assert!(view.slots.is_some());
    assert!(!view.metrics, "started without --metrics");
    assert!(upstream_words(&view).ends_with("no /metrics (start it with --metrics)"));
    stop.send(()).unwrap();
    let gone = next_reading(&mut rx).await;
    let error = gone.error.as_deref().expect("why it has no figures");
    assert!(error.starts_with("the connection failed"), "{error}");
    assert_eq!(gone.slots, None, "no figures it did not read");
    assert!(upstream_words(&gone).contains(": not answering (the connection failed"));
}

#[tokio::test]
async fn without_the_key_the_routes_answer_nothing() {
    let (url, _stop) = stand_in(&[("/props", "llama-server-b11434/props.json")]).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let target = UpstreamTarget {
        url,
        kind: "auto".into(),
    };
    spawn_watch(&target, &[], tx.downgrade());
    // nothing differs from the unread view (its kind unknown): nothing is sent
    let waited = tokio::time::timeout(Duration::from_millis(2500), rx.recv()).await;
    assert!(waited.is_err(), "no reading without the key");
}

#[test]
fn a_password_in_the_address_is_never_shown() {
    assert_eq!(shown_url("http://me:secret@host:8080"), "http://host:8080/");
    assert_eq!(shown_url("http://host:8080"), "http://host:8080");
    let view = UpstreamView::unread(&UpstreamTarget {
        url: "https://u:p@example.com/v".into(),
        kind: "vllm".into(),
    });
    assert_eq!(upstream_words(&view), "vllm at https://example.com/v");
}
