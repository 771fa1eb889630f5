//! The request builder for [`Sim::arrive`].

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
