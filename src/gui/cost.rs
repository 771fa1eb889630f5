//! "Is preemption helping or hurting?": what parks cost the interrupted requests and what
//! pauses saved the interrupting ones over the last minutes, by priority, and one line per
//! request that ended. Both read the snapshot's `cost` and `finished` (the figures of
//! `/v1/scheduler`).

use super::units::{NBSP, secs_words};
use crate::service::{CostClass, FinishedRequest, ServiceSnapshot};
use egui::Ui;

/// Ended requests listed, newest first.
const FINISHED_SHOWN: usize = 8;

/// A share of a time in whole percent: "31 %".
fn share(part: f64, whole: f64) -> String {
    if whole <= 0.0 {
        return "-".to_owned();
    }
    format!("{:.0}{NBSP}%", (100.0 * part / whole).clamp(0.0, 100.0))
}

/// Why a pause saved no estimate: the estimate is the paused stream's tokens left at its
/// measured rate, and a stream paused after a token or two has no rate yet.
pub const NO_ESTIMATE: &str = "no estimate yet: the stream it paused had written too few \
                               tokens before the pause to measure a rate (or set no max_tokens)";

/// Why the pauses of `by` saved no estimate, from the stream it paused where it is still
/// parked: "no estimate yet: 2 tokens before the pause, too few to measure a rate".
pub fn no_estimate_words(s: &ServiceSnapshot, by: crate::ids::RequestId) -> String {
    let Some(paused) = s.parked.iter().find(|p| p.parked_for == Some(by)) else {
        return NO_ESTIMATE.to_owned();
    };
    let row = s
        .requests
        .iter()
        .find(|r| r.request_id == paused.request_id);
    if row.is_some_and(|r| r.max_tokens.is_none()) {
        return "no estimate: the stream it paused set no max_tokens, so what it had left is \
                unknown"
            .to_owned();
    }
    let n = paused.generated_tokens;
    format!(
        "no estimate yet: {n}{NBSP}token{} before the pause, too few to measure a rate",
        if n == 1 { "" } else { "s" }
    )
}

fn wrapped(ui: &mut Ui, text: String) {
    ui.add(egui::Label::new(text).wrap());
}

/// One priority's line: what its parked requests paid (parked time against their own time
/// end to end, not against other requests), and what its pauses saved.
pub fn class_words(c: &CostClass) -> String {
    let mut parts = vec![format!("priority {}: {} ended", c.priority, c.finished)];
    if c.interrupted > 0 {
        let own_time = c.interrupted_end_to_end_secs_mean.unwrap_or(0.0) * f64::from(c.interrupted);
        parts.push(format!(
            "{} parked ({} pauses, {} give-ways), parked {} ({} of their time)",
            c.interrupted,
            c.pauses,
            c.give_ways,
            secs_words(c.parked_secs),
            share(c.parked_secs, own_time)
        ));
    } else {
        parts.push("none parked".to_owned());
    }
    if c.interrupting > 0 {
        let ttft = c.interrupting_ttft_secs_mean.map_or(String::new(), |t| {
            format!(", first token after {} on average", secs_words(t))
        });
        let saved = c.gained_secs_estimate.map_or_else(
            || NO_ESTIMATE.to_owned(),
            |g| format!("saved about {} (estimate)", secs_words(g)),
        );
        parts.push(format!("{} paused others{ttft}; {saved}", c.interrupting));
    }
    parts.join("; ")
}

/// The sums by priority over the window, one wrapped line each.
pub fn cost_ui(ui: &mut Ui, s: &ServiceSnapshot) {
    let minutes = s.cost.window_secs / 60.0;
    ui.heading(format!(
        "What preemption cost and saved, last {minutes:.0} min"
    ))
    .on_hover_text(
        "per priority: what the requests that were parked paid (measured: their time parked, \
         and its share of their own time end to end), and what pausing a stream saved the \
         requests that paused it (an estimate: the paused stream's tokens left at its \
         measured rate)",
    );
    if s.cost.by_priority.is_empty() {
        ui.weak("no request has ended in this window yet");
        return;
    }
    for c in &s.cost.by_priority {
        wrapped(ui, class_words(c));
    }
}

/// An ended request's line: "parked 2 times, 6.7 s (12 % of its time) (2 pauses); 57.0 s end
/// to end".
pub fn ended_words(s: &ServiceSnapshot, f: &FinishedRequest) -> String {
    let mut parts = Vec::new();
    if f.parks > 0 {
        let mut causes = Vec::new();
        if f.pauses > 0 {
            causes.push(plural(f.pauses, "pause", "pauses"));
        }
        if f.give_ways > 0 {
            causes.push(plural(f.give_ways, "give-way", "give-ways"));
        }
        let causes = if causes.is_empty() {
            String::new()
        } else {
            format!(", {}", causes.join(", "))
        };
        parts.push(format!(
            "parked {} ({} of its time, {}{causes})",
            secs_words(f.parked_secs),
            share(f.parked_secs, f.end_to_end_secs),
            plural(f.parks, "time", "times"),
        ));
    } else {
        parts.push("never parked".to_owned());
    }
    if let Some(wait) = f.queue_wait_secs.filter(|w| *w >= 0.05) {
        parts.push(format!("waited {} for a slot", secs_words(wait)));
    }
    if f.paused_others > 0 {
        let others = plural(f.paused_others, "other request", "other requests");
        parts.push(match f.gained_secs_estimate {
            Some(g) => format!(
                "paused {others}, saving it about {} (estimate)",
                secs_words(g)
            ),
            None => format!("paused {others}; {}", no_estimate_words(s, f.request_id)),
        });
    }
    parts.push(format!("{} end to end", secs_words(f.end_to_end_secs)));
    parts.join("; ")
}

fn plural(n: u32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The latest ended requests, newest first, each with its line.
pub fn finished_ui(ui: &mut Ui, s: &ServiceSnapshot) {
    ui.heading("Ended").on_hover_text(
        "the latest requests that ended: how long they were parked and what share of their \
         own time that was, and their time end to end",
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
        wrapped(
            ui,
            format!(
                "{} ({from}priority {}, {}, {}{NBSP}tokens): {}",
                f.client_id,
                f.priority,
                outcome_words(s, f),
                f.output_tokens,
                ended_words(s, f)
            ),
        );
    }
}

/// Its outcome; a failure with its reason, as the log's end of it says ("failed: engine
/// restarted"; #62: the Ended line said only "failed").
fn outcome_words(s: &ServiceSnapshot, f: &FinishedRequest) -> String {
    if f.outcome != "failed" {
        return f.outcome.to_owned();
    }
    let error = s.log.iter().rev().find_map(|e| match &e.event {
        crate::service::Observed::Ended {
            error: Some(error), ..
        } if e.request_id == Some(f.request_id) => Some(error.clone()),
        _ => None,
    });
    match error {
        Some(error) => format!("failed: {error}"),
        None => "failed".to_owned(),
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
    fn each_ended_request_says_how_long_it_was_parked_as_a_share_of_its_own_time() {
        let s = snapshot();
        let harness = Harness::new_ui(|ui| finished_ui(ui, &s));
        harness.get_by_label(
            "chatcmpl-1 (claude-cli, priority 0, length, 2000\u{a0}tokens): parked 6.7\u{a0}s \
             (12\u{a0}% of its time, 2 times, 2 pauses); 57.0\u{a0}s end to end",
        );
        harness.get_by_label_contains(
            "paused 1 other request, saving it about 38.2\u{a0}s (estimate)",
        );
    }

    #[test]
    fn the_cost_panel_sets_parked_time_against_the_parked_requests_own_time() {
        let s = snapshot();
        let harness = Harness::new_ui(|ui| cost_ui(ui, &s));
        harness.get_by_label("What preemption cost and saved, last 10 min");
        harness.get_by_label(
            "priority 0: 1 ended; 1 parked (2 pauses, 0 give-ways), parked 6.7\u{a0}s \
             (12\u{a0}% of their time)",
        );
        harness.get_by_label(
            "priority 5: 1 ended; none parked; 1 paused others, first token after 0.3\u{a0}s \
             on average; saved about 38.2\u{a0}s (estimate)",
        );
        // nothing set against the requests never parked: they are other requests
        assert!(harness.query_by_label_contains("never").is_none());
        let empty = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        let harness = Harness::new_ui(|ui| cost_ui(ui, &empty));
        harness.get_by_label("no request has ended in this window yet");
    }

    #[test]
    fn a_pause_with_no_estimate_says_why_in_plain_words() {
        let mut s = snapshot();
        let mut finished: Vec<FinishedRequest> = s.finished.iter().cloned().collect();
        finished[0].gained_secs_estimate = None;
        s.finished = finished.into();
        s.cost = cost_view(&s.finished, 61.0, 600.0);
        let harness = Harness::new_ui(|ui| {
            cost_ui(ui, &s);
            finished_ui(ui, &s);
        });
        assert_eq!(
            harness
                .get_all_by_label_contains(
                    "no estimate yet: the stream it paused had written too few tokens"
                )
                .count(),
            2
        );
        assert!(
            harness
                .query_by_label_contains("no max_tokens or rate")
                .is_none()
        );
    }

    #[test]
    fn a_pause_with_no_estimate_names_the_paused_streams_few_tokens_while_it_is_parked() {
        let mut s = snapshot();
        let mut finished: Vec<FinishedRequest> = s.finished.iter().cloned().collect();
        finished[0].gained_secs_estimate = None;
        s.finished = finished.into();
        s.parked = vec![crate::service::ParkedView {
            request_id: RequestId(9),
            priority: 0,
            effective_priority: 0,
            boost: 0,
            generated_tokens: 2,
            read_tokens: 20,
            parked_secs: 3.0,
            pauses: 1,
            kind: crate::service::ParkKind::Decode,
            place: crate::service::ParkedIn::Spare,
            seq: None,
            cause: None,
            parked_for: Some(RequestId(2)),
        }];
        let harness = Harness::new_ui(|ui| finished_ui(ui, &s));
        harness.get_by_label_contains(
            "paused 1 other request; no estimate yet: 2\u{a0}tokens before the pause, too few \
             to measure a rate",
        );
    }
}
