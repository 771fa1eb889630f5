//! What the user asks for: commands queued during a frame and drained once at its end into
//! the service (each runs as a task on the background runtime, so a frame never waits). Their
//! outcomes come back for the event log and the settings view.

use super::host::{RestartSettings, ServerHost};
use crate::ids::RequestId;
use crate::models::discover::{self, FoundModel, ModelFacts};
use crate::service::GiveWay;
use crate::service::{ServiceHandle, SettingsChange};
use serde_json::json;
use std::path::PathBuf;
use std::sync::mpsc;

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    SetSoloPriority(bool),
    SetGiveWay(GiveWay),
    /// The Preemption switch: both live switches at once (`gui::preemption`); `restore` is
    /// the `give_way` to put back when switching on, `batch` when `parallel` ≥ 2.
    SetPreemption {
        on: bool,
        batch: bool,
        restore: GiveWay,
    },
    RestartEngine,
    Cancel(RequestId),
    SetPriority(RequestId, i32),
    /// Restart the server with settings only a new engine takes (needs the app's own server).
    ApplySettings(Box<RestartSettings>),
    /// Open the file dialog to choose a GGUF model.
    PickModel,
    /// Look for models in LM Studio's and Ollama's folders and the app's own, and read each
    /// one's facts (on a blocking thread: a vocabulary-only load each).
    ScanModels,
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
    /// The models found on this machine, each with its facts or why they could not be read.
    Models(Vec<ScannedModel>),
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

    /// Sends the frame's commands to the service (or the host), each on its own task.
    pub fn drain(
        &mut self,
        service: &ServiceHandle,
        host: Option<&ServerHost>,
        runtime: &tokio::runtime::Handle,
    ) {
        for command in self.pending.drain(..) {
            let service = service.clone();
            let host = host.cloned();
            let tx = self.outcomes_tx.clone();
            runtime.spawn(async move {
                if let Some(outcome) = run(command, service, host).await {
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

pub(super) async fn run(
    command: Command,
    service: ServiceHandle,
    host: Option<ServerHost>,
) -> Option<Outcome> {
    let line = match &command {
        Command::ApplySettings(settings) => {
            let Some(host) = host else {
                return Some(Outcome::Applied(Err(
                    "settings need the app's own server".to_owned()
                )));
            };
            let applied = host.apply(settings).await;
            return Some(Outcome::Applied(
                applied
                    .map(|a| match a.not_saved {
                        None => "the engine restarted with the new settings (saved)".to_owned(),
                        Some(why) => {
                            format!("the engine restarted with the new settings (not saved: {why})")
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
        Command::PickModel => {
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
            set_live(change, &service, host.as_ref()).await
        }
        Command::SetGiveWay(g) => {
            let change = SettingsChange {
                solo_priority: None,
                give_way: Some(*g),
            };
            set_live(change, &service, host.as_ref()).await
        }
        Command::SetPreemption { on, batch, restore } => {
            let change = super::preemption::preemption_change(*on, *batch, *restore);
            set_live(change, &service, host.as_ref()).await
        }
        Command::RestartEngine => service
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

/// A live switch (R12): through the host when there is one (kept across an apply and saved to
/// the config file), else straight to the service.
async fn set_live(
    change: SettingsChange,
    service: &ServiceHandle,
    host: Option<&ServerHost>,
) -> Result<String, String> {
    match host {
        Some(host) => host.set_live(change).await,
        None => service
            .change_settings(change)
            .await
            .map(|s| {
                format!(
                    "solo_priority {}, give_way {}",
                    if s.solo_priority { "on" } else { "off" },
                    json!(s.give_way).as_str().unwrap_or("?")
                )
            })
            .map_err(|e| e.to_string()),
    }
}
