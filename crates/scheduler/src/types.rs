//! The scheduler's contract with the service: engine facts, events in, actions out.

use crate::ids::{RequestId, SeqId, TokenId};
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::time::Duration;

use super::settings::SchedulerSettings;

/// Virtual or real time, passed in by the caller: time since the service's epoch.
pub type Now = Duration;

/// What the engine's handshake states.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineFacts {
    /// Slots (`parallel`): at most this many requests read or decode in one step.
    pub parallel: u32,
    /// Engine sequences over the unified pool (`kv_sequences`): every live request and every
    /// kept conversation has its own; at least `parallel + 1`.
    pub sequences: u32,
    /// Size of the unified KV pool, in cells.
    pub kv_cells_total: u32,
    /// The most tokens one sequence can hold (the model's context); capped by `kv_cells_total`.
    pub context_tokens: u32,
    /// The measured chunk size (about a quarter second of prompt reading), used when the setting is unset.
    pub chunk_tokens: u32,
    /// The engine can trim a sequence at any token (transformers); false: sliding-window
    /// caches that keep only their window, recurrent and hybrid models, whose sequences are
    /// continued whole, cut within their last `rewindable_tokens`, or cut back to a checkpoint
    /// the engine reported ([`Event::CheckpointsChanged`]).
    pub trims_at_any_token: bool,
    /// How many trailing tokens of a sequence an engine that cannot trim anywhere can still
    /// cut exactly (1 on a sliding-window cache, 0 on a recurrent one).
    #[serde(default)]
    pub rewindable_tokens: u32,
}

/// A request, as the API edge hands it over (already tokenized, priority already resolved).
#[derive(Debug, Clone, PartialEq)]
pub struct NewRequest {
    pub id: RequestId,
    pub prompt: Vec<TokenId>,
    /// Resolved higher-first priority (see `resolve_priority`).
    pub priority: i32,
    /// A priority came from the body, a header or the key (no small-request boost then).
    pub priority_given: bool,
    /// `None`: as many as the context leaves.
    pub max_tokens: Option<u32>,
}

/// Why a request ended normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End of generation or a stop string (the service detects both).
    Stop,
    /// `max_tokens` (possibly clamped to the room left) reached.
    Length,
    /// The client disconnected or cancelled (R9).
    Cancelled,
}

/// Why a request failed (the service maps it to an error object or an error event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailKind {
    /// The engine process died while it held the request (R10).
    EngineDied,
    /// The user restarted the engine ("engine restarted").
    EngineRestarted,
    /// The engine could not be started `restart_attempts_max` times in a row: a 503 (the
    /// engine then stays failed until a user restart).
    EngineUnavailable { stderr_tail: String },
    /// The engine answered a step without the token it owed (a protocol fault).
    EngineProtocol,
    /// The engine could not serve this request while it served the others: it refused a
    /// command or a chunk, or what it holds disagrees with what the scheduler counted (the
    /// message says which). Only this request fails; the engine goes on.
    RequestFailed { message: String },
    /// A new engine handshake shrank the context below a waiting request's prompt: the same
    /// `context_length_exceeded` as `Refusal::PromptTooLong` (`max_context_tokens` is the
    /// longest prompt accepted, context - 1).
    PromptTooLong {
        prompt_tokens: u32,
        max_context_tokens: u32,
    },
}

/// Why a request was refused at arrival (it never entered the queue).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// 429 with `Retry-After`.
    QueueFull {
        retry_after_secs: u32,
    },
    /// OpenAI `context_length_exceeded` / Anthropic "prompt is too long: N tokens > M maximum".
    /// `max_context_tokens` is the longest prompt accepted: the context less one cell for output.
    PromptTooLong {
        prompt_tokens: u32,
        max_context_tokens: u32,
    },
    /// `max_tokens_over_context: reject`: the strict 400.
    MaxTokensOverContext {
        max_tokens: u32,
        room_tokens: u32,
    },
    EmptyPrompt,
    /// The id is already live (the caller's bug); the live request is untouched.
    DuplicateId,
    /// No engine has finished its first start yet: a 503 with `Retry-After`.
    EngineStarting {
        retry_after_secs: u32,
    },
    /// `restart_attempts_max` starts failed in a row and no user restart since: a 503 with the
    /// worker's last words. Nothing was queued or started (R10: only a retry starts it).
    EngineUnavailable {
        stderr_tail: String,
    },
}

/// An arrival that was not admitted: why, and what to execute all the same (the decision
/// pass that follows every arrival; the refusal itself starts nothing).
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub refusal: Refusal,
    pub outcome: Outcome,
}

/// Where a parked request's tokens are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkPlace {
    /// Its own sequence in the KV pool, cells kept: parking and resuming move nothing.
    Pool(SeqId),
    /// Host RAM (llama.cpp sequence state get/set), when its cells were needed.
    HostRam,
}

/// An id for a conversation in the host-RAM conversation cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConversationId(pub u64);

/// One prompt chunk: read positions `tokens` of `request`'s prompt into `seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chunk {
    pub request: RequestId,
    pub seq: SeqId,
    /// Prompt positions `start..end`; `start` is where the sequence's cache ends, and `end` is
    /// the next absolute multiple of `chunk_tokens` (or the prompt's end).
    pub tokens: Range<u32>,
    /// The prompt's last chunk: the engine samples the first output token.
    pub is_last: bool,
}

/// One engine call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    pub chunk: Option<Chunk>,
    /// Each decoding request feeds its last token and samples one more.
    pub decode: Vec<(RequestId, SeqId)>,
}

/// The engine's answer for one request of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOutput {
    pub request: RequestId,
    /// The sampled token (decodes always, a chunk only when `is_last`).
    pub token: Option<TokenId>,
    /// Set by the service when this token ends the request (EOG or a stop string).
    pub finished: Option<FinishReason>,
}

/// Per-request figures for metrics, given with its `Finish` or `Fail` (SCHEDULING.md, "What is
/// counted"); time to first token is the service's (first `Deliver`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RequestStats {
    /// Arrival to first slot; `None` when it never got one.
    pub queue_wait_secs: Option<f64>,
    pub prompt_tokens: u32,
    /// Prompt tokens the engine already held at admission (prefix cache).
    pub prompt_tokens_held: u32,
    pub prompt_tokens_read: u32,
    pub output_tokens: u32,
    pub give_ways: u32,
    pub pauses: u32,
}

/// Events in (an arrival is [`crate::Scheduler::admit`], which answers at once).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The client disconnected or asked to cancel.
    Cancelled(RequestId),
    /// The outstanding step ran: the chunk was read and every listed request sampled.
    StepDone(Vec<StepOutput>),
    /// The engine process exited, closed its pipe or stopped answering.
    EngineDied,
    /// A start attempt failed (after a `RestartEngine`).
    EngineStartFailed { stderr_tail: String },
    /// The engine finished its handshake (possibly with new facts).
    EngineReady(EngineFacts),
    /// The user asked for an engine restart (also the retry that starts a failed engine).
    RestartRequested,
    /// A new set of settings (invalid ones are refused with a diagnostic).
    SettingsChanged(Box<SchedulerSettings>),
    /// A new priority for a request that has not ended (already clamped by the caller). It
    /// counts as given (no small-request boost) and takes effect at the next decision.
    Reprioritised { request: RequestId, priority: i32 },
    /// The engine could not serve this request (it refused a command or a chunk for it, or
    /// holds other tokens than counted: `lost_tokens` prompt tokens it should hold are gone).
    /// Only this request fails, at once or, when it is in the outstanding step, at its end.
    RequestFailed {
        request: RequestId,
        message: String,
        lost_tokens: u32,
    },
    /// The engine's host-RAM conversation cache dropped these entries to stay in its byte
    /// bound: they can no longer be restored.
    ConversationsEvicted(Vec<ConversationId>),
    /// The checkpoints these sequences hold now (each list whole, ascending), reported with
    /// the step that changed them (one taken after a chunk, older ones let go), before that
    /// step's `StepDone`.
    CheckpointsChanged(Vec<(SeqId, Vec<Checkpoint>)>),
    /// Nothing happened but time passed (aging); lets the caller poll.
    Tick,
}

/// A checkpoint the engine keeps of a sequence: taken when it held `tokens` tokens, so it can
/// be cut back there exactly; `bytes` in host RAM (shown, not scheduled by).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Checkpoint {
    pub tokens: u32,
    pub bytes: u64,
}

impl Checkpoint {
    pub fn new(tokens: u32, bytes: u64) -> Self {
        Self { tokens, bytes }
    }
}

/// Actions out, to be executed in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum Action {
    /// Move a host-RAM cached conversation into `into_seq` (replacing what it holds), for
    /// `for_request` to continue.
    RestoreConversation {
        conversation: ConversationId,
        into_seq: SeqId,
        for_request: RequestId,
    },
    /// Make `to` (free) share the first `tokens` cells of `from` (a prefix `for_request`'s
    /// prompt continues; no data moves in the unified pool).
    CopyPrefix {
        from: SeqId,
        to: SeqId,
        tokens: u32,
        for_request: RequestId,
    },
    /// Give `seq` to `request`: keep its first `keep_tokens` cells (a prefix of the prompt it
    /// already holds), drop the rest.
    Assign {
        request: RequestId,
        seq: SeqId,
        keep_tokens: u32,
    },
    /// Save an idle conversation to the host-RAM cache under `to_cache` (or just drop it when
    /// `None`), then clear `seq` (its cells shared with other sequences stay for them).
    EvictConversation {
        seq: SeqId,
        to_cache: Option<ConversationId>,
    },
    /// Drop a conversation from the host-RAM cache.
    DropConversation { conversation: ConversationId },
    /// Take a request out of the active set, losing nothing. To `Pool(from_seq)` nothing moves
    /// (the engine is not asked); to `HostRam` its state is saved and `from_seq` cleared.
    Park {
        request: RequestId,
        from_seq: SeqId,
        to: ParkPlace,
    },
    /// Bring a parked request back, same sampler: from `Pool(s)` into `s` itself (nothing
    /// moves), from host RAM into the free `into_seq`.
    Restore {
        request: RequestId,
        from: ParkPlace,
        into_seq: SeqId,
    },
    /// Drop a parked request's state (cancel or dead engine).
    DropParked {
        request: RequestId,
        place: ParkPlace,
    },
    /// Run one step. Exactly one is outstanding until `Event::StepDone` or `Event::EngineDied`.
    Step(Step),
    /// Send this accepted token to the client; `index` counts from 0 per request, over pauses.
    Deliver {
        request: RequestId,
        token: TokenId,
        index: u32,
    },
    /// The request left `seq`; its tokens stay there as conversation cache when asked.
    Release {
        request: RequestId,
        seq: SeqId,
        keep_as_conversation: bool,
    },
    /// The request ended normally (close the stream with this reason).
    Finish {
        request: RequestId,
        reason: FinishReason,
        output_tokens: u32,
        stats: RequestStats,
    },
    /// The request failed (structured error).
    Fail {
        request: RequestId,
        error: FailKind,
        stats: RequestStats,
    },
    /// Start an engine after `delay_secs` (attempt counts failed starts in a row, from 1).
    RestartEngine { attempt: u32, delay_secs: f64 },
}

/// What one `handle` call returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub actions: Vec<Action>,
    /// Illegal transitions and protocol faults, for the log. Empty in a healthy run.
    pub diagnostics: Vec<String>,
}
