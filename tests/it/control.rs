//! The control plane over HTTP: applying a new engine never takes the HTTP server down (a
//! client polling `/health` never sees a refused connection, the event stream follows the new
//! engine), and `GET /v1/settings` shows every key in force with its default and what it
//! takes.

use crate::support::{until, worker_exe};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use strata_desk::config::{Config, Overrides};
use strata_desk::control::RestartSettings;
use strata_desk::service::{EngineStatus, Observed};

/// The app's server for `config` (read from `path`) on a free port, once its engine is ready.
async fn serve_ready(
    config: &Config,
    path: &std::path::Path,
) -> (strata_desk::server::Running, std::net::SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let running =
        strata_desk::server::start_on(listener, config, Some(path.to_path_buf()), worker_exe())
            .unwrap();
    let control = running.control.clone();
    until("ready", || {
        control.service().snapshot().engine.status == EngineStatus::Ready
    })
    .await;
    (running, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applying_a_new_model_keeps_the_listener_and_the_clients_that_only_watch() {
    let _serial = crate::support::real_model();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    // the real engine; the new model is the test model under another file name
    let model = crate::support::model_path();
    let other = dir.path().join("other-model.gguf");
    std::os::unix::fs::symlink(&model, &other).unwrap();
    let file = serde_json::json!({"model": model, "ctx": 2048, "threads": 1});
    std::fs::write(&path, file.to_string()).unwrap();
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    let (running, addr) = serve_ready(&config, &path).await;
    let control = running.control.clone();

    // a watcher on the event stream, and a poller of /health
    let events = reqwest::get(format!("http://{addr}/v1/scheduler/events"))
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let mut events = events.bytes_stream();
    let (refused, answered) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = tokio::spawn({
        let (refused, answered, stop) = (refused.clone(), answered.clone(), stop.clone());
        async move {
            let client = reqwest::Client::new();
            while !stop.load(Ordering::SeqCst) {
                match client.get(format!("http://{addr}/health")).send().await {
                    Ok(_) => answered.fetch_add(1, Ordering::SeqCst),
                    Err(_) => refused.fetch_add(1, Ordering::SeqCst),
                };
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });

    let mut settings = RestartSettings::of(&control.config());
    settings.engine.model = Some(other.clone());
    settings.engine.ctx_tokens = 4096;
    let applied = control.apply(&settings.patch()).await.unwrap();
    assert!(applied.not_saved.is_none(), "{:?}", applied.not_saved);
    until("the new engine is ready", || {
        control.service().snapshot().engine.status == EngineStatus::Ready
    })
    .await;
    assert_eq!(control.unit().generation, 2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::SeqCst);
    poller.await.unwrap();
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "a /health poll found the port closed"
    );
    assert!(answered.load(Ordering::SeqCst) > 10);

    // the event stream is still open, and now shows the new engine's context
    let followed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = events.next().await {
            if String::from_utf8_lossy(&chunk.unwrap()).contains("\"context_tokens\":4096") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        followed,
        Ok(true),
        "the event stream did not follow the new engine"
    );

    // and the same address serves a completion from the new engine
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(
            &serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(saved["ctx"], 4096);
    assert_eq!(saved["model"], other.display().to_string());
    running.stop().await;
}

#[tokio::test]
async fn get_settings_shows_every_key_in_force_with_its_default_and_what_it_takes() {
    let server = crate::api_fake::server(crate::api_fake::Setup {
        app: strata_desk::config::AppSettings {
            api_keys: vec![strata_desk::config::ApiKeyEntry::Plain(
                "a-secret-key-1".into(),
            )],
            ..strata_desk::config::AppSettings::default()
        },
        ..crate::api_fake::Setup::default()
    })
    .await;
    let v: Value = reqwest::Client::new()
        .get(format!("{}/v1/settings", server.base))
        .bearer_auth("a-secret-key-1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let settings = &v["settings"];
    assert_eq!(settings["solo_priority"], false, "{v}");
    assert_eq!(settings["give_way"], "left", "{v}");
    assert_eq!(settings["queue_max"], 1024, "{v}");
    // the keys' names only, never the keys
    assert_eq!(settings["api_keys"], serde_json::json!(["key 1"]));
    assert!(!v.to_string().contains("a-secret-key-1"), "{v}");
    let keys = v["keys"].as_array().unwrap();
    let defaults = strata_desk::config::schema::defaults();
    assert_eq!(keys.len(), defaults.len());
    let solo = keys.iter().find(|k| k["name"] == "solo_priority").unwrap();
    assert_eq!(solo["applies"], "live");
    assert_eq!(solo["flag"], "--solo-priority");
    assert_eq!(solo["default"], false);
    let ctx = keys.iter().find(|k| k["name"] == "ctx").unwrap();
    assert_eq!(ctx["applies"], "new_engine");
    assert_eq!(ctx["part"], "app");
    // a live change shows at once
    let changed = reqwest::Client::new()
        .patch(format!("{}/v1/settings", server.base))
        .bearer_auth("a-secret-key-1")
        .json(&serde_json::json!({"give_way": "whole"}))
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), 200);
    let v: Value = reqwest::Client::new()
        .get(format!("{}/v1/settings", server.base))
        .bearer_auth("a-secret-key-1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["settings"]["give_way"], "whole", "{v}");
}

/// The first event of the service's stream that `pick` takes, waited for (a control-plane
/// event reaches the service as a command).
async fn logged<T>(
    control: &strata_desk::control::Control,
    pick: impl Fn(&Observed) -> Option<T>,
) -> T {
    let started = std::time::Instant::now();
    loop {
        let log = control.service().snapshot().log;
        if let Some(found) = log.iter().find_map(|e| pick(&e.event)) {
            return found;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no such event");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_and_a_rollback_are_events_of_the_stream_that_serves_after_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, r#"{"engine": "sim", "restart_attempts_max": 1}"#).unwrap();
    // the simulated engine reads its script at every start: without it, it cannot start
    let script = dir.path().join("script.json");
    std::fs::write(&script, r#"{"rules": []}"#).unwrap();
    let mut config = Config::load(Some(&path), &Overrides::default()).unwrap();
    config.sim_script = Some(script.clone());
    let (running, _) = serve_ready(&config, &path).await;
    let control = running.control.clone();

    let mut settings = RestartSettings::of(&control.config());
    settings.engine.ctx_tokens = 4096;
    control.apply(&settings.patch()).await.unwrap();
    let changed = logged(&control, |event| match event {
        Observed::Applied { changed } => Some(changed.clone()),
        _ => None,
    })
    .await;
    assert_eq!(changed, json!({"ctx": 4096}).as_object().unwrap().clone());

    std::fs::remove_file(&script).unwrap();
    settings.engine.ctx_tokens = 8192;
    let err = control
        .apply(&settings.patch())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("previous settings run again"), "{err}");
    let (changed, reason) = logged(&control, |event| match event {
        Observed::ApplyFailed { changed, reason } => Some((changed.clone(), reason.clone())),
        _ => None,
    })
    .await;
    assert_eq!(changed, json!({"ctx": 8192}).as_object().unwrap().clone());
    assert!(reason.contains("script"), "{reason}");
    assert!(err.contains(&reason), "{reason} is not in {err}");
    running.stop().await;
}

/// #62 item 4: ids never repeat within a run of the app. They started again at
/// `chatcmpl-1` after an apply, so a client saw the same id twice; the counter now belongs to
/// the control plane and each new engine unit goes on from the one before.
#[tokio::test]
async fn request_ids_go_on_across_an_apply_and_never_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, r#"{"engine": "sim"}"#).unwrap();
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    let (running, addr) = serve_ready(&config, &path).await;
    let control = running.control.clone();
    let ask = || async {
        let answer: Value = reqwest::Client::new()
            .post(format!("http://{addr}/v1/chat/completions"))
            .json(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["id"].as_str().unwrap().to_owned()
    };
    let mut ids = vec![ask().await, ask().await];
    let mut settings = RestartSettings::of(&control.config());
    settings.engine.ctx_tokens = 4096;
    control.apply(&settings.patch()).await.unwrap();
    until("the new engine is ready", || {
        control.service().snapshot().engine.status == EngineStatus::Ready
    })
    .await;
    ids.push(ask().await);
    assert_eq!(ids, ["chatcmpl-1", "chatcmpl-2", "chatcmpl-3"]);
    running.stop().await;
}

/// The `/metrics` samples of `text` (comment lines left out), by series name with labels.
fn samples(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of the samples whose series name starts with `prefix`.
fn sum_of(samples: &std::collections::BTreeMap<String, f64>, prefix: &str) -> f64 {
    samples
        .iter()
        .filter(|(name, _)| name.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

/// #63 item 3: observation lives above the engine unit. An apply made a new registry (every
/// `/metrics` counter fell to 0) and a new event stream (`seq` from 0 again, which the window
/// patched); both now belong to the control plane and go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_counters_and_the_event_seq_go_on_across_an_apply() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, r#"{"engine": "sim"}"#).unwrap();
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    let (running, addr) = serve_ready(&config, &path).await;
    let control = running.control.clone();
    let client = reqwest::Client::new();
    let ask = || {
        let client = client.clone();
        async move {
            let answer = client
                .post(format!("http://{addr}/v1/chat/completions"))
                .json(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 200);
            answer.text().await.unwrap();
        }
    };
    let scrape = || {
        let client = client.clone();
        async move {
            let text = client
                .get(format!("http://{addr}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            samples(&text)
        }
    };
    let ended = "strata_requests_finished_total";

    // a follower of the event stream from the start
    let events = client
        .get(format!("http://{addr}/v1/scheduler/events"))
        .send()
        .await
        .unwrap();
    // it reads until it has seen the apply and a request that ended after it (30 s at most)
    let follower = tokio::spawn(async move {
        let mut seen = String::new();
        let mut stream = events.bytes_stream();
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            let done = seen
                .find("\"type\":\"applied\"")
                .is_some_and(|at| seen[at..].contains("\"type\":\"ended\""));
            if done {
                break;
            }
            match tokio::time::timeout(Duration::from_secs(1), stream.next()).await {
                Ok(Some(Ok(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(_) => break,
                Err(_) => {}
            }
        }
        seen
    });

    ask().await;
    ask().await;
    let started = std::time::Instant::now();
    let before = loop {
        let now = scrape().await;
        if sum_of(&now, ended) == 2.0 {
            break now;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let log_before = control.service().snapshot().log;
    let last_seq = log_before.last().unwrap().seq;

    let mut settings = RestartSettings::of(&control.config());
    settings.engine.ctx_tokens = 4096;
    control.apply(&settings.patch()).await.unwrap();
    until("the new engine is ready", || {
        control.service().snapshot().engine.status == EngineStatus::Ready
    })
    .await;
    assert_eq!(control.unit().generation, 2);

    // every counter as it was: the apply reset none
    let after = scrape().await;
    let counters = |s: &std::collections::BTreeMap<String, f64>| {
        s.iter()
            .filter(|(name, _)| name.split('{').next().unwrap().ends_with("_total"))
            .filter(|(name, _)| !name.starts_with("strata_engine_restarts"))
            .map(|(name, v)| (name.clone(), *v))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        counters(&after),
        counters(&before),
        "a counter moved across the apply"
    );
    assert!(sum_of(&after, "strata_generation_tokens_total") > 0.0);
    // ... and they go on counting
    ask().await;
    let started = std::time::Instant::now();
    while sum_of(&scrape().await, ended) != 3.0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the counters stopped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let generated = sum_of(&scrape().await, "strata_generation_tokens_total");
    assert!(generated > sum_of(&before, "strata_generation_tokens_total"));
    assert_eq!(
        control.service().snapshot().counters.finished,
        3,
        "the snapshot's counters started again"
    );

    // one log, numbered once: the old engine's entries stay, the new one's follow them
    let log = control.service().snapshot().log;
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    let first = seqs[0];
    let expected: Vec<u64> = (first..first + seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "the log's seq started again");
    assert!(
        log.iter()
            .any(|e| e.seq == last_seq && e == &log_before[log_before.len() - 1])
    );
    let applied = log
        .iter()
        .find(|e| matches!(e.event, Observed::Applied { .. }))
        .expect("the apply is an event of the stream");
    assert!(applied.seq > last_seq);

    // the follower saw each observed event once, in order, across the apply
    let seen = follower.await.unwrap();
    let observed: Vec<u64> = seen
        .split("\n\n")
        .filter(|block| block.lines().any(|l| l == "event: observed"))
        .filter_map(|block| {
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            serde_json::from_str::<Value>(data).ok()?["seq"].as_u64()
        })
        .collect();
    assert!(!observed.is_empty(), "{seen}");
    let from = observed[0];
    let expected: Vec<u64> = (from..from + observed.len() as u64).collect();
    assert_eq!(
        observed, expected,
        "each event once, in order, across the apply"
    );
    assert!(
        observed.contains(&applied.seq),
        "the apply was not streamed"
    );
    running.stop().await;
}
