//! The dashboard under egui_kittest (no display, no GPU), over the simulated engine: clicks by
//! label reach the service; rows and counters render from real snapshots.

use crate::api_fake::{Server, Setup, chat, server};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable as _;
use serde_json::json;
use std::time::{Duration, Instant};
use strata_desk::engine_worker::FakeOptions;
use strata_desk::gui::Dashboard;
use strata_desk::scheduler::SchedulerSettings;
use strata_desk::service::ServiceSnapshot;

/// A runtime of its own: the harness runs frames on the test's thread.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn wait(
    rt: &tokio::runtime::Runtime,
    server: &Server,
    what: &str,
    check: impl Fn(&ServiceSnapshot) -> bool,
) {
    rt.block_on(server.until(what, check));
}

fn frames(harness: &mut Harness<'_>, rt: &tokio::runtime::Runtime, secs: f64) {
    let started = Instant::now();
    while started.elapsed().as_secs_f64() < secs {
        harness.run();
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(20)).await });
    }
}

#[test]
fn clicking_solo_priority_by_its_label_changes_the_service_setting() {
    let rt = runtime();
    let server = rt.block_on(server(Setup::default()));
    let mut dashboard = Dashboard::new(server.service.clone(), rt.handle().clone());
    let mut harness = Harness::new_ui(|ui| dashboard.ui(ui));
    harness.run();
    assert!(!server.service.snapshot().solo_priority);
    harness.get_by_label("solo_priority").click();
    harness.run();
    wait(&rt, &server, "solo_priority is on", |s| s.solo_priority);
    frames(&mut harness, &rt, 0.2);
    harness.get_by_label("whole").click();
    harness.run();
    wait(&rt, &server, "give_way is whole", |s| {
        s.give_way == strata_desk::scheduler::GiveWay::Whole
    });
}

#[test]
fn restart_restarts_the_engine_and_asks_first_when_requests_are_in_flight() {
    let rt = runtime();
    let server = rt.block_on(server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 20.0,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    }));
    let mut dashboard = Dashboard::new(server.service.clone(), rt.handle().clone());
    let mut harness = Harness::new_ui(|ui| dashboard.ui(ui));
    harness.run();
    // Idle: one click restarts.
    harness.get_by_label("Restart engine").click();
    harness.run();
    wait(&rt, &server, "the engine came back", |s| {
        s.counters.engine_restarts == 1
    });

    // Busy: the first click says what will happen; "Restart now" does it.
    let _running = rt.spawn(server.post(&chat("long", 300)).send());
    wait(&rt, &server, "a request runs", |s| {
        s.slots.iter().any(|x| x.request_id.is_some())
    });
    frames(&mut harness, &rt, 0.1);
    harness.get_by_label("Restart engine").click();
    harness.run();
    assert!(harness.query_by_label_contains("fails 1 running").is_some());
    assert_eq!(server.service.snapshot().counters.engine_restarts, 1);
    harness.get_by_label("Restart now").click();
    harness.run();
    wait(&rt, &server, "the engine came back again", |s| {
        s.counters.engine_restarts == 2
    });
}

#[test]
fn parked_and_waiting_rows_render_a_starving_request_is_highlighted_and_cancel_works() {
    let rt = runtime();
    let server = rt.block_on(server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 20.0,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            solo_priority: true,
            min_run_quantum_secs: 0.2,
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    }));
    let mut dashboard = Dashboard::new(server.service.clone(), rt.handle().clone());
    dashboard.starving_secs = 0.5;
    let mut harness = Harness::new_ui(|ui| dashboard.ui(ui));

    let long = rt.spawn(server.post(&chat("long", 300)).send());
    wait(&rt, &server, "the long one decodes", |s| {
        s.slots.iter().any(|x| x.state == "decoding")
    });
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(300)).await });
    let mut urgent = chat("urgent", 200);
    urgent["priority"] = json!(50);
    let urgent = rt.spawn(server.post(&urgent).send());
    wait(&rt, &server, "the long one is parked", |s| {
        s.parked.len() == 1
    });
    let waiter = rt.spawn(server.post(&chat("waits", 5)).send());
    wait(&rt, &server, "one waits", |s| s.waiting.len() == 1);
    frames(&mut harness, &rt, 0.8);

    assert!(
        harness.query_by_label_contains("paused stream").is_some(),
        "no parked row"
    );
    assert!(
        harness.query_by_label_contains("tokens to read").is_some(),
        "no waiting row"
    );
    assert!(
        harness.query_by_label_contains("starving").is_some(),
        "not highlighted"
    );
    assert!(harness.query_by_label("pauses").is_some());
    assert!(
        harness
            .query_by_label_contains("a stream was paused")
            .is_some(),
        "no event line"
    );

    harness.get_by_label("Cancel").click();
    harness.run();
    wait(&rt, &server, "the waiter was cancelled", |s| {
        s.waiting.is_empty() && s.counters.cancellations_by_state.waiting == 1
    });
    drop(waiter);
    long.abort();
    urgent.abort();
}
