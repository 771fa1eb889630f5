//! The contract between the host (the app) and the engine worker process: the shared id types,
//! the typed, versioned JSON-lines messages, the worker's options and engine enums, and the
//! simulated engine's vocabulary.
//!
//! - [`ids`]: identifier types shared by the host, the worker and the scheduler.
//! - the messages (re-exported at the root): [`CommandLine`], [`Command`], [`ReplyLine`],
//!   [`Reply`], the [`Handshake`], [`Sampling`] and [`Grammar`].
//! - [`options`]: `strata-desk engine-worker`'s options ([`WorkerOptions`]) and the engine
//!   settings the config file also names ([`FlashAttn`], [`KvType`]).
//! - [`settings`]: the engine's settings as one struct ([`EngineSettings`]): the config file's
//!   engine keys, the app's and the worker's flags, what `WorkerOptions` carries.
//! - [`gpu`]: `gpu_layers` (`auto` or a count), the memory margin the fitting leaves, and the
//!   device facts the handshake reports ([`DeviceFacts`]).
//! - [`pool`]: the cells of the unified KV pool as the commands move them (prefix copies
//!   share cells), counted the same way by the scheduler and the worker.
//! - [`sim_vocab`]: the simulated engine's special tokens, which the host's tokenizer mirrors.
//! - [`control_text`]: how a sampled control token's text is marked in [`Sampled::bytes`].
//!
//! This crate knows no tokio, no llama.cpp and no UI.

pub mod gpu;
pub mod ids;
mod messages;
pub mod options;
pub mod pool;
pub mod settings;

pub use gpu::{DeviceFacts, GpuLayers, GpuMemoryLimit};
pub use messages::*;
pub use options::{
    DEFAULT_CTX_MIN_TOKENS, DEFAULT_GRAMMAR_MS_PER_TOKEN, FakeOptions, FlashAttn, KvType,
    UPSTREAM_API_KEY_ENV, UpstreamTarget, WorkerOptions,
};
pub use settings::{ENGINE_KEY_DOCS, EngineKeyDoc, EngineSettings};

/// A sampled control token (llama.cpp's `CONTROL` attribute, not end-of-generation) comes with
/// its text wrapped in [`OPEN`](control_text::OPEN) … [`CLOSE`](control_text::CLOSE), two
/// private-use characters: the host's output parser sees the format markers some models write
/// as control tokens (`[TOOL_CALLS]`, `<|python_tag|>`, harmony's `<|channel|>`) and drops every
/// other control token, so clients never see raw control tokens in content, and a model that
/// writes a marker's characters as plain text is not taken for the marker's token.
pub mod control_text {
    /// Opens a control token's text.
    pub const OPEN: char = '\u{F8F4}';
    /// Closes it.
    pub const CLOSE: char = '\u{F8F5}';

    /// `text` marked as a control token's.
    pub fn wrap(text: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len() + 6);
        out.extend_from_slice(OPEN.encode_utf8(&mut [0; 4]).as_bytes());
        out.extend_from_slice(text);
        out.extend_from_slice(CLOSE.encode_utf8(&mut [0; 4]).as_bytes());
        out
    }
}

/// The simulated engine's vocabulary: bytes `0..=255` are tokens `0..=255`, then two specials.
pub mod sim_vocab {
    use crate::ids::TokenId;

    /// Ends a generation.
    pub const EOG: TokenId = 256;
    /// Starts a turn (ChatML's `<|im_start|>` in the simulated template).
    pub const TURN: TokenId = 257;
    /// Fill-in-the-middle: before the code ahead of the cursor (`<|fim_prefix|>`).
    pub const FIM_PRE: TokenId = 258;
    /// Fill-in-the-middle: before the code after the cursor (`<|fim_suffix|>`).
    pub const FIM_SUF: TokenId = 259;
    /// Fill-in-the-middle: the middle, which the model writes, follows (`<|fim_middle|>`).
    pub const FIM_MID: TokenId = 260;
    /// Fill-in-the-middle: the repository's name follows (`<|repo_name|>`).
    pub const FIM_REP: TokenId = 261;
    /// Fill-in-the-middle: a file's name and text follow (`<|file_sep|>`).
    pub const FIM_SEP: TokenId = 262;
    /// The vocabulary's size.
    pub const VOCAB: i32 = 263;

    /// The text of each special token (Qwen2.5-Coder's names for the fill-in-the-middle ones).
    pub const SPECIAL: &[(TokenId, &str)] = &[
        (EOG, "<|im_end|>"),
        (TURN, "<|im_start|>"),
        (FIM_PRE, "<|fim_prefix|>"),
        (FIM_SUF, "<|fim_suffix|>"),
        (FIM_MID, "<|fim_middle|>"),
        (FIM_REP, "<|repo_name|>"),
        (FIM_SEP, "<|file_sep|>"),
    ];
}
