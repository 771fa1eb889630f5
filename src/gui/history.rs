//! The window's one log: the scheduler's log with client ids (the snapshot's `log[]`) merged
//! by time with what the window did, after the lines of the engines an apply replaced
//! (marked); filterable. And the banner for a prompt refused as longer than the model's
//! context, with what to do about it.

use crate::service::{LengthRefusal, LogEntry, ServiceSnapshot};
use egui::{Color32, RichText, Ui};
use std::collections::VecDeque;

const BANNER: Color32 = Color32::from_rgb(220, 60, 40);

/// What the log shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    /// Shown only lines that contain this (a request id, a client, a word).
    pub text: String,
    /// Hide arrivals, admissions and finishes: only what interrupted or refused someone.
    pub interruptions_only: bool,
}

impl LogFilter {
    pub fn shows(&self, e: &LogEntry) -> bool {
        let interruption = e.kind.interrupts();
        (!self.interruptions_only || interruption)
            && (self.text.is_empty() || e.text.contains(self.text.trim()))
    }
}

/// One line of the log as shown: its time and words.
fn line(at_secs: f64, text: &str) -> String {
    format!("{at_secs:8.1} s  {text}")
}

/// The scheduler's entries `filter` shows, merged by time with the window's own lines
/// (`window`: what it did, on the same clock; hidden under "interruptions only").
pub fn merged_lines(
    log: &[LogEntry],
    window: &VecDeque<(f64, String)>,
    filter: &LogFilter,
) -> Vec<String> {
    let mut lines: Vec<(f64, String)> = log
        .iter()
        .filter(|e| filter.shows(e))
        .map(|e| (e.at_secs, e.text.clone()))
        .collect();
    if !filter.interruptions_only {
        lines.extend(
            window
                .iter()
                .map(|(at, text)| (*at, format!("window: {text}")))
                .filter(|(_, text)| filter.text.is_empty() || text.contains(filter.text.trim())),
        );
    }
    // stable: at equal times the scheduler's entry comes first
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    lines
        .into_iter()
        .map(|(at, text)| line(at, &text))
        .collect()
}

/// The log, newest at the bottom, with its filter (the service's log is the app's run's: an
/// apply that restarts the engine keeps it).
pub fn scheduler_log_ui(
    ui: &mut Ui,
    s: &ServiceSnapshot,
    filter: &mut LogFilter,
    window: &VecDeque<(f64, String)>,
) {
    ui.horizontal(|ui| {
        ui.heading("Log").on_hover_text(
            "the scheduler's events with the ids clients see, and what the window did; kept \
             across an apply that restarts the engine",
        );
        ui.add(
            egui::TextEdit::singleline(&mut filter.text)
                .hint_text("filter: an id, a client, a word")
                .desired_width(200.0),
        )
        .on_hover_text("show only the lines that contain this");
        ui.checkbox(&mut filter.interruptions_only, "interruptions only")
            .on_hover_text("pauses, give-ways, parks, resumes, cancellations, failures, refusals");
    });
    // whole rows: with the newest line at the bottom, the top one is not cut in half (a line
    // that wraps still shifts it by a row's spacing)
    let spacing = ui.spacing().item_spacing.y;
    let row_height = ui.text_style_height(&egui::TextStyle::Body) + spacing;
    let rows = (ui.available_height() / row_height).floor().max(1.0);
    let height = rows * row_height - spacing;
    egui::ScrollArea::vertical()
        .id_salt("scheduler-log")
        .max_height(height)
        // its default minimum (64 px) would override a shorter whole number of rows
        .min_scrolled_height(height)
        .stick_to_bottom(true)
        .show(ui, |ui| {
            // not justified: a wrapped line keeps its word spacing
            ui.vertical(|ui| {
                for l in merged_lines(s.log.as_slice(), window, filter) {
                    ui.label(l);
                }
            });
        });
}

/// The agent a client product is, in words.
fn agent_words(client: &str) -> String {
    match client {
        "" => "A client".to_owned(),
        "claude-cli" => "Claude Code".to_owned(),
        c if c.starts_with("codex") => "Codex".to_owned(),
        other => other.to_owned(),
    }
}

/// The banner's sentence for a refusal.
pub fn length_refusal_words(r: &LengthRefusal, context_tokens: u32) -> String {
    format!(
        "{} sent {} tokens; this model's context is {} (prompts up to {} tokens). Load a model \
         with a longer context or raise ctx in Settings and model, and set the agent's context \
         window to match (docs/DEPLOYMENT.md has each agent's setting).",
        agent_words(&r.client),
        r.prompt_tokens,
        context_tokens,
        r.max_context_tokens
    )
}

/// The banner, until dismissed (`dismissed_at`: the refusal time last dismissed).
pub fn length_refusal_ui(ui: &mut Ui, s: &ServiceSnapshot, dismissed_at: &mut Option<f64>) {
    let Some(r) = &s.last_length_refusal else {
        return;
    };
    if *dismissed_at == Some(r.at_secs) {
        return;
    }
    ui.horizontal_wrapped(|ui| {
        ui.label(
            RichText::new(length_refusal_words(r, s.engine.context_tokens))
                .color(BANNER)
                .strong(),
        );
        if ui
            .button("Dismiss")
            .on_hover_text("hide this until the next refusal")
            .clicked()
        {
            *dismissed_at = Some(r.at_secs);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::RequestId;
    use crate::service::LogKind;
    use crate::service::Route;

    fn entry(kind: LogKind, text: &str) -> LogEntry {
        LogEntry {
            at_secs: 1.0,
            kind,
            request_id: Some(RequestId(7)),
            client_id: Some("chatcmpl-7".into()),
            text: text.into(),
            seq: 0,
            event: crate::service::Observed::Resumed,
        }
    }

    #[test]
    fn the_filter_keeps_lines_with_its_text_and_interruptions_when_asked() {
        let arrived = entry(LogKind::Arrived, "chatcmpl-7 arrived from codex");
        let paused = entry(LogKind::Paused, "chatcmpl-7 was paused for chatcmpl-9");
        let mut filter = LogFilter::default();
        assert!(filter.shows(&arrived) && filter.shows(&paused));
        filter.interruptions_only = true;
        assert!(!filter.shows(&arrived) && filter.shows(&paused));
        filter.interruptions_only = false;
        filter.text = "chatcmpl-9".into();
        assert!(!filter.shows(&arrived) && filter.shows(&paused));
    }

    #[test]
    fn one_log_merges_the_schedulers_entries_and_the_windows_lines_by_time() {
        let mut arrived = entry(LogKind::Arrived, "chatcmpl-7 arrived from codex");
        arrived.at_secs = 1.0;
        let mut paused = entry(LogKind::Paused, "chatcmpl-7 was paused for chatcmpl-9");
        paused.at_secs = 3.0;
        let window: VecDeque<(f64, String)> =
            [(2.0, "preemption on".to_owned())].into_iter().collect();
        let all = merged_lines(
            &[arrived.clone(), paused.clone()],
            &window,
            &LogFilter::default(),
        );
        assert_eq!(
            all,
            [
                "     1.0 s  chatcmpl-7 arrived from codex",
                "     2.0 s  window: preemption on",
                "     3.0 s  chatcmpl-7 was paused for chatcmpl-9",
            ]
        );
        let interruptions = LogFilter {
            interruptions_only: true,
            ..LogFilter::default()
        };
        assert_eq!(
            merged_lines(&[arrived, paused], &window, &interruptions),
            ["     3.0 s  chatcmpl-7 was paused for chatcmpl-9"]
        );
    }

    /// #44 item 5: the log's top line was drawn half hidden under the panel's heading.
    #[test]
    fn the_logs_top_visible_line_is_whole() {
        use egui_kittest::Harness;
        use egui_kittest::kittest::Queryable as _;
        let mut s = ServiceSnapshot::starting(Default::default(), 1, true);
        s.log = (0..40)
            .map(|i| {
                let mut e = entry(
                    LogKind::Arrived,
                    &format!("chatcmpl-{i} arrived from codex"),
                );
                e.at_secs = f64::from(i);
                e
            })
            .collect();
        for height in [97.0, 130.0, 191.0, 233.0] {
            let mut filter = LogFilter::default();
            let window = VecDeque::new();
            let mut harness = Harness::builder()
                .with_size(egui::vec2(900.0, height))
                .build_ui(|ui| scheduler_log_ui(ui, &s, &mut filter, &window));
            harness.run_ok();
            let heading = harness.get_by_label("interruptions only").rect();
            // the scroll area starts a spacing below the heading's row
            let top = heading.max.y + 3.0;
            for line in harness.query_all_by_label_contains(" arrived from codex") {
                let r = line.rect();
                assert!(
                    !(r.min.y < top - 0.5 && r.max.y > top + 0.5),
                    "at {height} px a line is cut by the top edge {top}: {r:?}"
                );
            }
        }
    }

    #[test]
    fn the_banner_names_the_agent_its_prompt_and_the_context() {
        let r = LengthRefusal {
            at_secs: 3.0,
            client: "claude-cli".into(),
            route: Route::Messages,
            prompt_tokens: 20_134,
            max_context_tokens: 8_191,
        };
        let words = length_refusal_words(&r, 8_192);
        assert!(
            words.starts_with("Claude Code sent 20134 tokens; this model's context is 8192"),
            "{words}"
        );
    }
}
