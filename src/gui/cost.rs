//! "Is preemption helping or hurting?": what parks cost the interrupted requests and what
//! pauses saved the interrupting ones over the last minutes, by priority, and one line per
//! request that ended. Both read the snapshot's `cost` and `finished` (the figures of
//! `/v1/scheduler`).

use crate::service::{CostClass, ServiceSnapshot};
use egui::Ui;

/// Ended requests listed, newest first.
const FINISHED_SHOWN: usize = 8;

fn secs(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{v:.1} s"))
}

/// The sums by priority over the window, one row each.
pub fn cost_ui(ui: &mut Ui, s: &ServiceSnapshot) {
    let minutes = s.cost.window_secs / 60.0;
    ui.heading(format!(
        "What preemption cost and saved, last {minutes:.0} min"
    ))
    .on_hover_text(
        "per priority: what the requests that were parked paid (measured), and what \
             pausing a stream saved the requests that paused it (an estimate: the paused \
             stream's tokens left at its measured rate)",
    );
    if s.cost.by_priority.is_empty() {
        ui.weak("no request has ended in this window yet");
        return;
    }
    egui::Grid::new("cost")
        .striped(true)
        .num_columns(7)
        .show(ui, |ui| {
            for title in [
                "priority",
                "ended",
                "requests parked (pauses, give-ways)",
                "time parked",
                "end to end: parked / never",
                "paused others (TTFT)",
                "saved, estimate",
            ] {
                ui.strong(title);
            }
            ui.end_row();
            for c in &s.cost.by_priority {
                class_row_ui(ui, c);
            }
        });
}

fn class_row_ui(ui: &mut Ui, c: &CostClass) {
    ui.label(c.priority.to_string());
    ui.label(c.finished.to_string());
    ui.label(format!("{} ({}, {})", c.interrupted, c.pauses, c.give_ways));
    ui.label(format!("{:.1} s", c.parked_secs));
    ui.label(format!(
        "{} / {}",
        secs(c.interrupted_end_to_end_secs_mean),
        secs(c.uninterrupted_end_to_end_secs_mean)
    ));
    ui.label(if c.interrupting == 0 {
        "0".to_owned()
    } else {
        format!(
            "{} ({})",
            c.interrupting,
            secs(c.interrupting_ttft_secs_mean)
        )
    });
    ui.label(match (c.interrupting, c.gained_secs_estimate) {
        (0, _) => "–".to_owned(),
        (_, Some(gained)) => format!("about {gained:.1} s"),
        (_, None) => "no estimate (no max_tokens or rate)".to_owned(),
    });
    ui.end_row();
}

/// The latest ended requests, newest first, each with its line.
pub fn finished_ui(ui: &mut Ui, s: &ServiceSnapshot) {
    ui.heading("Ended").on_hover_text(
        "the latest requests that ended: how often and how long they were parked, and \
         their time end to end",
    );
    if s.finished.is_empty() {
        ui.weak("none yet");
        return;
    }
    for f in s.finished.iter().rev().take(FINISHED_SHOWN) {
        let from = if f.client.is_empty() {
            String::new()
        } else {
            format!("{}, ", f.client)
        };
        ui.label(format!(
            "{} ({from}priority {}, {}, {} tokens): {}",
            f.client_id,
            f.priority,
            f.outcome,
            f.output_tokens,
            f.summary()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::{cost_ui, finished_ui};
    use crate::ids::RequestId;
    use crate::service::{FinishedRequest, Route, SchedulerSettings, ServiceSnapshot, cost_view};
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;

    fn snapshot() -> ServiceSnapshot {
        let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        let stream = FinishedRequest {
            request_id: RequestId(1),
            client_id: "chatcmpl-1".into(),
            client: "claude-cli".into(),
            route: Route::ChatCompletions,
            priority: 0,
            outcome: "length",
            prompt_tokens: 20,
            prompt_tokens_held: 0,
            prompt_tokens_read: 20,
            output_tokens: 2000,
            queue_wait_secs: Some(0.0),
            ttft_secs: Some(0.1),
            parks: 2,
            parked_secs: 6.7,
            pauses: 2,
            give_ways: 0,
            end_to_end_secs: 57.0,
            paused_others: 0,
            gained_secs_estimate: None,
            ended_at_secs: 60.0,
        };
        let short = FinishedRequest {
            request_id: RequestId(2),
            client_id: "chatcmpl-2".into(),
            client: String::new(),
            priority: 5,
            outcome: "stop",
            output_tokens: 12,
            ttft_secs: Some(0.27),
            parks: 0,
            parked_secs: 0.0,
            pauses: 0,
            end_to_end_secs: 0.6,
            paused_others: 1,
            gained_secs_estimate: Some(38.2),
            ended_at_secs: 30.0,
            ..stream.clone()
        };
        s.finished = vec![short, stream].into();
        s.cost = cost_view(&s.finished, 61.0, 600.0);
        s
    }

    #[test]
    fn each_ended_request_says_how_often_and_how_long_it_was_parked() {
        let s = snapshot();
        let harness = Harness::new_ui(|ui| finished_ui(ui, &s));
        harness.get_by_label(
            "chatcmpl-1 (claude-cli, priority 0, length, 2000 tokens): parked 2 times, \
             6.7 s in all (2 pauses); 57.0 s end to end",
        );
        harness.get_by_label_contains("paused 1 other request, saving it about 38.2 s (estimate)");
    }

    #[test]
    fn the_cost_panel_shows_what_the_parked_paid_and_the_estimate_the_others_gained() {
        let s = snapshot();
        let harness = Harness::new_ui(|ui| cost_ui(ui, &s));
        harness.get_by_label("What preemption cost and saved, last 10 min");
        harness.get_by_label("6.7 s");
        harness.get_by_label("1 (2, 0)");
        harness.get_by_label("57.0 s / –");
        harness.get_by_label("1 (0.3 s)");
        harness.get_by_label("about 38.2 s");
        let empty = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        let harness = Harness::new_ui(|ui| cost_ui(ui, &empty));
        harness.get_by_label("no request has ended in this window yet");
    }
}
