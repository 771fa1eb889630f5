//! The service's published view: the engine's state and the scheduler's snapshot.

use crate::scheduler::Snapshot;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "reason")]
pub enum EngineStatus {
    Loading,
    Ready,
    Restarting,
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineView {
    pub status: EngineStatus,
    pub model: String,
    /// Context tokens of the loaded engine (0 before the first handshake).
    pub context_tokens: u32,
    pub simulated: bool,
    pub restarts: u64,
    pub generation: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceSnapshot {
    pub engine: EngineView,
    /// `None` until the first engine handshake.
    pub scheduler: Option<Snapshot>,
}
