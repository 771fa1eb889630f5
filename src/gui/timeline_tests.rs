//! The timeline's tests: its segments from snapshots, its marks from the stream.

use super::*;
use crate::service::SchedulerSettings;
use crate::service::SlotView;

fn slot(state: SlotStatus, request: Option<u64>, lane: bool) -> SlotView {
    SlotView {
        slot: crate::service::SchedulerSlotView {
            id: 0,
            state,
            request_id: request.map(RequestId),
            seq: request.map(|_| crate::ids::SeqId(0)),
            priority: None,
            prompt_tokens: 0,
            held_tokens: 0,
            read_tokens: 0,
            generated_tokens: 0,
            has_lane: lane,
            effective_priority: None,
            boost: 0,
            run_secs: 0.0,
            pausable_in_secs: None,
        },
        tokens_per_sec: None,
    }
}

fn at(secs: f64, slot_view: SlotView) -> ServiceSnapshot {
    let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
    s.uptime_secs = secs;
    s.slots = vec![slot_view];
    s
}

#[test]
fn a_holder_that_stays_extends_one_segment_and_a_change_starts_another() {
    let mut t = Timeline::default();
    t.record(&at(1.0, slot(SlotStatus::Reading, Some(7), true)));
    t.record(&at(1.5, slot(SlotStatus::Reading, Some(7), true)));
    t.record(&at(2.0, slot(SlotStatus::Decoding, Some(7), false)));
    t.record(&at(2.5, slot(SlotStatus::Reading, Some(8), true)));
    let lane = &t.rows()[0];
    assert_eq!(lane.name, "read lane");
    let lane_holders: Vec<_> = lane.segments.iter().map(|s| s.request).collect();
    assert_eq!(lane_holders, [Some(RequestId(7)), Some(RequestId(8))]);
    assert_eq!(lane.segments[0].to_secs, 1.5);
    let slot_row = &t.rows()[1];
    let acts: Vec<_> = slot_row
        .segments
        .iter()
        .map(|s| (s.request, s.activity))
        .collect();
    assert_eq!(
        acts,
        [
            (Some(RequestId(7)), Activity::Reading),
            (Some(RequestId(7)), Activity::Decoding),
            (Some(RequestId(8)), Activity::Reading),
        ]
    );
}

#[test]
fn segments_are_labelled_with_the_id_the_client_sees_not_the_internal_one() {
    let mut s = at(1.0, slot(SlotStatus::Decoding, Some(7), false));
    s.requests = crate::service::request_rows(&s, |_| {
        Some(crate::service::LiveFacts {
            origin: crate::service::RequestOrigin {
                route: crate::service::Route::Messages,
                ..Default::default()
            },
            ..Default::default()
        })
    });
    let mut t = Timeline::default();
    t.record(&s);
    assert_eq!(t.rows()[1].segments[0].label, "msg_7");
}

#[test]
fn the_first_parked_and_the_first_waiting_request_have_rows_of_their_own() {
    let mut s = at(1.0, slot(SlotStatus::Decoding, Some(9), false));
    s.waiting.push(crate::service::WaitingView {
        request_id: RequestId(3),
        priority: 0,
        effective_priority: 0,
        boost: 0,
        aging: 0,
        waited_secs: 0.5,
        tokens_left_to_read: 10,
    });
    let mut t = Timeline::default();
    t.record(&s);
    s.uptime_secs = 2.0;
    t.record(&s);
    let waiting = t.rows().iter().find(|r| r.name == "waiting").unwrap();
    assert_eq!(waiting.segments.len(), 1);
    assert_eq!(
        (waiting.segments[0].request, waiting.segments[0].activity),
        (Some(RequestId(3)), Activity::Waiting)
    );
    assert_eq!(waiting.segments[0].to_secs, 2.0);
    let parked = t.rows().iter().find(|r| r.name == "parked").unwrap();
    assert!(parked.segments.is_empty());
}

#[test]
fn segments_older_than_the_window_are_dropped_and_a_new_service_starts_afresh() {
    let mut t = Timeline::default();
    t.record(&at(1.0, slot(SlotStatus::Decoding, Some(1), false)));
    t.record(&at(
        1.0 + TIMELINE_SECS + 5.0,
        slot(SlotStatus::Decoding, Some(2), false),
    ));
    assert_eq!(t.rows()[1].segments.len(), 1);
    t.record(&at(0.5, slot(SlotStatus::Empty, None, false)));
    assert!(t.rows()[1].segments.is_empty());
}

#[test]
fn an_idle_sample_between_two_turns_of_one_request_splits_its_segment() {
    let mut t = Timeline::default();
    t.record(&at(1.0, slot(SlotStatus::Decoding, Some(4), false)));
    t.record(&at(5.0, slot(SlotStatus::Decoding, Some(4), false)));
    t.record(&at(6.0, slot(SlotStatus::Empty, None, false)));
    t.record(&at(9.0, slot(SlotStatus::Decoding, Some(4), false)));
    let spans: Vec<_> = t.rows()[1]
        .segments
        .iter()
        .map(|s| (s.from_secs, s.to_secs))
        .collect();
    assert_eq!(spans, [(1.0, 5.0), (9.0, 9.0)]);
}

#[test]
fn an_engine_replaced_by_an_apply_keeps_the_earlier_segments_and_marks_the_restart() {
    let mut t = Timeline::default();
    t.record(&at(1.0, slot(SlotStatus::Decoding, Some(1), false)));
    t.record(&at(4.0, slot(SlotStatus::Decoding, Some(1), false)));
    t.mark_restart(4.5);
    // the clock and the ids run on across engines: the new engine's request 2 is a segment
    // of its own, and request 1's ended at the restart
    t.record(&at(5.0, slot(SlotStatus::Decoding, Some(2), false)));
    t.record(&at(6.0, slot(SlotStatus::Decoding, Some(2), false)));
    let spans: Vec<_> = t.rows()[1]
        .segments
        .iter()
        .map(|s| (s.from_secs, s.to_secs))
        .collect();
    assert_eq!(spans, [(1.0, 4.0), (5.0, 6.0)]);
    assert_eq!(t.restarts_at_secs().collect::<Vec<_>>(), [4.5]);
}

fn entry(seq: u64, at_secs: f64, kind: LogKind, text: &str) -> crate::service::LogEntry {
    crate::service::LogEntry {
        at_secs,
        kind,
        request_id: Some(RequestId(3)),
        client_id: Some("chatcmpl-3".into()),
        text: text.into(),
        seq,
        event: crate::service::Observed::Resumed,
    }
}

#[test]
fn the_streams_interruptions_are_marked_once_at_their_time_on_the_windows_clock() {
    let mut s = at(2.0, slot(SlotStatus::Decoding, Some(3), false));
    s.log = vec![
        entry(0, 0.5, LogKind::Arrived, "chatcmpl-3 arrived"),
        entry(
            1,
            1.2,
            LogKind::Paused,
            "chatcmpl-3 was paused for chatcmpl-4",
        ),
    ]
    .into();
    let mut t = Timeline::default();
    // the window's clock runs 10 s ahead of this service's (an earlier engine's time)
    t.record_at(&s, 12.0);
    t.record_at(&s, 12.5);
    let marks: Vec<(f64, LogKind)> = t.marks().map(|m| (m.at_secs, m.kind)).collect();
    assert_eq!(marks, [(11.2, LogKind::Paused)], "once, at its own time");
    // a new service after an apply continues the stream's numbers and its clock
    t.mark_restart(13.0);
    s.uptime_secs = 4.0;
    s.log = vec![entry(
        2,
        3.8,
        LogKind::Cancelled,
        "chatcmpl-3 was cancelled",
    )]
    .into();
    t.record_at(&s, 14.0);
    let kinds: Vec<LogKind> = t.marks().map(|m| m.kind).collect();
    assert_eq!(kinds, [LogKind::Paused, LogKind::Cancelled]);
}

#[test]
fn pointing_at_a_mark_shows_what_happened() {
    let mut s = at(100.0, slot(SlotStatus::Decoding, Some(3), false));
    let words = "chatcmpl-3 was paused for chatcmpl-4 (its cells kept in the pool)";
    s.log = vec![entry(0, 10.0, LogKind::Paused, words)].into();
    let mut t = Timeline::default();
    t.record(&s);
    let drawn = std::cell::Cell::new(Rect::NOTHING);
    let mut harness = egui_kittest::Harness::new_ui(|ui| {
        ui.style_mut().interaction.tooltip_delay = 0.0;
        timeline_ui(ui, &t);
        drawn.set(ui.min_rect());
    });
    harness.run();
    // the marks' row is the last 18 px of what the timeline drew: point along it
    let drawn = drawn.get();
    let y = drawn.bottom() - 9.0;
    let shown = (0..(drawn.width() as i32 / 2)).any(|i| {
        harness.hover_at(pos2(drawn.left() + 2.0 * i as f32, y));
        harness.run();
        use egui_kittest::kittest::Queryable;
        harness
            .query_by_label_contains("was paused for chatcmpl-4")
            .is_some()
    });
    assert!(
        shown,
        "no pointer position along the row showed the mark's words"
    );
}
