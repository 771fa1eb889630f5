//! Where a read takes checkpoints (a model whose cache cannot be cut at any token): a few
//! tokens before a prompt's end, as llama-server does (its pull request 20288), and within a
//! long read every `checkpoint_min_step_tokens`.
//!
//! Before the end: `CHECKPOINT_TOKENS_BEFORE_END` tokens, for a next prompt that departs at or
//! just before the end of this one (the last answer re-rendered, the boundary re-tokenized:
//! a checkpoint at the very end would not cover a departure one token earlier), and that
//! plus one physical batch (`ubatch_tokens`), for a next prompt that rewrites its last
//! message. A chunk that holds such a place is read in runs, the checkpoint between them.

use super::Worker;
use crate::engine_worker::backend::{Backend, ChunkRun, Refusal};
use crate::ids::SeqId;
use std::collections::BTreeSet;

/// A checkpoint this many tokens before a prompt's end (llama-server's 4).
const CHECKPOINT_TOKENS_BEFORE_END: u32 = 4;

/// Where checkpoints go before a prompt's end: tokens before it, farthest first.
pub fn before_end_tokens(ubatch_tokens: u32) -> Vec<u32> {
    vec![
        CHECKPOINT_TOKENS_BEFORE_END + ubatch_tokens,
        CHECKPOINT_TOKENS_BEFORE_END,
    ]
}

impl<B: Backend> Worker<B> {
    /// The places near the prompt's end that fall in `run` (at its start or inside it), in
    /// order. `prompt_tokens` 0 (unknown) makes a last chunk's end the prompt's.
    fn near_end_places(&self, run: &ChunkRun<'_>, prompt_tokens: u32) -> Vec<u32> {
        let end = run.start_pos + run.tokens.len() as u32;
        let prompt_end = match prompt_tokens {
            0 if run.sample => end,
            0 => return Vec::new(),
            n => n,
        };
        self.checkpoint_before_end_tokens
            .iter()
            .filter_map(|&before| prompt_end.checked_sub(before))
            .filter(|&at| at > 0 && at >= run.start_pos && at < end)
            .collect()
    }

    /// Reads `run`'s tokens up to each place near the prompt's end that it holds, taking a
    /// checkpoint at each: how many of its tokens were read (the rest is the step's), and the
    /// sequences whose checkpoints changed.
    pub(super) fn read_to_near_end_places(
        &mut self,
        run: &ChunkRun<'_>,
        prompt_tokens: u32,
    ) -> Result<(usize, BTreeSet<SeqId>), Refusal> {
        let mut changed = BTreeSet::new();
        if !self.checkpoints.enabled() {
            return Ok((0, changed));
        }
        let mut read = 0usize;
        for at in self.near_end_places(run, prompt_tokens) {
            let upto = (at - run.start_pos) as usize;
            if upto > read {
                let part = ChunkRun {
                    start_pos: run.start_pos + read as u32,
                    tokens: &run.tokens[read..upto],
                    sample: false,
                    ..*run
                };
                self.backend.run(Some(&part), &[])?;
                self.pool.append(run.seq, (upto - read) as u32);
                read = upto;
            }
            changed.extend(self.checkpoint_now(run.seq));
        }
        Ok((read, changed))
    }

    /// A checkpoint after a chunk was read, if one is due within a long read: at least
    /// `checkpoint_min_step_tokens` after the last.
    pub(super) fn checkpoint_after_read(&mut self, seq: SeqId) -> BTreeSet<SeqId> {
        let held = self.pool.len(seq);
        let step = held.saturating_sub(self.checkpoints.last_tokens(seq));
        if !self.checkpoints.enabled() || step < self.checkpoint_min_step_tokens {
            return BTreeSet::new();
        }
        self.checkpoint_now(seq)
    }

    /// A checkpoint of `seq` where it ends (none if one is there already): the sequences
    /// whose checkpoints changed (older ones may leave to stay within the bounds). One the
    /// engine could not save is logged and skipped: it costs a later read, not this step.
    fn checkpoint_now(&mut self, seq: SeqId) -> BTreeSet<SeqId> {
        let held = self.pool.len(seq);
        if held == 0 || self.checkpoints.at(seq, held).is_some() {
            return BTreeSet::new();
        }
        match self.backend.save_partial(seq) {
            Ok(saved) => {
                let bytes = B::saved_bytes(&saved);
                self.checkpoints.take(seq, held, saved, bytes)
            }
            Err((_, message)) => {
                tracing::warn!("no checkpoint of {seq} at {held} tokens: {message}");
                BTreeSet::new()
            }
        }
    }
}
