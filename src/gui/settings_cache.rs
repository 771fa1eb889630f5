//! The settings view's widgets for the context checkpoints (`ctx_checkpoints`,
//! `checkpoint_min_step`, `checkpoint_mib`), drawn in the KV cache's row.

use crate::config::EngineSettings;
use egui::Ui;

/// The context checkpoints' keys (in the KV cache's row: see `device_rows_ui`).
pub(super) fn checkpoints_ui(ui: &mut Ui, e: &mut EngineSettings) {
    ui.separator();
    let label = ui.label("ctx_checkpoints");
    ui.add(egui::DragValue::new(&mut e.ctx_checkpoints).range(0..=1024))
        .labelled_by(label.id)
        .on_hover_text(
            "per sequence, where the cache cannot be cut anywhere: a departing \
            prompt reads from the last checkpoint before it; 0: none",
        );
    let label = ui.label("every");
    ui.add(egui::DragValue::new(&mut e.checkpoint_min_step_tokens).range(64..=1 << 20))
        .labelled_by(label.id)
        .on_hover_text(
            "checkpoint_min_step: within a long prompt read, tokens between checkpoints",
        );
    let label = ui.label("MiB");
    ui.add(egui::DragValue::new(&mut e.checkpoint_mib).range(0..=1 << 20))
        .labelled_by(label.id)
        .on_hover_text("checkpoint_mib: all checkpoints in host RAM; the oldest leave first");
}
