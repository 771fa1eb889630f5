//! The precedence list, at each step boundary: 1. end what must end (pending cancels),
//! 2. pause (R7), 3. fill free slots (R1, in admission.rs), 4. give the read lane (R2-R5),
//! 5. compose the step.

use super::snapshot::ParkCause;
use crate::ids::RequestId;
use std::cmp::Reverse;

use super::lifecycle::{ParkedKind, Phase, Request, SlotState};
use super::outlook::{Outlook, Verdict};
use super::types::{Action, Chunk, FinishReason, Now, Step};
use super::{EngineState, Scheduler};
use crate::ids::SeqId;

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
                    if let Some(r) = self.requests.get_mut(&victim) {
                        r.parked_because = Some((ParkCause::KvPoolFull, None));
                    }
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

    pub(crate) fn best_for_slot(&self, now: Now) -> Option<RequestId> {
        self.waiting
            .iter()
            .chain(self.parked.iter())
            .copied()
            .min_by_key(|id| self.admission_key(*id, now))
    }

    /// R7's guard on the request `r` holding the one slot: `None` where it cannot be paused
    /// (no `solo_priority` in solo mode, not decoding, being cancelled), else what is left of
    /// its `min_run_quantum_secs` since it took the slot or resumed (zero once it is up).
    /// The snapshot's `pausable_in_secs` shows the same, so the two cannot disagree.
    pub(crate) fn pause_quantum_left(&self, r: &Request, now: Now) -> Option<Now> {
        if !self.settings.solo_priority
            || self.slots.len() != 1
            || !matches!(r.phase, Phase::Decoding { .. })
            || r.cancel_pending
        {
            return None;
        }
        let quantum = Now::from_secs_f64(self.settings.min_run_quantum_secs);
        Some(quantum.saturating_sub(now.saturating_sub(r.run_since)))
    }

    /// Step 2, R7: with solo_priority, pause the decoding request for a higher effective
    /// priority of another class (aging alone never pauses an equal), as its outlook says.
    fn maybe_pause(&mut self, now: Now) {
        let Some(Outlook {
            holder: p,
            waiter: w,
            verdict: Verdict::Now { in_pool },
        }) = self.pause_outlook(now)
        else {
            return;
        };
        self.park(p, ParkedKind::Decode, in_pool, now);
        self.counters.pauses += 1;
        if let Some(r) = self.requests.get_mut(&p) {
            r.pauses += 1;
            r.paused_for = Some(w);
            r.parked_because = Some((ParkCause::Paused, Some(w)));
        }
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
            if let Some(r) = self.requests.get_mut(&rid) {
                let cause = match reason {
                    GiveWayReason::HigherPriority => ParkCause::GaveWayHigherPriority,
                    GiveWayReason::ShorterLeft => ParkCause::GaveWayShorterLeft,
                };
                r.parked_because = Some((cause, Some(w)));
            }
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
