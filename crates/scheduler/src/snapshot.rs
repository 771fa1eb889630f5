//! The stable read-only view (plain data) the API and the GUI see; never the internal enums.

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
    pub seq: SeqId,
    /// `empty`, `conversation` (free, holding cache) or `reading` / `decoding`.
    pub state: String,
    pub request: Option<RequestId>,
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
    pub request: RequestId,
    pub priority: i32,
    pub effective_priority: i64,
    /// `spare` or `host_ram`.
    pub place: String,
    /// `read` (gave way) or `decode` (paused).
    pub kind: String,
    pub parked_secs: f64,
    pub generated_tokens: u32,
    /// Times this request was paused (R7).
    pub pauses: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitingView {
    pub request: RequestId,
    pub priority: i32,
    pub effective_priority: i64,
    /// The parts of `effective_priority` above `priority`: the small-request boost (0 or 1)
    /// and aging.
    pub boost: i64,
    pub aging: i64,
    pub waited_secs: f64,
    pub tokens_left_to_read: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    pub mode: Mode,
    /// `ready`, `starting` or `down`.
    pub engine: String,
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
                        seq: s.seq,
                        state: r.map_or("busy", |r| r.phase.name()).to_string(),
                        request: Some(*request),
                        priority: r.map(|r| r.priority),
                        prompt_tokens: r.map_or(0, |r| r.prompt_len()),
                        held_tokens: r.map_or(0, |r| r.held_cells()),
                        read_tokens: r.map_or(0, |r| r.prompt_tokens_read),
                        generated_tokens: r.map_or(0, |r| r.generated()),
                        has_lane: self.lane == Some(*request),
                    }
                }
                other => SlotView {
                    seq: s.seq,
                    state: other.name().to_string(),
                    request: None,
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
                    Phase::Parked { place, kind } => (
                        match place {
                            ParkPlace::Spare(_) => "spare",
                            ParkPlace::HostRam => "host_ram",
                        },
                        match kind {
                            ParkedKind::Read { .. } => "read",
                            ParkedKind::Decode => "decode",
                        },
                    ),
                    _ => ("?", "?"),
                };
                ParkedView {
                    request: r.id,
                    priority: r.priority,
                    effective_priority: self.effective(r, now),
                    place: place.to_string(),
                    kind: kind.to_string(),
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
                request: r.id,
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
                EngineState::Ready => "ready",
                EngineState::Starting { .. } => "starting",
                EngineState::Down => "down",
            }
            .to_string(),
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
