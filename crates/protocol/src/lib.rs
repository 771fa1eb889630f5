//! The contract between the host (the app) and the engine worker process: the shared id types,
//! the typed, versioned JSON-lines messages, the worker's options and engine enums, and the
//! simulated engine's vocabulary.
//!
//! - [`ids`]: identifier types shared by the host, the worker and the scheduler.
//! - the messages (re-exported at the root): [`CommandLine`], [`Command`], [`ReplyLine`],
//!   [`Reply`], the [`Handshake`], [`Sampling`] and [`Grammar`].
//! - [`options`]: `strata-desk engine-worker`'s options ([`WorkerOptions`]) and the engine
//!   settings the config file also names ([`FlashAttn`], [`KvType`]).
//! - [`pool`]: the cells of the unified KV pool as the commands move them (prefix copies
//!   share cells), counted the same way by the scheduler and the worker.
//! - [`sim_vocab`]: the simulated engine's special tokens, which the host's tokenizer mirrors.
//!
//! This crate knows no tokio, no llama.cpp and no UI.

pub mod ids;
mod messages;
pub mod options;
pub mod pool;

pub use messages::*;
pub use options::{FakeOptions, FlashAttn, KvType, WorkerOptions};

/// The simulated engine's vocabulary: bytes `0..=255` are tokens `0..=255`, then two specials.
pub mod sim_vocab {
    use crate::ids::TokenId;

    /// Ends a generation.
    pub const EOG: TokenId = 256;
    /// Starts a turn (ChatML's `<|im_start|>` in the simulated template).
    pub const TURN: TokenId = 257;
    /// The vocabulary's size.
    pub const VOCAB: i32 = 258;
}
