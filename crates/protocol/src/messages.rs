//! The typed, versioned messages between the host (the app) and the engine worker process.
//!
//! Transport: JSON lines over the worker's stdin (commands) and stdout (replies); the worker's
//! logs go to stderr. Every command carries an `id` that its reply repeats. The worker sends one
//! unsolicited [`Reply::Ready`] (id 0) when the model is loaded: the handshake. A line the worker
//! cannot parse gets a [`Reply::Error`] (with the id when it could be read) and the worker goes
//! on with the next line. The host may send the next command before the last reply arrived: the
//! worker runs them in order.
//!
//! This module imports nothing but the shared id types.

use crate::ids::{RequestId, SeqId, TokenId};
use serde::{Deserialize, Serialize};

/// Bumped on every incompatible change; the host refuses a worker that speaks another one.
pub const PROTOCOL_VERSION: u32 = 5;

/// One line from the host to the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandLine {
    pub id: u64,
    #[serde(flatten)]
    pub command: Command,
}

/// What the host asks of the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// Start a request on a sequence. The sequence keeps its first `keep_tokens` cached tokens
    /// (a prefix the request shares) and drops the rest; the request's prompt continues from
    /// there. One sampler object is made for the request and kept until it is closed. A
    /// sequence that holds fewer than `keep_tokens` is refused (never kept short silently).
    Open {
        request: RequestId,
        seq: SeqId,
        #[serde(default)]
        keep_tokens: u32,
        #[serde(default)]
        sampling: Sampling,
    },
    /// One engine step: at most one prompt chunk plus one decode token for every listed
    /// decoding request, in one llama.cpp batch (split only where `n_batch` demands).
    Step {
        #[serde(default)]
        chunk: Option<Chunk>,
        #[serde(default)]
        decode: Vec<RequestId>,
    },
    /// A decode-only step sent before the last step's reply arrived (the host pipelines: the
    /// worker starts it the moment the last one ends). It runs exactly as a [`Command::Step`]
    /// with no chunk, and the worker keeps what undoing it takes until the next command: a
    /// [`Command::Rewind`] undoes it; any other command lets it stand. One that does not fit
    /// in the pool (a decode at its last cell), or cannot run for any other reason, is answered
    /// [`Reply::StepAheadNotRun`] and leaves nothing behind: the host sends the step itself
    /// when it is asked for. Refused for a model whose facts say it does not trim at any token
    /// (its state cannot drop a position).
    StepAhead { decode: Vec<RequestId> },
    /// Undo the step ahead that was the last command: its tokens leave the cache, each
    /// request's sampler and last sampled token are as before it, so what follows is
    /// token-identical to a run without it. Refused after any other command.
    Rewind,
    /// End a request: its sampler is dropped; the tokens stay in its sequence as a cache
    /// (a parked request's saved state is dropped).
    Close { request: RequestId },
    /// Move an open request's sequence state to host RAM and free its sequence. Its sampler
    /// and its last sampled token stay with the request.
    Park { request: RequestId },
    /// Put a parked request's state into a free sequence and let it go on from there.
    Restore { request: RequestId, seq: SeqId },
    /// Keep the first `keep_tokens` of a free sequence, drop the rest.
    Trim { seq: SeqId, keep_tokens: u32 },
    /// Make `to` (free) hold the first `tokens` of `from` (shared cells in the unified pool).
    CopyPrefix { from: SeqId, to: SeqId, tokens: u32 },
    /// Move the conversation a free sequence holds to the host-RAM conversation cache under
    /// `key`, and clear the sequence. Least recently used entries leave past the cache's bound,
    /// never those in `keep` (about to be loaded); if no room is left then, the new entry
    /// itself is not kept.
    SaveConversation {
        seq: SeqId,
        key: u64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keep: Vec<u64>,
    },
    /// Put a cached conversation into a free sequence. With `take`, the entry leaves the cache
    /// (a move); else it stays cached.
    LoadConversation {
        key: u64,
        seq: SeqId,
        #[serde(default)]
        take: bool,
    },
    /// Forget a cached conversation.
    DropConversation { key: u64 },
    /// Counters and the KV budget.
    Stats,
}

/// Part of a request's prompt to read in this step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    pub request: RequestId,
    /// The position of its first token: the worker refuses a chunk that does not start where
    /// the request's sequence ends (the host and the engine would disagree about the cache).
    pub start: u32,
    pub tokens: Vec<TokenId>,
    /// The prompt ends with this chunk: sample the first output token from its last position.
    #[serde(default)]
    pub last: bool,
    /// The whole prompt's length, so the worker can place its checkpoints near the prompt's
    /// end (docs/ARCHITECTURE.md, "Context checkpoints"); 0 where unknown: the end of a last
    /// chunk is then the prompt's.
    #[serde(default)]
    pub prompt_tokens: u32,
}

/// Sampling parameters of one request. `temperature <= 0` is greedy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sampling {
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub seed: u32,
    /// 1.0 is off.
    pub repeat_penalty: f32,
    /// 0.0 is off.
    pub frequency_penalty: f32,
    /// 0.0 is off.
    pub presence_penalty: f32,
    /// Recent tokens the penalties look at.
    pub penalty_last_n: i32,
    /// A grammar the output must follow (the simulated engine ignores it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grammar: Option<Grammar>,
}

/// A llama.cpp GBNF grammar with its start rule `root`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grammar {
    pub gbnf: String,
    /// Lazy: free text until this word appears, the grammar from there on (its root starts
    /// with the word). `None` constrains from the first token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lazy_trigger: Option<String>,
    /// Lazy by a regular expression over all the output so far: the grammar takes the text
    /// from its first group on. Set instead of `lazy_trigger` when the output starts inside
    /// a reasoning block the grammar must not see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lazy_pattern: Option<String>,
}

impl Grammar {
    /// The output starts inside `<think>` (the prompt opened it): the grammar applies only
    /// after `</think>`, from its trigger word on if it has one.
    pub fn after_reasoning(&mut self) {
        let from = match self.lazy_trigger.take() {
            // Any text may come between the reasoning and the trigger.
            Some(word) => format!("[\\s\\S]*?({}[\\s\\S]*)", regex_escape(&word)),
            None => "\\s*([\\s\\S]*)".to_owned(),
        };
        self.lazy_pattern = Some(format!("[\\s\\S]*?</think>{from}"));
    }
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            seed: 0,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            grammar: None,
        }
    }
}

impl Sampling {
    pub fn has_penalties(&self) -> bool {
        self.repeat_penalty != 1.0 || self.frequency_penalty != 0.0 || self.presence_penalty != 0.0
    }
}

/// One line from the worker to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplyLine {
    /// The command's id; 0 for the handshake; `None` for an error about a line without one.
    pub id: Option<u64>,
    #[serde(flatten)]
    pub reply: Reply,
}

/// What the worker answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Ready(Box<Handshake>),
    Opened {
        request: RequestId,
        seq: SeqId,
        /// Tokens of the sequence kept for the request: always `keep_tokens` (an open that keeps
        /// more than the sequence holds is refused, never shortened).
        kept_tokens: u32,
    },
    StepDone(StepDone),
    Closed {
        request: RequestId,
    },
    Parked(StateMoved),
    Restored(StateMoved),
    Trimmed {
        seq: SeqId,
        held_tokens: u32,
    },
    Copied {
        to: SeqId,
        held_tokens: u32,
    },
    ConversationSaved {
        key: u64,
        moved: StateMoved,
        /// Entries that left the cache to make room (least recently used first); the saved
        /// key itself when it alone exceeds the bound.
        evicted: Vec<u64>,
    },
    ConversationLoaded {
        key: u64,
        moved: StateMoved,
    },
    ConversationDropped {
        key: u64,
        existed: bool,
    },
    Stats(Stats),
    /// A step ahead was undone: the cells it had added.
    Rewound {
        cells: u32,
    },
    /// A step ahead did not run (it did not fit in the pool, or it failed and was undone):
    /// nothing changed, and there is nothing to rewind.
    StepAheadNotRun {
        reason: String,
    },
    Error(ErrorReply),
}

/// The handshake: what this engine is and can do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handshake {
    pub protocol_version: u32,
    pub model: ModelFacts,
    /// Slots: requests read or decode together in one step (the host's `parallel`).
    pub slots: u32,
    /// Sequences over the unified pool (`0..sequences`): every live request and every kept
    /// conversation has its own (more than `slots`).
    pub sequences: u32,
    /// Cells of the one unified KV pool, shared by every sequence.
    pub kv_cells: u32,
    /// Most tokens one llama.cpp decode call takes.
    pub n_batch: u32,
    pub threads: u32,
    /// Prompt tokens read per second, measured at load.
    pub prompt_tokens_per_sec: f64,
    /// About a quarter second of prompt reading on this engine, bounded 64..=8192, a multiple
    /// of 64.
    pub chunk_tokens: u32,
    /// True for a simulated engine; every UI labels it so.
    pub simulated: bool,
    /// What the engine runs on: the device, layers on the GPU, its memory.
    #[serde(default)]
    pub device: crate::DeviceFacts,
}

/// Facts about the loaded model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFacts {
    pub name: String,
    pub path: String,
    /// Context of the engine (cells one sequence may use at most).
    pub n_ctx: u32,
    pub n_ctx_train: u32,
    /// How `n_ctx` was chosen: `set` (the `ctx` setting), `trained` (the model's trained
    /// context fits), `fit` (llama.cpp's fitting shrank it to fit the memory), `floor` (it did
    /// not fit even at `ctx_min`: the floor, with a warning); empty from an older worker.
    #[serde(default)]
    pub ctx_chosen_by: String,
    pub n_vocab: i32,
    pub bos: Option<TokenId>,
    pub eog: Vec<TokenId>,
    /// The token where a turn starts (`<|im_start|>` in ChatML), if the vocabulary has one.
    pub turn_token: Option<TokenId>,
    /// Whether the cache can be cut at any token (false for recurrent and hybrid models, and
    /// for a sliding-window model whose window layers keep only their window: `swa_full` off).
    pub trims_at_any_token: bool,
    /// Whether the last token decoded can be undone (a step ahead's rewind): wherever the cache
    /// trims at any token, and on a sliding-window cache, where a token's decode frees only
    /// cells that its own window no longer reaches. False from an older worker: no step ahead.
    #[serde(default)]
    pub rewinds_last_token: bool,
    /// Whether a cache that cannot be cut anywhere keeps checkpoints it can be cut back to
    /// exactly: the positions each sequence holds one at are reported
    /// ([`StepDone::checkpoints`]), and an open or a trim may keep exactly that many tokens.
    #[serde(default)]
    pub keeps_checkpoints: bool,
    /// How many trailing tokens of a sequence can always be cut exactly, with no checkpoint:
    /// unbounded (`u32::MAX`) where the cache trims at any token, 1 on a sliding-window cache
    /// (a token's decode frees only cells its own window no longer reaches; more may still be
    /// there, but nothing more is sure), 0 for recurrent and hybrid layers. 0 from an older
    /// worker.
    #[serde(default)]
    pub rewindable_tokens: u32,
    pub chat_template: Option<String>,
    /// Its quantization and sizes (all empty or 0 for the simulated engine); boxed, so that a
    /// handshake reply stays near the size of the others.
    #[serde(default)]
    pub size: Box<ModelSize>,
}

/// A loaded model's quantization and sizes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelSize {
    /// The file type its GGUF header names (`Q4_1`, `Q4_K_M`, `F16`, ...), empty when the
    /// header names none.
    pub quantization: String,
    /// Parameters, and the bytes of its weights (all its tensors).
    pub params: u64,
    pub weights_bytes: u64,
    /// Bytes of the KV cache one cell (one token of one sequence) takes: every layer's key
    /// and value at the cache's type; 0 when not known (recurrent and hybrid models).
    pub kv_bytes_per_cell: u64,
}

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepDone {
    /// One entry per request that sampled a token in this step.
    pub sampled: Vec<Sampled>,
    /// Requests of this step that did not run (their chunk or decode was refused, say a chunk
    /// that does not start where its sequence ends); the rest of the step ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<RequestFailure>,
    /// The chunk's request and the prompt tokens its sequence now holds.
    pub read: Option<ReadProgress>,
    /// Wall time of the step inside the worker.
    pub step_micros: u64,
    /// Cells of the pool in use after the step (each shared cell once): the host compares
    /// them with the scheduler's pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cells_used: Option<u32>,
    /// Sequences whose checkpoints changed in this step (one taken after the chunk, older ones
    /// let go to stay within the bounds), each with all the checkpoints it now holds.
    /// Checkpoints change nowhere else but where the host knows: a cut drops those past it,
    /// a park or a conversation save takes them along, a restore or a load brings them back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<SeqCheckpoints>,
}

/// The checkpoints a sequence holds, ascending: the places it can be cut back to exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqCheckpoints {
    pub seq: SeqId,
    pub checkpoints: Vec<CheckpointAt>,
}

/// One checkpoint: taken when its sequence held `tokens` tokens; `bytes` in host RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointAt {
    pub tokens: u32,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sampled {
    pub request: RequestId,
    pub token: TokenId,
    /// The token's text as raw bytes (it may be part of a UTF-8 character); a control token's
    /// text is marked ([`crate::control_text`]).
    pub bytes: Vec<u8>,
    /// End of generation (EOS, EOT, ...).
    pub eog: bool,
}

/// One request the engine could not serve, while it serves the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestFailure {
    pub request: RequestId,
    pub kind: ErrorKind,
    pub message: String,
}

/// A sequence state moved between the KV pool and host RAM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateMoved {
    pub request: Option<RequestId>,
    pub seq: SeqId,
    pub tokens: u32,
    pub bytes: u64,
    pub micros: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadProgress {
    pub request: RequestId,
    /// Positions the request's sequence holds after the chunk.
    pub held_tokens: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub kv_cells: u32,
    /// Sum of what the sequences hold (an upper bound: a copied prefix shares its cells).
    pub kv_cells_used: u32,
    /// Tokens each sequence holds, by sequence id.
    pub seq_tokens: Vec<u32>,
    pub open_requests: u32,
    pub parked_requests: u32,
    pub parked_bytes: u64,
    pub conversation_cache_entries: u32,
    pub conversation_cache_bytes: u64,
    pub conversation_cache_capacity_bytes: u64,
    pub steps: u64,
    pub prompt_tokens_read: u64,
    pub tokens_decoded: u64,
    /// Checkpoints the sequences in the pool hold, and their bytes in host RAM.
    #[serde(default)]
    pub checkpoints: u32,
    #[serde(default)]
    pub checkpoint_bytes: u64,
    /// Cuts made by restoring a checkpoint, and the prompt tokens they kept (not read again).
    #[serde(default)]
    pub checkpoint_restores: u64,
    #[serde(default)]
    pub checkpoint_tokens_saved: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    pub kind: ErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The line is not JSON, or not a command of this protocol.
    Malformed,
    /// A well-formed command that names something unknown (a request, a sequence).
    Invalid,
    /// llama.cpp refused (no KV room, decode failure).
    Engine,
}

impl ReplyLine {
    pub fn error(id: Option<u64>, kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            id,
            reply: Reply::Error(ErrorReply {
                kind,
                message: message.into(),
            }),
        }
    }
}

/// Reads the `id` of a line that did not parse as a command, so its error can name it.
pub fn salvage_id(line: &str) -> Option<u64> {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()?
        .get("id")?
        .as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_command_round_trips_through_json() {
        let line = CommandLine {
            id: 7,
            command: Command::Step {
                chunk: Some(Chunk {
                    request: RequestId(3),
                    start: 0,
                    tokens: vec![1, 2, 3],
                    last: true,
                    prompt_tokens: 0,
                }),
                decode: vec![RequestId(4)],
            },
        };
        let text = serde_json::to_string(&line).unwrap();
        assert!(text.contains(r#""op":"step""#), "{text}");
        assert_eq!(serde_json::from_str::<CommandLine>(&text).unwrap(), line);
    }

    #[test]
    fn an_unknown_op_does_not_parse_but_its_id_is_salvaged() {
        let text = r#"{"id":12,"op":"explode"}"#;
        assert!(serde_json::from_str::<CommandLine>(text).is_err());
        assert_eq!(salvage_id(text), Some(12));
        assert_eq!(salvage_id("not json"), None);
    }
}
