//! What the user asks for: commands queued during a frame and drained once at its end into
//! the service (each runs as a task on the background runtime, so a frame never waits). Their
//! outcomes come back for the event log and the settings view.

use super::host::{RestartSettings, ServerHost};
use crate::ids::RequestId;
use crate::scheduler::GiveWay;
use crate::service::{ServiceHandle, SettingsChange};
use serde_json::json;
use std::path::PathBuf;
use std::sync::mpsc;

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    SetSoloPriority(bool),
    SetGiveWay(GiveWay),
    RestartEngine,
    Cancel(RequestId),
    SetPriority(RequestId, i32),
    /// Restart the server with settings only a new engine takes (needs the app's own server).
    ApplySettings(Box<RestartSettings>),
    /// Open the file dialog to choose a GGUF model.
    PickModel,
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
}

/// The frame's commands and the channel their outcomes come back on.
#[derive(Debug)]
pub struct CommandQueue {
    pending: Vec<Command>,
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

/// Writes a live switch to the config file, so the next start (window or headless) keeps it.
fn remember(host: Option<&ServerHost>, key: &str, value: serde_json::Value) -> String {
    let Some(host) = host else {
        return String::new();
    };
    let mut keys = serde_json::Map::new();
    keys.insert(key.to_owned(), value);
    match host.remember(keys) {
        Ok(()) => String::new(),
        Err(e) => format!(" (not saved: {e})"),
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
                    .map(|_| "the engine restarted with the new settings".to_owned())
                    .map_err(|e| e.to_string()),
            ));
        }
        Command::PickModel => {
            let picked = rfd::AsyncFileDialog::new()
                .set_title("Open a GGUF model")
                .add_filter("GGUF model", &["gguf"])
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
        Command::SetSoloPriority(on) => service
            .change_settings(SettingsChange {
                solo_priority: Some(*on),
                give_way: None,
            })
            .await
            .map(|_| {
                let saved = remember(host.as_ref(), "solo_priority", json!(on));
                format!("solo_priority {}{saved}", if *on { "on" } else { "off" })
            }),
        Command::SetGiveWay(g) => service
            .change_settings(SettingsChange {
                solo_priority: None,
                give_way: Some(*g),
            })
            .await
            .map(|_| {
                let saved = remember(host.as_ref(), "give_way", json!(g));
                format!("give_way {}{saved}", json!(g).as_str().unwrap_or("?"))
            }),
        Command::RestartEngine => service.restart_engine().await.map(|r| {
            format!(
                "engine restart: {} failed, {} kept waiting",
                r.failed_requests.len(),
                r.waiting_requests.len()
            )
        }),
        Command::Cancel(id) => service
            .cancel_request(*id)
            .await
            .map(|state| format!("cancelled {id} ({state})")),
        Command::SetPriority(id, p) => service
            .set_priority(*id, *p)
            .await
            .map(|state| format!("{id} priority {p} ({state})")),
    };
    Some(Outcome::Line(
        line.unwrap_or_else(|e| format!("{command:?} failed: {e}")),
    ))
}
