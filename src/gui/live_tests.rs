//! The window at its default size (1100x720) in a crowded state: a stream running, the agent's
//! stream paused, three waiting (one aged, one starving), eight ended requests and the cost
//! table, TTFTs from 0.1 s to 170 s. The live view (slots, parked, waiting, the TTFT plot, the
//! timeline) is above the fold whatever the history holds, and no text is cut.

use super::commands::CommandQueue;
use super::history::{LogFilter, scheduler_log_ui};
use super::live::{LiveView, live_view_ui};
use super::requests::RequestsView;
use super::timeline::Timeline;
use crate::ids::RequestId;
use crate::service::{
    FinishedRequest, ParkKind, ParkedIn, ParkedView, RequestRow, RequestStatus, Route,
    SchedulerSettings, SchedulerSlotView, ServiceSnapshot, SlotStatus, SlotView, TtftSample,
    WaitingView, cost_view,
};
use egui::Rect;
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use std::collections::VecDeque;

const WHY: &str = "waits for a slot: slot 0 decodes chatcmpl-2 (priority 5), pausable in \
                   0.4 s; then it reads its prompt of 2400 tokens, about 1.2 s at the measured \
                   rate, behind chatcmpl-4 which ranks higher after aging";

fn row(id: u64, state: RequestStatus, priority: i32, aging: i64, waited: f64) -> RequestRow {
    RequestRow {
        request_id: RequestId(id),
        client_id: format!("chatcmpl-{id}"),
        client: if id == 1 {
            "claude-cli".into()
        } else {
            String::new()
        },
        route: Route::ChatCompletions,
        state,
        priority,
        effective_priority: i64::from(priority) + aging,
        boost: 0,
        aging,
        elapsed_secs: waited,
        waited_secs: waited,
        parks: u32::from(state == RequestStatus::Parked),
        parked_secs: 0.0,
        prompt_tokens: 2400,
        read_tokens: 0,
        generated_tokens: if state == RequestStatus::Waiting {
            0
        } else {
            2
        },
        max_tokens: Some(700),
        tokens_per_sec: (state == RequestStatus::Decoding).then_some(8.0),
        read_secs_left: None,
        pausable_in_secs: None,
        why: WHY.to_owned(),
    }
}

fn ended(id: u64) -> FinishedRequest {
    FinishedRequest {
        request_id: RequestId(id),
        client_id: format!("chatcmpl-{id}"),
        client: "claude-cli".into(),
        route: Route::ChatCompletions,
        priority: (id % 3) as i32,
        outcome: "stop",
        prompt_tokens: 3000,
        prompt_tokens_held: 0,
        prompt_tokens_read: 3000,
        output_tokens: 700,
        queue_wait_secs: Some(2.5),
        ttft_secs: Some(3.1),
        parks: 2,
        parked_secs: 21.6,
        pauses: 1,
        give_ways: 1,
        end_to_end_secs: 95.0,
        paused_others: 1,
        gained_secs_estimate: id.is_multiple_of(2).then_some(38.2),
        ended_at_secs: 100.0 + id as f64,
    }
}

/// The crowded state.
pub fn crowded() -> ServiceSnapshot {
    let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
    s.uptime_secs = 200.0;
    s.slots = vec![SlotView {
        slot: SchedulerSlotView {
            id: 0,
            state: SlotStatus::Decoding,
            request_id: Some(RequestId(2)),
            seq: Some(crate::ids::SeqId(1)),
            priority: Some(5),
            prompt_tokens: 40,
            held_tokens: 40,
            read_tokens: 40,
            generated_tokens: 120,
            has_lane: false,
            effective_priority: Some(5),
            boost: 0,
            run_secs: 15.0,
            pausable_in_secs: Some(0.4),
        },
        tokens_per_sec: Some(8.0),
    }];
    s.parked = vec![ParkedView {
        request_id: RequestId(1),
        priority: 0,
        effective_priority: 0,
        boost: 0,
        generated_tokens: 2,
        read_tokens: 2400,
        parked_secs: 12.3,
        pauses: 1,
        kind: ParkKind::Decode,
        place: ParkedIn::Spare,
        seq: Some(crate::ids::SeqId(0)),
        cause: None,
        parked_for: Some(RequestId(2)),
    }];
    s.waiting = [(3, 0, 0, 34.8), (4, 5, 1, 12.0), (5, 1, 0, 2.0)]
        .into_iter()
        .map(|(id, priority, aging, waited)| WaitingView {
            request_id: RequestId(id),
            priority,
            effective_priority: i64::from(priority) + aging,
            boost: 0,
            aging,
            waited_secs: waited,
            tokens_left_to_read: 2400,
        })
        .collect();
    s.requests = vec![
        row(2, RequestStatus::Decoding, 5, 0, 0.0),
        row(1, RequestStatus::Parked, 0, 0, 12.3),
        row(3, RequestStatus::Waiting, 0, 0, 34.8),
        row(4, RequestStatus::Waiting, 5, 1, 12.0),
        row(5, RequestStatus::Waiting, 1, 0, 2.0),
    ];
    s.finished = (10..18).map(ended).collect::<Vec<_>>().into();
    s.cost = cost_view(&s.finished, 200.0, 600.0);
    s.ttft = (1..=12)
        .map(|i| TtftSample {
            request_id: RequestId(i),
            client_id: format!("chatcmpl-{i}"),
            client: if i % 2 == 0 {
                "claude-cli".into()
            } else {
                String::new()
            },
            priority: 0,
            ttft_secs: if i == 3 { 170.0 } else { 0.1 * i as f64 },
            at_secs: 10.0 * i as f64,
        })
        .collect::<Vec<_>>()
        .into();
    s
}

/// What one frame of the window drew: the live part's rectangle, the fold (the central
/// panel's visible bottom, above the log), its visible right edge, and every label drawn in
/// the central panel with its rectangle.
pub struct Drawn {
    pub live: Rect,
    pub fold: f32,
    pub right: f32,
    pub labels: Vec<(String, Rect)>,
}

/// The window's panels as the dashboard lays them out (the engine line and switches on top,
/// the log below at its default height, the totals at the right), the middle drawn by
/// [`live_view_ui`], at `size`.
pub fn draw(s: &ServiceSnapshot, size: [f32; 2]) -> Drawn {
    let mut timeline = Timeline::default();
    for at in [150.0, 170.0, 200.0] {
        timeline.record_at(s, at);
    }
    let found = std::cell::Cell::new((Rect::NOTHING, 0.0, 0.0));
    let (mut view, mut q, mut filter) = (
        RequestsView::default(),
        CommandQueue::default(),
        LogFilter::default(),
    );
    let mut confirm = None;
    let mut harness = Harness::builder().with_size(size).build_ui(|ui| {
        egui::Panel::top("engine").show(ui, |ui| {
            super::panels::engine_ui(ui, s, &mut confirm, &mut q);
            super::controls::controls_ui(ui, s, &mut q);
            ui.horizontal(|ui| {
                let _ = ui.button("Settings and model");
                ui.label("serving on http://127.0.0.1:8080");
            });
        });
        // the log at the height the window opens with
        egui::Panel::bottom("events")
            .exact_size(190.0)
            .show(ui, |ui| {
                scheduler_log_ui(ui, s, &mut filter, &VecDeque::new());
            });
        egui::Panel::right("totals")
            .resizable(true)
            .default_size(250.0)
            .size_range(200.0..=700.0)
            .show(ui, |ui| super::panels::counters_ui(ui, s));
        egui::CentralPanel::default().show(ui, |ui| {
            let (fold, right) = (ui.max_rect().bottom(), ui.max_rect().right());
            eprintln!(
                "central max_rect {:?} clip {:?}",
                ui.max_rect(),
                ui.clip_rect()
            );
            egui::ScrollArea::vertical().show(ui, |ui| {
                let live = LiveView {
                    snapshot: s,
                    timeline: &timeline,
                    starving_secs: 30.0,
                };
                eprintln!(
                    "scroll max_rect {:?} clip {:?}",
                    ui.max_rect(),
                    ui.clip_rect()
                );
                let rect = live_view_ui(ui, &live, &mut view, &mut q);
                found.set((rect, fold, right));
            });
        });
    });
    harness.run_ok();
    let (live, fold, right) = found.get();
    let pane = harness
        .get_by_label("Slots")
        .parent()
        .into_iter()
        .chain(std::iter::successors(
            harness.get_by_label("Slots").parent(),
            |p| p.parent(),
        ))
        .find(|p| p.accesskit_node().role() == egui::accesskit::Role::Pane)
        .expect("the live view is in no panel");
    let labels = pane
        .query_all_by_role(egui::accesskit::Role::Label)
        .map(|n| {
            let node = n.accesskit_node();
            let text = node.label().or_else(|| node.value()).unwrap_or_default();
            (text, n.rect())
        })
        .collect();
    Drawn {
        live,
        fold,
        right,
        labels,
    }
}

const DEFAULT_SIZE: [f32; 2] = [1100.0, 720.0];

#[test]
fn in_a_crowded_window_the_live_view_is_above_the_fold_and_the_history_below_it() {
    let s = crowded();
    let d = draw(&s, DEFAULT_SIZE);
    assert!(
        d.live.bottom() <= d.fold,
        "the live view ends at y {:.0}, below the fold at {:.0}",
        d.live.bottom(),
        d.fold
    );
    let top_of = |start: &str| {
        d.labels
            .iter()
            .find(|(t, _)| t.starts_with(start))
            .unwrap_or_else(|| panic!("no {start:?}"))
            .1
    };
    for live in [
        "Slots",
        "slot 0: decoding chatcmpl-2",
        "Parked",
        "paused stream, priority 0",
        "Waiting",
        "priority 1, waited",
        "Time to first token",
        "Timeline",
    ] {
        let r = top_of(live);
        assert!(
            r.bottom() <= d.fold,
            "{live:?} ends at y {:.0}, below the fold at {:.0}",
            r.bottom(),
            d.fold
        );
    }
    // the history comes after the live view
    for history in ["Ended", "What preemption cost"] {
        assert!(
            top_of(history).top() >= d.live.bottom(),
            "{history:?} is above the live view"
        );
    }
}

#[test]
fn in_a_crowded_window_no_text_is_cut_at_the_edge_or_drawn_over_another() {
    let s = crowded();
    let d = draw(&s, DEFAULT_SIZE);
    let mut faults = Vec::new();
    for (text, r) in &d.labels {
        if r.right() > d.right + 0.5 {
            faults.push(format!(
                "{text:?} at {r:?} ends at x {:.0}, past the edge at {:.0}",
                r.right(),
                d.right
            ));
        }
    }
    for (i, (a, ra)) in d.labels.iter().enumerate() {
        for (b, rb) in &d.labels[i + 1..] {
            let both = ra.intersect(*rb);
            if both.width() > 0.5 && both.height() > 0.5 {
                faults.push(format!("{a:?} at {ra:?} is drawn over {b:?} at {rb:?}"));
            }
        }
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
    // the long texts are there whole (wrapped, not elided)
    assert!(d.labels.iter().any(|(t, _)| t == "5 -> 6 aging"));
    assert!(d.labels.iter().any(|(t, _)| t == WHY));
    assert!(d.labels.iter().any(|(t, _)| t.ends_with("end to end")));
}

#[test]
fn a_starving_request_is_marked_in_its_own_row_of_the_requests_table() {
    let s = crowded();
    let d = draw(&s, DEFAULT_SIZE);
    let starving: Vec<&String> = d
        .labels
        .iter()
        .map(|(t, _)| t)
        .filter(|t| t.contains("starving"))
        .collect();
    // the row's state cell, and the Waiting section's line
    assert!(
        starving.contains(&&"waiting 34.8\u{a0}s - starving".to_owned()),
        "{starving:?}"
    );
    assert_eq!(starving.len(), 2, "{starving:?}");
}
