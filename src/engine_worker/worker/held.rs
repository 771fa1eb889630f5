//! A sequence's state moved to host RAM and back (a parked request's, a saved conversation's)
//! with its checkpoints.

use super::{HeldState, Worker, invalid, moved};
use crate::engine_worker::backend::{Backend, Refusal};
use crate::engine_worker::checkpoints::bytes_of;
use crate::ids::{RequestId, SeqId};
use crate::protocol::Reply;
use std::time::Instant;

impl<B: Backend> Worker<B> {
    /// `seq`'s state and checkpoints, copied to host RAM, and the sequence cleared.
    fn hold_in_ram(&mut self, seq: SeqId) -> Result<HeldState<B::Saved>, Refusal> {
        let saved = self.backend.save(seq)?;
        let tokens = self.pool.len(seq);
        let checkpoints = self.checkpoints.take_all(seq);
        let bytes = B::saved_bytes(&saved) + bytes_of(&checkpoints);
        self.set_len(seq, 0)?;
        Ok(HeldState {
            saved,
            checkpoints,
            tokens,
            bytes,
        })
    }

    pub(super) fn park(&mut self, request: RequestId) -> Result<Reply, Refusal> {
        let seq = self.running(request)?.seq.expect("running");
        let started = Instant::now();
        let held = self.hold_in_ram(seq)?;
        let (tokens, bytes) = (held.tokens, held.bytes);
        self.parked.insert(request, held);
        if let Some(open) = self.requests.get_mut(&request) {
            open.seq = None;
        }
        Ok(Reply::Parked(moved(
            Some(request),
            seq,
            tokens,
            bytes,
            started,
        )))
    }

    pub(super) fn restore(&mut self, request: RequestId, seq: SeqId) -> Result<Reply, Refusal> {
        if !self.parked.contains_key(&request) {
            return Err(invalid(format!("{request} is not parked")));
        }
        self.free_seq(seq)?;
        let tokens = self.parked[&request].tokens;
        self.room_replacing(seq, tokens)?;
        let started = Instant::now();
        let parked = self.parked.remove(&request).expect("checked");
        if let Err(e) = self.backend.load(&parked.saved, seq) {
            self.parked.insert(request, parked);
            return Err(e);
        }
        self.pool.clear(seq);
        self.pool.append(seq, parked.tokens);
        self.checkpoints.put_all(seq, parked.checkpoints);
        if let Some(open) = self.requests.get_mut(&request) {
            open.seq = Some(seq);
        }
        Ok(Reply::Restored(moved(
            Some(request),
            seq,
            parked.tokens,
            parked.bytes,
            started,
        )))
    }

    pub(super) fn save_conversation(
        &mut self,
        seq: SeqId,
        key: u64,
        keep: &[u64],
    ) -> Result<Reply, Refusal> {
        self.free_seq(seq)?;
        let started = Instant::now();
        let held = self.hold_in_ram(seq)?;
        let (tokens, bytes) = (held.tokens, held.bytes);
        let evicted = self.cache.insert(key, held, tokens, bytes, keep);
        Ok(Reply::ConversationSaved {
            key,
            moved: moved(None, seq, tokens, bytes, started),
            evicted,
        })
    }

    pub(super) fn load_conversation(
        &mut self,
        key: u64,
        seq: SeqId,
        take: bool,
    ) -> Result<Reply, Refusal> {
        self.free_seq(seq)?;
        let Some(tokens) = self.cache.tokens_of(key) else {
            return Err(invalid(format!("no cached conversation {key}")));
        };
        self.room_replacing(seq, tokens)?;
        let started = Instant::now();
        let (held, tokens, bytes) = self.cache.get(key).expect("checked");
        self.backend.load(&held.saved, seq)?;
        let checkpoints = if take {
            Vec::new()
        } else {
            held.checkpoints.clone()
        };
        self.pool.clear(seq);
        self.pool.append(seq, tokens);
        if take {
            let held = self.cache.take(key).expect("checked");
            self.checkpoints.put_all(seq, held.checkpoints);
        } else {
            self.checkpoints.put_all(seq, checkpoints);
        }
        Ok(Reply::ConversationLoaded {
            key,
            moved: moved(None, seq, tokens, bytes, started),
        })
    }
}
