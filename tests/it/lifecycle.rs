//! The app's lifecycle under egui_kittest: the window shows a start that fails (a port in use,
//! a model file missing, a bad config) in words with what to do, and closing the window keeps
//! the app serving in the tray (a notice the first time), a stream in flight completing, or,
//! where no tray host shows the icon, minimised (the notice says why, each time).

use crate::support::{runtime, worker_exe};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable as _;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};
use strata_desk::config::{Config, Overrides};
use strata_desk::gui::{App, Dashboard, start_in_background};
use strata_desk::service::EngineStatus;

/// A port nothing listens on now.
fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().port()
}

/// The window of an app started with this config file's text: frames are stepped until a
/// label contains `shown`; then each of `also` must show too.
fn start_shows(file: &str, shown: &str, also: &[&str]) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, file).unwrap();
    let config = Config::load(Some(&path), &Overrides::default());
    let (events_tx, events) = mpsc::channel();
    start_in_background(
        config,
        Some(path.clone()),
        worker_exe(),
        rt.handle().clone(),
        events_tx,
        || {},
    );
    let mut app = App::new(
        events,
        rt.handle().clone(),
        Arc::new(Mutex::new(None)),
        |_, _| {},
    );
    let mut harness = Harness::new_ui(|ui| app.ui(ui));
    let started = Instant::now();
    while harness.query_by_label_contains(shown).is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the window never said {shown:?}"
        );
        harness.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    for text in ["Strata Desk could not start"].iter().chain(also) {
        assert!(
            harness.query_by_label_contains(text).is_some(),
            "the window does not say {text:?}"
        );
    }
    harness.get_by_label("Quit");
}

#[test]
fn a_start_on_a_port_in_use_says_so_in_the_window_with_what_to_do() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let file = json!({"engine": "sim", "port": port}).to_string();
    start_shows(
        &file,
        &format!("cannot listen on 127.0.0.1:{port}"),
        &["set another `port`"],
    );
}

#[test]
fn a_start_with_a_missing_model_says_which_file_and_what_to_do() {
    let file = json!({"model": "/nowhere/coder-7b.gguf", "port": free_port()}).to_string();
    start_shows(
        &file,
        "/nowhere/coder-7b.gguf does not exist",
        &["Set `model` in the config file"],
    );
}

#[test]
fn a_bad_config_is_shown_in_the_window() {
    start_shows(
        r#"{"model": "C:\models\a.gguf"}"#,
        "invalid escape",
        &[r#""C:/models/a.gguf""#, "Fix the config file"],
    );
}

/// The root viewport's commands in the last frame's output.
fn commands(harness: &Harness<'_>) -> Vec<egui::ViewportCommand> {
    harness
        .output()
        .viewport_output
        .get(&egui::ViewportId::ROOT)
        .map(|o| o.commands.clone())
        .unwrap_or_default()
}

/// A close request from the window system, and the commands the frame answered with.
fn close(harness: &mut Harness<'_>) -> Vec<egui::ViewportCommand> {
    harness
        .input_mut()
        .viewports
        .entry(egui::ViewportId::ROOT)
        .or_default()
        .events
        .push(egui::ViewportEvent::Close);
    harness.step();
    commands(harness)
}

/// Closing the window with a tray: the first time a notice says the app keeps serving; the
/// window hides; the tray's Show/Hide shows it in one click (regression, #62: the tray kept
/// its own flag, which missed the notice's hide, so it took two); a stream in flight
/// completes; the next close hides at once.
#[test]
fn closing_the_window_keeps_serving_in_the_tray_and_a_stream_in_flight_completes() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, r#"{"engine": "sim"}"#).unwrap();
    let (running, addr) = crate::support::app_server(&rt, &path);
    let control = running.control.clone();
    let mut dashboard = Dashboard::with_control(control.clone(), addr, rt.handle().clone());
    dashboard.set_has_tray(true);
    let window = dashboard.window();
    let mut harness = Harness::new_ui(|ui| dashboard.ui(ui));
    rt.block_on(async {
        let started = Instant::now();
        while control.service().snapshot().engine.status != EngineStatus::Ready {
            assert!(started.elapsed() < Duration::from_secs(20));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let body = json!({"messages": [{"role": "user", "content": "a long one"}], "max_tokens": 120});
    let stream = rt.spawn(async move {
        let v: Value = reqwest::Client::new()
            .post(format!("http://{addr}/v1/chat/completions"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v
    });
    rt.block_on(async {
        let started = Instant::now();
        while !control
            .service()
            .snapshot()
            .slots
            .iter()
            .any(|s| s.generated_tokens > 3)
        {
            assert!(started.elapsed() < Duration::from_secs(20));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let closed = close(&mut harness);
    assert!(
        closed.contains(&egui::ViewportCommand::CancelClose),
        "the window closed: {closed:?}"
    );
    harness.step();
    harness.get_by_label("Strata Desk keeps serving");
    harness.get_by_label("Hide to tray").click();
    harness.step();
    let hidden = commands(&harness).contains(&egui::ViewportCommand::Visible(false));
    assert!(hidden, "the window was not hidden");
    // the tray's Show/Hide (what its menu's handler calls) shows it in one click
    let ctx = harness.ctx.clone();
    assert!(
        window.show_or_hide(&ctx),
        "the tray's first click hid it again"
    );
    harness.step();
    let shown = commands(&harness);
    for expected in [
        egui::ViewportCommand::Visible(true),
        egui::ViewportCommand::Minimized(false),
        egui::ViewportCommand::Focus,
    ] {
        assert!(shown.contains(&expected), "{expected:?} not in {shown:?}");
    }
    // the next close hides at once
    let closed = close(&mut harness);
    assert!(
        closed.contains(&egui::ViewportCommand::CancelClose)
            && closed.contains(&egui::ViewportCommand::Visible(false)),
        "{closed:?}"
    );
    // the server went on: the stream completes whole
    let answer = rt.block_on(stream).unwrap();
    assert_eq!(answer["usage"]["completion_tokens"], 120, "{answer}");
    assert_eq!(
        control.service().snapshot().engine.status,
        EngineStatus::Ready
    );
    drop(harness);
    rt.block_on(running.stop());
}

/// What a close does: quit when chosen or with `close_to_tray: false`; hide to the tray only
/// where a tray host shows the icon; elsewhere ask each time (minimise, or quit).
#[test]
fn a_close_hides_to_the_tray_only_where_a_tray_host_shows_the_icon() {
    use strata_desk::gui::{CloseAction, close_action};
    assert_eq!(
        close_action(false, true, false, false),
        CloseAction::NoTrayNotice
    );
    assert_eq!(
        close_action(false, true, false, true),
        CloseAction::NoTrayNotice
    );
    assert_eq!(close_action(false, false, false, false), CloseAction::Quit);
    assert_eq!(close_action(true, false, false, false), CloseAction::Quit);
    assert_eq!(close_action(true, true, true, true), CloseAction::Quit);
    assert_eq!(close_action(false, true, true, false), CloseAction::Quit);
    assert_eq!(close_action(true, true, false, false), CloseAction::Notice);
    assert_eq!(close_action(true, true, false, true), CloseAction::Hide);
}

/// Regression (#62): where the icon registered on D-Bus but no tray host showed it (GNOME
/// without the extension), "Hide to tray" left no way back. Without a host, closing says why
/// and minimises, each time, and Quit now still quits.
#[test]
fn without_a_tray_host_closing_minimises_and_says_why() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, r#"{"engine": "sim"}"#).unwrap();
    let (running, addr) = crate::support::app_server(&rt, &path);
    let mut dashboard = Dashboard::with_control(running.control.clone(), addr, rt.handle().clone());
    dashboard.set_has_tray(false);
    let window = dashboard.window();
    let mut harness = Harness::new_ui(|ui| dashboard.ui(ui));
    for _ in 0..2 {
        let closed = close(&mut harness);
        assert!(
            closed.contains(&egui::ViewportCommand::CancelClose),
            "the window closed: {closed:?}"
        );
        harness.step();
        harness.get_by_label_contains("No tray shows Strata Desk's icon here");
        assert!(harness.query_by_label("Hide to tray").is_none());
        harness.get_by_label("Minimise").click();
        harness.step();
        let sent = commands(&harness);
        assert!(
            sent.contains(&egui::ViewportCommand::Minimized(true))
                && !sent.contains(&egui::ViewportCommand::Visible(false)),
            "{sent:?}"
        );
        assert!(!window.is_hidden());
    }
    close(&mut harness);
    harness.step();
    harness.get_by_label("Quit now").click();
    harness.step();
    assert!(window.quitting());
    assert!(commands(&harness).contains(&egui::ViewportCommand::Close));
    drop(harness);
    rt.block_on(running.stop());
}
