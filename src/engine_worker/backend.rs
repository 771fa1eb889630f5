//! What an inference backend does for the worker: the real one (llama.cpp) and the simulated
//! one implement it, and [`super::worker::Worker`] speaks the protocol over either, so the
//! protocol's checks and bookkeeping are written once.

use crate::ids::{RequestId, SeqId, TokenId};
use crate::protocol::{ErrorKind, Handshake, Sampling};
use std::collections::HashMap;

/// A refused command: the error kind and a message naming what was wrong.
pub type Refusal = (ErrorKind, String);

/// Prompt tokens of one request to read at `start_pos..` of its sequence.
#[derive(Debug, Clone, Copy)]
pub struct ChunkRun<'a> {
    pub request: RequestId,
    pub seq: SeqId,
    pub start_pos: u32,
    pub tokens: &'a [TokenId],
    /// The prompt ends here: sample the request's first output token.
    pub sample: bool,
}

/// One token fed to a decoding request's sequence at `pos`, then a token sampled.
#[derive(Debug, Clone, Copy)]
pub struct DecodeRun {
    pub request: RequestId,
    pub seq: SeqId,
    pub pos: u32,
    pub token: TokenId,
}

/// A fault the simulated engine injects at a step (the real one has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Exit with code 3 before answering.
    Die,
    /// Stop answering (and reading).
    Hang,
    /// Answer with a line that is not a reply.
    Malformed,
    /// Lose the step's chunk: run the step without it and report what the sequence holds
    /// (the host must notice that it holds less than counted).
    DropChunk,
    /// Answer the command with an engine error reply instead of serving it.
    Error,
    /// Serve the step, but report one cell more in use than the pool holds (the host's pool
    /// check must notice it, and only count it).
    MiscountCells,
}

pub trait Backend {
    /// A sequence's state moved to host RAM, or a checkpoint's part of it.
    type Saved: Clone;

    fn handshake(&self) -> &Handshake;
    /// Fails only when the engine cannot build the sampler (a grammar it does not take).
    fn new_sampler(&mut self, request: RequestId, sampling: &Sampling) -> Result<(), Refusal>;
    fn drop_sampler(&mut self, request: RequestId);
    /// Keeps a copy of these requests' sampler states (a step ahead may be undone); the
    /// copies of the last call are replaced.
    fn checkpoint_samplers(&mut self, requests: &[RequestId]);
    /// Puts the copies [`Backend::checkpoint_samplers`] kept back in place, once.
    fn rewind_samplers(&mut self);
    /// Keeps positions `0..keep_tokens` of `seq`.
    fn trim(&mut self, seq: SeqId, keep_tokens: u32) -> Result<(), Refusal>;
    /// `to` (cleared first) shares positions `0..tokens` of `from`.
    fn copy_prefix(&mut self, from: SeqId, to: SeqId, tokens: u32) -> Result<(), Refusal>;
    /// Runs one step's batch and samples: the chunk's request (if `sample`) first, then each
    /// decoding request in order. A request whose sampling fails (its grammar took too long)
    /// fails alone: its entry is the refusal; the batch's own failure fails the step.
    fn run(
        &mut self,
        chunk: Option<&ChunkRun<'_>>,
        decodes: &[DecodeRun],
    ) -> Result<Vec<Result<TokenId, Refusal>>, Refusal>;
    fn piece(&self, token: TokenId) -> Vec<u8>;
    fn is_eog(&self, token: TokenId) -> bool;
    /// Copies `seq`'s state to host RAM (the sequence is cleared by the caller).
    fn save(&mut self, seq: SeqId) -> Result<Self::Saved, Refusal>;
    fn saved_bytes(saved: &Self::Saved) -> u64;
    /// Puts a saved state into `seq` (cleared first).
    fn load(&mut self, saved: &Self::Saved, seq: SeqId) -> Result<(), Refusal>;
    /// Whether `seq` can be cut to `keep_tokens` exactly as its cache is now, with no
    /// checkpoint (always on a cache that trims at any token).
    fn cuts_exactly(&self, seq: SeqId, keep_tokens: u32) -> bool;
    /// A checkpoint of `seq`: the part of its state a cut cannot rebuild (its window layers'
    /// cells, its recurrent state).
    fn save_partial(&mut self, seq: SeqId) -> Result<Self::Saved, Refusal>;
    /// Puts back a checkpoint taken when `seq` held `tokens` tokens and drops every position
    /// from `tokens` on: `seq` then continues exactly as it did from there.
    fn restore_partial(
        &mut self,
        saved: &Self::Saved,
        seq: SeqId,
        tokens: u32,
    ) -> Result<(), Refusal>;
    /// A fault to inject before answering step number `step` (1-based).
    fn fault_at_step(&mut self, _step: u64) -> Option<Fault> {
        None
    }
    /// A fault to inject before answering command line number `message` (1-based, every
    /// command counted).
    fn fault_at_message(&mut self, _message: u64) -> Option<Fault> {
        None
    }
    /// A fault to inject before answering rewind number `rewind` (1-based).
    fn fault_at_rewind(&mut self, _rewind: u64) -> Option<Fault> {
        None
    }
    /// A fault to inject before answering step ahead number `ahead` (1-based).
    fn fault_at_ahead(&mut self, _ahead: u64) -> Option<Fault> {
        None
    }
    /// A fault to inject before answering conversation load number `load` (1-based).
    fn fault_at_load(&mut self, _load: u64) -> Option<Fault> {
        None
    }
}

/// Copies of some requests' samplers taken before a step ahead, put back if it is undone.
#[derive(Debug)]
pub struct SamplerCheckpoint<S>(Vec<(RequestId, S)>);

impl<S> Default for SamplerCheckpoint<S> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<S: Clone> SamplerCheckpoint<S> {
    /// Copies these requests' samplers (replacing the last copies).
    pub fn keep(&mut self, samplers: &HashMap<RequestId, S>, requests: &[RequestId]) {
        self.0 = requests
            .iter()
            .filter_map(|r| Some((*r, samplers.get(r)?.clone())))
            .collect();
    }

    /// Puts the copies back (a request closed since is not brought back).
    pub fn restore(&mut self, samplers: &mut HashMap<RequestId, S>) {
        for (request, sampler) in self.0.drain(..) {
            if let Some(slot) = samplers.get_mut(&request) {
                *slot = sampler;
            }
        }
    }
}
