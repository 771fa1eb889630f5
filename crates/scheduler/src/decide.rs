//! The precedence list, at each step boundary:
//! 1. end what must end (pending cancels), 2. pause (R7), 3. fill free slots (R1),
//! 4. give the read lane (R2-R5), 5. compose the step.

use crate::ids::RequestId;
use std::cmp::Reverse;

use super::kv::Source;
use super::lifecycle::{ParkedKind, Phase, SeqState, SlotState};
use super::types::{Action, Chunk, ConversationId, FinishReason, Now, ParkPlace, Step};
use super::{EngineState, Scheduler};
use crate::ids::SeqId;

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

/// Why a read gave way (counted separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveWayReason {
    HigherPriority,
    ShorterLeft,
}

enum Composed {
    Step(Step),
    Idle,
    /// Nothing can run: these decoding requests could not get a KV cell.
    Stalled(Vec<RequestId>),
}

impl Scheduler {
    /// Runs the precedence list when the engine is ready and no step is outstanding.
    pub(crate) fn decide(&mut self, now: Now) {
        if self.outstanding.is_some() || self.engine != EngineState::Ready {
            return;
        }
        for _ in 0..self.slots.len() + 2 {
            self.end_pending(now);
            self.maybe_pause(now);
            self.grow_decodes(now);
            self.fill_slots(now);
            self.assign_lane(now);
            match self.compose(now) {
                Composed::Step(step) => {
                    self.out.actions.push(Action::Step(step.clone()));
                    self.outstanding = Some(step);
                    return;
                }
                Composed::Idle => return,
                Composed::Stalled(stalled) => {
                    // the lowest-ranked running request (a stalled decode, or a reader
                    // holding cells) leaves for host RAM, losing nothing, so the rest go on
                    let running: Vec<RequestId> = self
                        .slots
                        .iter()
                        .filter_map(|s| match s.state {
                            SlotState::Busy { request } => Some(request),
                            SlotState::Empty => None,
                        })
                        .collect();
                    let Some(victim) = running
                        .into_iter()
                        .chain(stalled)
                        .max_by_key(|id| self.lane_key(*id, now))
                    else {
                        return;
                    };
                    let kind = match self.requests.get(&victim).map(|r| &r.phase) {
                        Some(Phase::Reading { read_to, .. }) => {
                            ParkedKind::Read { read_to: *read_to }
                        }
                        _ => ParkedKind::Decode,
                    };
                    self.park(victim, kind, false, now);
                    self.counters.kv_parks += 1;
                }
            }
        }
    }

    /// 1. Slot holders whose cancel waited for the step to end.
    fn end_pending(&mut self, now: Now) {
        // only slot holders wait for a boundary to be cancelled
        let pending: Vec<RequestId> = self
            .slots
            .iter()
            .filter_map(|s| match s.state {
                SlotState::Busy { request } => Some(request),
                _ => None,
            })
            .filter(|id| self.requests.get(id).is_some_and(|r| r.cancel_pending))
            .collect();
        for id in pending {
            self.finish_in_seq(id, FinishReason::Cancelled, now);
        }
    }

    /// Order for slots (smaller first): paused decodes first when preemption is off (rollback
    /// drains them in order), then effective priority, then paused ahead of fresh, then ticket.
    pub(crate) fn admission_key(&self, id: RequestId, now: Now) -> (u8, Reverse<i64>, u8, u64) {
        let Some(r) = self.requests.get(&id) else {
            return (u8::MAX, Reverse(i64::MIN), u8::MAX, u64::MAX);
        };
        let paused = matches!(
            r.phase,
            Phase::Parked {
                kind: ParkedKind::Decode,
                ..
            }
        );
        if paused && !self.settings.solo_priority {
            return (0, Reverse(0), 0, r.ticket);
        }
        (
            1,
            Reverse(self.effective(r, now)),
            u8::from(!paused),
            r.ticket,
        )
    }

    /// Order for the lane (smaller first): effective priority, then ticket (R2, R4).
    pub(crate) fn lane_key(&self, id: RequestId, now: Now) -> (Reverse<i64>, u64) {
        match self.requests.get(&id) {
            Some(r) => (Reverse(self.effective(r, now)), r.ticket),
            None => (Reverse(i64::MIN), u64::MAX),
        }
    }

    fn best_for_slot(&self, now: Now) -> Option<RequestId> {
        self.waiting
            .iter()
            .chain(self.parked.iter())
            .copied()
            .min_by_key(|id| self.admission_key(*id, now))
    }

    /// 2. R7: with solo_priority, pause the decoding request for a higher effective priority.
    fn maybe_pause(&mut self, now: Now) {
        if !self.settings.solo_priority || self.slots.len() != 1 {
            return;
        }
        let SlotState::Busy { request: p } = self.slots[0].state else {
            return;
        };
        let Some(pr) = self.requests.get(&p) else {
            return;
        };
        let quantum = Now::from_secs_f64(self.settings.min_run_quantum_secs);
        if !matches!(pr.phase, Phase::Decoding { .. })
            || pr.cancel_pending
            || pr.tokens_since_resume == 0
            || now.saturating_sub(pr.run_since) < quantum
        {
            return;
        }
        let p_eff = self.effective(pr, now);
        let Some(w) = self.best_for_slot(now) else {
            return;
        };
        let w_eff = self
            .requests
            .get(&w)
            .map_or(i64::MIN, |r| self.effective(r, now));
        if w_eff <= p_eff {
            return;
        }
        let Some(in_pool) = self.park_plan(p, w, now) else {
            return;
        };
        self.park(p, ParkedKind::Decode, in_pool, now);
        self.counters.pauses += 1;
        if let Some(r) = self.requests.get_mut(&p) {
            r.pauses += 1;
            r.paused_for = Some(w);
        }
    }

    /// 3. R1: free slots go to the highest effective priority, in strict order.
    fn fill_slots(&mut self, now: Now) {
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
        let seq = match seq {
            Some(s) => s,
            None => {
                let protect: Vec<SeqId> = match via {
                    Via::Copy(from) => vec![from],
                    _ => Vec::new(),
                };
                match self.free_seq(&protect, now) {
                    Some(s) => s,
                    None => return false,
                }
            }
        };
        let need = match via {
            Via::TakeOver | Via::Copy(_) => reserve.saturating_sub(keep),
            Via::Restore(_) | Via::Fresh => reserve,
        };
        let mut keep = keep;
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
        // the new sequence is taken before room is made, so nothing evicts it
        let mut protect = vec![seq];
        if let Via::Copy(from) = via {
            protect.push(from);
        }
        if !self.make_room(u64::from(need), &protect, now) {
            self.diag(format!("{id}: the room planned for it was not there"));
        }
        if let Via::Restore(cid) = via {
            // making room may have pushed the cache's oldest entries out
            match self.host_cache.iter().position(|(c, _)| *c == cid) {
                Some(h) => {
                    let (_, conv) = self.host_cache.remove(h).expect("found");
                    self.out.actions.push(Action::RestoreConversation {
                        conversation: cid,
                        into_seq: seq,
                        for_request: id,
                    });
                    self.pool.append(seq, conv.tokens.len());
                    self.pool.trim(seq, keep);
                }
                None => keep = 0,
            }
        }
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
        true
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
                Via::Restore(_) | Via::Fresh => reserve,
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

    /// Whether `id` is a slot holder with prompt left to read.
    fn is_lane_candidate(&self, id: RequestId) -> bool {
        self.requests.get(&id).is_some_and(|r| {
            !r.cancel_pending
                && matches!(r.phase, Phase::Reading { read_to, .. } if read_to < r.prompt_len())
        })
    }

    /// 4. R2-R5: the lane goes only to a slot holder with prompt left.
    fn assign_lane(&mut self, now: Now) {
        if let Some(l) = self.lane
            && !self.is_lane_candidate(l)
        {
            self.lane = None;
        }
        if let Some(r) = self.lane
            && let Some((w, reason)) = self.give_way_target(r, now)
        {
            self.give_way(r, w, reason, now);
        }
        if self.lane.is_none() {
            let holders: Vec<RequestId> = self
                .slots
                .iter()
                .filter_map(|s| match s.state {
                    SlotState::Busy { request } => Some(request),
                    _ => None,
                })
                .filter(|id| self.is_lane_candidate(*id))
                .collect();
            let best = holders.into_iter().min_by_key(|id| self.lane_key(*id, now));
            if let Some(b) = best {
                self.lane = Some(b);
                if let Some(r) = self.requests.get_mut(&b) {
                    r.idle_since = None;
                }
            }
        }
    }

    /// R3: the request the lane holder `r` gives way to now, if any.
    fn give_way_target(&mut self, rid: RequestId, now: Now) -> Option<(RequestId, GiveWayReason)> {
        let rule = self.settings.give_way;
        if rule == super::GiveWay::Off {
            return None;
        }
        let r = self.requests.get(&rid)?;
        let Phase::Reading { read_to, .. } = r.phase else {
            return None;
        };
        if r.generated() > 0 || r.yields >= self.settings.yields_max || r.chunks_left(read_to) <= 1
        {
            return None;
        }
        let r_eff = self.effective(r, now);
        let r_left = r.left_after(read_to);
        let r_len = r.prompt_len();
        let solo = self.slots.len() == 1;
        let others: Vec<RequestId> = if solo {
            self.waiting
                .iter()
                .chain(self.parked.iter())
                .copied()
                .collect()
        } else {
            self.slots
                .iter()
                .filter_map(|s| match s.state {
                    SlotState::Busy { request } if request != rid => Some(request),
                    _ => None,
                })
                .filter(|id| self.is_lane_candidate(*id))
                .collect()
        };
        let mut qualifying: Vec<(RequestId, GiveWayReason)> = Vec::new();
        for w in others {
            let Some(wr) = self.requests.get(&w) else {
                continue;
            };
            let w_eff = self.effective(wr, now);
            let w_len = wr.prompt_len();
            // R7: the request paused for this reader does not take the lane or the slot back
            // by the shorter-left rule before the reader's first token (no pause/restore
            // cycles); a higher priority still does
            let paused_for_reader = wr.paused_for == Some(rid);
            let reason = if w_eff > r_eff {
                GiveWayReason::HigherPriority
            } else if w_eff == r_eff && !paused_for_reader {
                let shorter = match rule {
                    super::GiveWay::Left => {
                        2 * u64::from(self.left_to_read(w)) <= u64::from(r_left)
                    }
                    super::GiveWay::Whole => 2 * u64::from(w_len) <= u64::from(r_len),
                    super::GiveWay::Off => false,
                };
                if !shorter {
                    continue;
                }
                GiveWayReason::ShorterLeft
            } else {
                continue;
            };
            qualifying.push((w, reason));
        }
        // best first; solo, the first one that fits once R is parked (a candidate that cannot
        // fit does not stop a later one that can)
        qualifying.sort_by_key(|(w, _)| self.lane_key(*w, now));
        qualifying
            .into_iter()
            .find(|(w, _)| !solo || self.park_plan(rid, *w, now).is_some())
    }

    fn give_way(&mut self, rid: RequestId, w: RequestId, reason: GiveWayReason, now: Now) {
        let ticket = self.take_ticket();
        if let Some(r) = self.requests.get_mut(&rid) {
            r.yields += 1;
            r.ticket = ticket;
            r.idle_since = Some(now);
        }
        match reason {
            GiveWayReason::HigherPriority => self.counters.give_ways_higher_priority += 1,
            GiveWayReason::ShorterLeft => self.counters.give_ways_shorter_left += 1,
        }
        self.lane = None;
        if self.slots.len() == 1 {
            // solo: R's part is parked (nothing read is lost), W takes the slot at once
            let Some(in_pool) = self.park_plan(rid, w, now) else {
                return;
            };
            let read_to = match self.requests.get(&rid).map(|r| &r.phase) {
                Some(Phase::Reading { read_to, .. }) => *read_to,
                _ => return,
            };
            self.park(rid, ParkedKind::Read { read_to }, in_pool, now);
            self.counters.read_parks += 1;
            if !self.take_slot(w, now) {
                self.diag(format!("{w} could not take the slot {rid} gave way to"));
            }
        } else {
            self.lane = Some(w);
            if let Some(r) = self.requests.get_mut(&w) {
                r.idle_since = None;
            }
        }
    }

    /// 5. The lane holder's next chunk (absolute boundaries) plus every decoding slot.
    fn compose(&mut self, now: Now) -> Composed {
        let chunk = self.lane.and_then(|id| {
            let r = self.requests.get(&id)?;
            let Phase::Reading { seq, read_to } = r.phase else {
                return None;
            };
            let c = r.chunk_tokens.max(1);
            let len = r.prompt_len();
            let end = ((read_to / c + 1) * c).min(len);
            Some(Chunk {
                request: id,
                seq,
                tokens: read_to..end,
                is_last: end == len,
            })
        });
        let (decode, stalled) = self.grow_decodes(now);
        if !stalled.is_empty() {
            // a running decode is never skipped while other work runs: room is made first
            Composed::Stalled(stalled)
        } else if chunk.is_none() && decode.is_empty() {
            Composed::Idle
        } else {
            Composed::Step(Step { chunk, decode })
        }
    }

    /// Every running decode's next cell, reserved (growing its reservation by a share of
    /// output when it has used it up): the decodes that have one, highest rank first, and
    /// those that could not get one. Run before any admission, so a newcomer never takes the
    /// cell a running decode needs next.
    fn grow_decodes(&mut self, now: Now) -> (Vec<(RequestId, SeqId)>, Vec<RequestId>) {
        let mut decoding: Vec<(RequestId, SeqId)> = self
            .slots
            .iter()
            .filter_map(|s| match s.state {
                SlotState::Busy { request } => Some(request),
                SlotState::Empty => None,
            })
            .filter_map(|id| {
                let r = self.requests.get(&id)?;
                match r.phase {
                    Phase::Decoding { seq } if !r.cancel_pending => Some((id, seq)),
                    _ => None,
                }
            })
            .collect();
        // higher ranks get cells first
        decoding.sort_by_key(|(id, _)| self.lane_key(*id, now));
        let mut decode = Vec::with_capacity(decoding.len());
        let mut stalled = Vec::new();
        let share = self.settings.output_reserve_tokens;
        let ctx = self.context_tokens();
        let running: Vec<SeqId> = self
            .requests
            .values()
            .filter_map(|r| r.phase.seq())
            .collect();
        for (id, seq) in decoding {
            let Some(r) = self.requests.get(&id) else {
                continue;
            };
            let want = r.prompt_len() + r.generated();
            let reserved = r.reserved_cells;
            if want > reserved {
                let grow_to = reserved.saturating_add(share).min(ctx).max(want);
                let new_res = if self.make_room(u64::from(grow_to - reserved), &running, now) {
                    Some(grow_to)
                } else if self.cells_free() >= u64::from(want - reserved) {
                    Some(want)
                } else {
                    None
                };
                match new_res {
                    Some(n) => {
                        if let Some(r) = self.requests.get_mut(&id) {
                            r.reserved_cells = n;
                        }
                    }
                    None => {
                        stalled.push(id);
                        continue;
                    }
                }
            }
            decode.push((id, seq));
        }
        (decode, stalled)
    }
}
