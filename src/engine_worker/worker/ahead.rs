//! The step ahead (the host's pipelining): a decode-only step run before the host asked for
//! it, kept undoable until the next command; one that does not fit in the pool, or fails, is
//! answered "not run" and leaves nothing behind.

use super::{Backend, Refusal, Worker, invalid};
use crate::ids::{RequestId, SeqId, TokenId};
use crate::protocol::Reply;

/// What undoing the last command takes when it was a step ahead.
#[derive(Debug)]
pub(super) struct StepUndo {
    /// Each decoded request: its sequence, the cells it held and its last sampled token
    /// before the step.
    pub(super) decoded: Vec<(RequestId, SeqId, u32, Option<TokenId>)>,
    pub(super) steps: u64,
    pub(super) tokens_decoded: u64,
}

impl<B: Backend> Worker<B> {
    /// A decode-only step that a rewind may undo: what each request held and its sampler are
    /// kept first. One that does not fit in the pool is not run, and one that fails is undone
    /// at once: either way the reply says it did not run and nothing is left to rewind.
    pub(super) fn step_ahead(&mut self, decode: &[RequestId]) -> Result<Reply, Refusal> {
        if !self.backend.handshake().model.rewinds_last_token {
            return Err(invalid(
                "a step ahead needs a cache that can undo its last token".into(),
            ));
        }
        let total = u64::from(self.backend.handshake().kv_cells);
        if let Err(full) = self.pool.room_for(decode.len() as u64, total) {
            return Ok(Reply::StepAheadNotRun {
                reason: full.to_string(),
            });
        }
        let decoded = decode
            .iter()
            .filter_map(|request| {
                let open = self.requests.get(request)?;
                let seq = open.seq?;
                Some((*request, seq, self.pool.len(seq), open.pending))
            })
            .collect();
        self.backend.checkpoint_samplers(decode);
        self.undo = Some(StepUndo {
            decoded,
            steps: self.steps,
            tokens_decoded: self.tokens_decoded,
        });
        match self.step(None, decode) {
            Ok(done) => Ok(Reply::StepDone(done)),
            Err((_, reason)) => {
                let undo = self.undo.take();
                self.rewind(undo)?;
                Ok(Reply::StepAheadNotRun { reason })
            }
        }
    }

    /// Undoes the step ahead that was the last command.
    pub(super) fn rewind(&mut self, undo: Option<StepUndo>) -> Result<Reply, Refusal> {
        let undo = undo.ok_or_else(|| {
            invalid("nothing to rewind: the last command was not a step ahead".into())
        })?;
        let mut cells = 0;
        for (request, seq, len, pending) in undo.decoded {
            cells += self.pool.len(seq).saturating_sub(len);
            self.set_len(seq, len)?;
            if let Some(open) = self.requests.get_mut(&request) {
                open.pending = pending;
            }
        }
        self.backend.rewind_samplers();
        self.steps = undo.steps;
        self.tokens_decoded = undo.tokens_decoded;
        Ok(Reply::Rewound { cells })
    }
}
