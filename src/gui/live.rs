//! The middle of the window, in the order a person looks: what runs and waits now (slots,
//! parked, waiting side by side; the TTFT plot beside the timeline), then the requests table
//! with each request's why, then the history (what preemption cost, the ended requests), so
//! that the history, however long, never pushes the live view below the fold.

use super::commands::CommandQueue;
use super::panels::{parked_ui, slots_ui, waiting_ui};
use super::requests::{RequestsView, requests_ui};
use super::timeline::{Timeline, timeline_ui};
use crate::service::ServiceSnapshot;
use egui::Ui;

/// `n` columns of equal width, whole points wide, within the available width (egui's own
/// columns can end a point or two past it, where the panel cuts their text).
fn side_by_side(ui: &mut Ui, n: usize, mut column: impl FnMut(usize, &mut Ui)) {
    let gap = ui.spacing().item_spacing.x;
    let width = ((ui.available_width() - gap * (n - 1) as f32) / n as f32).floor();
    ui.horizontal_top(|ui| {
        for i in 0..n {
            ui.allocate_ui_with_layout(
                egui::vec2(width, 0.0),
                egui::Layout::top_down(egui::Align::Min),
                |ui| {
                    ui.set_width(width);
                    column(i, ui);
                },
            );
        }
    });
}

/// What the middle of the window reads: the snapshot, the timeline's samples (and where an
/// apply started a new engine), and the wait past which a request starves.
pub struct LiveView<'a> {
    pub snapshot: &'a ServiceSnapshot,
    pub timeline: &'a Timeline,
    pub starving_secs: f64,
}

/// The live view, the requests table, then the history. Returns where the live part (slots
/// to timeline) was drawn.
pub fn live_view_ui(
    ui: &mut Ui,
    live: &LiveView<'_>,
    requests: &mut RequestsView,
    q: &mut CommandQueue,
) -> egui::Rect {
    let s = live.snapshot;
    let top = ui.cursor().top();
    side_by_side(ui, 3, |i, ui| match i {
        0 => slots_ui(ui, s),
        1 => parked_ui(ui, s),
        _ => waiting_ui(ui, s, live.starving_secs),
    });
    ui.separator();
    side_by_side(ui, 2, |i, ui| match i {
        0 => {
            let restarts: Vec<f64> = live.timeline.restarts_at_secs().collect();
            super::ttft::ttft_ui(ui, s, &restarts);
        }
        _ => timeline_ui(ui, live.timeline),
    });
    let live_rect = egui::Rect::from_min_max(
        egui::pos2(ui.max_rect().left(), top),
        egui::pos2(ui.max_rect().right(), ui.min_rect().bottom()),
    );
    ui.separator();
    requests.starving_secs = live.starving_secs;
    requests_ui(ui, s, requests, q);
    ui.separator();
    super::cost::cost_ui(ui, s);
    super::cost::finished_ui(ui, s);
    live_rect
}
