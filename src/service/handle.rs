//! The cloneable handle to the service actor, and what flows through it.

use crate::ids::{RequestId, TokenId};
use crate::protocol::Sampling;
use crate::scheduler::{FinishReason, GiveWay, SchedulerSettings};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};

use super::ServiceSnapshot;

/// A validated request, tokenized.
#[derive(Debug, Clone)]
pub struct Submission {
    pub prompt: Vec<TokenId>,
    pub sampling: Sampling,
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens (benchmarks).
    pub ignore_eos: bool,
    pub priority: i32,
    pub priority_given: bool,
    /// Which route and client sent it (shown in the requests table; no prompt text).
    pub origin: RequestOrigin,
}

/// Where a request came from: its route and who sent it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RequestOrigin {
    pub route: Route,
    /// The API key's `name`, else the User-Agent's product (`claude-cli`, `codex_cli_rs`,
    /// `OpenAI`, ...), else empty.
    pub client: String,
}

/// The API route a request came in on: `chat_completions`, `responses`, `messages`,
/// `completions` (OpenAI's legacy completions, with or without a suffix) or `infill`
/// (llama.cpp's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    #[default]
    ChatCompletions,
    Responses,
    Messages,
    Completions,
    Infill,
}

impl Route {
    /// The id its client sees in the response (`chatcmpl-7`, `resp_7`, `msg_7`, `cmpl-7`,
    /// `infill-7`).
    pub fn client_id(self, id: RequestId) -> String {
        match self {
            Self::ChatCompletions => format!("chatcmpl-{}", id.0),
            Self::Responses => format!("resp_{}", id.0),
            Self::Messages => format!("msg_{}", id.0),
            Self::Completions => format!("cmpl-{}", id.0),
            Self::Infill => format!("infill-{}", id.0),
        }
    }
}

/// The product of a User-Agent header: what comes before its first `/` or space
/// (`claude-cli/2.0.1 (external, cli)` is `claude-cli`).
pub fn user_agent_product(user_agent: &str) -> &str {
    user_agent
        .split(['/', ' '])
        .next()
        .unwrap_or_default()
        .trim()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Prompt tokens the engine already held (prefix cache).
    pub cached_tokens: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub reason: FinishReason,
    pub usage: Usage,
    /// The stop string that ended the output, if one did.
    pub stop_sequence: Option<String>,
}

/// What a client receives, in order: text pieces, then exactly one `Done` or `Failed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    Text(String),
    Done(Finished),
    Failed(Failure),
}

/// Why an admitted request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The engine died, was restarted, or could not be started.
    #[error("{0}")]
    Engine(String),
    /// The engine refused or lost this request alone (a step it could not run for it, or a
    /// drift check that failed); the engine and every other request carry on.
    #[error("the engine could not serve this request: {0}")]
    Request(String),
    /// A new engine's context is too small for this waiting prompt (R11).
    #[error(
        "the prompt has {prompt_tokens} tokens; this model's context allows {max_context_tokens}"
    )]
    PromptTooLong {
        prompt_tokens: u32,
        max_context_tokens: u32,
    },
    #[error("the server is shutting down")]
    ShuttingDown,
}

/// Why a submission was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("the waiting queue is full")]
    QueueFull { retry_after_secs: u32 },
    #[error(
        "the prompt has {prompt_tokens} tokens; this model's context allows {max_context_tokens}"
    )]
    PromptTooLong {
        prompt_tokens: u32,
        max_context_tokens: u32,
    },
    #[error("max_tokens {max_tokens} is more than the {room_tokens} tokens left in the context")]
    MaxTokensOverContext { max_tokens: u32, room_tokens: u32 },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the engine is starting")]
    EngineStarting { retry_after_secs: u32 },
    #[error("the engine failed: {0}")]
    EngineFailed(String),
    #[error("the server is shutting down")]
    ShuttingDown,
}

/// Why a control command (cancel by id, re-prioritise, settings, restart) was not carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("no request {0} is waiting, running or parked")]
    UnknownRequest(RequestId),
    #[error("{0}")]
    InvalidSettings(String),
    #[error("the server is shutting down")]
    ShuttingDown,
}

/// The settings that change live (R12), as a patch: `None` leaves one as it is. Serialized, it
/// names the keys it changes (the config file's names), so the control plane saves them
/// without naming any by hand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SettingsChange {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solo_priority: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub give_way: Option<GiveWay>,
}

/// What a user restart did (R10): in-flight requests failed with "engine restarted", waiting
/// ones stay queued for the new engine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RestartReport {
    pub failed_requests: Vec<RequestId>,
    pub waiting_requests: Vec<RequestId>,
    /// Set when the restart was not needed as asked (a start already under way).
    pub note: Option<String>,
}

/// A request's state when a control command reached it: `waiting`, `reading`, `decoding` or
/// `parked`.
pub type RequestState = crate::scheduler::RequestStatus;

pub(super) type Reply<T> = oneshot::Sender<Result<T, ControlError>>;

pub(super) enum ServiceCommand {
    Submit {
        submission: Submission,
        reply:
            oneshot::Sender<Result<(RequestId, mpsc::UnboundedReceiver<StreamEvent>), SubmitError>>,
    },
    /// A client's stream ended early (no answer wanted).
    Cancel(RequestId),
    CancelRequest {
        id: RequestId,
        reply: Reply<RequestState>,
    },
    SetPriority {
        id: RequestId,
        priority: i32,
        reply: Reply<RequestState>,
    },
    ChangeSettings {
        change: SettingsChange,
        /// Who made it (the window, the tray, an HTTP client): logged when it changes
        /// anything; `None` for a read of the settings in force.
        by: Option<String>,
        reply: Reply<SchedulerSettings>,
    },
    RestartEngine {
        reply: Reply<RestartReport>,
    },
    /// An event from outside the service (the control plane's) for its stream.
    Observe(super::Observed),
    /// A new reading of the upstream engine's own figures (`upstream_watch`).
    Upstream(super::upstream_watch::UpstreamView),
    Shutdown(oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct ServiceHandle {
    pub(super) commands: mpsc::UnboundedSender<ServiceCommand>,
    pub(super) snapshots: watch::Receiver<ServiceSnapshot>,
    pub(super) observation: super::Observation,
}

impl std::fmt::Debug for ServiceHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceHandle")
    }
}

impl ServiceHandle {
    /// The observation it continues (the clock, request ids, the event stream, the ended
    /// requests, the metrics), for the service that takes its place: an apply resets none.
    pub fn observation(&self) -> super::Observation {
        self.observation.clone()
    }

    /// The log as it is now and every entry logged after it, in `seq` order, across the
    /// services that take this one's place.
    pub fn events(
        &self,
    ) -> (
        super::SharedLog,
        tokio::sync::broadcast::Receiver<super::LogEntry>,
    ) {
        self.observation.subscribe()
    }

    /// Submits a request; its events arrive on the returned stream. Dropping the stream
    /// before it ended cancels the request (R9: a disconnect ends only its own request).
    pub async fn submit(&self, submission: Submission) -> Result<RequestStream, SubmitError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(ServiceCommand::Submit { submission, reply })
            .map_err(|_| SubmitError::ShuttingDown)?;
        let (id, events) = answer.await.map_err(|_| SubmitError::ShuttingDown)??;
        Ok(RequestStream {
            id,
            events,
            commands: self.commands.clone(),
            ended: false,
        })
    }

    pub fn cancel(&self, id: RequestId) {
        let _ = self.commands.send(ServiceCommand::Cancel(id));
    }

    /// Cancels any request by id (R9); answers the state it was in.
    pub async fn cancel_request(&self, id: RequestId) -> Result<RequestState, ControlError> {
        self.control(|reply| ServiceCommand::CancelRequest { id, reply })
            .await
    }

    /// Gives a request that has not ended a new (already clamped) priority; answers the
    /// state it is in. It ranks by the new value from the next scheduling decision.
    pub async fn set_priority(
        &self,
        id: RequestId,
        priority: i32,
    ) -> Result<RequestState, ControlError> {
        self.control(|reply| ServiceCommand::SetPriority {
            id,
            priority,
            reply,
        })
        .await
    }

    /// Changes `solo_priority` / `give_way` live (R12); answers every setting now in force.
    /// (A change that changes nothing reads them.)
    pub async fn change_settings(
        &self,
        change: SettingsChange,
    ) -> Result<SchedulerSettings, ControlError> {
        self.control(|reply| ServiceCommand::ChangeSettings {
            change,
            by: None,
            reply,
        })
        .await
    }

    /// [`ServiceHandle::change_settings`], made by `by` (the window, the tray, an HTTP
    /// client): the service's log names who changed what.
    pub async fn change_settings_by(
        &self,
        change: SettingsChange,
        by: &str,
    ) -> Result<SchedulerSettings, ControlError> {
        let by = Some(by.to_owned());
        self.control(|reply| ServiceCommand::ChangeSettings { change, by, reply })
            .await
    }

    /// Adds a control-plane event (an apply, a rollback) to this service's observation
    /// stream, so the log and `/v1/scheduler/events` say what replaced the engine.
    pub fn note_control(&self, event: super::Observed) {
        let _ = self.commands.send(ServiceCommand::Observe(event));
    }

    /// Restarts the engine (R10's user restart).
    pub async fn restart_engine(&self) -> Result<RestartReport, ControlError> {
        self.control(|reply| ServiceCommand::RestartEngine { reply })
            .await
    }

    async fn control<T>(
        &self,
        command: impl FnOnce(Reply<T>) -> ServiceCommand,
    ) -> Result<T, ControlError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(command(reply))
            .map_err(|_| ControlError::ShuttingDown)?;
        answer.await.map_err(|_| ControlError::ShuttingDown)?
    }

    /// The app's Prometheus metrics: their text, and the one fact the API adds (a grammar
    /// built or taken from the cache).
    pub fn metrics(&self) -> &super::Observation {
        &self.observation
    }

    /// The latest snapshot.
    /// The engine's context in tokens (0 before an engine was ready).
    pub fn context_tokens(&self) -> u32 {
        self.snapshots.borrow().engine.context_tokens
    }

    pub fn snapshot(&self) -> ServiceSnapshot {
        self.snapshots.borrow().clone()
    }

    /// A receiver that sees every published snapshot.
    pub fn watch(&self) -> watch::Receiver<ServiceSnapshot> {
        self.snapshots.clone()
    }

    /// Ends every live request with an error, stops the engine, and waits for the actor.
    pub async fn shutdown(&self) {
        let (done, wait) = oneshot::channel();
        if self.commands.send(ServiceCommand::Shutdown(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

/// One request's events. Dropping it before the end cancels the request.
#[derive(Debug)]
pub struct RequestStream {
    pub id: RequestId,
    events: mpsc::UnboundedReceiver<StreamEvent>,
    commands: mpsc::UnboundedSender<ServiceCommand>,
    ended: bool,
}

impl RequestStream {
    pub async fn next(&mut self) -> Option<StreamEvent> {
        let event = self.events.recv().await;
        if matches!(
            event,
            None | Some(StreamEvent::Done(_) | StreamEvent::Failed(_))
        ) {
            self.ended = true;
        }
        event
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.commands.send(ServiceCommand::Cancel(self.id));
        }
    }
}
