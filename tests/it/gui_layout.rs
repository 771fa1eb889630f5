//! The dashboard's layout under egui_kittest with a crowded table (an agent's long stream and
//! ten requests over the simulated engine): at the window's default size and at full HD, no
//! text of the live view is cut at its edge or drawn over another (asserted on the rendered
//! labels' rectangles).

use crate::api_fake::{Setup, chat, server};
use crate::gui::{frames, wait};
use crate::support::runtime;
use egui::Rect;
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use serde_json::json;
use strata_desk::engine_worker::FakeOptions;
use strata_desk::gui::Dashboard;
use strata_desk::scheduler::SchedulerSettings;
use strata_desk::service::RequestStatus;

/// A label's text (egui gives a label's text as its value).
fn text(n: &egui_kittest::Node<'_>) -> String {
    let node = n.accesskit_node();
    node.label().or_else(|| node.value()).unwrap_or_default()
}

/// The live view's area (left of the totals panel, from the Requests heading down), and
/// every label in its panel (each of the requests table's rows, whether scrolled into view
/// or not, the cost figures, the slots, ...) with where it was drawn.
fn live_view_labels(harness: &Harness<'_>) -> (Rect, Vec<(String, Rect)>) {
    let heading = harness.get_by_label("Requests");
    let top = heading.rect().top();
    let right = harness.get_by_label("Counters").rect().left();
    let area = Rect::from_min_max(egui::pos2(0.0, top), egui::pos2(right, f32::INFINITY));
    // the central panel: the heading's nearest pane
    let mut pane = heading.parent();
    while let Some(p) = pane
        && p.accesskit_node().role() != egui::accesskit::Role::Pane
    {
        pane = p.parent();
    }
    let pane = pane.expect("the live view is in no panel");
    let labels = pane
        .query_all_by_role(egui::accesskit::Role::Label)
        .map(|n| (text(&n), n.rect()))
        .collect();
    (area, labels)
}

/// What is wrong with the layout: labels cut at the live view's right edge, and pairs drawn
/// over each other.
fn layout_faults(area: Rect, labels: &[(String, Rect)]) -> Vec<String> {
    let mut faults = Vec::new();
    for (text, r) in labels {
        if r.right() > area.right() + 0.5 {
            faults.push(format!(
                "{text:?} ends at x {:.0}, past the live view's edge at {:.0}",
                r.right(),
                area.right()
            ));
        }
    }
    for (i, (a, ra)) in labels.iter().enumerate() {
        for (b, rb) in &labels[i + 1..] {
            let both = ra.intersect(*rb);
            if both.width() > 0.5 && both.height() > 0.5 {
                faults.push(format!("{a:?} at {ra:?} is drawn over {b:?} at {rb:?}"));
            }
        }
    }
    faults
}

#[test]
fn a_crowded_table_is_neither_cut_nor_drawn_over_at_the_default_size_and_full_hd() {
    let rt = runtime();
    let server = rt.block_on(server(Setup {
        fake: FakeOptions {
            prompt_tokens_per_sec: 2_000.0,
            decode_steps_per_sec: 8.0,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            solo_priority: true,
            // the agent is paused soon after a higher priority comes: a parked row too
            min_run_quantum_secs: 0.3,
            ..SchedulerSettings::default()
        },
        worker: |w| w.slots = 1,
        ..Setup::default()
    }));
    // the agent: a long conversation and a long answer
    let mut agent = chat(&"the agent's long conversation so far ".repeat(120), 2000);
    agent["stream"] = json!(true);
    let mut sent = vec![
        rt.spawn(
            server
                .post(&agent)
                .header("user-agent", "claude-cli/2.0.1 (external, cli)")
                .send(),
        ),
    ];
    wait(&rt, &server, "the agent decodes", |s| {
        s.requests.iter().any(|r| r.generated_tokens > 2)
    });
    // ten more with every kind of why: priorities above and below the agent's, long prompts
    for i in 0..10_i64 {
        let mut body = chat(
            &"a question with some context ".repeat(20 * (i as usize + 1)),
            300,
        );
        body["priority"] = json!(i % 4);
        sent.push(rt.spawn(server.post(&body).send()));
    }
    // (under load more reads overlap: one may give way and be parked beside the agent)
    let crowded = |s: &strata_desk::service::ServiceSnapshot| {
        s.requests.len() == 11
            && s.requests
                .iter()
                .any(|r| r.client == "claude-cli" && r.state == RequestStatus::Parked)
            && s.requests.iter().any(|r| r.tokens_per_sec.is_some())
    };
    let started = std::time::Instant::now();
    while !crowded(&server.service.snapshot()) {
        let s = server.service.snapshot();
        let states: Vec<String> = s
            .requests
            .iter()
            .map(|r| format!("{} {} {:?}", r.client_id, r.state, r.tokens_per_sec))
            .collect();
        assert!(
            started.elapsed().as_secs() < 40,
            "never eleven in flight with the agent paused: {states:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // the paused agent holds its whole prompt and what it wrote: its row says so (not "read 0")
    let held = server
        .service
        .snapshot()
        .requests
        .iter()
        .find(|r| r.client == "claude-cli")
        .map(|r| {
            format!(
                "read {}/{}, out {}/2000",
                r.prompt_tokens, r.prompt_tokens, r.generated_tokens
            )
        })
        .unwrap();

    for size in [[1100.0, 720.0], [1920.0, 1080.0]] {
        let mut dashboard = Dashboard::new(server.control.clone(), rt.handle().clone());
        let mut harness = Harness::builder()
            .with_size(size)
            .build_ui(|ui| dashboard.ui(ui));
        frames(&mut harness, &rt, 0.5);
        let (area, labels) = live_view_labels(&harness);
        // the crowded table is there: a row per request, with progress, speed and why
        let progress = labels
            .iter()
            .filter(|(t, _)| t.starts_with("read "))
            .count();
        // (the Parked panel shows the agent's progress too)
        assert!(
            progress >= 11,
            "{progress} progress cells for 11 requests at {size:?}"
        );
        assert!(
            labels.iter().any(|(t, _)| *t == held),
            "the paused agent's row does not show {held:?} at {size:?}"
        );
        assert!(
            // one unit for a rate across the window, joined to its number
            labels.iter().any(|(t, _)| t.ends_with("\u{a0}tok/s")),
            "no speed at {size:?}"
        );
        assert!(
            labels.iter().any(|(t, _)| t.starts_with("waits for")),
            "no why at {size:?}"
        );
        let faults = layout_faults(area, &labels);
        assert!(
            faults.is_empty(),
            "at {size:?} ({} labels in {area:?}):\n{}",
            labels.len(),
            faults.join("\n")
        );
    }
    for request in sent {
        request.abort();
    }
}
