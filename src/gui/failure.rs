//! The banner of an engine that could not start: after `restart_attempts_max` failed starts
//! in a row it stays down until a Retry (R10), so the window says why in words a user can act
//! on, with the Retry button.

use super::commands::{Command, CommandQueue};
use crate::service::{EngineStatus, ServiceSnapshot, failure_headline, what_to_try};
use egui::{Color32, RichText, Ui};

const BANNER: Color32 = Color32::from_rgb(220, 60, 40);

/// The banner, while the engine stays failed after its starts ran out.
pub fn engine_failure_ui(ui: &mut Ui, s: &ServiceSnapshot, cpu_code: &str, q: &mut CommandQueue) {
    let EngineStatus::Failed(reason) = &s.engine.status else {
        return;
    };
    if !s.engine.needs_retry {
        return;
    }
    ui.horizontal_wrapped(|ui| {
        ui.label(
            RichText::new(format!(
                "The engine could not start: {}.",
                failure_headline(reason)
            ))
            .color(BANNER)
            .strong(),
        );
        if ui
            .button("Retry")
            .on_hover_text("start the engine again (POST /v1/engine/restart does the same)")
            .clicked()
        {
            q.send(Command::RestartEngine);
        }
    });
    ui.label(RichText::new(format!("Why: {reason}")).color(BANNER));
    ui.label(format!("What to try: {}.", what_to_try(reason, cpu_code)));
}
