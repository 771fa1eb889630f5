//! The settings view's models from the hub: the curated list of coding-agent models by card
//! size (assets/models.json), a box for any repository, each repository's GGUFs with "fits /
//! fits with N layers on the CPU / does not fit" for this machine, a download per file with
//! a progress bar, its speed and time left, Cancel (the next Download resumes), then Use.

use super::commands::{CancelFlag, Command, CommandQueue};
use super::hub_commands::HubFailure;
use crate::models::curated::{CLASSES, CuratedList, curated};
use crate::models::hub::{DownloadProgress, HubModel};
use crate::models::hub_rows::{HubListing, HubRow};
use crate::models::pull::progress_words;
use egui::{Color32, RichText, Ui};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The view's state between frames.
#[derive(Debug)]
pub struct HubView {
    pub curated: &'static CuratedList,
    /// What the repository box holds.
    pub repo_input: String,
    /// Listings by repository, the last one read (kept while it is read again, so a running
    /// download keeps its bar and Cancel).
    pub listings: BTreeMap<String, Result<HubListing, HubFailure>>,
    /// Repositories being read now.
    pub reading: BTreeSet<String>,
    /// Downloads by `repo/name`.
    pub downloads: BTreeMap<String, Download>,
}

impl Default for HubView {
    fn default() -> Self {
        Self {
            curated: curated(),
            repo_input: String::new(),
            listings: BTreeMap::new(),
            reading: BTreeSet::new(),
            downloads: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Download {
    Running {
        progress: Option<DownloadProgress>,
        cancel: CancelFlag,
    },
    Done(PathBuf),
    /// Failed or cancelled, in words; what was downloaded is kept for the next try.
    Stopped(HubFailure),
}

/// The key a download is kept under.
pub fn download_key(repo: &str, model: &HubModel) -> String {
    format!("{repo}/{}", model.name)
}

impl HubView {
    pub fn listed(&mut self, repo: String, listing: Result<HubListing, HubFailure>) {
        self.reading.remove(&repo);
        self.listings.insert(repo, listing);
    }

    pub fn progressed(&mut self, key: &str, progress: DownloadProgress) {
        if let Some(Download::Running { progress: p, .. }) = self.downloads.get_mut(key) {
            *p = Some(progress);
        }
    }

    pub fn finished(&mut self, key: String, result: Result<PathBuf, HubFailure>) {
        let state = match result {
            Ok(path) => Download::Done(path),
            Err(e) => Download::Stopped(e),
        };
        self.downloads.insert(key, state);
    }

    fn running(&self) -> bool {
        self.downloads
            .values()
            .any(|d| matches!(d, Download::Running { .. }))
            || !self.reading.is_empty()
    }
}

/// The hub section. "Use" puts a downloaded model's path into `model_path` (the draft's).
pub fn hub_ui(ui: &mut Ui, view: &mut HubView, model_path: &mut String, q: &mut CommandQueue) {
    if view.running() {
        // progress arrives between snapshots: keep the bar moving
        ui.ctx()
            .request_repaint_after(std::time::Duration::from_millis(250));
    }
    ui.horizontal(|ui| {
        ui.add(
            egui::TextEdit::singleline(&mut view.repo_input)
                .hint_text("a repository: owner/name")
                .desired_width(300.0),
        );
        let repo = view.repo_input.trim().to_owned();
        let valid = crate::models::hub::parse_model_ref(&repo).is_ok();
        if ui
            .add_enabled(valid, egui::Button::new("List files"))
            .on_hover_text(
                "list its GGUF files with what fits this machine (HF_ENDPOINT, HF_TOKEN apply)",
            )
            .clicked()
        {
            list(view, q, repo, None);
        }
    });
    ui.label(RichText::new("Coding-agent models by the memory they need:").strong());
    // a &'static list: read while the view changes
    let curated = &view.curated.models;
    for class in CLASSES {
        for entry in curated.iter().filter(|m| m.class == class) {
            ui.horizontal(|ui| {
                ui.label(RichText::new(class).monospace());
                ui.label(format!("{} ({})", entry.repo, entry.file))
                    .on_hover_text(format!("{}; tool calls: {}", entry.note, entry.tool_calls));
                let busy = view.reading.contains(&entry.repo);
                if ui
                    .add_enabled(!busy, egui::Button::new("Check"))
                    .on_hover_text(format!(
                        "read {}'s files and header from the hub, and what fits here",
                        entry.repo
                    ))
                    .clicked()
                {
                    list(view, q, entry.repo.clone(), Some(entry.file.clone()));
                }
            });
            listing_ui(
                ui,
                view,
                &entry.repo,
                Some(&entry.tool_calls),
                model_path,
                q,
            );
        }
    }
    // repositories typed in the box
    let typed: BTreeSet<String> = view
        .listings
        .keys()
        .chain(&view.reading)
        .filter(|repo| !curated.iter().any(|m| &m.repo == *repo))
        .cloned()
        .collect();
    for repo in typed {
        ui.label(RichText::new(&repo).strong());
        listing_ui(ui, view, &repo, None, model_path, q);
    }
}

fn list(view: &mut HubView, q: &mut CommandQueue, repo: String, pattern: Option<String>) {
    view.reading.insert(repo.clone());
    q.send(Command::HubList { repo, pattern });
}

/// A repository's files: each on a line with its size and fit, and under it the download's
/// state and buttons.
fn listing_ui(
    ui: &mut Ui,
    view: &mut HubView,
    repo: &str,
    expected_tools: Option<&str>,
    model_path: &mut String,
    q: &mut CommandQueue,
) {
    if view.reading.contains(repo) {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label(format!("reading {repo} from the hub..."));
        });
    }
    let listing = match view.listings.get(repo) {
        None => return,
        Some(Err(e)) => {
            failure_ui(ui, e, repo);
            return;
        }
        Some(Ok(listing)) => listing,
    };
    match &listing.facts {
        Ok(facts) => {
            let tools = facts.tool_calls.as_deref().unwrap_or("none");
            ui.label(format!(
                "    {}, {} layers, trained for {} tokens, KV cache {:.1} KB a token at F16, tool calls: {tools}",
                facts.architecture,
                facts.layers,
                facts.context_length,
                facts.kv_bytes_per_token(crate::config::KvType::F16) as f64 / 1e3,
            ));
            if let Some(expected) = expected_tools.filter(|e| *e != tools) {
                ui.colored_label(
                    Color32::from_rgb(200, 140, 0),
                    format!("    the list says {expected} tool calls; its template says {tools}"),
                );
            }
        }
        Err(e) => {
            ui.colored_label(Color32::from_rgb(220, 60, 40), format!("    {e}"));
        }
    }
    for row in &listing.rows {
        ui.horizontal(|ui| {
            ui.add_space(16.0);
            ui.vertical(|ui| file_row_ui(ui, &mut view.downloads, repo, row, model_path, q));
        });
    }
}

fn file_row_ui(
    ui: &mut Ui,
    downloads: &mut BTreeMap<String, Download>,
    repo: &str,
    row: &HubRow,
    model_path: &mut String,
    q: &mut CommandQueue,
) {
    let key = download_key(repo, &row.model);
    let parts = if row.model.parts.len() > 1 {
        format!(", {} parts", row.model.parts.len())
    } else {
        String::new()
    };
    ui.horizontal(|ui| {
        ui.label(&row.model.name);
        ui.label(format!(
            "{}{parts}",
            super::units::bytes_words(row.model.size_bytes())
        ));
        let colour = match row.fit.map(|f| f.verdict) {
            Some(crate::models::fit::Verdict::OnGpu) => Color32::from_rgb(60, 160, 60),
            Some(crate::models::fit::Verdict::DoesNotFit { .. }) => Color32::from_rgb(220, 60, 40),
            _ => ui.visuals().text_color(),
        };
        ui.colored_label(colour, &row.fit_words);
    });
    ui.horizontal(|ui| download_ui(ui, downloads, repo, row, &key, model_path, q));
}

/// A file's download: its progress and Cancel, or Download (again: it resumes), or Use.
fn download_ui(
    ui: &mut Ui,
    downloads: &mut BTreeMap<String, Download>,
    repo: &str,
    row: &HubRow,
    key: &str,
    model_path: &mut String,
    q: &mut CommandQueue,
) {
    let done = match downloads.get(key) {
        Some(Download::Done(path)) => Some(path.clone()),
        _ => row.downloaded.clone(),
    };
    match downloads.get(key).cloned() {
        Some(Download::Running { progress, cancel }) => {
            let fraction = progress
                .as_ref()
                .map_or(0.0, |p| p.done_bytes as f32 / p.total_bytes.max(1) as f32);
            ui.add(egui::ProgressBar::new(fraction).desired_width(140.0));
            ui.label(
                progress
                    .as_ref()
                    .map_or_else(|| "starting...".to_owned(), progress_words),
            );
            if ui
                .button("Cancel")
                .on_hover_text("stop; what was downloaded is kept and Download resumes there")
                .clicked()
            {
                cancel.cancel();
            }
            return;
        }
        Some(Download::Stopped(why)) => {
            ui.vertical(|ui| failure_ui(ui, &why, key));
        }
        _ => {}
    }
    match done {
        Some(path) => {
            if ui
                .button("Use")
                .on_hover_text(format!(
                    "put {} in the draft (Apply and restart loads it)",
                    path.display()
                ))
                .clicked()
            {
                *model_path = path.display().to_string();
            }
        }
        None => {
            if ui
                .button("Download")
                .on_hover_text("into this app's models folder, checked by its SHA-256")
                .clicked()
            {
                let cancel = CancelFlag::default();
                downloads.insert(
                    key.to_owned(),
                    Download::Running {
                        progress: None,
                        cancel: cancel.clone(),
                    },
                );
                q.send(Command::HubDownload {
                    repo: repo.to_owned(),
                    model: row.model.clone(),
                    cancel,
                });
            }
        }
    }
}

/// A failure in words, its detail (the address and the error's chain) folded away under them.
fn failure_ui(ui: &mut Ui, failure: &HubFailure, id: &str) {
    ui.colored_label(Color32::from_rgb(220, 60, 40), &failure.words);
    if let Some(detail) = &failure.detail {
        egui::CollapsingHeader::new("details")
            .id_salt(("hub-failure", id))
            .show(ui, |ui| ui.weak(detail));
    }
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
