//! The stable read-only view (plain data) the API and the GUI see; never the internal enums.
//! Its field names and serde values are `/v1/scheduler`'s (the service wraps these views), so
//! every state is a serde enum here, in one place, and nothing compares states as strings.

use crate::ids::{RequestId, SeqId};
use serde::Serialize;

use super::lifecycle::{ParkedKind, Phase, SlotState};
use super::types::{Now, ParkPlace};
use super::{EngineState, Scheduler, SchedulerSettings};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Solo,
    SoloPriority,
    Batch,
}

/// A slot's state as shown: `empty`, `conversation` (free, holding a kept conversation),
/// `reading` or `decoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotStatus {
    Empty,
    Conversation,
    Reading,
    Decoding,
}

impl SlotStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::Conversation => "conversation",
            Self::Reading => "reading",
            Self::Decoding => "decoding",
        }
    }
}

/// A live request's state: `waiting`, `reading`, `decoding` or `parked`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    Waiting,
    Reading,
    Decoding,
    Parked,
}

impl RequestStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Reading => "reading",
            Self::Decoding => "decoding",
            Self::Parked => "parked",
        }
    }
}

impl std::fmt::Display for RequestStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a parked request's state is: `spare` (an engine sequence) or `host_ram`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkedIn {
    Spare,
    HostRam,
}

/// What a parked request was doing: `read` (a prompt read that gave way) or `decode` (a
/// paused stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkKind {
    Read,
    Decode,
}

/// The engine as the scheduler sees it: `ready`, `starting` or `down`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineCondition {
    Ready,
    Starting,
    Down,
}

/// Cancellations by the state the request was in (R9).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Cancellations {
    pub waiting: u64,
    pub reading: u64,
    pub decoding: u64,
    pub parked: u64,
}

/// Totals since start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub give_ways_higher_priority: u64,
    pub give_ways_shorter_left: u64,
    /// R7 pauses.
    pub pauses: u64,
    /// Paused decodes brought back.
    pub resumes: u64,
    /// Solo reads parked when they gave way, and brought back.
    pub read_parks: u64,
    pub read_restores: u64,
    /// Decodes parked because the KV pool had no cell left for them.
    pub kv_parks: u64,
    /// Prompt tokens read again: a chunk starting below the furthest position its request ever
    /// read adds the difference. 0 in a healthy run (parks are moves that keep all).
    pub processed_prefix_losses: u64,
    pub cancellations: Cancellations,
    pub engine_restarts: u64,
    pub refusals: u64,
    pub finished: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlotView {
    /// The slot's engine sequence.
    pub id: SeqId,
    pub state: SlotStatus,
    pub request_id: Option<RequestId>,
    pub priority: Option<i32>,
    pub prompt_tokens: u32,
    /// Tokens the sequence holds (cache or prompt read so far plus output).
    pub held_tokens: u32,
    /// Prompt tokens read by this request (not counting the held prefix).
    pub read_tokens: u32,
    pub generated_tokens: u32,
    pub has_lane: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParkedView {
    pub request_id: RequestId,
    pub priority: i32,
    pub effective_priority: i64,
    pub generated_tokens: u32,
    pub parked_secs: f64,
    /// Times this request was paused (R7).
    pub pauses: u32,
    pub kind: ParkKind,
    pub place: ParkedIn,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitingView {
    pub request_id: RequestId,
    pub priority: i32,
    /// `priority` + `boost` + `aging`.
    pub effective_priority: i64,
    /// The small-request boost (0 or 1, `solo_priority` only).
    pub boost: i64,
    /// +1 per `aging_interval_secs` waited.
    pub aging: i64,
    pub waited_secs: f64,
    pub tokens_left_to_read: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    pub mode: Mode,
    pub engine: EngineCondition,
    pub settings: SchedulerSettings,
    pub chunk_tokens: u32,
    pub kv_cells_total: u32,
    pub kv_cells_used: u64,
    pub host_cached_conversations: usize,
    pub slots: Vec<SlotView>,
    pub parked: Vec<ParkedView>,
    pub waiting: Vec<WaitingView>,
    pub counters: Counters,
}

impl Scheduler {
    /// The read-only view at `now` (effective priorities age with time).
    pub fn snapshot(&self, now: Now) -> Snapshot {
        let mode = if self.slots.len() >= 2 {
            Mode::Batch
        } else if self.settings.solo_priority {
            Mode::SoloPriority
        } else {
            Mode::Solo
        };
        let slots = self
            .slots
            .iter()
            .map(|s| match &s.state {
                SlotState::Busy { request } => {
                    let r = self.requests.get(request);
                    SlotView {
                        id: s.seq,
                        state: match r.map(|r| &r.phase) {
                            Some(Phase::Decoding { .. }) => SlotStatus::Decoding,
                            _ => SlotStatus::Reading,
                        },
                        request_id: Some(*request),
                        priority: r.map(|r| r.priority),
                        prompt_tokens: r.map_or(0, |r| r.prompt_len()),
                        held_tokens: r.map_or(0, |r| r.held_cells()),
                        read_tokens: r.map_or(0, |r| r.prompt_tokens_read),
                        generated_tokens: r.map_or(0, |r| r.generated()),
                        has_lane: self.lane == Some(*request),
                    }
                }
                other => SlotView {
                    id: s.seq,
                    state: match other {
                        SlotState::Conversation(_) => SlotStatus::Conversation,
                        _ => SlotStatus::Empty,
                    },
                    request_id: None,
                    priority: None,
                    prompt_tokens: 0,
                    held_tokens: match other {
                        SlotState::Conversation(c) => c.tokens.len(),
                        _ => 0,
                    },
                    read_tokens: 0,
                    generated_tokens: 0,
                    has_lane: false,
                },
            })
            .collect();
        let parked = self
            .parked
            .iter()
            .filter_map(|id| self.requests.get(id))
            .map(|r| {
                let (place, kind) = match r.phase {
                    Phase::Parked {
                        place: ParkPlace::HostRam,
                        kind,
                    } => (ParkedIn::HostRam, kind),
                    Phase::Parked { kind, .. } => (ParkedIn::Spare, kind),
                    // Only parked requests are in `parked`.
                    _ => (ParkedIn::HostRam, ParkedKind::Decode),
                };
                ParkedView {
                    request_id: r.id,
                    priority: r.priority,
                    effective_priority: self.effective(r, now),
                    place,
                    kind: match kind {
                        ParkedKind::Read { .. } => ParkKind::Read,
                        ParkedKind::Decode => ParkKind::Decode,
                    },
                    parked_secs: r
                        .idle_since
                        .map_or(0.0, |t| now.saturating_sub(t).as_secs_f64()),
                    generated_tokens: r.generated(),
                    pauses: r.pauses,
                }
            })
            .collect();
        let waiting = self
            .waiting
            .iter()
            .filter_map(|id| self.requests.get(id))
            .map(|r| WaitingView {
                request_id: r.id,
                priority: r.priority,
                effective_priority: self.effective(r, now),
                boost: self.boost(r),
                aging: self.aging(r, now),
                waited_secs: now.saturating_sub(r.arrived_at).as_secs_f64(),
                tokens_left_to_read: r.prompt_len() - self.held_for_sure_peek(r.id),
            })
            .collect();
        Snapshot {
            mode,
            engine: match self.engine {
                EngineState::Ready => EngineCondition::Ready,
                EngineState::Starting { .. } => EngineCondition::Starting,
                EngineState::Down => EngineCondition::Down,
            },
            settings: self.settings.clone(),
            chunk_tokens: self.chunk_tokens(),
            kv_cells_total: self.facts.kv_cells_total,
            kv_cells_used: self.cells_used(),
            host_cached_conversations: self.host_cache.len(),
            slots,
            parked,
            waiting,
            counters: self.counters.clone(),
        }
    }
}
