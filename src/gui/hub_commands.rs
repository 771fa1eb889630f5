//! The hub's commands, run on the background runtime: a listing with the fit on this machine,
//! and a download that reports its progress (a few times a second) and its end.

use super::commands::{CancelFlag, Command, Outcome};
use super::hub::download_key;
use crate::models::hub::{HubClient, HubError, HubModel, download_model};
use crate::models::hub_rows::list_with_fit;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// A hub command's failure as the window shows it: the words, and a detail folded away under
/// them (and whole in the log).
#[derive(Debug, Clone, PartialEq)]
pub struct HubFailure {
    pub words: String,
    pub detail: Option<String>,
}

/// What the window says where the hub cannot be reached.
pub const NO_CONNECTION: &str =
    "No connection to the hub; check the network or proxy, or set HF_ENDPOINT";

impl HubFailure {
    pub fn of(e: &HubError) -> Self {
        match e {
            HubError::Network { url, detail } => Self {
                words: NO_CONNECTION.to_owned(),
                detail: Some(format!("{url}: {detail}")),
            },
            other => Self::from(other.to_string()),
        }
    }

    /// The words and the detail, for the log.
    pub fn whole(&self) -> String {
        match &self.detail {
            Some(detail) => format!("{} ({detail})", self.words),
            None => self.words.clone(),
        }
    }
}

impl From<String> for HubFailure {
    fn from(words: String) -> Self {
        Self {
            words,
            detail: None,
        }
    }
}

/// Progress reaches the window at most this often.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

pub(super) enum HubJob {
    List {
        repo: String,
        pattern: Option<String>,
    },
    Download {
        repo: String,
        model: HubModel,
        cancel: CancelFlag,
    },
}

impl HubJob {
    pub(super) fn of(command: &Command) -> Option<Self> {
        match command {
            Command::HubList { repo, pattern } => Some(Self::List {
                repo: repo.clone(),
                pattern: pattern.clone(),
            }),
            Command::HubDownload {
                repo,
                model,
                cancel,
            } => Some(Self::Download {
                repo: repo.clone(),
                model: model.clone(),
                cancel: cancel.clone(),
            }),
            _ => None,
        }
    }

    /// Runs the job; `service` says what the running engine holds on the GPU; a listing's fit
    /// is for a context of `ctx_min` tokens (the config's floor of a fitted context) within
    /// `gpu_limit_bytes` (`gpu_memory_limit`; 0: none).
    pub(super) async fn run(
        self,
        tx: Sender<Outcome>,
        service: crate::service::ServiceHandle,
        (ctx_min, gpu_limit_bytes): (u32, u64),
    ) {
        let client = HubClient::from_env();
        let models_dir = crate::models::models_dir().map_err(|e| e.to_string());
        match self {
            Self::List { repo, pattern } => {
                let listing = async {
                    let dir = models_dir.map_err(HubFailure::from)?;
                    // llama.cpp's device list and /proc: off the runtime's threads
                    let engine = service.snapshot().engine;
                    let machine = tokio::task::spawn_blocking(move || {
                        crate::models::machine::machine_beside_engine(
                            engine.device.as_ref(),
                            engine.weights_bytes,
                            engine.kv_pool_bytes,
                            gpu_limit_bytes,
                        )
                    })
                    .await
                    .map_err(|e| HubFailure::from(e.to_string()))?;
                    list_with_fit(&client, &repo, pattern.as_deref(), &machine, ctx_min, &dir)
                        .await
                        .map_err(|e| HubFailure::of(&e))
                }
                .await;
                let _ = tx.send(Outcome::HubListed { repo, listing });
            }
            Self::Download {
                repo,
                model,
                cancel,
            } => {
                let key = download_key(&repo, &model);
                let result = match models_dir {
                    Ok(dir) => {
                        let mut last: Option<Instant> = None;
                        let mut report = |p: &crate::models::hub::DownloadProgress| {
                            if last.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) || p.checking {
                                last = Some(Instant::now());
                                let _ = tx.send(Outcome::HubProgress {
                                    key: key.clone(),
                                    progress: p.clone(),
                                });
                            }
                        };
                        let dir = crate::models::hub::repo_dir(&dir, &repo);
                        download_model(
                            &client,
                            &repo,
                            "main",
                            &model,
                            &dir,
                            &mut report,
                            cancel.flag(),
                        )
                        .await
                        .map_err(|e| HubFailure::of(&e))
                    }
                    Err(e) => Err(HubFailure::from(e)),
                };
                let _ = tx.send(Outcome::HubDownloaded { key, result });
            }
        }
    }
}
