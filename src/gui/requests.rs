//! The requests table: one row per live request (waiting, reading, decoding, parked) with the
//! id its client sees, who sent it, priority and effective priority, progress, and why it
//! stands where it does (the snapshot's `requests[]`, the same words as `/v1/scheduler`);
//! sortable, with Cancel and ±priority per row.

use super::commands::{Command, CommandQueue};
use super::queue::STARVING;
use super::units::{rate_words, secs_words};
use crate::service::{RequestRow, RequestStatus, ServiceSnapshot};
use egui::{Color32, RichText, Ui};

const WAITING_WHY: Color32 = Color32::from_rgb(230, 160, 40);

/// The table's order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RequestOrder {
    /// Running (slot order), parked, then waiting: the scheduler's own order.
    #[default]
    State,
    /// Highest effective priority first.
    Priority,
    /// Longest present wait first.
    Waited,
}

impl RequestOrder {
    fn words(self) -> &'static str {
        match self {
            Self::State => "state",
            Self::Priority => "priority",
            Self::Waited => "waited",
        }
    }
}

/// The table's state in the window: its order, the request whose Cancel waits for
/// a confirmation, the wait past which a row is marked starving, and the rows' last order
/// with whether the pointer was over them (rows keep their places under the pointer, so a
/// click lands on the row it was aimed at).
#[derive(Debug, Clone)]
pub struct RequestsView {
    pub order: RequestOrder,
    pub confirm_cancel: Option<crate::ids::RequestId>,
    pub starving_secs: f64,
    shown: Vec<crate::ids::RequestId>,
    pointer_over: bool,
}

impl Default for RequestsView {
    fn default() -> Self {
        Self {
            order: RequestOrder::default(),
            confirm_cancel: None,
            starving_secs: 30.0,
            shown: Vec::new(),
            pointer_over: false,
        }
    }
}

/// `rows` in the places they had in `shown` (the last frame's order); rows that are new go
/// after them in their own order, rows that ended are gone.
pub fn keep_places<'a>(
    shown: &[crate::ids::RequestId],
    mut rows: Vec<&'a RequestRow>,
) -> Vec<&'a RequestRow> {
    // a stable sort: the new rows (no place) keep their order at the end
    rows.sort_by_key(|r| {
        shown
            .iter()
            .position(|id| *id == r.request_id)
            .unwrap_or(usize::MAX)
    });
    rows
}

/// The rows in `order` (a stable sort: equals keep the scheduler's order).
pub fn sorted_rows(s: &ServiceSnapshot, order: RequestOrder) -> Vec<&RequestRow> {
    let mut rows: Vec<&RequestRow> = s.requests.iter().collect();
    match order {
        RequestOrder::State => {}
        RequestOrder::Priority => rows.sort_by_key(|r| std::cmp::Reverse(r.effective_priority)),
        RequestOrder::Waited => rows.sort_by(|a, b| b.waited_secs.total_cmp(&a.waited_secs)),
    }
    rows
}

/// The table, or a line saying nothing is in flight.
pub fn requests_ui(
    ui: &mut Ui,
    s: &ServiceSnapshot,
    view: &mut RequestsView,
    q: &mut CommandQueue,
) {
    let order = &mut view.order;
    ui.horizontal(|ui| {
        ui.heading("Requests");
        ui.label("sort by");
        for o in [
            RequestOrder::State,
            RequestOrder::Priority,
            RequestOrder::Waited,
        ] {
            ui.selectable_value(order, o, o.words())
                .on_hover_text(format!("order the rows by {}", o.words()));
        }
    });
    if s.requests.is_empty() {
        ui.label("no request in flight");
        return;
    }
    let mut rows = sorted_rows(s, *order);
    if view.pointer_over {
        rows = keep_places(&view.shown, rows);
    }
    view.shown = rows.iter().map(|r| r.request_id).collect();
    // the why wraps at the panel's edge (the grid's cells know only last frame's widths)
    let right_edge = ui.max_rect().right();
    let starving_secs = view.starving_secs;
    let table = egui::Grid::new("requests")
        .striped(true)
        .num_columns(6)
        .show(ui, |ui| {
            // who sent it under its id, its speed under its progress: the why keeps the width
            for heading in ["request", "state", "priority", "progress", "", "why"] {
                ui.strong(heading);
            }
            ui.end_row();
            for r in rows {
                let row = Row {
                    right_edge,
                    starving: r.state == RequestStatus::Waiting && r.waited_secs > starving_secs,
                };
                row_ui(ui, r, row, q, &mut view.confirm_cancel);
                ui.end_row();
            }
        });
    view.pointer_over = ui.rect_contains_pointer(table.response.rect);
    confirm_cancel_ui(ui, s, &mut view.confirm_cancel, q);
}

/// Cancelling a request that has written something (decoding, or a paused stream) throws
/// that away: ask first.
fn confirm_cancel_ui(
    ui: &mut Ui,
    s: &ServiceSnapshot,
    confirm: &mut Option<crate::ids::RequestId>,
    q: &mut CommandQueue,
) {
    let Some(id) = *confirm else { return };
    let Some(r) = s.requests.iter().find(|r| r.request_id == id) else {
        // it ended meanwhile: nothing to cancel
        *confirm = None;
        return;
    };
    ui.horizontal(|ui| {
        ui.colored_label(
            WAITING_WHY,
            format!(
                "Cancel {}? It has written {} token{}; its client gets an error.",
                r.client_id,
                r.generated_tokens,
                if r.generated_tokens == 1 { "" } else { "s" }
            ),
        );
        if ui.button("Cancel it").clicked() {
            q.send(Command::Cancel(id));
            *confirm = None;
        }
        if ui.button("Keep it").clicked() {
            *confirm = None;
        }
    });
}

/// The priority as given, and what it ranks at when a boost or aging adds to it:
/// "0 -> 1 boost" (the window's font has no arrow glyph).
pub fn priority_cell(r: &RequestRow) -> String {
    let mut added = Vec::new();
    if r.boost > 0 {
        added.push("boost");
    }
    if r.aging > 0 {
        added.push("aging");
    }
    if added.is_empty() {
        r.priority.to_string()
    } else {
        format!(
            "{} -> {} {}",
            r.priority,
            r.effective_priority,
            added.join(", ")
        )
    }
}

/// The why column's least width, in points.
const WHY_MIN_WIDTH: f32 = 180.0;

/// What a row needs beside its request: where the panel ends, whether it starves.
#[derive(Clone, Copy)]
struct Row {
    right_edge: f32,
    starving: bool,
}

fn row_ui(
    ui: &mut Ui,
    r: &RequestRow,
    row: Row,
    q: &mut CommandQueue,
    confirm: &mut Option<crate::ids::RequestId>,
) {
    ui.vertical(|ui| {
        ui.label(&r.client_id)
            .on_hover_text(format!("{} on {:?}", r.request_id, r.route));
        ui.weak(if r.client.is_empty() { "-" } else { &r.client })
            .on_hover_text("the API key's name, else the User-Agent's product");
    });
    state_cell_ui(ui, r, row.starving);
    ui.label(priority_cell(r)).on_hover_text(format!(
        "given {}; effective {}",
        r.priority,
        crate::service::priority_words(r)
    ));
    let max = r.max_tokens.map_or("-".to_owned(), |m| m.to_string());
    ui.vertical(|ui| {
        ui.label(format!(
            "read {}/{}, out {}/{max}",
            r.read_tokens, r.prompt_tokens, r.generated_tokens
        ))
        .on_hover_text("prompt tokens read of the prompt, output tokens of max_tokens");
        // when it may be paused is in its why
        if let Some(tps) = r.tokens_per_sec {
            ui.label(rate_words(tps));
        }
    });
    // ids by request, not by position: a click lands on its row whatever moved since
    ui.push_id(r.request_id.0, |ui| {
        ui.horizontal(|ui| row_buttons_ui(ui, r, q, confirm))
    });
    let why = match r.state {
        RequestStatus::Waiting | RequestStatus::Parked => RichText::new(&r.why).color(WAITING_WHY),
        _ => RichText::new(&r.why),
    };
    // wrapped at the panel's edge, so a long why is read whole, and never narrower than a
    // few words a line
    ui.scope(|ui| {
        let width = (row.right_edge - ui.cursor().left()).max(WHY_MIN_WIDTH);
        ui.set_min_width(WHY_MIN_WIDTH);
        ui.set_max_width(width);
        ui.add(egui::Label::new(why).wrap());
    });
}

/// The row's state (how long it has waited, whether it starves), with its time and parks on
/// hover.
fn state_cell_ui(ui: &mut Ui, r: &RequestRow, starving: bool) {
    let state = match r.state {
        RequestStatus::Waiting | RequestStatus::Parked => {
            format!("{} {}", r.state, secs_words(r.waited_secs))
        }
        _ => r.state.to_string(),
    };
    // a starving request is marked in its own row, not only in the Waiting section
    let state = if starving {
        RichText::new(format!("{state} - starving"))
            .color(STARVING)
            .strong()
    } else {
        RichText::new(state)
    };
    let parked = match r.parks {
        0 => String::new(),
        1 => format!("; parked once, {:.1} s in all", r.parked_secs),
        n => format!("; parked {n} times, {:.1} s in all", r.parked_secs),
    };
    ui.label(state)
        .on_hover_text(format!("{:.1} s since it arrived{parked}", r.elapsed_secs));
}

/// The row's +1, -1 and Cancel (a cancel of a request that wrote something asks first).
fn row_buttons_ui(
    ui: &mut Ui,
    r: &RequestRow,
    q: &mut CommandQueue,
    confirm: &mut Option<crate::ids::RequestId>,
) {
    if ui
        .small_button("+1")
        .on_hover_text("raise its priority")
        .clicked()
    {
        q.send(Command::SetPriority(
            r.request_id,
            r.priority.saturating_add(1),
        ));
    }
    if ui
        .small_button("-1")
        .on_hover_text("lower its priority")
        .clicked()
    {
        q.send(Command::SetPriority(
            r.request_id,
            r.priority.saturating_sub(1),
        ));
    }
    if ui
        .small_button("Cancel")
        .on_hover_text(format!("cancel {} (its client gets an error)", r.client_id))
        .clicked()
    {
        // a request that has written something loses it: confirmed below the table
        // first (a decoding one, and a paused stream)
        if r.generated_tokens > 0 {
            *confirm = Some(r.request_id);
        } else {
            q.send(Command::Cancel(r.request_id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::RequestId;
    use crate::service::{RequestStatus, Route, SchedulerSettings};

    fn row(id: u64, effective_priority: i64, waited_secs: f64) -> RequestRow {
        RequestRow {
            request_id: RequestId(id),
            client_id: format!("chatcmpl-{id}"),
            client: String::new(),
            route: Route::ChatCompletions,
            state: RequestStatus::Waiting,
            priority: 0,
            effective_priority,
            boost: 0,
            aging: 0,
            elapsed_secs: waited_secs,
            waited_secs,
            parks: 0,
            parked_secs: 0.0,
            prompt_tokens: 10,
            read_tokens: 0,
            generated_tokens: 0,
            max_tokens: None,
            tokens_per_sec: None,
            read_secs_left: None,
            pausable_in_secs: None,
            why: String::new(),
        }
    }

    #[test]
    fn a_boosted_requests_priority_cell_names_the_boost() {
        use egui_kittest::Harness;
        use egui_kittest::kittest::Queryable;
        let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        let mut boosted = row(1, 1, 0.5);
        boosted.boost = 1;
        let mut aged = row(2, 3, 9.0);
        aged.aging = 3;
        s.requests = vec![boosted, aged, row(3, 0, 1.0)];
        let mut view = RequestsView::default();
        let mut q = CommandQueue::default();
        let harness = Harness::new_ui(|ui| requests_ui(ui, &s, &mut view, &mut q));
        harness.get_by_label("0 -> 1 boost");
        harness.get_by_label("0 -> 3 aging");
        harness.get_by_label("0");
    }

    #[test]
    fn cancelling_a_request_that_has_written_asks_first_and_a_waiting_one_does_not() {
        use egui_kittest::Harness;
        use egui_kittest::kittest::Queryable;
        let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        let mut decoding = row(1, 0, 0.0);
        decoding.state = RequestStatus::Decoding;
        decoding.generated_tokens = 562;
        let mut paused = row(3, 0, 2.0);
        paused.state = RequestStatus::Parked;
        paused.generated_tokens = 40;
        s.requests = vec![decoding, row(2, 0, 1.0), paused];
        let state = (RequestsView::default(), CommandQueue::default());
        let mut harness = Harness::new_ui_state(
            |ui, (view, q): &mut (RequestsView, CommandQueue)| requests_ui(ui, &s, view, q),
            state,
        );
        let cancels: Vec<_> = harness.get_all_by_label("Cancel").collect();
        cancels[0].click();
        harness.run();
        assert!(harness.state().1.pending.is_empty(), "cancelled unasked");
        harness.get_by_label(
            "Cancel chatcmpl-1? It has written 562 tokens; its client gets an error.",
        );
        harness.get_by_label("Keep it").click();
        harness.run();
        assert!(harness.state().1.pending.is_empty());
        assert!(
            harness.query_by_label("Keep it").is_none(),
            "the question stays"
        );
        harness.get_all_by_label("Cancel").next().unwrap().click();
        harness.run();
        harness.get_by_label("Cancel it").click();
        harness.run();
        assert!(matches!(
            harness.state().1.pending[..],
            [Command::Cancel(RequestId(1))]
        ));
        // the waiting one is cancelled at once
        harness.get_all_by_label("Cancel").nth(1).unwrap().click();
        harness.run();
        assert_eq!(harness.state().1.pending.len(), 2);
        // a paused stream has written too: it asks
        harness.get_all_by_label("Cancel").nth(2).unwrap().click();
        harness.run();
        assert_eq!(harness.state().1.pending.len(), 2);
        harness
            .get_by_label("Cancel chatcmpl-3? It has written 40 tokens; its client gets an error.");
    }

    #[test]
    fn under_the_pointer_rows_keep_their_places_new_ones_go_last_and_ended_ones_go() {
        let (a, c, d) = (row(1, 0, 1.0), row(3, 0, 1.0), row(4, 0, 1.0));
        let shown = [RequestId(3), RequestId(1), RequestId(2)];
        // 2 ended, 4 is new; the sort now says 1, 4, 3
        let kept = keep_places(&shown, vec![&a, &d, &c]);
        let ids: Vec<u64> = kept.iter().map(|r| r.request_id.0).collect();
        assert_eq!(ids, [3, 1, 4]);
    }

    #[test]
    fn a_row_keeps_its_place_while_the_pointer_is_over_the_table() {
        use egui_kittest::Harness;
        use egui_kittest::kittest::Queryable;
        type State = (ServiceSnapshot, RequestsView, CommandQueue);
        let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        s.requests = vec![row(1, 0, 1.0), row(2, 0, 1.0)];
        let view = RequestsView {
            order: RequestOrder::Priority,
            ..RequestsView::default()
        };
        let mut harness = Harness::new_ui_state(
            |ui, (s, view, q): &mut State| requests_ui(ui, s, view, q),
            (s, view, CommandQueue::default()),
        );
        let order = |h: &Harness<'_, State>| {
            let mut ids: Vec<(f32, String)> = ["chatcmpl-1", "chatcmpl-2"]
                .into_iter()
                .map(|id| (h.get_by_label(id).rect().top(), id.to_owned()))
                .collect();
            ids.sort_by(|a, b| a.0.total_cmp(&b.0));
            ids.into_iter().map(|(_, id)| id).collect::<Vec<_>>()
        };
        assert_eq!(order(&harness), ["chatcmpl-1", "chatcmpl-2"]);
        harness.get_by_label("chatcmpl-1").hover();
        harness.run();
        // 2 now ranks higher: under the pointer the rows stay where they were
        harness.state_mut().0.requests[1].effective_priority = 5;
        harness.run();
        assert_eq!(order(&harness), ["chatcmpl-1", "chatcmpl-2"]);
        // the pointer leaves: the sort applies
        harness.hover_at(egui::pos2(5000.0, 5000.0));
        harness.run();
        harness.run();
        assert_eq!(order(&harness), ["chatcmpl-2", "chatcmpl-1"]);
    }

    #[test]
    fn rows_sort_by_state_order_priority_or_wait_keeping_equals_in_order() {
        let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        s.requests = vec![row(1, 0, 3.0), row(2, 5, 1.0), row(3, 0, 9.0)];
        let ids = |order| {
            sorted_rows(&s, order)
                .iter()
                .map(|r| r.request_id.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(RequestOrder::State), [1, 2, 3]);
        assert_eq!(ids(RequestOrder::Priority), [2, 1, 3]);
        assert_eq!(ids(RequestOrder::Waited), [3, 1, 2]);
    }
}
