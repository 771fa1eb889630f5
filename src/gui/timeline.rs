//! Who held the prompt read lane and each slot over the last minutes: sampled from the
//! snapshots the window draws (so it needs no history from the service) and painted as one
//! row of segments per lane and slot.

use crate::ids::RequestId;
use crate::service::{ServiceSnapshot, SlotStatus};
use egui::{Align2, Color32, FontId, Rect, Sense, Stroke, Ui, pos2, vec2};
use std::collections::VecDeque;

/// How far back the timeline reaches.
pub const TIMELINE_SECS: f64 = 180.0;

/// What a holder was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    Reading,
    Decoding,
    /// Parked (paused, or a read that gave way).
    Parked,
    /// First in the waiting queue.
    Waiting,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub request: Option<RequestId>,
    /// The id its client sees (`chatcmpl-7`), as the rest of the window names it.
    pub label: String,
    pub activity: Activity,
    pub from_secs: f64,
    pub to_secs: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    pub segments: VecDeque<Segment>,
    /// Whether the last sample had a holder (the last segment is still open).
    open: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Timeline {
    rows: Vec<Row>,
    last_secs: f64,
    /// When an apply replaced the engine (drawn as a line across the rows).
    restarts_at_secs: VecDeque<f64>,
}

impl Timeline {
    /// Notes who holds what at the snapshot's time.
    pub fn record(&mut self, s: &ServiceSnapshot) {
        self.record_at(s, s.uptime_secs);
    }

    /// Notes who holds what at `now` on the window's clock (which runs on across engines).
    pub fn record_at(&mut self, s: &ServiceSnapshot, now: f64) {
        if now < self.last_secs {
            // A clock that went back: nothing before it can be placed.
            self.rows.clear();
        }
        self.last_secs = now;
        let lane = s
            .slots
            .iter()
            .find(|slot| slot.has_lane)
            .map(|slot| (slot.request_id, Activity::Reading));
        let mut held = vec![("read lane".to_owned(), lane)];
        for slot in &s.slots {
            let activity = match slot.state {
                SlotStatus::Reading => Some(Activity::Reading),
                SlotStatus::Decoding => Some(Activity::Decoding),
                SlotStatus::Empty => None,
            };
            held.push((
                format!("slot {}", slot.id),
                activity.map(|a| (slot.request_id, a)),
            ));
        }
        // who waited, and for how long: the first parked request and the head of the queue
        held.push((
            "parked".to_owned(),
            s.parked
                .first()
                .map(|p| (Some(p.request_id), Activity::Parked)),
        ));
        held.push((
            "waiting".to_owned(),
            s.waiting
                .first()
                .map(|w| (Some(w.request_id), Activity::Waiting)),
        ));
        self.rows.resize_with(held.len(), || Row {
            name: String::new(),
            segments: VecDeque::new(),
            open: false,
        });
        let label = |id: Option<RequestId>| {
            id.map_or_else(String::new, |id| {
                s.requests
                    .iter()
                    .find(|r| r.request_id == id)
                    .map_or_else(|| format!("#{}", id.0), |r| r.client_id.clone())
            })
        };
        for (row, (name, now_held)) in self.rows.iter_mut().zip(held) {
            row.name = name;
            let now_held = now_held.map(|(id, activity)| (id, activity, label(id)));
            extend(row, now_held, now);
            while row
                .segments
                .front()
                .is_some_and(|seg| seg.to_secs < now - TIMELINE_SECS)
            {
                row.segments.pop_front();
            }
        }
        while self
            .restarts_at_secs
            .front()
            .is_some_and(|at| *at < now - TIMELINE_SECS)
        {
            self.restarts_at_secs.pop_front();
        }
    }

    /// An apply replaced the engine at `at_secs` (the window's clock): every holder's segment
    /// ends there (the new engine's request ids start again) and a line marks it.
    pub fn mark_restart(&mut self, at_secs: f64) {
        for row in &mut self.rows {
            row.open = false;
        }
        self.restarts_at_secs.push_back(at_secs);
    }

    pub fn restarts_at_secs(&self) -> impl Iterator<Item = f64> + '_ {
        self.restarts_at_secs.iter().copied()
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    pub fn now_secs(&self) -> f64 {
        self.last_secs
    }
}

fn extend(row: &mut Row, held: Option<(Option<RequestId>, Activity, String)>, now: f64) {
    let Some((request, activity, label)) = held else {
        row.open = false;
        return;
    };
    if !row.open {
        row.open = true;
        row.segments.push_back(Segment {
            request,
            label,
            activity,
            from_secs: now,
            to_secs: now,
        });
        return;
    }
    match row.segments.back_mut() {
        // Still the same holder doing the same. Any change wakes the window, so two samples in
        // a row with the same holder mean it held on in between.
        Some(last) if last.request == request && last.activity == activity => {
            last.to_secs = now;
        }
        _ => row.segments.push_back(Segment {
            request,
            label,
            activity,
            from_secs: now,
            to_secs: now,
        }),
    }
}

/// A request's colour: stable per id, so one request reads the same across rows.
fn colour(request: Option<RequestId>, activity: Activity) -> Color32 {
    let Some(id) = request else {
        return Color32::from_gray(90);
    };
    let hue = (id.0.wrapping_mul(0x9E37_79B9) % 360) as f32 / 360.0;
    let (saturation, value) = match activity {
        Activity::Reading => (0.6, 0.95),
        Activity::Decoding => (0.6, 0.7),
        Activity::Parked | Activity::Waiting => (0.3, 0.55),
    };
    egui::ecolor::Hsva::new(hue, saturation, value, 1.0).into()
}

/// The timeline: a row per lane and slot, the last [`TIMELINE_SECS`], newest at the right.
pub fn timeline_ui(ui: &mut Ui, timeline: &Timeline) {
    ui.label(format!(
        "Timeline: the read lane, each slot, the first parked and the first waiting request, last {} s (bright: reading, mid: decoding, pale: parked or waiting)",
        TIMELINE_SECS as u32
    ));
    let rows = timeline.rows();
    let row_height = 18.0;
    let label_width = 70.0;
    let size = vec2(ui.available_width(), row_height * rows.len().max(1) as f32);
    let (rect, _) = ui.allocate_exact_size(size, Sense::hover());
    let painter = ui.painter_at(rect);
    let now = timeline.now_secs();
    let start = now - TIMELINE_SECS;
    let plot_left = rect.left() + label_width;
    let x_of = |secs: f64| {
        plot_left
            + ((secs - start) / TIMELINE_SECS).clamp(0.0, 1.0) as f32 * (rect.right() - plot_left)
    };
    let font = FontId::proportional(11.0);
    for (i, row) in rows.iter().enumerate() {
        let top = rect.top() + i as f32 * row_height;
        painter.text(
            pos2(rect.left(), top + row_height / 2.0),
            Align2::LEFT_CENTER,
            &row.name,
            font.clone(),
            ui.visuals().text_color(),
        );
        painter.rect_stroke(
            Rect::from_min_max(
                pos2(plot_left, top + 2.0),
                pos2(rect.right(), top + row_height - 2.0),
            ),
            0.0,
            Stroke::new(1.0, ui.visuals().weak_text_color()),
            egui::StrokeKind::Inside,
        );
        for seg in &row.segments {
            let (left, right) = (
                x_of(seg.from_secs),
                x_of(seg.to_secs).max(x_of(seg.from_secs) + 2.0),
            );
            let bar =
                Rect::from_min_max(pos2(left, top + 3.0), pos2(right, top + row_height - 3.0));
            painter.rect_filled(bar, 2.0, colour(seg.request, seg.activity));
            if seg.request.is_some() && bar.width() > 60.0 {
                painter.text(
                    bar.center(),
                    Align2::CENTER_CENTER,
                    &seg.label,
                    font.clone(),
                    Color32::BLACK,
                );
            }
        }
    }
    for at in timeline.restarts_at_secs() {
        let x = x_of(at);
        painter.vline(x, rect.y_range(), Stroke::new(2.0, Color32::WHITE));
        painter.text(
            pos2(x + 3.0, rect.top()),
            Align2::LEFT_TOP,
            "engine restarted",
            font.clone(),
            ui.visuals().strong_text_color(),
        );
    }
}

#[cfg(test)]
mod tests {
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
        t.record_at(&at(1.0, slot(SlotStatus::Decoding, Some(1), false)), 1.0);
        t.record_at(&at(4.0, slot(SlotStatus::Decoding, Some(1), false)), 4.0);
        t.mark_restart(4.5);
        // the new engine's clock starts at 0 and its ids again at 1: on the window's clock
        // (4.5 s on) its request 1 is a segment of its own
        t.record_at(&at(0.5, slot(SlotStatus::Decoding, Some(1), false)), 5.0);
        t.record_at(&at(1.5, slot(SlotStatus::Decoding, Some(1), false)), 6.0);
        let spans: Vec<_> = t.rows()[1]
            .segments
            .iter()
            .map(|s| (s.from_secs, s.to_secs))
            .collect();
        assert_eq!(spans, [(1.0, 4.0), (5.0, 6.0)]);
        assert_eq!(t.restarts_at_secs().collect::<Vec<_>>(), [4.5]);
    }
}
