//! The precedence list, at each step boundary:
//! 1. end what must end (pending cancels), 2. pause (R7), 3. fill free slots (R1),
//! 4. give the read lane (R2-R5), 5. compose the step.

use crate::ids::RequestId;
use std::cmp::Reverse;

use super::kv::Source;
use super::lifecycle::{ParkedKind, Phase, SlotState};
use super::prefix::BLOCK;
use super::types::{Action, Chunk, FinishReason, Now, ParkPlace, Step};
use super::{EngineState, Scheduler};

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
                    // the lowest-ranked stalled decode leaves for host RAM so others go on
                    let Some(victim) = stalled.into_iter().max_by_key(|id| self.lane_key(*id, now))
                    else {
                        return;
                    };
                    self.park(victim, ParkedKind::Decode, false, now);
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
            self.finish_in_slot(id, FinishReason::Cancelled, now);
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
        let Some(allow_spare) = self.park_plan(p, w) else {
            return;
        };
        self.park(p, ParkedKind::Decode, allow_spare, now);
        self.counters.pauses += 1;
        if let Some(r) = self.requests.get_mut(&p) {
            r.pauses += 1;
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

    /// Tokens a free slot's conversation holds (0 for an empty or busy slot).
    fn conversation_len(&self, idx: usize) -> u32 {
        match &self.slots[idx].state {
            SlotState::Conversation(c) => c.tokens.len(),
            _ => 0,
        }
    }

    /// A free slot to overwrite: an empty one, else the least recently used conversation.
    fn plain_free_slot(&self) -> Option<usize> {
        let free = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !matches!(s.state, SlotState::Busy { .. }));
        free.min_by_key(|(i, s)| (!matches!(s.state, SlotState::Empty), s.last_used, *i))
            .map(|(i, _)| i)
    }

    fn admit_waiting(&mut self, id: RequestId, now: Now) -> bool {
        let Some(plain) = self.plain_free_slot() else {
            return false;
        };
        // A prefix shorter than one block (a shared BOS or template header) does not choose the
        // slot when taking it would drop the rest of a conversation: the slot is then the plain
        // one (empty, else the least recently used), so a recent conversation is not
        // overwritten for a few header tokens. A short conversation's follow-up (its whole
        // conversation is the prefix) still goes to its slot.
        let (idx, mut keep, from_host) = match self.best_source(id) {
            Some((Source::Slot(i), u))
                if (u as usize) < BLOCK && i != plain && u < self.conversation_len(i) =>
            {
                (plain, 0, None)
            }
            Some((Source::Host(_), u)) if (u as usize) < BLOCK => (plain, 0, None),
            Some((Source::Slot(i), u)) => (i, u, None),
            Some((Source::Host(h), u)) => (plain, u, Some(self.host_cache[h].0)),
            None => (plain, 0, None),
        };
        let Some(r) = self.requests.get(&id) else {
            return false;
        };
        let reserve = self.initial_reservation(r.prompt_len(), r.max_tokens);
        if !self.make_room(u64::from(reserve), Some(idx), Some(id), now) {
            return false;
        }
        let seq = self.slots[idx].seq;
        if let Some(cid) = from_host {
            // making room may have pushed the cache's oldest entries out
            match self.host_cache.iter().position(|(c, _)| *c == cid) {
                Some(h) => {
                    self.host_cache.remove(h);
                    self.out.actions.push(Action::RestoreConversation {
                        conversation: cid,
                        into_seq: seq,
                    });
                }
                None => keep = 0,
            }
        }
        self.out.actions.push(Action::Assign {
            request: id,
            seq,
            keep_tokens: keep,
        });
        self.set_slot(idx, SlotState::Busy { request: id }, now);
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

    fn admit_parked(
        &mut self,
        id: RequestId,
        place: ParkPlace,
        kind: ParkedKind,
        now: Now,
    ) -> bool {
        let Some(idx) = self.plain_free_slot() else {
            return false;
        };
        let need = self.admission_need(id);
        if !self.make_room(need, Some(idx), Some(id), now) {
            return false;
        }
        // make_room never moves this very request out of its spare sequence (it is `keep`);
        // the phase is read again to be safe
        let place = match self.requests.get(&id).map(|r| &r.phase) {
            Some(Phase::Parked { place, .. }) => *place,
            _ => place,
        };
        if place == ParkPlace::HostRam {
            let need2 = u64::from(self.restore_reservation(id));
            if !self.make_room(need2, Some(idx), Some(id), now) {
                return false;
            }
        }
        if let SlotState::Conversation(_) = self.slots[idx].state {
            // the restore replaces the slot's content
            self.set_slot(idx, SlotState::Empty, now);
        }
        let seq = self.slots[idx].seq;
        self.out.actions.push(Action::Restore {
            request: id,
            from: place,
            into_seq: seq,
        });
        if let ParkPlace::Spare(_) = place {
            for s in &mut self.spares {
                if *s == Some(id) {
                    *s = None;
                }
            }
        }
        let reserve = self.restore_reservation(id);
        self.set_slot(idx, SlotState::Busy { request: id }, now);
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
            let reason = if w_eff > r_eff {
                GiveWayReason::HigherPriority
            } else if w_eff == r_eff {
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
            .find(|(w, _)| !solo || self.park_plan(rid, *w).is_some())
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
            let Some(allow_spare) = self.park_plan(rid, w) else {
                return;
            };
            let read_to = match self.requests.get(&rid).map(|r| &r.phase) {
                Some(Phase::Reading { read_to, .. }) => *read_to,
                _ => return,
            };
            self.park(rid, ParkedKind::Read { read_to }, allow_spare, now);
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
        let mut decoding: Vec<(RequestId, crate::ids::SeqId)> = self
            .slots
            .iter()
            .filter_map(|s| match s.state {
                SlotState::Busy { request } => Some((request, s.seq)),
                _ => None,
            })
            .filter(|(id, _)| {
                self.requests
                    .get(id)
                    .is_some_and(|r| !r.cancel_pending && matches!(r.phase, Phase::Decoding { .. }))
            })
            .collect();
        // higher ranks get cells first
        decoding.sort_by_key(|(id, _)| self.lane_key(*id, now));
        let mut decode = Vec::with_capacity(decoding.len());
        let mut stalled = Vec::new();
        let share = self.settings.output_reserve_tokens;
        let ctx = self.context_tokens();
        for (id, seq) in decoding {
            let Some(r) = self.requests.get(&id) else {
                continue;
            };
            let want = r.prompt_len() + r.generated();
            let reserved = r.reserved_cells;
            if want > reserved {
                let grow_to = reserved.saturating_add(share).min(ctx).max(want);
                let new_res = if self.make_room(u64::from(grow_to - reserved), None, None, now) {
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
        if chunk.is_none() && decode.is_empty() {
            if stalled.is_empty() {
                Composed::Idle
            } else {
                Composed::Stalled(stalled)
            }
        } else {
            Composed::Step(Step { chunk, decode })
        }
    }
}
