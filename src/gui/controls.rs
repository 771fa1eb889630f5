//! The scheduler's switches in the window: Preemption (`solo_priority` itself), long reads
//! giving way, and the expert `give_way` values.

use super::commands::{Command, CommandQueue};
use super::preemption::{
    BATCH_REASON, GIVE_WAY_LABEL, GIVE_WAY_TOOLTIP, PREEMPTION_TOOLTIP, Preemption, give_way_click,
    preemption_click, preemption_label, preemption_of,
};
use crate::service::{GiveWay, ServiceSnapshot};
use egui::Ui;

/// The rollback switch (Preemption: `solo_priority` itself) and the give-way switch beside it
/// (R12), then the expert `give_way` values.
pub fn controls_ui(ui: &mut Ui, s: &ServiceSnapshot, q: &mut CommandQueue) {
    ui.horizontal(|ui| {
        let state = preemption_of(s);
        let mut on = state == Preemption::On;
        let label = preemption_label(state);
        let response = ui
            .add_enabled(
                state != Preemption::Batch,
                egui::Checkbox::new(&mut on, label),
            )
            .on_hover_text(PREEMPTION_TOOLTIP)
            .on_disabled_hover_text(BATCH_REASON);
        if response.clicked()
            && let Some(command) = preemption_click(s)
        {
            q.send(command);
        }
        ui.separator();
        let mut gives_way = s.give_way != GiveWay::Off;
        if ui
            .checkbox(&mut gives_way, GIVE_WAY_LABEL)
            .on_hover_text(GIVE_WAY_TOOLTIP)
            .clicked()
        {
            q.send(give_way_click(s));
        }
    });
    egui::CollapsingHeader::new("Expert switches")
        .id_salt("expert-switches")
        .default_open(false)
        .show(ui, |ui| expert_switches_ui(ui, s, q));
}

/// `give_way`'s values one by one, and the mode.
fn expert_switches_ui(ui: &mut Ui, s: &ServiceSnapshot, q: &mut CommandQueue) {
    ui.horizontal(|ui| {
        ui.label("give_way:")
            .on_hover_text("how a long prompt read compares itself with a waiting request");
        let mut give_way = s.give_way;
        for (value, name, tip) in [
            (
                GiveWay::Left,
                "left",
                "a read gives way to a higher priority, or to one with less left to read",
            ),
            (
                GiveWay::Whole,
                "whole",
                "a read gives way to a higher priority, or to one whose whole prompt is shorter",
            ),
            (GiveWay::Off, "off", "a read runs to its end once started"),
        ] {
            if ui
                .radio_value(&mut give_way, value, name)
                .on_hover_text(tip)
                .changed()
            {
                q.send(Command::SetGiveWay(give_way));
            }
        }
        ui.separator();
        let (mode, tip) = if s.engine.parallel >= 2 {
            (
                format!("batch mode: {} slots", s.engine.parallel),
                "several requests decode together; none is paused for another",
            )
        } else {
            (
                "solo mode: one slot".to_owned(),
                "one request decodes at a time; the others wait (or pause it, with preemption)",
            )
        };
        ui.label(mode).on_hover_text(tip);
    });
}

#[cfg(test)]
mod tests {
    /// In batch mode the Preemption switch does not apply: shown disabled, with the reason,
    /// and a click sends nothing.
    #[test]
    fn in_batch_mode_the_preemption_switch_is_disabled() {
        use super::super::commands::CommandQueue;
        use super::super::preemption::PREEMPTION_BATCH;
        use egui_kittest::Harness;
        use egui_kittest::kittest::NodeT as _;
        use egui_kittest::kittest::Queryable;
        let settings = crate::service::SchedulerSettings::default();
        let mut s = crate::service::ServiceSnapshot::starting(settings, 2, true);
        s.engine.parallel = 2;
        let mut queue = CommandQueue::default();
        let mut harness = Harness::new_ui(|ui| {
            super::controls_ui(ui, &s, &mut queue);
        });
        let switch = harness.get_by_label(PREEMPTION_BATCH);
        assert!(switch.accesskit_node().is_disabled());
        switch.click();
        harness.run();
        drop(harness);
        assert!(queue.pending.is_empty(), "{:?}", queue.pending);
    }
}
