//! The dashboard under egui_kittest (no display, no GPU), over the simulated engine: clicks by
//! label reach the service; rows and counters render from real snapshots.
//!
//! `run_ok`, not `run`: a live server changes the snapshot between frames, so a busy dashboard
//! may not settle within the harness's step limit (under load it once did not).

use crate::api_fake::{Server, Setup, chat, server};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable as _;
use serde_json::json;
use std::time::{Duration, Instant};
use strata_desk::engine_worker::FakeOptions;
use strata_desk::gui::{Dashboard, PREEMPTION_OFF};
use strata_desk::scheduler::SchedulerSettings;
use strata_desk::service::ServiceSnapshot;
use strata_desk::service::SlotStatus;

use crate::support::runtime;

pub(crate) fn wait(
    rt: &tokio::runtime::Runtime,
    server: &Server,
    what: &str,
    check: impl Fn(&ServiceSnapshot) -> bool,
) {
    rt.block_on(server.until(what, check));
}

pub(crate) fn frames(harness: &mut Harness<'_>, rt: &tokio::runtime::Runtime, secs: f64) {
    let started = Instant::now();
    while started.elapsed().as_secs_f64() < secs {
        // One frame each (not `run`, which waits to settle: a spinner never does).
        harness.step();
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(20)).await });
    }
}

#[test]
fn clicking_the_switches_by_their_labels_changes_the_service_settings() {
    let rt = runtime();
    let server = rt.block_on(server(Setup::default()));
    let mut dashboard = Dashboard::new(server.control.clone(), rt.handle().clone());
    let mut harness = Harness::new_ui(|ui| dashboard.ui(ui));
    harness.run_ok();
    assert!(!server.service.snapshot().solo_priority);
    harness.get_by_label(PREEMPTION_OFF).click();
    harness.run_ok();
    wait(&rt, &server, "solo_priority is on", |s| s.solo_priority);
    frames(&mut harness, &rt, 0.2);
    harness.get_by_label("Expert switches").click();
    harness.run_ok();
    harness.get_by_label("whole").click();
    harness.run_ok();
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
    let mut dashboard = Dashboard::new(server.control.clone(), rt.handle().clone());
    let mut harness = Harness::new_ui(|ui| dashboard.ui(ui));
    harness.run_ok();
    // Idle: one click restarts.
    harness.get_by_label("Restart engine").click();
    harness.run_ok();
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
    harness.run_ok();
    assert!(harness.query_by_label_contains("fails 1 running").is_some());
    assert_eq!(server.service.snapshot().counters.engine_restarts, 1);
    harness.get_by_label("Restart now").click();
    harness.run_ok();
    wait(&rt, &server, "the engine came back again", |s| {
        s.counters.engine_restarts == 2
    });
    // the Ended line gives the reason (#62: it said only "failed")
    frames(&mut harness, &rt, 0.2);
    // the log's line and the Ended line
    assert_eq!(
        harness
            .query_all_by_label_contains("failed: engine restarted")
            .count(),
        2,
        "the Ended line does not say why it failed"
    );
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
    let mut dashboard = Dashboard::new(server.control.clone(), rt.handle().clone());
    dashboard.starving_secs = 0.5;
    // the window's default size: the rows' buttons are where a user sees them
    let mut harness = Harness::builder()
        .with_size([1100.0, 720.0])
        .build_ui(|ui| dashboard.ui(ui));

    let long = rt.spawn(server.post(&chat("long", 300)).send());
    wait(&rt, &server, "the long one decodes", |s| {
        s.slots.iter().any(|x| x.state == SlotStatus::Decoding)
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

    // the running row's why: solo_priority is on, and R7's outlook says the first in line
    // ranks lower (#62: the why is the scheduler's own verdict)
    assert!(
        harness
            .query_by_label_contains("ranks lower: only a higher priority pauses it")
            .is_some(),
        "no why for the decoding row"
    );
    // the panels name requests as their clients do, as the requests table does
    assert!(
        harness
            .query_by_label_contains("chatcmpl-2 (priority 50) on ")
            .is_some(),
        "the slot row does not name the client's id"
    );
    for id in ["chatcmpl-1", "chatcmpl-3"] {
        assert_eq!(
            harness.query_all_by_label(id).count(),
            2,
            "{id} is not in both the table and its panel"
        );
    }
    assert!(
        harness.query_by_label_contains("paused stream").is_some(),
        "no parked row"
    );
    assert!(
        harness.query_by_label_contains("tokens to read").is_some(),
        "no waiting row"
    );
    // in the Waiting section and in the request's own row (#62)
    assert!(
        harness.query_all_by_label_contains("starving").count() >= 2,
        "not highlighted in both places"
    );
    assert!(harness.query_by_label("pauses").is_some());
    assert!(
        harness
            .query_by_label_contains("chatcmpl-1 was paused for chatcmpl-2")
            .is_some(),
        "no log line naming the pause by client ids"
    );

    // the requests table: each row's why, in the scheduler's order (running, parked, waiting)
    assert!(
        harness
            .query_by_label_contains("paused for chatcmpl-2 (priority 50)")
            .is_some(),
        "no why for the parked stream"
    );
    assert!(
        harness
            .query_by_label_contains("waits for the slot: chatcmpl-2 decoding")
            .is_some(),
        "no why for the waiter"
    );
    let cancels: Vec<_> = harness.get_all_by_label("Cancel").collect();
    assert_eq!(cancels.len(), 3, "one Cancel per row");
    cancels[2].click();
    harness.run_ok();
    wait(&rt, &server, "the waiter was cancelled", |s| {
        s.waiting.is_empty() && s.counters.cancellations_by_state.waiting == 1
    });
    drop(waiter);
    long.abort();
    urgent.abort();
}

/// The app's own server over the simulated engine (its control plane and HTTP server), with
/// its config file in a fresh folder.
#[test]
fn a_finished_request_shows_as_a_kept_conversation_with_its_sequence() {
    let rt = runtime();
    let server = rt.block_on(server(Setup::default()));
    let mut dashboard = Dashboard::new(server.control.clone(), rt.handle().clone());
    let mut harness = Harness::new_ui(|ui| dashboard.ui(ui));
    harness.run_ok();
    assert!(harness.query_by_label("none kept yet").is_some());
    let response = rt
        .block_on(server.post(&chat("keep me", 5)).send())
        .unwrap();
    assert_eq!(response.status(), 200);
    wait(&rt, &server, "a conversation is kept", |s| {
        s.conversations.len() == 1
    });
    frames(&mut harness, &rt, 0.2);
    let kept = server.service.snapshot().conversations[0].clone();
    let seq = kept.seq.expect("kept in the pool");
    assert!(harness.query_by_label(&format!("{seq}")).is_some());
    assert!(
        harness
            .query_by_label(&format!("{} tokens", kept.tokens))
            .is_some()
    );
    assert!(harness.query_by_label("none kept yet").is_none());
}

#[test]
fn a_prompt_too_long_shows_a_banner_with_what_to_do_and_the_log_names_the_ids() {
    let rt = runtime();
    let server = rt.block_on(server(Setup {
        fake: FakeOptions {
            kv_cells: 64,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    }));
    let mut dashboard = Dashboard::new(server.control.clone(), rt.handle().clone());
    let mut harness = Harness::new_ui(|ui| dashboard.ui(ui));
    harness.run_ok();
    let refused = rt.block_on(
        server
            .post(&chat(&"many words ".repeat(40), 4))
            .header("user-agent", "claude-cli/2.0.1 (external, cli)")
            .send(),
    );
    assert_eq!(refused.unwrap().status(), 400);
    let served = rt.block_on(server.post(&chat("hi", 3)).send()).unwrap();
    assert_eq!(served.status(), 200);
    wait(&rt, &server, "the served one finished", |s| {
        s.counters.finished == 1
    });
    frames(&mut harness, &rt, 0.3);
    assert!(
        harness
            .query_by_label_contains("Claude Code sent")
            .is_some(),
        "no length banner"
    );
    assert!(
        harness
            .query_by_label_contains("this model's context is 64")
            .is_some(),
        "the banner does not give the context"
    );
    assert!(
        harness
            .query_by_label_contains("refused a request from claude-cli")
            .is_some(),
        "no refusal line"
    );
    assert!(
        harness
            .query_by_label_contains("chatcmpl-2 finished (")
            .is_some(),
        "no finish line naming the id"
    );
    harness.get_by_label("Dismiss").click();
    harness.run_ok();
    assert!(
        harness
            .query_by_label_contains("Claude Code sent")
            .is_none()
    );
}
