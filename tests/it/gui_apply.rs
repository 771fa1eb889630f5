//! Applying settings from the window's control plane, over the simulated engine: a new
//! engine on the same address, the live switches kept, refusals and rollbacks, the recent
//! models. (Split from `gui.rs` by the 600-line bound.)

use crate::api_fake::chat;
use crate::gui::frames;
use crate::support::runtime;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable as _;
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use strata_desk::config::KvType;
use strata_desk::control::{Control, RestartSettings};
use strata_desk::gui::{Dashboard, PREEMPTION_OFF};
use strata_desk::server::Running;
use strata_desk::service::{EngineStatus, Observed, SettingsChange};

struct Hosted {
    running: Running,
    addr: std::net::SocketAddr,
}

impl Hosted {
    fn control(&self) -> &Control {
        &self.running.control
    }
}

fn hosted(rt: &tokio::runtime::Runtime, name: &str) -> (Hosted, PathBuf) {
    hosted_with(rt, name, r#"{"engine": "sim", "queue_max": 9}"#)
}

fn hosted_with(rt: &tokio::runtime::Runtime, name: &str, file: &str) -> (Hosted, PathBuf) {
    let dir = std::env::temp_dir().join(format!("strata-gui-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config_path = dir.join("config.json");
    std::fs::write(&config_path, file).unwrap();
    let (running, addr) = crate::support::app_server(rt, &config_path);
    (Hosted { running, addr }, config_path)
}

fn until(what: &str, check: impl Fn() -> bool, mut step: impl FnMut()) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "timed out waiting until {what}"
        );
        step();
    }
}

#[test]
fn applying_settings_starts_a_new_engine_on_the_same_address_keeps_the_live_switches_and_saves_them()
 {
    let rt = runtime();
    let (hosted, config_path) = hosted(&rt, "apply");
    let host = hosted.control().clone();
    let mut dashboard = Dashboard::with_control(host.clone(), hosted.addr, rt.handle().clone());
    let mut harness = Harness::new_ui(|ui| dashboard.ui(ui));
    let ready = |h: &Control| h.service().snapshot().engine.status == EngineStatus::Ready;
    until(
        "the engine is ready",
        || ready(&host),
        || frames(&mut harness, &rt, 0.05),
    );

    // A live switch is saved to the same file headless mode reads.
    harness.get_by_label(PREEMPTION_OFF).click();
    until(
        "solo_priority is saved",
        || {
            std::fs::read_to_string(&config_path)
                .unwrap()
                .contains("\"solo_priority\": true")
        },
        || frames(&mut harness, &rt, 0.05),
    );
    // A request answered before the apply: its first token and count outlive the engine.
    let before = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("http://{}/v1/chat/completions", hosted.addr))
            .header("user-agent", "before-apply/1.0")
            .json(&chat("hello", 4))
            .send()
            .await
            .unwrap()
    });
    assert_eq!(before.status(), 200);
    frames(&mut harness, &rt, 0.1);
    harness.get_by_label_contains("before-apply: p50");

    harness.get_by_label("Settings and model").click();
    harness.run_ok();
    harness.get_by_label("q8_0").click();
    harness.run_ok();
    assert!(
        harness
            .query_by_label_contains("applying starts one in place of this one")
            .is_some(),
        "the view does not say what applying does"
    );
    harness.get_by_label("Apply and restart").click();
    until(
        "a new engine serves",
        || host.unit().generation == 2,
        || frames(&mut harness, &rt, 0.05),
    );
    until(
        "the new engine is ready",
        || ready(&host),
        || frames(&mut harness, &rt, 0.05),
    );
    frames(&mut harness, &rt, 0.2);

    assert_eq!(host.config().app.engine_settings.kv_type, KvType::Q8_0);
    assert!(
        host.service().snapshot().solo_priority,
        "the live switch was lost"
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    assert_eq!(saved["kv_type"], "q8_0");
    assert_eq!(
        saved["queue_max"], 9,
        "a key the view does not edit was lost"
    );
    assert!(
        harness
            .query_all_by_label_contains("a new engine serves the new settings")
            .next()
            .is_some()
    );
    // One log for the app's run, kept across the restart: the apply is a line of it, after
    // the old engine's.
    assert!(
        harness
            .query_by_label_contains("settings applied with a new engine")
            .is_some(),
        "no line where the engine restarted"
    );
    assert!(
        harness
            .query_by_label_contains("preemption (solo_priority) on by")
            .is_some(),
        "the old engine's log was lost"
    );
    // ... and its first-token samples, and its counters (the app's run's: they go on)
    assert!(
        harness
            .query_by_label_contains("before-apply: p50")
            .is_some(),
        "the old engine's TTFT samples were lost"
    );
    assert!(
        host.service().snapshot().counters.finished >= 1,
        "the counters started again with the new engine"
    );
    // The new engine answers on the same address.
    let answer = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("http://{}/v1/chat/completions", hosted.addr))
            .json(&chat("hello", 4))
            .send()
            .await
            .unwrap()
    });
    assert_eq!(answer.status(), 200);
    rt.block_on(hosted.running.stop());
}

#[test]
fn settings_that_do_not_validate_stop_nothing_and_name_the_keys() {
    let rt = runtime();
    let (hosted, _) = hosted(&rt, "invalid");
    let host = hosted.control().clone();
    rt.block_on(async {
        let service = host.service();
        service
            .change_settings(SettingsChange {
                solo_priority: Some(true),
                give_way: None,
            })
            .await
            .unwrap();
        let mut settings = RestartSettings::of(&host.config());
        settings.engine.slots = 2;
        let err = host.apply(&settings.patch()).await.unwrap_err().to_string();
        assert!(
            err.contains("solo_priority") && err.contains("parallel"),
            "{err}"
        );
        assert_eq!(host.unit().generation, 1, "the engine was restarted anyway");
        hosted.running.stop().await;
    });
}

#[test]
fn models_applied_become_recent_models_newest_first_without_repeats() {
    let rt = runtime();
    let (hosted, config_path) = hosted(&rt, "recent");
    let host = hosted.control().clone();
    rt.block_on(async {
        for (n, model) in ["/models/a.gguf", "/models/b.gguf", "/models/a.gguf"]
            .into_iter()
            .enumerate()
        {
            let mut settings = RestartSettings::of(&host.config());
            settings.engine.model = Some(PathBuf::from(model));
            host.apply(&settings.patch()).await.unwrap();
            // the new service's stream says what replaced the engine: its n-th apply (the log
            // is the app's run's and goes on across applies)
            let applied = service_event(
                &host.service(),
                |event| match event {
                    Observed::Applied { changed } => Some(changed.clone()),
                    _ => None,
                },
                n,
            )
            .await;
            assert_eq!(applied["model"], json!(model), "{applied:?}");
        }
        let recent = host.config().app.recent_models;
        assert_eq!(
            recent,
            [
                PathBuf::from("/models/a.gguf"),
                PathBuf::from("/models/b.gguf")
            ]
        );
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
        assert_eq!(
            saved["recent_models"],
            json!(["/models/a.gguf", "/models/b.gguf"])
        );
        assert_eq!(saved["model"], "/models/a.gguf");
        hosted.running.stop().await;
    });
}

/// The real engine: a model file that cannot be read stops nothing (it is checked before the
/// engine that serves is stopped), says which of missing, not a file, not a GGUF or unreadable
/// it is, and saves nothing; a file that reads as a GGUF but does not load rolls back to the
/// model that ran, on the same address, the HTTP server never down.
#[test]
fn settings_whose_model_fails_are_refused_or_rolled_back_and_not_saved() {
    let _serial = crate::support::real_model();
    let rt = runtime();
    let model = crate::support::model_path();
    let file = json!({"model": model, "ctx": 2048, "threads": 1}).to_string();
    let (hosted, config_path) = hosted_with(&rt, "rollback", &file);
    let host = hosted.control().clone();
    let dir = config_path.parent().unwrap().to_path_buf();
    let before = std::fs::read_to_string(&config_path).unwrap();
    rt.block_on(async {
        let ready = || async {
            let started = Instant::now();
            while host.service().snapshot().engine.status != EngineStatus::Ready {
                assert!(started.elapsed() < Duration::from_secs(60), "never ready");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        ready().await;
        let missing = dir.join("missing.gguf");
        let mut settings = RestartSettings::of(&host.config());
        settings.engine.model = Some(missing.clone());
        let err = host.apply(&settings.patch()).await.unwrap_err().to_string();
        assert!(
            err.contains("missing.gguf")
                && err.contains("does not exist")
                && err.contains("nothing was stopped"),
            "{err}"
        );
        assert_eq!(host.unit().generation, 1, "the engine was stopped anyway");
        // a GGUF header with nothing after it: it reads as a GGUF, llama.cpp cannot load it
        let broken = dir.join("broken.gguf");
        std::fs::write(&broken, b"GGUF\x03\x00\x00\x00").unwrap();
        settings.engine.model = Some(broken);
        let err = host.apply(&settings.patch()).await.unwrap_err().to_string();
        assert!(
            err.contains("nothing was stopped") || err.contains("previous settings run again"),
            "{err}"
        );
        assert_eq!(
            host.config().app.engine_settings.model.as_deref(),
            Some(model.as_path())
        );
        ready().await;
        let answer = reqwest::Client::new()
            .post(format!("http://{}/v1/chat/completions", hosted.addr))
            .json(&chat("Say hi.", 4))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        hosted.running.stop().await;
    });
    assert_eq!(std::fs::read_to_string(&config_path).unwrap(), before);
}

/// The `nth` (from 0) event of `service`'s stream that `pick` takes, waited for (a
/// control-plane event reaches the service as a command).
async fn service_event<T>(
    service: &strata_desk::service::ServiceHandle,
    pick: impl Fn(&Observed) -> Option<T>,
    nth: usize,
) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = service
            .snapshot()
            .log
            .iter()
            .filter_map(|e| pick(&e.event))
            .nth(nth)
        {
            return found;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no such event");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
