//! The stable read-only view (plain data) the API and the GUI see; never the internal enums.
//! Its field names and serde values are `/v1/scheduler`'s (the service wraps these views), so
//! every state is a serde enum here, in one place, and nothing compares states as strings.

use crate::ids::{RequestId, SeqId};
use serde::Serialize;

use super::lifecycle::{ParkedKind, Phase, SeqState, SlotState};
use super::types::{Now, ParkPlace};
use super::{EngineState, Scheduler, SchedulerSettings};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Solo,
    SoloPriority,
    Batch,
}

/// A slot's state as shown: `empty`, `reading` or `decoding`. (A slot is a lane: kept
/// conversations have sequences of their own, listed in `conversations`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotStatus {
    Empty,
    Reading,
    Decoding,
}

impl SlotStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "empty",
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

/// Where a parked request's state is: `spare` (its own sequence in the KV pool, cells kept:
/// parking moved nothing) or `host_ram` (saved there because its cells were needed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkedIn {
    Spare,
    HostRam,
}

/// Where a kept conversation is: `sequence` (its own, in the KV pool) or `host_ram`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeptIn {
    Sequence,
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

/// Why a request is parked: `paused` (R7, for `parked_for`), `gave_way_higher_priority` or
/// `gave_way_shorter_left` (a read that gave way at a chunk boundary to `parked_for`, R3), or
/// `kv_pool_full` (parked to host RAM because a running decode needed its cells).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkCause {
    Paused,
    GaveWayHigherPriority,
    GaveWayShorterLeft,
    KvPoolFull,
}

/// The engine as the scheduler sees it: `ready`, `starting` or `down` (no engine runs and no
/// start is under way: after a death, or failed after its starts ran out, which
/// [`Scheduler::engine_failed`](crate::Scheduler::engine_failed) tells apart).
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
    /// Parks (pauses, give-ways, KV stalls) that kept the request's sequence and cells in
    /// the pool (no copy), and those that saved it to host RAM (including later moves of a
    /// parked request whose cells were needed).
    pub parks_in_pool: u64,
    pub parks_to_host: u64,
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
    /// Requests that ended at a limit `max_output_tokens_cap` had lowered (agents take such
    /// an end as a failed turn).
    pub output_cap_cuts: u64,
    /// Admissions that cut a conversation back to a checkpoint the engine reported (where
    /// it could not cut it exactly), and the prompt tokens they kept instead of reading.
    pub checkpoint_restores: u64,
    pub checkpoint_tokens_saved: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlotView {
    /// The slot's index, `0..parallel`.
    pub id: u32,
    pub state: SlotStatus,
    pub request_id: Option<RequestId>,
    /// The engine sequence its request runs on.
    pub seq: Option<SeqId>,
    pub priority: Option<i32>,
    pub prompt_tokens: u32,
    /// Tokens the sequence holds (cache or prompt read so far plus output).
    pub held_tokens: u32,
    /// Prompt tokens read by this request (not counting the held prefix).
    pub read_tokens: u32,
    pub generated_tokens: u32,
    pub has_lane: bool,
    /// Its request's priority with boost and aging (`null` when empty).
    pub effective_priority: Option<i64>,
    /// Its request's small-request boost (0 or 1, `solo_priority` only; 0 when empty).
    pub boost: i64,
    /// Seconds since its request got the slot or last resumed.
    pub run_secs: f64,
    /// With `solo_priority`, while decoding: seconds until R7 may pause it (0 once its
    /// quantum is up: paused at the next step that finds it has produced a token since it
    /// resumed); `null` otherwise, and while it is being cancelled.
    pub pausable_in_secs: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParkedView {
    pub request_id: RequestId,
    pub priority: i32,
    pub effective_priority: i64,
    /// The small-request boost (0 or 1, `solo_priority` only).
    pub boost: i64,
    pub generated_tokens: u32,
    /// Prompt tokens read before it was parked, all kept (the whole prompt for a paused
    /// stream, where its read had got to for a read that gave way).
    pub read_tokens: u32,
    pub parked_secs: f64,
    /// Times this request was paused (R7).
    pub pauses: u32,
    pub kind: ParkKind,
    pub place: ParkedIn,
    /// Its sequence, when parked in the pool.
    pub seq: Option<SeqId>,
    /// Why it is parked (`null` only for a park older than this field).
    pub cause: Option<ParkCause>,
    /// The request it was paused or gave way for.
    pub parked_for: Option<RequestId>,
}

/// A kept conversation (no text).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConversationView {
    /// Its key (the host-RAM cache's too).
    pub id: u64,
    pub kept_in: KeptIn,
    /// Its sequence, when kept in the pool.
    pub seq: Option<SeqId>,
    pub tokens: u32,
    /// Seconds since it was last continued or kept (pool only).
    pub idle_secs: Option<f64>,
    /// Checkpoints the engine keeps of it (a model whose cache cannot be cut at any token),
    /// and their bytes in host RAM.
    pub checkpoints: u32,
    pub checkpoint_bytes: u64,
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
    /// Engine sequences, and how many hold nothing.
    pub kv_sequences: u32,
    pub kv_sequences_free: u32,
    pub host_cached_conversations: usize,
    /// Kept conversations, in the pool (least recently used first), then in host RAM.
    pub conversations: Vec<ConversationView>,
    /// Bytes of every checkpoint the engine keeps (of conversations, live and parked
    /// requests), as reported.
    pub checkpoint_bytes: u64,
    pub slots: Vec<SlotView>,
    pub parked: Vec<ParkedView>,
    pub waiting: Vec<WaitingView>,
    /// R7's outlook for the one slot's holder (solo with `solo_priority`, something in line),
    /// as of the last event: whether the first in line pauses it, and if not why not.
    pub pause_outlook: Option<crate::PauseOutlookView>,
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
        let slots = self.slot_views(now);
        let conversations = self.conversation_views(now);
        let parked = self.parked_views(now);
        let waiting = self.waiting_views(now);
        Snapshot {
            mode,
            engine: match self.engine {
                EngineState::Ready => EngineCondition::Ready,
                EngineState::Starting { .. } => EngineCondition::Starting,
                // no variant of its own yet: the service matches `EngineCondition`
                // exhaustively; `Scheduler::engine_failed` tells the two apart
                EngineState::Down | EngineState::Failed { .. } => EngineCondition::Down,
            },
            settings: self.settings.clone(),
            chunk_tokens: self.chunk_tokens(),
            kv_cells_total: self.facts.kv_cells_total,
            kv_cells_used: self.cells_used(),
            kv_sequences: self.seqs.len() as u32,
            kv_sequences_free: self
                .seqs
                .iter()
                .filter(|s| matches!(s.state, SeqState::Free))
                .count() as u32,
            host_cached_conversations: self.host_cache.len(),
            conversations,
            checkpoint_bytes: self.checkpoint_bytes(),
            slots,
            parked,
            waiting,
            pause_outlook: self.outlook_view(now),
            counters: self.counters.clone(),
        }
    }

    /// Each slot, with what its holder has read and made.
    fn slot_views(&self, now: Now) -> Vec<SlotView> {
        self.slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let request = match s.state {
                    SlotState::Busy { request } => Some(request),
                    SlotState::Empty => None,
                };
                let r = request.and_then(|id| self.requests.get(&id));
                SlotView {
                    id: i as u32,
                    state: match r.map(|r| &r.phase) {
                        None => SlotStatus::Empty,
                        Some(Phase::Decoding { .. }) => SlotStatus::Decoding,
                        Some(_) => SlotStatus::Reading,
                    },
                    request_id: request,
                    seq: r.and_then(|r| r.phase.seq()),
                    priority: r.map(|r| r.priority),
                    prompt_tokens: r.map_or(0, |r| r.prompt_len()),
                    held_tokens: r.map_or(0, |r| r.held_cells()),
                    read_tokens: r.map_or(0, |r| r.prompt_tokens_read),
                    generated_tokens: r.map_or(0, |r| r.generated()),
                    has_lane: request.is_some() && self.lane == request,
                    effective_priority: r.map(|r| self.effective(r, now)),
                    boost: r.map_or(0, |r| self.boost(r)),
                    run_secs: r.map_or(0.0, |r| now.saturating_sub(r.run_since).as_secs_f64()),
                    // R7's own guard, so the countdown and the pause agree.
                    pausable_in_secs: r
                        .and_then(|r| self.pause_quantum_left(r, now))
                        .map(|left| left.as_secs_f64()),
                }
            })
            .collect()
    }

    /// Bytes of every checkpoint it knows of: kept and host-cached conversations', and live
    /// and parked requests'.
    fn checkpoint_bytes(&self) -> u64 {
        let kept = self.seqs.iter().filter_map(|s| match &s.state {
            SeqState::Kept(c) => Some(c.tokens.checkpoint_totals().1),
            _ => None,
        });
        let cached = self
            .host_cache
            .iter()
            .map(|(_, c)| c.tokens.checkpoint_totals().1);
        let live = self
            .requests
            .values()
            .map(|r| r.checkpoints.iter().map(|c| c.bytes).sum::<u64>());
        kept.chain(cached).chain(live).sum()
    }

    /// Kept conversations, in the pool (least recently used first), then in host RAM.
    fn conversation_views(&self, now: Now) -> Vec<ConversationView> {
        let mut in_pool: Vec<(Now, ConversationView)> = self
            .seqs
            .iter()
            .filter_map(|s| match &s.state {
                SeqState::Kept(c) => Some((
                    s.last_used,
                    ConversationView {
                        id: c.key,
                        kept_in: KeptIn::Sequence,
                        seq: Some(s.id),
                        tokens: c.tokens.len(),
                        idle_secs: Some(now.saturating_sub(s.last_used).as_secs_f64()),
                        checkpoints: c.tokens.checkpoint_totals().0,
                        checkpoint_bytes: c.tokens.checkpoint_totals().1,
                    },
                )),
                _ => None,
            })
            .collect();
        in_pool.sort_by_key(|(t, c)| (*t, c.id));
        in_pool
            .into_iter()
            .map(|(_, c)| c)
            .chain(self.host_cache.iter().map(|(id, c)| ConversationView {
                id: id.0,
                kept_in: KeptIn::HostRam,
                seq: None,
                tokens: c.tokens.len(),
                idle_secs: None,
                checkpoints: c.tokens.checkpoint_totals().0,
                checkpoint_bytes: c.tokens.checkpoint_totals().1,
            }))
            .collect()
    }

    /// Parked requests, where and why.
    fn parked_views(&self, now: Now) -> Vec<ParkedView> {
        self.parked
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
                    boost: self.boost(r),
                    place,
                    kind: match kind {
                        ParkedKind::Read { .. } => ParkKind::Read,
                        ParkedKind::Decode => ParkKind::Decode,
                    },
                    parked_secs: r
                        .idle_since
                        .map_or(0.0, |t| now.saturating_sub(t).as_secs_f64()),
                    generated_tokens: r.generated(),
                    read_tokens: match kind {
                        ParkedKind::Read { read_to } => read_to.min(r.prompt_len()),
                        ParkedKind::Decode => r.prompt_len(),
                    },
                    pauses: r.pauses,
                    seq: r.phase.own_seq(),
                    cause: r.parked_because.map(|(cause, _)| cause),
                    parked_for: r.parked_because.and_then(|(_, w)| w),
                }
            })
            .collect()
    }

    /// Requests in line, in order.
    fn waiting_views(&self, now: Now) -> Vec<WaitingView> {
        self.waiting
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
            .collect()
    }
}
