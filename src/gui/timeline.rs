//! Who held the prompt read lane and each slot over the last minutes: sampled from the
//! snapshots the window draws (so it needs no history from the service) and painted as one
//! row of segments per lane and slot; and below them the interruptions (pauses, give-ways,
//! parks, resumes, cancels, failures, refusals, engine starts, settings changes, diagnostics)
//! at the times the service's observation stream gives, each once, its words on hover.

use crate::ids::RequestId;
use crate::service::{LogKind, ServiceSnapshot, SlotStatus};
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

/// An event of the service's stream, on the window's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub at_secs: f64,
    pub request: Option<RequestId>,
    pub kind: LogKind,
    /// The log's line.
    pub words: String,
}

#[derive(Debug, Clone, Default)]
pub struct Timeline {
    rows: Vec<Row>,
    last_secs: f64,
    /// When an apply replaced the engine (drawn as a line across the rows).
    restarts_at_secs: VecDeque<f64>,
    /// The stream's interruptions in the window, oldest first.
    marks: VecDeque<Mark>,
    /// The first log entry (`seq`) of the live service not taken yet.
    next_seq: u64,
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
            self.marks.clear();
            self.next_seq = 0;
        }
        self.last_secs = now;
        self.take_marks(s, now);
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
        while self
            .marks
            .front()
            .is_some_and(|m| m.at_secs < now - TIMELINE_SECS)
        {
            self.marks.pop_front();
        }
    }

    /// The log entries that came since the last snapshot, each once, placed on the window's
    /// clock (`now` is the snapshot's `uptime_secs` there).
    fn take_marks(&mut self, s: &ServiceSnapshot, now: f64) {
        let offset = now - s.uptime_secs;
        for entry in s.log.iter().filter(|e| e.seq >= self.next_seq) {
            if entry.kind.interrupts() {
                self.marks.push_back(Mark {
                    at_secs: entry.at_secs + offset,
                    request: entry.request_id,
                    kind: entry.kind,
                    words: entry.text.clone(),
                });
            }
        }
        if let Some(last) = s.log.last() {
            self.next_seq = self.next_seq.max(last.seq + 1);
        }
    }

    pub fn marks(&self) -> impl Iterator<Item = &Mark> {
        self.marks.iter()
    }

    /// An apply replaced the engine at `at_secs`: every holder's segment ends there (its
    /// requests ended with the old engine) and a line marks it. The clock and the stream's
    /// `seq` run on across engines.
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
        "Timeline: the read lane, each slot, the first parked and the first waiting request, and the interruptions (point at one for what happened), last {} s (bright: reading, mid: decoding, pale: parked or waiting)",
        TIMELINE_SECS as u32
    ));
    let rows = timeline.rows();
    let row_height = 18.0;
    let label_width = 70.0;
    // the rows, then one of the stream's marks
    let size = vec2(ui.available_width(), row_height * (rows.len() + 1) as f32);
    let (rect, response) = ui.allocate_exact_size(size, Sense::hover());
    let plot = Plot {
        painter: ui.painter_at(rect),
        rect,
        plot_left: rect.left() + label_width,
        start: timeline.now_secs() - TIMELINE_SECS,
        row_height,
        font: FontId::proportional(11.0),
    };
    for (i, row) in rows.iter().enumerate() {
        plot.row(ui, rect.top() + i as f32 * row_height, row);
    }
    let marks_top = rect.top() + rows.len() as f32 * row_height;
    plot.marks(ui, marks_top, timeline, response);
    for at in timeline.restarts_at_secs() {
        let x = plot.x_of(at);
        plot.painter
            .vline(x, rect.y_range(), Stroke::new(2.0, Color32::WHITE));
        plot.painter.text(
            pos2(x + 3.0, rect.top()),
            Align2::LEFT_TOP,
            "engine restarted",
            plot.font.clone(),
            ui.visuals().strong_text_color(),
        );
    }
}

/// Where the timeline is drawn: its rectangle, the plot's left edge (right of the rows'
/// names), the time at that edge, a row's height and the font.
struct Plot {
    painter: egui::Painter,
    rect: Rect,
    plot_left: f32,
    start: f64,
    row_height: f32,
    font: FontId,
}

impl Plot {
    /// The x of `secs` on the plot, clamped to it.
    fn x_of(&self, secs: f64) -> f32 {
        self.plot_left
            + ((secs - self.start) / TIMELINE_SECS).clamp(0.0, 1.0) as f32
                * (self.rect.right() - self.plot_left)
    }

    /// One row at `top`: its name, its frame, and a bar per segment (with its request's label
    /// where it fits).
    fn row(&self, ui: &Ui, top: f32, row: &Row) {
        let (painter, rect, row_height) = (&self.painter, self.rect, self.row_height);
        painter.text(
            pos2(rect.left(), top + row_height / 2.0),
            Align2::LEFT_CENTER,
            &row.name,
            self.font.clone(),
            ui.visuals().text_color(),
        );
        painter.rect_stroke(
            Rect::from_min_max(
                pos2(self.plot_left, top + 2.0),
                pos2(rect.right(), top + row_height - 2.0),
            ),
            0.0,
            Stroke::new(1.0, ui.visuals().weak_text_color()),
            egui::StrokeKind::Inside,
        );
        for seg in &row.segments {
            let (left, right) = (
                self.x_of(seg.from_secs),
                self.x_of(seg.to_secs).max(self.x_of(seg.from_secs) + 2.0),
            );
            let bar =
                Rect::from_min_max(pos2(left, top + 3.0), pos2(right, top + row_height - 3.0));
            painter.rect_filled(bar, 2.0, colour(seg.request, seg.activity));
            if seg.request.is_some() && bar.width() > 60.0 {
                painter.text(
                    bar.center(),
                    Align2::CENTER_CENTER,
                    &seg.label,
                    self.font.clone(),
                    Color32::BLACK,
                );
            }
        }
    }

    /// The events row at `top`: a line per mark, and the words of the marks under the pointer.
    fn marks(&self, ui: &Ui, top: f32, timeline: &Timeline, response: egui::Response) {
        self.painter.text(
            pos2(self.rect.left(), top + self.row_height / 2.0),
            Align2::LEFT_CENTER,
            "events",
            self.font.clone(),
            ui.visuals().text_color(),
        );
        let marks_y = top + 2.0..=top + self.row_height - 2.0;
        for mark in timeline.marks() {
            let stroke = Stroke::new(2.0, colour(mark.request, Activity::Reading));
            self.painter
                .vline(self.x_of(mark.at_secs), marks_y.clone(), stroke);
        }
        if let Some(pointer) = response.hover_pos()
            && marks_y.contains(&pointer.y)
        {
            let near: Vec<&Mark> = timeline
                .marks()
                .filter(|m| (self.x_of(m.at_secs) - pointer.x).abs() <= 4.0)
                .collect();
            if !near.is_empty() {
                response.on_hover_ui_at_pointer(|ui| {
                    for mark in near {
                        ui.label(format!("{:.1} s: {}", mark.at_secs, mark.words));
                    }
                });
            }
        }
    }
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
