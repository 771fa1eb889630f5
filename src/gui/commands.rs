//! What the user asks for: commands queued during a frame and drained once at its end into
//! the service (each runs as a task on the background runtime, so a frame never waits). Their
//! outcomes come back as lines for the event log.

use crate::ids::RequestId;
use crate::scheduler::GiveWay;
use crate::service::{ServiceHandle, SettingsChange};
use std::sync::mpsc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    SetSoloPriority(bool),
    SetGiveWay(GiveWay),
    RestartEngine,
    Cancel(RequestId),
    SetPriority(RequestId, i32),
}

/// The frame's commands and the channel their outcomes come back on.
#[derive(Debug)]
pub struct CommandQueue {
    pending: Vec<Command>,
    outcomes_tx: mpsc::Sender<String>,
    outcomes_rx: mpsc::Receiver<String>,
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

    /// Sends the frame's commands to the service, each on its own task.
    pub fn drain(&mut self, service: &ServiceHandle, runtime: &tokio::runtime::Handle) {
        for command in self.pending.drain(..) {
            let service = service.clone();
            let tx = self.outcomes_tx.clone();
            runtime.spawn(async move {
                let line = match &command {
                    Command::SetSoloPriority(on) => service
                        .change_settings(SettingsChange {
                            solo_priority: Some(*on),
                            give_way: None,
                        })
                        .await
                        .map(|_| format!("solo_priority {}", if *on { "on" } else { "off" })),
                    Command::SetGiveWay(g) => service
                        .change_settings(SettingsChange {
                            solo_priority: None,
                            give_way: Some(*g),
                        })
                        .await
                        .map(|_| format!("give_way {g:?}").to_lowercase()),
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
                let _ = tx.send(line.unwrap_or_else(|e| format!("{command:?} failed: {e}")));
            });
        }
    }

    /// Outcomes that arrived since the last call.
    pub fn outcomes(&self) -> Vec<String> {
        self.outcomes_rx.try_iter().collect()
    }
}
