//! What the user asks for: commands queued during a frame and drained once at its end into
//! the service (each runs as a task on the background runtime, so a frame never waits). Their
//! outcomes come back for the event log and the settings view.

use super::hub_commands::HubFailure;
use crate::control::{Control, RestartSettings};
use crate::ids::RequestId;
use crate::models::discover::{self, FoundModel, ModelFacts};
use crate::models::hub::{DownloadProgress, HubModel};
use crate::models::hub_rows::HubListing;
use crate::service::GiveWay;
use crate::service::{ServiceHandle, SettingsChange};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// The Preemption switch: `solo_priority` (the rollback switch).
    SetSoloPriority(bool),
    /// The give-way switch: long reads give way (the `give_way` the control plane keeps to
    /// put back) or not (`off`).
    SetGivingWay(bool),
    /// The expert `give_way` values.
    SetGiveWay(GiveWay),
    RestartEngine,
    Cancel(RequestId),
    SetPriority(RequestId, i32),
    /// Start a new engine with settings only a new engine takes (needs the control plane).
    ApplySettings(Box<RestartSettings>),
    /// Turn preemption off, then apply (`parallel` 2 or more is refused with it on): one
    /// command, so the two happen in that order.
    ApplyWithPreemptionOff(Box<RestartSettings>),
    /// Open the file dialog to choose a GGUF model.
    PickModel,
    /// Look for models in LM Studio's and Ollama's folders and the app's own, and read each
    /// one's facts (on a blocking thread: a vocabulary-only load each).
    ScanModels,
    /// List a hub repository's GGUFs (those whose name contains `pattern`) with their fit.
    HubList {
        repo: String,
        pattern: Option<String>,
    },
    /// Download a model from the hub into the models folder; progress comes back as it goes.
    HubDownload {
        repo: String,
        model: HubModel,
        cancel: CancelFlag,
    },
}

/// A download's Cancel button: shared with the task that downloads.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn flag(&self) -> &AtomicBool {
        &self.0
    }
}

impl PartialEq for CancelFlag {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// What came of a command.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A line for the event log.
    Line(String),
    /// The settings view's apply ended: `Ok` with what runs now, or the error.
    Applied(Result<String, String>),
    /// The file dialog closed with this model chosen.
    Picked(PathBuf),
    /// No file dialog can open here (why): the window offers a path field instead.
    NoFileDialog(String),
    /// The models found on this machine, each with its facts or why they could not be read.
    Models(Vec<ScannedModel>),
    /// A hub repository's listing, or why it could not be read.
    HubListed {
        repo: String,
        listing: Result<HubListing, HubFailure>,
    },
    /// How far the download kept under `key` is.
    HubProgress {
        key: String,
        progress: DownloadProgress,
    },
    /// The download kept under `key` ended: the model's path, or why not.
    HubDownloaded {
        key: String,
        result: Result<PathBuf, HubFailure>,
    },
}

/// A model found on this machine and what its header says.
pub type ScannedModel = (FoundModel, Result<ModelFacts, String>);

/// The frame's commands and the channel their outcomes come back on.
#[derive(Debug)]
pub struct CommandQueue {
    pub(super) pending: Vec<Command>,
    outcomes_tx: mpsc::Sender<Outcome>,
    outcomes_rx: mpsc::Receiver<Outcome>,
}

impl Default for CommandQueue {
    fn default() -> Self {
        let (outcomes_tx, outcomes_rx) = mpsc::channel();
        Self {
            pending: Vec::new(),
            outcomes_tx,
            outcomes_rx,
        }
    }
}

impl CommandQueue {
    pub fn send(&mut self, command: Command) {
        self.pending.push(command);
    }

    /// Sends the frame's commands to the control plane (a request's cancel or priority to
    /// the service serving it), each on its own task, as the window's.
    pub fn drain(
        &mut self,
        service: &ServiceHandle,
        control: &Control,
        runtime: &tokio::runtime::Handle,
    ) {
        for command in self.pending.drain(..) {
            if let Some(hub) = super::hub_commands::HubJob::of(&command) {
                // the listing's fit: for the floor the engine's context keeps, within the limit
                let e = control.config().app.engine_settings;
                let fit_for = (e.ctx_min_tokens, e.gpu_memory_limit.bytes());
                runtime.spawn(hub.run(self.outcomes_tx.clone(), service.clone(), fit_for));
                continue;
            }
            let service = service.clone();
            let control = control.clone();
            let tx = self.outcomes_tx.clone();
            runtime.spawn(async move {
                if let Some(outcome) = run(command, service, control, WINDOW).await {
                    let _ = tx.send(outcome);
                }
            });
        }
    }

    /// Outcomes that arrived since the last call.
    pub fn outcomes(&self) -> Vec<Outcome> {
        self.outcomes_rx.try_iter().collect()
    }
}

/// Who made a change, as the service's log names it.
pub const WINDOW: &str = "the window";
pub const TRAY: &str = "the tray";

/// Runs one command, made by `by` (the window, the tray).
pub(super) async fn run(
    command: Command,
    service: ServiceHandle,
    control: Control,
    by: &str,
) -> Option<Outcome> {
    let line = match &command {
        Command::ApplySettings(settings) | Command::ApplyWithPreemptionOff(settings) => {
            if matches!(command, Command::ApplyWithPreemptionOff(_)) {
                let off = SettingsChange {
                    solo_priority: Some(false),
                    give_way: None,
                };
                if let Err(e) = control.change_live(off, by).await {
                    return Some(Outcome::Applied(Err(format!(
                        "preemption could not be turned off: {e}"
                    ))));
                }
            }
            let applied = control.apply(&settings.patch()).await;
            return Some(Outcome::Applied(
                applied
                    .map(|a| match a.not_saved {
                        None => "a new engine serves the new settings (saved)".to_owned(),
                        Some(why) => {
                            format!("a new engine serves the new settings (not saved: {why})")
                        }
                    })
                    .map_err(|e| e.to_string()),
            ));
        }
        Command::ScanModels => {
            let scanned = tokio::task::spawn_blocking(|| {
                discover::find_models(&discover::usual_folders())
                    .into_iter()
                    .map(|found| {
                        let facts = discover::describe(&found.path);
                        (found, facts)
                    })
                    .collect()
            })
            .await
            .unwrap_or_else(|e| {
                // a panic in the scan: said in the log, and the list shows none found
                tracing::warn!("the model scan failed: {e}");
                Vec::new()
            });
            return Some(Outcome::Models(scanned));
        }
        Command::HubList { .. } | Command::HubDownload { .. } => {
            // run by the queue itself (`drain`): they report more than one outcome
            return None;
        }
        Command::PickModel => {
            // rfd fails with a line in the log only (Linux without xdg-desktop-portal or
            // zenity): the window says so and offers a path field
            let missing = tokio::task::spawn_blocking(super::session_bus::no_file_dialog).await;
            if let Ok(Some(why)) = missing {
                return Some(Outcome::NoFileDialog(why));
            }
            let picked = rfd::AsyncFileDialog::new()
                .set_title("Open a GGUF model")
                .add_filter("GGUF model", &["gguf"])
                // Ollama's blobs are GGUFs without the extension
                .add_filter("All files", &["*"])
                .pick_file()
                .await;
            return Some(match picked {
                Some(file) => Outcome::Picked(file.path().to_path_buf()),
                None => Outcome::Line(
                    "no model chosen (if no dialog appeared, no xdg-desktop-portal runs here: \
                     type the model's path instead)"
                        .to_owned(),
                ),
            });
        }
        Command::SetSoloPriority(on) => {
            let change = SettingsChange {
                solo_priority: Some(*on),
                give_way: None,
            };
            live_words(control.change_live(change, by).await)
        }
        Command::SetGivingWay(on) => live_words(control.set_giving_way(*on, by).await),
        Command::SetGiveWay(g) => {
            let change = SettingsChange {
                solo_priority: None,
                give_way: Some(*g),
            };
            live_words(control.change_live(change, by).await)
        }
        Command::RestartEngine => control
            .restart_engine()
            .await
            .map(|r| {
                format!(
                    "engine restart: {} failed, {} kept waiting",
                    r.failed_requests.len(),
                    r.waiting_requests.len()
                )
            })
            .map_err(|e| e.to_string()),
        Command::Cancel(id) => service
            .cancel_request(*id)
            .await
            .map(|state| format!("cancelled {id} ({state})"))
            .map_err(|e| e.to_string()),
        Command::SetPriority(id, p) => service
            .set_priority(*id, *p)
            .await
            .map(|state| format!("{id} priority {p} ({state})"))
            .map_err(|e| e.to_string()),
    };
    Some(Outcome::Line(
        line.unwrap_or_else(|e| format!("{command:?} failed: {e}")),
    ))
}

/// A live switch's outcome (R12), as the log line says it.
fn live_words(
    changed: Result<crate::control::LiveChanged, crate::service::ControlError>,
) -> Result<String, String> {
    let changed = changed.map_err(|e| e.to_string())?;
    let (settings, not_saved) = (changed.settings, changed.not_saved);
    let saved = not_saved.map_or(String::new(), |why| format!(" (not saved: {why})"));
    Ok(format!(
        "solo_priority {}, give_way {}{saved}",
        if settings.solo_priority { "on" } else { "off" },
        json!(settings.give_way).as_str().unwrap_or("?")
    ))
}
