//! Step 3 of the precedence list: filling free slots (R1). A waiting request takes its
//! sequence by the cheapest way the pool allows (continue a kept conversation, share a live
//! prefix, restore from host RAM, or start fresh); a parked one comes back to its place.

use crate::ids::{RequestId, SeqId};

use super::Scheduler;
use super::kv::Source;
use super::lifecycle::{ParkedKind, Phase, SeqState, SlotState};
use super::types::{Action, Checkpoint, ConversationId, Now, ParkPlace};

/// How a waiting request gets its sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// It continues a kept conversation in that conversation's sequence.
    TakeOver,
    /// A free sequence shares this sequence's prefix cells.
    Copy(SeqId),
    /// A host-RAM conversation is restored into a free sequence.
    Restore(ConversationId),
    /// A free sequence, nothing kept.
    Fresh,
}

impl Scheduler {
    /// 3. R1: free slots go to the highest effective priority, in strict order.
    pub(crate) fn fill_slots(&mut self, now: Now) {
        while self
            .slots
            .iter()
            .any(|s| !matches!(s.state, SlotState::Busy { .. }))
        {
            let Some(w) = self.best_for_slot(now) else {
                return;
            };
            if !self.take_slot(w, now) {
                return;
            }
        }
    }

    /// Gives `id` (waiting or parked) a free slot; false when none is free or cells lack.
    pub(crate) fn take_slot(&mut self, id: RequestId, now: Now) -> bool {
        match self.requests.get(&id).map(|r| r.phase.clone()) {
            Some(Phase::Waiting) => self.admit_waiting(id, now),
            Some(Phase::Parked { place, kind }) => self.admit_parked(id, place, kind, now),
            _ => false,
        }
    }

    /// A free slot (lane), if any.
    fn free_slot(&self) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| matches!(s.state, SlotState::Empty))
    }

    /// R1 for a waiting request: it continues the kept conversation holding the longest
    /// prefix of its prompt (taking its sequence when it continues all of it, else sharing
    /// the prefix cells by a copy into a sequence of its own), or a live request's prefix (a
    /// copy), or a host-RAM conversation (restored into a sequence of its own), or starts a
    /// fresh sequence. Nothing kept is destroyed while the pool has room and a sequence id is
    /// free; when a copy does not fit, the conversation it would copy is continued in place
    /// (its tail past the shared prefix is dropped), and when nothing else fits it starts
    /// fresh, with room made from what is kept.
    fn admit_waiting(&mut self, id: RequestId, now: Now) -> bool {
        let Some(slot) = self.free_slot() else {
            return false;
        };
        let Some(r) = self.requests.get(&id) else {
            return false;
        };
        let reserve = self.initial_reservation(r.prompt_len(), r.max_tokens);
        let Some((seq, keep, via)) = self.admission_plan(id, reserve, now) else {
            return false;
        };
        let need = match via {
            Via::TakeOver | Via::Copy(_) => reserve.saturating_sub(keep),
            Via::Restore(cid) => self.restore_need(cid, reserve),
            Via::Fresh => reserve,
        };
        // the conversation to restore leaves the cache first: the evictions that free a
        // sequence and make room push into the cache and must never push it out
        let restoring = match via {
            Via::Restore(cid) => self
                .host_cache
                .iter()
                .position(|(c, _)| *c == cid)
                .and_then(|h| Some((h, self.host_cache.remove(h)?))),
            _ => None,
        };
        let Some(seq) = seq.or_else(|| self.free_seq_for(via, now)) else {
            if let Some((h, entry)) = restoring {
                self.host_cache.insert(h, entry);
            }
            return false;
        };
        // the checkpoints of a conversation it continues, up to where it is cut (a copy takes
        // none: only engines that trim anywhere copy)
        let (mut inherited, mut source_len) = match (&via, &self.seqs[seq.0 as usize].state) {
            (Via::TakeOver, SeqState::Kept(c)) => {
                (c.tokens.checkpoints_to(keep), Some(c.tokens.len()))
            }
            _ => (Vec::new(), None),
        };
        self.share_prefix(id, seq, keep, via);
        // the new sequence is taken before room is made, so nothing evicts it
        let mut protect = vec![seq];
        if let Via::Copy(from) = via {
            protect.push(from);
        }
        if !self.make_room(u64::from(need), &protect, now) {
            self.diag(format!("{id}: the room planned for it was not there"));
        }
        let keep = match restoring {
            Some((_, (cid, conv))) => {
                self.out.actions.push(Action::RestoreConversation {
                    conversation: cid,
                    into_seq: seq,
                    for_request: id,
                });
                self.pool.append(seq, conv.tokens.len());
                self.pool.trim(seq, keep);
                inherited = conv.tokens.checkpoints_to(keep);
                source_len = Some(conv.tokens.len());
                keep
            }
            None if matches!(via, Via::Restore(_)) => 0,
            None => keep,
        };
        self.seat(id, slot, seq, keep, reserve, now);
        self.inherit_checkpoints(id, inherited, keep, source_len.unwrap_or(0));
        true
    }

    /// An admitted request takes the checkpoints of the conversation it continues, up to
    /// `keep`; a keep that only a checkpoint allows (a cut further back than the engine can
    /// cut exactly, from `held` tokens) is counted as a checkpoint restore.
    fn inherit_checkpoints(
        &mut self,
        id: RequestId,
        inherited: Vec<Checkpoint>,
        keep: u32,
        held: u32,
    ) {
        if !self.facts.trims_at_any_token
            && inherited.last().is_some_and(|c| c.tokens == keep)
            && held.saturating_sub(keep) > self.facts.rewindable_tokens
        {
            self.counters.checkpoint_restores += 1;
            self.counters.checkpoint_tokens_saved += u64::from(keep);
        }
        if let Some(r) = self.requests.get_mut(&id) {
            r.checkpoints = inherited;
        }
    }

    /// A sequence freed for an admission that takes none over (the one it copies from kept).
    fn free_seq_for(&mut self, via: Via, now: Now) -> Option<SeqId> {
        let protect: Vec<SeqId> = match via {
            Via::Copy(from) => vec![from],
            _ => Vec::new(),
        };
        self.free_seq(&protect, now)
    }

    /// The prefix an admission keeps in `seq`: the sequence taken over trimmed to it, or the
    /// prefix copied from another.
    fn share_prefix(&mut self, id: RequestId, seq: SeqId, keep: u32, via: Via) {
        match via {
            Via::TakeOver => self.pool.trim(seq, keep),
            Via::Copy(from) => {
                self.out.actions.push(Action::CopyPrefix {
                    from,
                    to: seq,
                    tokens: keep,
                    for_request: id,
                });
                self.pool.copy_prefix(from, seq, keep);
            }
            Via::Restore(_) | Via::Fresh => {}
        }
    }

    /// The admitted request takes its slot and sequence, and reads from `keep`.
    fn seat(&mut self, id: RequestId, slot: usize, seq: SeqId, keep: u32, reserve: u32, now: Now) {
        self.out.actions.push(Action::Assign {
            request: id,
            seq,
            keep_tokens: keep,
        });
        self.set_seq(seq, SeqState::Owned(id), now);
        self.set_slot(slot, SlotState::Busy { request: id }, now);
        self.set_phase(id, Phase::Reading { seq, read_to: keep });
        self.waiting.retain(|x| *x != id);
        let chunk = self.chunk_tokens();
        if let Some(r) = self.requests.get_mut(&id) {
            r.reserved_cells = reserve;
            r.chunk_tokens = chunk;
            r.run_since = now;
            r.admitted_at = Some(now);
            r.held_at_admission = keep;
        }
    }

    /// How a waiting request would take a slot now, best first, that fits: (the sequence it
    /// takes over, if any; the prefix it keeps; how it gets it). `None` when nothing fits.
    fn admission_plan(
        &mut self,
        id: RequestId,
        reserve: u32,
        now: Now,
    ) -> Option<(Option<SeqId>, u32, Via)> {
        let kept_len = |s: &Self, seq: SeqId| match &s.seqs[seq.0 as usize].state {
            SeqState::Kept(c) => c.tokens.len(),
            _ => 0,
        };
        let mut plans: Vec<(Option<SeqId>, u32, Via)> = Vec::new();
        match self.best_source(id) {
            // it continues the whole conversation: the sequence is its
            Some((Source::Kept(s), u)) if u == kept_len(self, s) => {
                plans.push((Some(s), u, Via::TakeOver));
            }
            // an engine that cannot share a prefix takes the sequence (cut at a checkpoint)
            Some((Source::Kept(s), u)) if !self.facts.trims_at_any_token => {
                plans.push((Some(s), u, Via::TakeOver));
            }
            Some((Source::Kept(s), u)) => {
                plans.push((None, u, Via::Copy(s)));
                plans.push((Some(s), u, Via::TakeOver));
            }
            Some((Source::Live(s), u)) => plans.push((None, u, Via::Copy(s))),
            Some((Source::Host(h), u)) => {
                plans.push((None, u, Via::Restore(self.host_cache[h].0)));
            }
            None => {}
        }
        plans.push((None, 0, Via::Fresh));
        plans.into_iter().find(|(seq, keep, via)| {
            let need = u64::from(match via {
                Via::TakeOver | Via::Copy(_) => reserve.saturating_sub(*keep),
                Via::Restore(cid) => self.restore_need(*cid, reserve),
                Via::Fresh => reserve,
            });
            match (via, seq) {
                (Via::TakeOver, Some(s)) => self.can_make_room_trimmed(*s, *keep, need, now),
                (Via::Copy(from), _) => {
                    // the copy's sequence comes free first (perhaps by an eviction), then room
                    self.seq_obtainable(&[*from], now) && self.can_make_room(need, &[*from], now)
                }
                _ => self.seq_obtainable(&[], now) && self.can_make_room(need, &[], now),
            }
        })
    }

    /// A parked request takes a slot again: from its own sequence (nothing moves), or from
    /// host RAM into a free sequence.
    fn admit_parked(
        &mut self,
        id: RequestId,
        place: ParkPlace,
        kind: ParkedKind,
        now: Now,
    ) -> bool {
        let Some(slot) = self.free_slot() else {
            return false;
        };
        let reserve = self.restore_reservation(id);
        let seq = match place {
            ParkPlace::Pool(seq) => {
                let more = reserve.saturating_sub(self.pool.len(seq));
                if !self.make_room(u64::from(more), &[seq], now) {
                    return false;
                }
                seq
            }
            ParkPlace::HostRam => {
                if !self.seq_obtainable(&[], now)
                    || !self.can_make_room(u64::from(reserve), &[], now)
                {
                    return false;
                }
                let Some(seq) = self.free_seq(&[], now) else {
                    return false;
                };
                if !self.make_room(u64::from(reserve), &[seq], now) {
                    self.diag(format!("{id}: room vanished while its sequence was freed"));
                    return false;
                }
                let held = self.requests.get(&id).map_or(0, |r| r.held_cells());
                // restored, it holds its own cells (nothing shared)
                self.pool.append(seq, held);
                self.set_seq(seq, SeqState::Owned(id), now);
                seq
            }
        };
        self.out.actions.push(Action::Restore {
            request: id,
            from: place,
            into_seq: seq,
        });
        self.set_slot(slot, SlotState::Busy { request: id }, now);
        let to = match kind {
            ParkedKind::Read { read_to } => Phase::Reading { seq, read_to },
            ParkedKind::Decode => Phase::Decoding { seq },
        };
        self.set_phase(id, to);
        self.parked.retain(|x| *x != id);
        match kind {
            ParkedKind::Decode => self.counters.resumes += 1,
            ParkedKind::Read { .. } => self.counters.read_restores += 1,
        }
        if let Some(r) = self.requests.get_mut(&id) {
            r.reserved_cells = r.reserved_cells.max(reserve);
            r.run_since = now;
            r.tokens_since_resume = 0;
            if kind == ParkedKind::Decode {
                r.idle_since = None;
            }
        }
        true
    }
}
