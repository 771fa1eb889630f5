//! The scheduler's live state in three narrow columns: each slot, each parked request, each
//! waiting one, one wrapped line apiece (no grid: a line wraps at its column's edge instead of
//! widening the column past the window).

use super::units::{NBSP, rate_words, secs_words};
use crate::ids::RequestId;
use crate::service::{ParkKind, ServiceSnapshot, SlotStatus};
use egui::{Color32, RichText, Ui};

pub const STARVING: Color32 = Color32::from_rgb(220, 60, 40);

/// The id a request's client sees (`chatcmpl-7`), from the requests table; the internal id
/// where the table has no row for it (between two snapshots).
pub fn client_id(s: &ServiceSnapshot, id: RequestId) -> String {
    s.requests
        .iter()
        .find(|r| r.request_id == id)
        .map_or_else(|| id.to_string(), |r| r.client_id.clone())
}

fn line(ui: &mut Ui, text: impl Into<RichText>) -> egui::Response {
    ui.add(egui::Label::new(text.into()).wrap())
}

/// A request's line in a two-column grid: its id as a label of its own (the one its client
/// sees, its internal id on hover), then the rest, wrapped within the column.
fn request_line(ui: &mut Ui, s: &ServiceSnapshot, id: RequestId, rest: RichText) {
    ui.label(client_id(s, id)).on_hover_text(id.to_string());
    line(ui, rest);
    ui.end_row();
}

/// Each slot: state, request, priority, read progress or its rate.
pub fn slots_ui(ui: &mut Ui, s: &ServiceSnapshot) {
    ui.heading("Slots").on_hover_text(
        "where requests run: each slot reads one prompt or decodes one stream; \
         priorities are effective (with boost and aging)",
    );
    for slot in &s.slots {
        let Some(id) = slot.request_id else {
            line(ui, format!("slot {}: idle", slot.id));
            continue;
        };
        let on = slot.seq.map_or(String::new(), |seq| format!(" on {seq}"));
        let what = match slot.state {
            SlotStatus::Reading => format!(
                ", read {} of {}{}",
                slot.held_tokens,
                slot.prompt_tokens,
                if slot.has_lane {
                    ""
                } else {
                    " (waiting for the lane)"
                }
            ),
            SlotStatus::Decoding => format!(
                ", {} tokens, {}",
                slot.generated_tokens,
                slot.tokens_per_sec.map_or("...".to_owned(), rate_words)
            ),
            _ => String::new(),
        };
        line(
            ui,
            format!(
                "slot {}: {} {} (priority {}){on}{what}",
                slot.id,
                slot.state.as_str(),
                client_id(s, id),
                slot.effective_priority.unwrap_or(0)
            ),
        )
        .on_hover_text(format!(
            "{id}: priority {} as sent, {} effective",
            slot.priority.unwrap_or(0),
            slot.effective_priority.unwrap_or(0)
        ));
    }
}

/// The parked streams (solo_priority's paused decode, reads that gave way).
pub fn parked_ui(ui: &mut Ui, s: &ServiceSnapshot) {
    ui.heading("Parked").on_hover_text(
        "streams paused for a higher priority and reads that gave way: their state is kept \
         (in the KV pool or host RAM) and they go on where they stopped",
    );
    if s.parked.is_empty() {
        line(ui, "nothing parked");
        return;
    }
    egui::Grid::new("parked").num_columns(2).show(ui, |ui| {
        for p in &s.parked {
            let kind = if p.kind == ParkKind::Decode {
                "paused stream"
            } else {
                "read gave way"
            };
            let rest = format!(
                "{kind}, priority {} (effective {}), {}{NBSP}tokens so far, parked {}, {} pause(s)",
                p.priority,
                p.effective_priority,
                p.generated_tokens,
                secs_words(p.parked_secs),
                p.pauses
            );
            request_line(ui, s, p.request_id, rest.into());
        }
    });
}

/// The queue with each request's effective priority, age and what is left to read; a
/// request waiting longer than `starving_secs` is marked (its Cancel and ±priority are the
/// requests table's).
pub fn waiting_ui(ui: &mut Ui, s: &ServiceSnapshot, starving_secs: f64) {
    ui.heading("Waiting").on_hover_text(
        "the queue: a free slot and the next prompt read go to the highest effective \
         priority; aging raises a waiting request's priority with time",
    );
    if s.waiting.is_empty() {
        line(ui, "nobody waits");
        return;
    }
    egui::Grid::new("waiting").num_columns(2).show(ui, |ui| {
        for w in &s.waiting {
            // what it adds to its priority, only where it adds something (a short line
            // per request keeps the queue and the live view below it in sight)
            let priority = crate::service::effective_priority_words(
                w.priority,
                w.effective_priority,
                w.boost,
                w.aging,
            );
            let text = format!(
                "{priority}, waited {}{}, {}{NBSP}tokens to read",
                secs_words(w.waited_secs),
                if w.waited_secs > starving_secs {
                    " - starving"
                } else {
                    ""
                },
                w.tokens_left_to_read
            );
            let text = if w.waited_secs > starving_secs {
                RichText::new(text).color(STARVING).strong()
            } else {
                RichText::new(text)
            };
            request_line(ui, s, w.request_id, text);
        }
    });
}
