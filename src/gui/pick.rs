//! Where no file dialog opens (Linux without xdg-desktop-portal or zenity), "Open GGUF..."
//! says so in the window and offers a field to type the model's path instead.

use egui::{Color32, RichText, Ui};
use std::path::PathBuf;

/// The typed path, shown once a file dialog failed to open.
#[derive(Debug, Default)]
pub struct PathEntry {
    /// Why no file dialog opened; `None`: the field is not shown.
    why: Option<String>,
    typed: String,
}

impl PathEntry {
    /// "Open GGUF..." found no file dialog.
    pub fn no_dialog(&mut self, why: String) {
        self.why = Some(why);
    }

    /// The notice and the field; the path typed once "Use this path" is clicked.
    pub fn ui(&mut self, ui: &mut Ui) -> Option<PathBuf> {
        let why = self.why.as_ref()?;
        let mut used = None;
        ui.label(
            RichText::new(format!(
                "Open GGUF... cannot open a file dialog: {why}. Type the model's path instead:"
            ))
            .color(Color32::from_rgb(220, 60, 40)),
        );
        ui.horizontal(|ui| {
            let field = ui.add(
                egui::TextEdit::singleline(&mut self.typed)
                    .hint_text("/path/to/model.gguf")
                    .desired_width(360.0),
            );
            let path = self.typed.trim();
            let entered = field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            if ui
                .add_enabled(!path.is_empty(), egui::Button::new("Use this path"))
                .on_hover_text("put it in Model below (Apply and restart loads it)")
                .clicked()
                || (entered && !path.is_empty())
            {
                used = Some(PathBuf::from(path));
            }
            if ui.button("Close").clicked() {
                self.why = None;
            }
        });
        if used.is_some() {
            self.why = None;
            self.typed.clear();
        }
        used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable as _;

    #[test]
    fn without_a_file_dialog_the_window_says_why_and_a_typed_path_is_used() {
        let mut harness = Harness::new_ui_state(
            |ui, (entry, used): &mut (PathEntry, Option<PathBuf>)| {
                if let Some(path) = entry.ui(ui) {
                    *used = Some(path);
                }
            },
            (PathEntry::default(), None),
        );
        harness.run();
        assert!(harness.query_by_label_contains("cannot open").is_none());
        harness
            .state_mut()
            .0
            .no_dialog("no xdg-desktop-portal".into());
        harness.run();
        harness.get_by_label_contains("cannot open a file dialog: no xdg-desktop-portal");
        harness
            .get_by_role(egui::accesskit::Role::TextInput)
            .focus();
        harness.run();
        harness
            .get_by_role(egui::accesskit::Role::TextInput)
            .type_text("/models/coder.gguf");
        harness.run();
        harness.get_by_label("Use this path").click();
        harness.run();
        assert_eq!(harness.state().1, Some(PathBuf::from("/models/coder.gguf")));
        assert!(harness.query_by_label_contains("cannot open").is_none());
    }
}
