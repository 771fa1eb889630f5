//! One lifecycle enum per request (`Phase`), per slot (`SlotState`) and per engine sequence
//! (`SeqState`), with data inside the variants, and the one checked function each goes through
//! to change.

use super::snapshot::ParkCause;
use crate::ids::{RequestId, SeqId, TokenId};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::prefix::TokenSeq;
use super::types::ParkPlace;

/// What a parked request was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParkedKind {
    /// A read that gave way (solo), with the prompt positions its cache holds.
    Read { read_to: u32 },
    /// A paused decode (R7) or a decode parked for lack of KV cells.
    Decode,
}

/// A request's lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// In the queue, no slot.
    Waiting,
    /// Holds a slot and its sequence `seq`; the cache holds prompt positions `..read_to`, the
    /// rest is left to read.
    Reading { seq: SeqId, read_to: u32 },
    /// Holds a slot and `seq`; every step feeds its last token and samples one.
    Decoding { seq: SeqId },
    /// Out of the active set, losing nothing.
    Parked { place: ParkPlace, kind: ParkedKind },
    /// Ended (finished, failed or cancelled); removed right after.
    Ended,
}

impl Phase {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Phase::Waiting => "waiting",
            Phase::Reading { .. } => "reading",
            Phase::Decoding { .. } => "decoding",
            Phase::Parked { .. } => "parked",
            Phase::Ended => "ended",
        }
    }

    /// The sequence it runs on (holding a slot).
    pub(crate) fn seq(&self) -> Option<SeqId> {
        match self {
            Phase::Reading { seq, .. } | Phase::Decoding { seq } => Some(*seq),
            _ => None,
        }
    }

    /// The sequence it owns: the one it runs on, or the one it is parked in.
    pub(crate) fn own_seq(&self) -> Option<SeqId> {
        match self {
            Phase::Reading { seq, .. }
            | Phase::Decoding { seq }
            | Phase::Parked {
                place: ParkPlace::Pool(seq),
                ..
            } => Some(*seq),
            _ => None,
        }
    }
}

/// Whether `from → to` is a legal request transition.
pub(crate) fn phase_transition_ok(from: &Phase, to: &Phase) -> bool {
    use Phase::*;
    match (from, to) {
        (Waiting, Reading { .. }) | (Waiting, Ended) => true,
        (Reading { seq: a, read_to: x }, Reading { seq: b, read_to: y }) => a == b && y >= x,
        (Reading { seq: a, .. }, Decoding { seq: b }) => a == b,
        (Reading { .. }, Parked { kind, .. }) => matches!(kind, ParkedKind::Read { .. }),
        (Decoding { .. }, Parked { kind, .. }) => *kind == ParkedKind::Decode,
        (Parked { kind: k1, .. }, Parked { kind: k2, .. }) => k1 == k2,
        (Parked { kind, .. }, Reading { read_to, .. }) => {
            *kind == ParkedKind::Read { read_to: *read_to }
        }
        (Parked { kind, .. }, Decoding { .. }) => *kind == ParkedKind::Decode,
        (Reading { .. } | Decoding { .. } | Parked { .. }, Ended) => true,
        _ => false,
    }
}

/// A conversation kept as cache (in its own sequence or in host RAM).
#[derive(Debug, Clone)]
pub(crate) struct Conversation {
    /// Unique per content; keys the per-request prefix memo.
    pub key: u64,
    pub tokens: Arc<TokenSeq>,
}

/// A slot's lifecycle: a lane of the engine, not a place. Giving it to another request moves
/// no data (the step names another sequence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SlotState {
    Empty,
    /// A request reading or decoding on its own sequence.
    Busy {
        request: RequestId,
    },
}

impl SlotState {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            SlotState::Empty => "empty",
            SlotState::Busy { .. } => "busy",
        }
    }
}

/// Whether `from → to` is a legal slot transition.
pub(crate) fn slot_transition_ok(from: &SlotState, to: &SlotState) -> bool {
    use SlotState::*;
    matches!((from, to), (Empty, Busy { .. }) | (Busy { .. }, Empty))
}

#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub state: SlotState,
}

/// An engine sequence's lifecycle.
#[derive(Debug, Clone)]
pub(crate) enum SeqState {
    /// Holds nothing.
    Free,
    /// An idle conversation: a finished request's tokens, kept for the next turn.
    Kept(Conversation),
    /// A live request's: it reads or decodes there, or is parked there with its cells.
    Owned(RequestId),
}

impl SeqState {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            SeqState::Free => "free",
            SeqState::Kept(_) => "kept",
            SeqState::Owned(_) => "owned",
        }
    }
}

/// Whether `from → to` is a legal sequence transition (a kept conversation is continued or
/// evicted; a request's sequence becomes its conversation or is freed).
pub(crate) fn seq_transition_ok(from: &SeqState, to: &SeqState) -> bool {
    use SeqState::*;
    matches!(
        (from, to),
        (Free, Owned(_))
            | (Free, Kept(_))
            | (Kept(_), Owned(_))
            | (Kept(_), Free)
            | (Owned(_), Kept(_))
            | (Owned(_), Free)
    )
}

#[derive(Debug, Clone)]
pub(crate) struct Seq {
    pub id: SeqId,
    pub state: SeqState,
    /// When it was last given out or kept (least recently used out first).
    pub last_used: Duration,
}

/// Everything the scheduler keeps about one request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub id: RequestId,
    pub priority: i32,
    pub boost_eligible: bool,
    pub prompt: Arc<TokenSeq>,
    pub max_tokens: u32,
    /// Order among equals (arrival; renewed when a read gives way, R4).
    pub ticket: u64,
    pub arrived_at: Duration,
    /// Aging anchor: set while the request waits, is parked or holds a slot without the lane.
    pub idle_since: Option<Duration>,
    /// Since it got a slot or last resumed (R7's quantum).
    pub run_since: Duration,
    pub phase: Phase,
    pub output: Vec<TokenId>,
    pub yields: u32,
    pub pauses: u32,
    /// The request it was last paused for (R7): until that one has produced its first
    /// token, this one cannot take the lane or the slot back from it by the shorter-left rule.
    pub paused_for: Option<RequestId>,
    /// Why it was last parked, and for whom (the snapshot's `parked[].cause`).
    pub parked_because: Option<(ParkCause, Option<RequestId>)>,
    pub tokens_since_resume: u32,
    /// Tokens its sequence may reach without asking for more cells (prompt plus a share of
    /// the output); what it does not hold yet is pledged in the pool while it runs.
    pub reserved_cells: u32,
    /// Chunk size fixed at admission, so a read keeps its boundaries.
    pub chunk_tokens: u32,
    pub cancel_pending: bool,
    /// The engine failed it while it was in the outstanding step: it ends when the step does.
    pub failed_pending: Option<String>,
    /// A step fed its last token but its sample was dropped (cancelled meanwhile): the cache
    /// holds one token more than the accepted output implies.
    pub last_token_fed: bool,
    /// Usable prefix per conversation key (memo; conversations are immutable per key).
    pub prefix_memo: HashMap<u64, u32>,
    pub held_at_admission: u32,
    /// `max_output_tokens_cap` lowered its limit (below what it asked and the room left): an
    /// end at that limit is counted as a cut by the cap.
    pub cut_by_cap: bool,
    pub admitted_at: Option<Duration>,
    pub prompt_tokens_read: u32,
    /// The furthest prompt position any chunk of this request ever read (across parks,
    /// give-ways and restores): a chunk starting below it reads tokens again.
    pub read_high: u32,
    /// The checkpoints of its sequence (the engine's reports, or what it kept of a
    /// conversation it continued), ascending: its conversation keeps them.
    pub checkpoints: Vec<crate::types::Checkpoint>,
}

/// Prompt tokens a chunk `tokens` reads again, given the furthest position read before.
pub(crate) fn reread_tokens(read_high: u32, tokens: &std::ops::Range<u32>) -> u32 {
    read_high.min(tokens.end).saturating_sub(tokens.start)
}

impl Request {
    pub(crate) fn prompt_len(&self) -> u32 {
        self.prompt.len()
    }

    pub(crate) fn generated(&self) -> u32 {
        self.output.len() as u32
    }

    /// Tokens its sequence holds now.
    pub(crate) fn held_cells(&self) -> u32 {
        match self.phase {
            Phase::Reading { read_to, .. }
            | Phase::Parked {
                kind: ParkedKind::Read { read_to },
                ..
            } => read_to,
            Phase::Decoding { .. }
            | Phase::Parked {
                kind: ParkedKind::Decode,
                ..
            } => {
                self.prompt_len()
                    + self.generated().saturating_sub(1)
                    + u32::from(self.last_token_fed)
            }
            Phase::Waiting | Phase::Ended => 0,
        }
    }

    /// Prompt tokens still to read, given what is held.
    pub(crate) fn left_after(&self, held: u32) -> u32 {
        self.prompt_len().saturating_sub(held)
    }

    /// Chunks left on absolute boundaries from `read_to`.
    pub(crate) fn chunks_left(&self, read_to: u32) -> u32 {
        let c = self.chunk_tokens.max(1);
        let len = self.prompt_len();
        if read_to >= len {
            return 0;
        }
        len.div_ceil(c) - read_to / c
    }

    /// The tokens its sequence holds (prompt and fed output), as a conversation, with its
    /// checkpoints.
    pub(crate) fn held_tokens(&self) -> TokenSeq {
        let n = self.held_cells() as usize;
        let p = self.prompt.len() as usize;
        let extra = if n > p {
            &self.output[..(n - p).min(self.output.len())]
        } else {
            &[]
        };
        TokenSeq::extend_prefix(&self.prompt, n.min(p), extra)
            .with_checkpoints(self.checkpoints.clone())
    }
}
