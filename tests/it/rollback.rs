//! The rollback switch from every entry point (the window under kittest, the tray's item, HTTP,
//! and `--headless` with its config file), from each of the six starting states
//! (`solo_priority` on/off × `give_way` off/left/whole): the rollback leaves `solo_priority`
//! off and `give_way` as it was, saved to the config file (the one rule for every entry point),
//! logged once naming who made it, and loses nothing: a stream parked when preemption goes off
//! finishes with its full text. Where preemption is off already, every entry point shows it
//! off (the window once said "partly on", and its click turned preemption on).
//!
//! The app's own server over the simulated engine (`"engine": "sim"`: 50 decode steps a
//! second), each run with its config file in a fresh folder.

use crate::support::{runtime, until, worker_exe};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable as _;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use strata_desk::control::Control;
use strata_desk::gui::{
    Command, Dashboard, PREEMPTION_OFF, PREEMPTION_ON, PreemptionItem, tray_command,
};
use strata_desk::scheduler::GiveWay;
use strata_desk::server::Running;
use strata_desk::service::{EngineStatus, ServiceSnapshot};

const STATES: [(bool, GiveWay); 6] = [
    (true, GiveWay::Off),
    (true, GiveWay::Left),
    (true, GiveWay::Whole),
    (false, GiveWay::Off),
    (false, GiveWay::Left),
    (false, GiveWay::Whole),
];

fn give_way_name(give_way: GiveWay) -> &'static str {
    match give_way {
        GiveWay::Off => "off",
        GiveWay::Left => "left",
        GiveWay::Whole => "whole",
    }
}

/// A config file for a starting state, in a fresh folder.
fn config_file(name: &str, solo_priority: bool, give_way: GiveWay) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "strata-rollback-{name}-{solo_priority}-{}-{}",
        give_way_name(give_way),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.json");
    let file = json!({
        "engine": "sim",
        "solo_priority": solo_priority,
        "give_way": give_way_name(give_way),
        "min_run_quantum_secs": 0.05,
        "queue_max": 9,
    });
    std::fs::write(&path, file.to_string()).unwrap();
    path
}

struct Hosted {
    running: Running,
    addr: SocketAddr,
}

impl Hosted {
    fn control(&self) -> &Control {
        &self.running.control
    }

    fn snapshot(&self) -> ServiceSnapshot {
        self.control().service().snapshot()
    }
}

fn hosted(rt: &tokio::runtime::Runtime, path: &std::path::Path) -> Hosted {
    let (running, addr) = crate::support::app_server(rt, path);
    Hosted { running, addr }
}

fn chat(text: &str, max_tokens: u32, priority: i64) -> Value {
    json!({
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "priority": priority,
    })
}

async fn text_of(addr: SocketAddr, body: Value) -> String {
    let v: Value = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_owned()
}

const LONG: &str = "a long answer about the harbour, please";

/// The long stream alone (the simulated engine's text depends only on the prompt).
fn clean_long_text(rt: &tokio::runtime::Runtime) -> String {
    let path = config_file("clean", false, GiveWay::Off);
    let hosted = hosted(rt, &path);
    rt.block_on(async {
        until("ready", || {
            hosted.snapshot().engine.status == EngineStatus::Ready
        })
        .await;
        let text = text_of(hosted.addr, chat(LONG, 80, 0)).await;
        hosted.running.stop().await;
        text
    })
}

/// Starts the long stream and, with `solo_priority` on, pauses it with a short request of a
/// higher priority; answers the long stream's task (its text) and the short one's.
fn long_and_short(
    rt: &tokio::runtime::Runtime,
    hosted: &Hosted,
) -> (
    tokio::task::JoinHandle<String>,
    tokio::task::JoinHandle<String>,
) {
    rt.block_on(async {
        until("ready", || {
            hosted.snapshot().engine.status == EngineStatus::Ready
        })
        .await;
    });
    let long = rt.spawn(text_of(hosted.addr, chat(LONG, 80, 0)));
    rt.block_on(until("the long one decodes", || {
        hosted
            .snapshot()
            .slots
            .iter()
            .any(|s| s.generated_tokens >= 3)
    }));
    let short = rt.spawn(text_of(hosted.addr, chat("quick", 40, 5)));
    if hosted.snapshot().solo_priority {
        rt.block_on(until("the long one is parked", || {
            hosted.snapshot().parked.len() == 1
        }));
    }
    (long, short)
}

/// After a rollback: `solo_priority` off and `give_way` as it was, in force and in the file;
/// one log line naming `by` when it changed; the long stream finished with its whole text.
fn check_rolled_back(
    rt: &tokio::runtime::Runtime,
    hosted: &Hosted,
    path: &std::path::Path,
    (solo_priority, give_way): (bool, GiveWay),
    by: &str,
    (long, short): (
        tokio::task::JoinHandle<String>,
        tokio::task::JoinHandle<String>,
    ),
    clean: &str,
) {
    let case = format!("from ({solo_priority}, {give_way:?})");
    rt.block_on(until("solo_priority is off", || {
        !hosted.snapshot().solo_priority
    }));
    let s = hosted.snapshot();
    assert_eq!(s.give_way, give_way, "{case}: give_way moved");
    // the window's and the tray's commands run on their own task: the file is written
    // just after the switch changed
    let read =
        || -> Value { serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap() };
    rt.block_on(until("the file is saved", || {
        read()["solo_priority"] == false
    }));
    let file = read();
    assert_eq!(file["solo_priority"], false, "{case}: not saved: {file}");
    assert_eq!(file["give_way"], give_way_name(give_way), "{case}: {file}");
    assert_eq!(file["queue_max"], 9, "{case}: another key was lost: {file}");
    let logged = s
        .log
        .iter()
        .filter(|e| e.text.contains("solo_priority) off by"))
        .map(|e| e.text.clone())
        .collect::<Vec<_>>();
    if solo_priority {
        assert_eq!(
            logged,
            vec![format!("preemption (solo_priority) off by {by}")],
            "{case}"
        );
    } else {
        assert!(logged.is_empty(), "{case}: {logged:?}");
    }
    let long = rt.block_on(long).unwrap();
    rt.block_on(short).unwrap();
    assert_eq!(long, clean, "{case}: the long stream lost something");
    rt.block_on(hosted.running.control.shutdown());
}

/// One entry point's rollback from each starting state: `rollback` does what the user does
/// there, `by` is who the log must name.
fn rollback_from_every_state(
    entry: &str,
    by: &str,
    rollback: impl Fn(&tokio::runtime::Runtime, &Hosted, (bool, GiveWay)),
) {
    let rt = runtime();
    let clean = clean_long_text(&rt);
    for state in STATES {
        let path = config_file(entry, state.0, state.1);
        let hosted = hosted(&rt, &path);
        let streams = long_and_short(&rt, &hosted);
        rollback(&rt, &hosted, state);
        check_rolled_back(&rt, &hosted, &path, state, by, streams, &clean);
    }
}

#[test]
fn the_window_s_rollback_from_every_state_turns_solo_priority_off_keeps_give_way_and_loses_nothing()
{
    rollback_from_every_state("window", "the window", |rt, hosted, state| {
        let mut dashboard =
            Dashboard::with_control(hosted.control().clone(), hosted.addr, rt.handle().clone());
        let mut harness = Harness::new_ui(|ui| dashboard.ui(ui));
        harness.step();
        // the switch says what is in force: on only when solo_priority is on
        if state.0 {
            assert!(harness.query_by_label(PREEMPTION_OFF).is_none());
            harness.get_by_label(PREEMPTION_ON).click();
            harness.step();
        } else {
            assert!(harness.query_by_label(PREEMPTION_ON).is_none());
            harness.get_by_label(PREEMPTION_OFF);
        }
        rt.block_on(until("the click is applied", || {
            !hosted.snapshot().solo_priority
        }));
    });
}

#[test]
fn the_tray_s_rollback_from_every_state_turns_solo_priority_off_keeps_give_way_and_loses_nothing() {
    rollback_from_every_state("tray", "the tray", |rt, hosted, state| {
        let s = hosted.snapshot();
        let item = PreemptionItem;
        assert_eq!(PreemptionItem::checked(&s), state.0, "the check mark lies");
        if PreemptionItem::checked(&s) {
            let click = item.click(&s).expect("a click in solo mode");
            assert_eq!(click, Command::SetSoloPriority(false));
            rt.block_on(tray_command(click, hosted.control().clone()));
        }
    });
}

#[test]
fn the_http_rollback_from_every_state_turns_solo_priority_off_keeps_give_way_and_loses_nothing() {
    rollback_from_every_state("http", "HTTP (loopback)", |rt, hosted, _| {
        let answer: Value = rt.block_on(async {
            reqwest::Client::new()
                .patch(format!("http://{}/v1/settings", hosted.addr))
                .json(&json!({"solo_priority": false}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        });
        assert_eq!(answer["settings"]["solo_priority"], false, "{answer}");
        assert_eq!(answer["saved"], true, "{answer}");
    });
}

/// `--headless` with its config file, a process as a service runs it: the rollback over HTTP
/// is saved to that file, so the next start keeps it.
#[test]
fn a_headless_rollback_from_every_state_is_saved_to_its_config_file() {
    let rt = runtime();
    for state in STATES {
        let path = config_file("headless", state.0, state.1);
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let mut server = std::process::Command::new(worker_exe())
            .arg("--headless")
            .arg("--config")
            .arg(&path)
            .args(["--port", &port.to_string()])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        rt.block_on(async {
            let client = reqwest::Client::new();
            let started = Instant::now();
            loop {
                let health = client.get(format!("{base}/health")).send().await;
                if health.is_ok_and(|r| r.status() == 200) {
                    break;
                }
                assert!(started.elapsed() < Duration::from_secs(20), "never ready");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let answer: Value = client
                .patch(format!("{base}/v1/settings"))
                .json(&json!({"solo_priority": false}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(answer["settings"]["solo_priority"], false, "{answer}");
            let settings: Value = client
                .get(format!("{base}/v1/settings"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(settings["settings"]["solo_priority"], false, "{settings}");
            assert_eq!(
                settings["settings"]["give_way"],
                give_way_name(state.1),
                "{settings}"
            );
        });
        let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(file["solo_priority"], false, "{file}");
        assert_eq!(file["give_way"], give_way_name(state.1), "{file}");
        let _ = std::process::Command::new("kill")
            .arg(server.id().to_string())
            .status();
        let _ = server.wait();
    }
}
