//! The protocol over a backend: every command's checks and the bookkeeping of requests,
//! sequences, parked states and the conversation cache, written once for the real and the
//! simulated engine.

use super::backend::{Backend, ChunkRun, DecodeRun, Fault, Refusal};
use super::cache::ConversationCache;
use super::checkpoints::{Checkpoint, CheckpointStore};
use crate::ids::{RequestId, SeqId, TokenId};
use crate::protocol::pool::CellPool;
use crate::protocol::{
    Chunk, Command, ErrorKind, ErrorReply, ReadProgress, Reply, RequestFailure, Sampled, Sampling,
    StateMoved, Stats, StepDone,
};
use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

mod ahead;
mod held;
mod taking;
use ahead::StepUndo;
pub use taking::before_end_tokens;

#[derive(Debug)]
struct OpenRequest {
    /// `None` while parked.
    seq: Option<SeqId>,
    /// The last sampled token, not yet in the KV cache: the next decode feeds it.
    pending: Option<TokenId>,
}

/// A sequence's state in host RAM (a parked request's, a saved conversation's), with its
/// checkpoints; `bytes` counts both.
#[derive(Debug)]
struct HeldState<S> {
    saved: S,
    checkpoints: Vec<Checkpoint<S>>,
    tokens: u32,
    bytes: u64,
}

/// What checkpoints did: restores and the prompt tokens they spared a read of.
#[derive(Debug, Default)]
struct CheckpointCounts {
    restores: u64,
    tokens_saved: u64,
}

#[derive(Debug)]
pub struct Worker<B: Backend> {
    backend: B,
    requests: HashMap<RequestId, OpenRequest>,
    /// The cells each sequence holds (positions `0..len`), prefix copies shared.
    pool: CellPool,
    parked: HashMap<RequestId, HeldState<B::Saved>>,
    cache: ConversationCache<HeldState<B::Saved>>,
    /// Checkpoints of the sequences in the pool (a model that keeps them).
    checkpoints: CheckpointStore<B::Saved>,
    /// Within a long read, a checkpoint at least this many tokens after the last.
    checkpoint_min_step_tokens: u32,
    /// Checkpoints this many tokens before a prompt's end (`taking::before_end_tokens`).
    checkpoint_before_end_tokens: Vec<u32>,
    checkpoint_counts: CheckpointCounts,
    steps: u64,
    /// Command lines served so far (the fault schedule's other clock).
    messages: u64,
    /// Rewind commands received (the fault counter of `error-at-rewind`).
    rewinds: u64,
    /// Step aheads and conversation loads received (the fault counters of `error-at-ahead`
    /// and `error-at-load`).
    aheads: u64,
    loads: u64,
    prompt_tokens_read: u64,
    tokens_decoded: u64,
    /// Set by a step ahead, taken by the next command (a rewind uses it).
    undo: Option<StepUndo>,
}

fn invalid(message: String) -> Refusal {
    (ErrorKind::Invalid, message)
}

impl<B: Backend> Worker<B> {
    pub fn new(backend: B, conversation_cache_bytes: u64) -> Self {
        let sequences = backend.handshake().sequences;
        Self {
            backend,
            requests: HashMap::new(),
            pool: CellPool::new(sequences),
            parked: HashMap::new(),
            cache: ConversationCache::new(conversation_cache_bytes),
            checkpoints: CheckpointStore::new(0, 0),
            checkpoint_min_step_tokens: u32::MAX,
            checkpoint_before_end_tokens: Vec::new(),
            checkpoint_counts: CheckpointCounts::default(),
            steps: 0,
            messages: 0,
            rewinds: 0,
            aheads: 0,
            loads: 0,
            prompt_tokens_read: 0,
            tokens_decoded: 0,
            undo: None,
        }
    }

    /// Keeps checkpoints (if the model's facts say it keeps them): at most `per_seq` a
    /// sequence and `bytes` in all, taken near each prompt's end (`before_end_tokens`) and,
    /// within a long read, at least `min_step_tokens` apart.
    pub fn with_checkpoints(
        mut self,
        per_seq: u32,
        bytes: u64,
        min_step_tokens: u32,
        before_end_tokens: Vec<u32>,
    ) -> Self {
        if self.backend.handshake().model.keeps_checkpoints {
            self.checkpoints = CheckpointStore::new(per_seq, bytes);
            self.checkpoint_min_step_tokens = min_step_tokens.max(1);
            self.checkpoint_before_end_tokens = before_end_tokens;
        }
        self
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Tests reach into the backend (to damage a cache on purpose, for one).
    #[cfg(test)]
    pub(crate) fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// The fault, if any, to inject instead of answering this command.
    pub fn fault_for(&mut self, command: &Command) -> Option<Fault> {
        self.messages += 1;
        let fault = match self.backend.fault_at_message(self.messages) {
            Some(fault) => Some(fault),
            None => match command {
                Command::StepAhead { .. } => {
                    self.aheads += 1;
                    self.backend
                        .fault_at_ahead(self.aheads)
                        .or_else(|| self.backend.fault_at_step(self.steps + 1))
                }
                Command::Step { .. } => self.backend.fault_at_step(self.steps + 1),
                Command::Rewind => {
                    self.rewinds += 1;
                    self.backend.fault_at_rewind(self.rewinds)
                }
                Command::LoadConversation { .. } => {
                    self.loads += 1;
                    self.backend.fault_at_load(self.loads)
                }
                _ => None,
            },
        };
        if fault.is_some() {
            // a command answered by a fault is still the next command: a step ahead before
            // it stands (a rewind after it finds nothing to undo)
            self.undo = None;
        }
        fault
    }

    /// Serves one command; a refusal becomes an error reply.
    pub fn serve(&mut self, command: Command) -> Reply {
        // a step ahead stands once any command but a rewind follows it
        let undo = self.undo.take();
        let result = match command {
            Command::Open {
                request,
                seq,
                keep_tokens,
                sampling,
            } => self.open(request, seq, keep_tokens, &sampling),
            Command::Step { chunk, decode } => self.step(chunk, &decode).map(Reply::StepDone),
            Command::StepAhead { decode } => self.step_ahead(&decode),
            Command::Rewind => self.rewind(undo),
            Command::Close { request } => self.close(request),
            Command::Park { request } => self.park(request),
            Command::Restore { request, seq } => self.restore(request, seq),
            Command::Trim { seq, keep_tokens } => self.trim(seq, keep_tokens),
            Command::CopyPrefix { from, to, tokens } => self.copy_prefix(from, to, tokens),
            Command::SaveConversation { seq, key, keep } => self.save_conversation(seq, key, &keep),
            Command::LoadConversation { key, seq, take } => self.load_conversation(key, seq, take),
            Command::DropConversation { key } => Ok(Reply::ConversationDropped {
                key,
                existed: self.cache.remove(key),
            }),
            Command::Stats => Ok(Reply::Stats(self.stats())),
        };
        result.unwrap_or_else(|(kind, message)| Reply::Error(ErrorReply { kind, message }))
    }

    fn open(
        &mut self,
        request: RequestId,
        seq: SeqId,
        keep_tokens: u32,
        sampling: &Sampling,
    ) -> Result<Reply, Refusal> {
        if self.requests.contains_key(&request) {
            return Err(invalid(format!("{request} is already open")));
        }
        let held = self.free_seq(seq)?;
        if keep_tokens > held {
            return Err(invalid(format!(
                "{request} keeps {keep_tokens} tokens of {seq}, which holds {held}"
            )));
        }
        let kept = keep_tokens;
        self.backend.new_sampler(request, sampling)?;
        if let Err(e) = self.set_len(seq, kept) {
            self.backend.drop_sampler(request);
            return Err(e);
        }
        self.requests.insert(
            request,
            OpenRequest {
                seq: Some(seq),
                pending: None,
            },
        );
        Ok(Reply::Opened {
            request,
            seq,
            kept_tokens: kept,
        })
    }

    fn close(&mut self, request: RequestId) -> Result<Reply, Refusal> {
        self.requests
            .remove(&request)
            .ok_or_else(|| invalid(format!("{request} is not open")))?;
        self.parked.remove(&request);
        self.backend.drop_sampler(request);
        Ok(Reply::Closed { request })
    }

    fn step(&mut self, chunk: Option<Chunk>, decode: &[RequestId]) -> Result<StepDone, Refusal> {
        let started = Instant::now();
        let mut done = StepDone::default();
        let mut seqs: Vec<SeqId> = Vec::with_capacity(decode.len() + 1);
        let mut added = 0u32;
        // A chunk or a decode that cannot run fails only its own request; the rest runs.
        let chunk_run = match &chunk {
            Some(chunk) => match self.check_chunk(chunk) {
                Ok(seq) => {
                    seqs.push(seq);
                    added += chunk.tokens.len() as u32;
                    Some(ChunkRun {
                        request: chunk.request,
                        seq,
                        start_pos: chunk.start,
                        tokens: &chunk.tokens,
                        sample: chunk.last,
                    })
                }
                Err((kind, message)) => {
                    done.failed.push(RequestFailure {
                        request: chunk.request,
                        kind,
                        message,
                    });
                    None
                }
            },
            None => None,
        };
        let mut decodes = Vec::with_capacity(decode.len());
        for request in decode {
            let checked = self.running(*request).and_then(|open| {
                let seq = open.seq.expect("running");
                let token = open.pending.ok_or_else(|| {
                    invalid(format!("{request} has no sampled token to decode yet"))
                })?;
                if seqs.contains(&seq) {
                    return Err(invalid(format!("{seq} appears twice in one step")));
                }
                Ok((seq, token))
            });
            match checked {
                Ok((seq, token)) => {
                    seqs.push(seq);
                    added += 1;
                    decodes.push(DecodeRun {
                        request: *request,
                        seq,
                        pos: self.pool.len(seq),
                        token,
                    });
                }
                Err((kind, message)) => done.failed.push(RequestFailure {
                    request: *request,
                    kind,
                    message,
                }),
            }
        }
        // Room the scheduler did not plan is a bug; it fails the fewest requests, never the
        // step: the chunk first (it takes the most), then decodes from the last (the
        // scheduler lists them highest rank first).
        let mut chunk_run = chunk_run;
        let total = u64::from(self.backend.handshake().kv_cells);
        while let Err(full) = self.pool.room_for(u64::from(added), total) {
            let (request, cells) = match (&chunk_run, decodes.last()) {
                (Some(run), _) => (run.request, run.tokens.len() as u32),
                (None, Some(run)) => (run.request, 1),
                (None, None) => break,
            };
            if chunk_run.is_some() {
                chunk_run = None;
            } else {
                decodes.pop();
            }
            added -= cells;
            done.failed.push(RequestFailure {
                request,
                kind: ErrorKind::Engine,
                message: full.to_string(),
            });
        }

        // the chunk's tokens before a checkpoint near the prompt's end are read first
        let mut changed = BTreeSet::new();
        let mut rest_run = None;
        if let Some(run) = &chunk_run {
            let prompt_tokens = chunk.as_ref().map_or(0, |c| c.prompt_tokens);
            let (read, taken) = self.read_to_near_end_places(run, prompt_tokens)?;
            changed = taken;
            rest_run = Some(ChunkRun {
                start_pos: run.start_pos + read as u32,
                tokens: &run.tokens[read..],
                ..*run
            });
        }
        let sampled_tokens = self.backend.run(rest_run.as_ref(), &decodes)?;

        let mut sampled_for = Vec::with_capacity(decodes.len() + 1);
        if let (Some(run), Some(rest)) = (&chunk_run, &rest_run) {
            self.pool.append(run.seq, rest.tokens.len() as u32);
            self.prompt_tokens_read += run.tokens.len() as u64;
            done.read = Some(ReadProgress {
                request: run.request,
                held_tokens: self.pool.len(run.seq),
            });
            changed.extend(self.checkpoint_after_read(run.seq));
            done.checkpoints = self.checkpoints.report(changed);
            if run.sample {
                sampled_for.push(run.request);
            }
        }
        for run in &decodes {
            self.pool.append(run.seq, 1);
            sampled_for.push(run.request);
        }
        self.tokens_decoded += decodes.len() as u64;
        for (request, token) in sampled_for.into_iter().zip(sampled_tokens) {
            let token = match token {
                Ok(token) => token,
                Err((kind, message)) => {
                    done.failed.push(RequestFailure {
                        request,
                        kind,
                        message,
                    });
                    continue;
                }
            };
            if let Some(open) = self.requests.get_mut(&request) {
                open.pending = Some(token);
            }
            done.sampled.push(Sampled {
                request,
                token,
                bytes: self.backend.piece(token),
                eog: self.backend.is_eog(token),
            });
        }
        self.steps += 1;
        done.step_micros = started.elapsed().as_micros() as u64;
        done.kv_cells_used = Some(self.pool.used() as u32);
        Ok(done)
    }

    fn trim(&mut self, seq: SeqId, keep_tokens: u32) -> Result<Reply, Refusal> {
        let held = self.free_seq(seq)?;
        let kept = keep_tokens.min(held);
        self.set_len(seq, kept)?;
        Ok(Reply::Trimmed {
            seq,
            held_tokens: kept,
        })
    }

    fn copy_prefix(&mut self, from: SeqId, to: SeqId, tokens: u32) -> Result<Reply, Refusal> {
        let from_len = self.seq_exists(from)?;
        self.free_seq(to)?;
        if from == to {
            return Err(invalid(format!("cannot copy {from} onto itself")));
        }
        if tokens > from_len {
            return Err(invalid(format!(
                "{from} holds {from_len} tokens, fewer than the {tokens} asked"
            )));
        }
        self.backend.copy_prefix(from, to, tokens)?;
        self.pool.copy_prefix(from, to, tokens);
        Ok(Reply::Copied {
            to,
            held_tokens: tokens,
        })
    }

    pub fn stats(&self) -> Stats {
        Stats {
            kv_cells: self.backend.handshake().kv_cells,
            kv_cells_used: self.pool.used() as u32,
            seq_tokens: (0..self.pool.sequences())
                .map(|s| self.pool.len(SeqId(s)))
                .collect(),
            open_requests: self.requests.len() as u32,
            parked_requests: self.parked.len() as u32,
            parked_bytes: self.parked.values().map(|p| p.bytes).sum(),
            conversation_cache_entries: self.cache.len() as u32,
            conversation_cache_bytes: self.cache.used_bytes(),
            conversation_cache_capacity_bytes: self.cache.capacity_bytes(),
            steps: self.steps,
            prompt_tokens_read: self.prompt_tokens_read,
            tokens_decoded: self.tokens_decoded,
            checkpoints: self.checkpoints.len() as u32,
            checkpoint_bytes: self.checkpoints.used_bytes(),
            checkpoint_restores: self.checkpoint_counts.restores,
            checkpoint_tokens_saved: self.checkpoint_counts.tokens_saved,
        }
    }

    /// The sequence a chunk reads into: the request runs, has not finished reading, and the
    /// chunk starts exactly where its sequence ends.
    fn check_chunk(&self, chunk: &Chunk) -> Result<SeqId, Refusal> {
        let open = self.running(chunk.request)?;
        if open.pending.is_some() {
            return Err(invalid(format!(
                "{} has finished reading its prompt",
                chunk.request
            )));
        }
        let seq = open.seq.expect("running");
        let held = self.pool.len(seq);
        if chunk.start != held {
            return Err(invalid(format!(
                "{}'s chunk starts at {}, but {seq} holds {held} tokens",
                chunk.request, chunk.start
            )));
        }
        Ok(seq)
    }

    /// An open request that holds a sequence.
    fn running(&self, request: RequestId) -> Result<&OpenRequest, Refusal> {
        let open = self
            .requests
            .get(&request)
            .ok_or_else(|| invalid(format!("{request} is not open")))?;
        if open.seq.is_none() {
            return Err(invalid(format!("{request} is parked")));
        }
        Ok(open)
    }

    /// The tokens `seq` holds, if it exists.
    fn seq_exists(&self, seq: SeqId) -> Result<u32, Refusal> {
        if seq.0 < self.pool.sequences() {
            Ok(self.pool.len(seq))
        } else {
            Err(invalid(format!(
                "{seq} does not exist: the engine has {} sequences",
                self.pool.sequences()
            )))
        }
    }

    /// The tokens `seq` holds, if it exists and no open request runs on it.
    fn free_seq(&self, seq: SeqId) -> Result<u32, Refusal> {
        let held = self.seq_exists(seq)?;
        match self.requests.iter().find(|(_, r)| r.seq == Some(seq)) {
            Some((other, _)) => Err(invalid(format!("{seq} is in use by {other}"))),
            None => Ok(held),
        }
    }

    /// Keeps `seq`'s first `tokens`: cut exactly where the cache allows it, else back to the
    /// checkpoint at exactly `tokens` (restored); else the backend refuses the cut.
    fn set_len(&mut self, seq: SeqId, tokens: u32) -> Result<(), Refusal> {
        let held = self.pool.len(seq);
        let cut = 0 < tokens && tokens < held;
        match self.checkpoints.at(seq, tokens) {
            Some(checkpoint) if cut && !self.backend.cuts_exactly(seq, tokens) => {
                self.backend
                    .restore_partial(&checkpoint.saved, seq, tokens)?;
                self.checkpoint_counts.restores += 1;
                self.checkpoint_counts.tokens_saved += u64::from(tokens);
            }
            _ => self.backend.trim(seq, tokens)?,
        }
        self.checkpoints.cut(seq, tokens);
        self.pool.trim(seq, tokens);
        Ok(())
    }

    /// Room for `tokens` put into `seq` in place of what it holds (the pool's own rule).
    fn room_replacing(&self, seq: SeqId, tokens: u32) -> Result<(), Refusal> {
        let total = u64::from(self.backend.handshake().kv_cells);
        self.pool
            .room_replacing(seq, u64::from(tokens), total)
            .map_err(|full| (ErrorKind::Engine, full.to_string()))
    }
}

/// A state move's reply body, timed from `started`.
fn moved(
    request: Option<RequestId>,
    seq: SeqId,
    tokens: u32,
    bytes: u64,
    started: Instant,
) -> StateMoved {
    StateMoved {
        request,
        seq,
        tokens,
        bytes,
        micros: started.elapsed().as_micros() as u64,
    }
}
