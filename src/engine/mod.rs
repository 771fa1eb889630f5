//! The host side of the engine: spawn the worker (this same binary, `engine-worker`), read the
//! handshake under a deadline, talk to it over its pipes with every call under a deadline, see
//! it die (exit, EOF, silence), and stop it (terminate → grace → kill). Each worker process is
//! one *generation*: its replies arrive on a channel that dies with it, so a dead worker's
//! lines never reach its successor. When to start another is the scheduler's (R10), carried
//! out by the service.

pub mod cpu_code;
mod launch;
mod process;
mod spawn;

pub use launch::WorkerLaunch;
pub use process::{EngineProcess, WorkerExit, signal_words};

use std::time::Duration;

/// What can go wrong between the host and a worker.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    #[error("cannot start the engine worker {exe}: {message}")]
    Spawn { exe: String, message: String },
    #[error("the engine worker did not finish loading within {secs} s")]
    HandshakeTimeout { secs: u64, stderr_tail: Vec<String> },
    #[error("the engine worker speaks protocol v{got}, this app v{want}")]
    ProtocolVersion { got: u32, want: u32 },
    #[error("the engine worker exited ({exit}); its last words: {}", .stderr_tail.join(" | "))]
    Died {
        exit: WorkerExit,
        stderr_tail: Vec<String>,
    },
    #[error("the engine worker did not answer within {0:?}: stopped it")]
    Unresponsive(Duration),
    #[error("the engine worker broke the protocol: {0}")]
    Protocol(String),
    #[error("the engine refused: {kind:?}: {message}")]
    Refused {
        kind: crate::protocol::ErrorKind,
        message: String,
    },
    #[error("no engine is running")]
    NotRunning,
}

impl EngineError {
    /// The worker is gone (or was stopped): a new one must be started.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, Self::Refused { .. })
    }
}
