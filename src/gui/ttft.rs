//! Time to first token, per client: the agent's requests beside the rest, each a point with
//! its request on hover, p50/p95 per client above the plot, and a sentence instead of an empty
//! grid before the first answer. The mouse wheel scrolls the page, not the plot.

use super::earlier::Earlier;
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

/// The panel.
///
/// The replaced engines' samples stay (an apply starts the service's again), on the window's
/// clock, with a line where each replacement happened.
pub fn ttft_ui(ui: &mut Ui, s: &ServiceSnapshot, earlier: &Earlier) {
    ui.heading("Time to first token").on_hover_text(
        "seconds from arrival to the first token of each recent request, per client (the API \
         key's name, else the User-Agent's product); point at a dot for its request",
    );
    let samples = earlier.ttft_with(s);
    if samples.is_empty() {
        ui.weak(
            "no request has had its first token yet: each one will show here as a dot, \
             per client",
        );
        return;
    }
    let series = ttft_series(&samples);
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
    for line in summary {
        ui.label(line);
    }
    egui_plot::Plot::new("ttft")
        .id(egui::Id::unique(PLOT_ID))
        .height(160.0)
        .legend(egui_plot::Legend::default().position(egui_plot::Corner::LeftTop))
        // headroom above the highest point, so the legend covers none
        .set_margin_fraction(egui::vec2(0.05, 0.35))
        .include_y(0.0)
        .x_axis_label("seconds since the app started")
        .y_axis_label("TTFT, s")
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
                let xy: Vec<[f64; 2]> = points.iter().map(|t| [t.at_secs, t.ttft_secs]).collect();
                plot.points(
                    egui_plot::Points::new(name.clone(), xy)
                        .color(colour)
                        .radius(3.0),
                );
            }
            for at in &earlier.restarts_at_secs {
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
        let harness = Harness::new_ui(|ui| ttft_ui(ui, &s, &Earlier::default()));
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
        let harness = Harness::new_ui(|ui| ttft_ui(ui, &s, &Earlier::default()));
        harness.get_by_label("claude-cli: p50 0.20 s, p95 0.40 s (2 requests)");
        harness.get_by_label("other clients: p50 0.10 s, p95 1.50 s (2 requests)");
        drop(harness);
        s.ttft = samples[..1].to_vec().into();
        let harness = Harness::new_ui(|ui| ttft_ui(ui, &s, &Earlier::default()));
        harness.get_by_label("claude-cli: p50 0.20 s, p95 0.20 s (1 request)");
    }

    #[test]
    fn the_mouse_wheel_over_the_plot_scrolls_the_page_it_sits_in() {
        let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        s.ttft = (1..=5).map(|i| sample(i, "claude-cli", 0.3)).collect();
        let mut harness = Harness::builder().with_size([600.0, 300.0]).build_ui(|ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                ui.label("above the plot");
                ttft_ui(ui, &s, &Earlier::default());
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
