//! Time to first token, per client: the agent's requests beside the rest, each a point with
//! its request on hover, p50/p95 per client above the plot, and a sentence instead of an empty
//! grid before the first answer. The mouse wheel scrolls the page, not the plot.

use super::panels::percentiles;
use crate::service::{ServiceSnapshot, TtftSample};
use egui::{Color32, Ui};

/// Clients drawn as series of their own (the busiest); the rest share one.
const CLIENT_SERIES_MAX: usize = 4;
const OTHERS: &str = "other clients";
/// The plot's id (its memory: bounds, pan).
const PLOT_ID: &str = "ttft-plot";
const COLOURS: [Color32; CLIENT_SERIES_MAX + 1] = [
    Color32::GOLD,
    Color32::LIGHT_BLUE,
    Color32::LIGHT_GREEN,
    Color32::LIGHT_RED,
    Color32::GRAY,
];

/// A client's name as a series: its own, "no client named" for requests that gave none.
fn client_name(t: &TtftSample) -> &str {
    if t.client.is_empty() {
        "no client named"
    } else {
        &t.client
    }
}

/// The samples by series, in plot order: the clients with the most samples (ties by name),
/// in name order so that a client keeps its colour while the counts move, then every other
/// client in one series.
pub fn ttft_series(samples: &[TtftSample]) -> Vec<(String, Vec<&TtftSample>)> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for t in samples {
        match counts.iter_mut().find(|(c, _)| *c == client_name(t)) {
            Some((_, n)) => *n += 1,
            None => counts.push((client_name(t), 1)),
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut own: Vec<&str> = counts
        .iter()
        .take(CLIENT_SERIES_MAX)
        .map(|(c, _)| *c)
        .collect();
    own.sort_unstable();
    let mut series: Vec<(String, Vec<&TtftSample>)> = own
        .iter()
        .map(|c| {
            let of = samples.iter().filter(|t| client_name(t) == *c).collect();
            ((*c).to_owned(), of)
        })
        .collect();
    let rest: Vec<&TtftSample> = samples
        .iter()
        .filter(|t| !own.contains(&client_name(t)))
        .collect();
    if !rest.is_empty() {
        series.push((OTHERS.to_owned(), rest));
    }
    series
}

/// The hover text of the `index`th point of series `name`.
pub fn hover_words(
    series: &[(String, Vec<&TtftSample>)],
    name: &str,
    index: usize,
) -> Option<String> {
    let (_, points) = series.iter().find(|(n, _)| n == name)?;
    let t = points.get(index)?;
    Some(format!(
        "{} ({}, priority {}): first token after {:.2} s, at {:.1} s",
        t.client_id,
        client_name(t),
        t.priority,
        t.ttft_secs,
        t.at_secs
    ))
}

/// The plot's height: its dots readable beside the timeline at the window's default size.
pub const PLOT_HEIGHT: f32 = 150.0;
/// The least TTFT drawn (a log axis has no 0).
const TTFT_FLOOR_SECS: f64 = 0.01;

/// Where a TTFT goes on the log axis.
pub fn log_of_seconds(secs: f64) -> f64 {
    secs.max(TTFT_FLOOR_SECS).log10()
}

/// A log axis' mark in seconds: "0.1 s", "1 s", "100 s".
pub fn seconds_of_log(value: f64) -> String {
    let secs = 10f64.powf(value);
    let digits = if secs < 1.0 {
        (-value.floor()) as usize
    } else {
        0
    };
    format!("{secs:.digits$}\u{a0}s")
}

/// The log axis' marks: each power of ten, and 2 and 5 times it between.
fn decades(input: egui_plot::GridInput) -> Vec<egui_plot::GridMark> {
    let (low, high) = input.bounds;
    let mut marks = Vec::new();
    for decade in (low.floor() as i32 - 1)..=(high.ceil() as i32) {
        let d = f64::from(decade);
        marks.push(egui_plot::GridMark {
            value: d,
            step_size: 1.0,
        });
        if high - low < 4.0 {
            for k in [2.0f64, 5.0] {
                marks.push(egui_plot::GridMark {
                    value: d + k.log10(),
                    step_size: 0.1,
                });
            }
        }
    }
    marks.retain(|m| m.value >= low && m.value <= high);
    marks
}

/// The panel.
///
/// The samples are the app's run's (an apply keeps them), with a line where each engine an
/// apply started took over (`restarts_at_secs`).
pub fn ttft_ui(ui: &mut Ui, s: &ServiceSnapshot, restarts_at_secs: &[f64]) {
    ui.heading("Time to first token").on_hover_text(
        "seconds from arrival to the first token of each recent request, per client (the API \
         key's name, else the User-Agent's product); point at a dot for its request",
    );
    let samples = &s.ttft;
    if samples.is_empty() {
        ui.weak(
            "no request has had its first token yet: each one will show here as a dot, \
             per client",
        );
        return;
    }
    let series = ttft_series(samples);
    let summary: Vec<String> = series
        .iter()
        .filter_map(|(name, points)| {
            let mut values: Vec<f64> = points.iter().map(|t| t.ttft_secs).collect();
            let (p50, p95) = percentiles(&mut values)?;
            let n = values.len();
            Some(format!(
                "{name}: p50 {p50:.2} s, p95 {p95:.2} s ({n} request{})",
                if n == 1 { "" } else { "s" }
            ))
        })
        .collect();
    // each line in its series' colour: the legend, outside the plot, where it hides no point
    for ((line, _), colour) in summary.iter().zip(&series).zip(COLOURS) {
        ui.add(egui::Label::new(egui::RichText::new(line).color(colour)).wrap());
    }
    egui_plot::Plot::new("ttft")
        .id(egui::Id::unique(PLOT_ID))
        .height(PLOT_HEIGHT)
        .set_margin_fraction(egui::vec2(0.05, 0.1))
        .x_axis_label("seconds since the app started")
        .y_axis_label("TTFT, s (log)")
        // a log axis: 0.1 s stays apart from 0.3 s beside a 170 s outlier
        .y_grid_spacer(decades)
        .y_axis_formatter(|mark, _| seconds_of_log(mark.value))
        // the wheel scrolls the page it sits in
        .allow_scroll(false)
        .allow_zoom(false)
        .label_formatter(|pos| match pos {
            egui_plot::HoverPosition::NearDataPoint {
                plot_name, index, ..
            } => hover_words(&series, plot_name, *index),
            egui_plot::HoverPosition::Elsewhere { .. } => None,
        })
        .show(ui, |plot| {
            for ((name, points), colour) in series.iter().zip(COLOURS) {
                let xy: Vec<[f64; 2]> = points
                    .iter()
                    .map(|t| [t.at_secs, log_of_seconds(t.ttft_secs)])
                    .collect();
                plot.points(
                    egui_plot::Points::new(name.clone(), xy)
                        .color(colour)
                        .radius(3.0),
                );
            }
            for at in restarts_at_secs {
                plot.vline(egui_plot::VLine::new("engine restarted", *at).color(Color32::WHITE));
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::RequestId;
    use crate::service::SchedulerSettings;
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;

    fn sample(id: u64, client: &str, ttft_secs: f64) -> TtftSample {
        TtftSample {
            request_id: RequestId(id),
            client_id: format!("chatcmpl-{id}"),
            client: client.to_owned(),
            priority: 0,
            ttft_secs,
            at_secs: id as f64,
        }
    }

    #[test]
    fn an_idle_window_says_what_the_plot_will_show_instead_of_an_empty_grid() {
        let s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        let harness = Harness::new_ui(|ui| ttft_ui(ui, &s, &[]));
        harness.get_by_label_contains("no request has had its first token yet");
        assert!(harness.query_by_label("TTFT, s").is_none());
    }

    #[test]
    fn each_client_is_a_series_with_its_percentiles_and_each_dot_names_its_request() {
        let mut samples = vec![
            sample(1, "claude-cli", 0.2),
            sample(2, "claude-cli", 0.4),
            sample(3, "", 1.5),
        ];
        for (i, c) in ["a", "b", "c", "d"].into_iter().enumerate() {
            samples.push(sample(10 + i as u64, c, 0.1));
        }
        let series = ttft_series(&samples);
        let names: Vec<&str> = series.iter().map(|(n, _)| n.as_str()).collect();
        // the four busiest (ties by name) in name order, the rest in one series
        assert_eq!(names, ["a", "b", "c", "claude-cli", OTHERS]);
        let others: Vec<u64> = series[4].1.iter().map(|t| t.request_id.0).collect();
        assert_eq!(others, [3, 13]);
        assert_eq!(
            hover_words(&series, "claude-cli", 1).as_deref(),
            Some("chatcmpl-2 (claude-cli, priority 0): first token after 0.40 s, at 2.0 s")
        );
        assert_eq!(
            hover_words(&series, OTHERS, 0).as_deref(),
            Some("chatcmpl-3 (no client named, priority 0): first token after 1.50 s, at 3.0 s")
        );
        assert_eq!(hover_words(&series, OTHERS, 2), None);

        let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        s.ttft = samples.clone().into();
        let harness = Harness::new_ui(|ui| ttft_ui(ui, &s, &[]));
        harness.get_by_label("claude-cli: p50 0.20 s, p95 0.40 s (2 requests)");
        harness.get_by_label("other clients: p50 0.10 s, p95 1.50 s (2 requests)");
        drop(harness);
        s.ttft = samples[..1].to_vec().into();
        let harness = Harness::new_ui(|ui| ttft_ui(ui, &s, &[]));
        harness.get_by_label("claude-cli: p50 0.20 s, p95 0.20 s (1 request)");
    }

    #[test]
    fn the_axis_is_logarithmic_so_a_tenth_of_a_second_stays_apart_from_minutes() {
        assert_eq!(seconds_of_log(log_of_seconds(0.1)), "0.1\u{a0}s");
        assert_eq!(seconds_of_log(log_of_seconds(170.0)), "170\u{a0}s");
        assert_eq!(seconds_of_log(0.0), "1\u{a0}s");
        // 0.1 s and 0.3 s are as far apart as 10 s and 30 s
        let near = log_of_seconds(0.3) - log_of_seconds(0.1);
        let far = log_of_seconds(30.0) - log_of_seconds(10.0);
        assert!((near - far).abs() < 1e-9);
        let marks = decades(egui_plot::GridInput {
            bounds: (-1.2, 2.3),
            base_step_size: 0.1,
        });
        let values: Vec<String> = marks.iter().map(|m| seconds_of_log(m.value)).collect();
        assert!(values.contains(&"0.1\u{a0}s".to_owned()), "{values:?}");
        assert!(values.contains(&"100\u{a0}s".to_owned()), "{values:?}");
    }

    #[test]
    fn the_mouse_wheel_over_the_plot_scrolls_the_page_it_sits_in() {
        let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        s.ttft = (1..=5).map(|i| sample(i, "claude-cli", 0.3)).collect();
        let mut harness = Harness::builder().with_size([600.0, 300.0]).build_ui(|ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                ui.label("above the plot");
                ttft_ui(ui, &s, &[]);
                ui.add_space(800.0);
            });
        });
        harness.run();
        let heading = |h: &Harness<'_>| h.get_by_label("above the plot").rect().top();
        let before = heading(&harness);
        let plot = harness.get_by_label("claude-cli: p50 0.30 s, p95 0.30 s (5 requests)");
        // the pointer well inside the plot, below the summary line
        harness.hover_at(plot.rect().center() + egui::vec2(0.0, 80.0));
        harness.run();
        harness.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, -120.0),
            phase: egui::TouchPhase::Move,
            source: egui::MouseWheelSource::Unknown,
            modifiers: egui::Modifiers::NONE,
        });
        harness.run();
        assert!(
            heading(&harness) < before - 50.0,
            "the page did not scroll: the heading stayed at {} (was {before})",
            heading(&harness)
        );
        // and the plot did not pan: it still fits its points
        let plot = egui_plot::PlotMemory::load(&harness.ctx, egui::Id::unique(PLOT_ID))
            .expect("no plot drawn");
        assert!(plot.auto_bounds.all(), "the wheel panned the plot");
    }
}
