//! The request builder for [`Sim::arrive`], the test engine's facts and the test prompts.

use super::*;

/// A request for [`Sim::arrive`]: by default it arrives at 0 s with priority 0 (given, so no
/// small-request boost), stops by itself after one token and has no `max_tokens`.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    pub(super) id: u64,
    pub(super) prompt: Vec<TokenId>,
    pub(super) at_secs: f64,
    pub(super) priority: i32,
    pub(super) priority_given: bool,
    pub(super) output_len: u32,
    pub(super) max_tokens: Option<u32>,
}

impl Arrival {
    pub(crate) fn new(id: u64, prompt: Vec<TokenId>) -> Self {
        Self {
            id,
            prompt,
            at_secs: 0.0,
            priority: 0,
            priority_given: true,
            output_len: 1,
            max_tokens: None,
        }
    }

    /// When it arrives, in virtual seconds.
    pub(crate) fn at(mut self, secs: f64) -> Self {
        self.at_secs = secs;
        self
    }

    pub(crate) fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// No priority came from the body, a header or a key (the small-request boost may apply).
    pub(crate) fn no_priority_given(mut self) -> Self {
        self.priority_given = false;
        self
    }

    /// It stops by itself (end of generation) after this many tokens.
    pub(crate) fn output(mut self, tokens: u32) -> Self {
        self.output_len = tokens;
        self
    }

    pub(crate) fn max_tokens(mut self, tokens: u32) -> Self {
        self.max_tokens = Some(tokens);
        self
    }
}

/// Engine facts for tests.
pub(crate) fn facts(parallel: u32, chunk: u32) -> EngineFacts {
    EngineFacts {
        parallel,
        sequences: (parallel + 1).max(16),
        kv_cells_total: 1_000_000,
        context_tokens: 200_000,
        chunk_tokens: chunk,
        trims_at_any_token: true,
        rewindable_tokens: u32::MAX,
    }
}

/// A prompt of `len` tokens: `shared` tokens of a common system prompt (seeded by `family`),
/// then tokens unique to `unique`. A turn token ends every 500 positions (499, 999, ...).
pub(crate) fn prompt(family: u32, shared: u32, len: u32, unique: u32) -> Vec<TokenId> {
    (0..len)
        .map(|i| {
            if i % 500 == 499 {
                TURN
            } else if i < shared {
                1000 + ((family * 7919 + i * 31) % 20000) as TokenId
            } else {
                30000 + ((unique * 104_729 + i * 17) % 20000) as TokenId
            }
        })
        .collect()
}
