//! The KV cell budget: what every holder uses, reservations, making room by moving idle
//! conversations to the host-RAM conversation cache (and engine-parked sequences to host RAM),
//! held-for-sure lookups against the free conversations, and parking places.

use crate::ids::{RequestId, SeqId};
use std::sync::Arc;

use super::Scheduler;
use super::lifecycle::{Conversation, ParkedKind, Phase, SlotState};
use super::prefix::TokenSeq;
use super::types::{Action, ConversationId, Now, ParkPlace};

/// Where a waiting request's held prefix comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Slot(usize),
    Host(usize),
}

impl Scheduler {
    /// Cells held now: busy slots (their reservation), conversations in slots, engine-parked.
    pub(crate) fn cells_used(&self) -> u64 {
        let mut used = 0u64;
        for s in &self.slots {
            used += match &s.state {
                SlotState::Empty => 0,
                SlotState::Conversation(c) => u64::from(c.tokens.len()),
                SlotState::Busy { request } => self
                    .requests
                    .get(request)
                    .map_or(0, |r| u64::from(r.reserved_cells.max(r.held_cells()))),
            };
        }
        for id in self.spares.iter().flatten() {
            used += self
                .requests
                .get(id)
                .map_or(0, |r| u64::from(r.held_cells()));
        }
        used
    }

    pub(crate) fn cells_free(&self) -> u64 {
        u64::from(self.facts.kv_cells_total).saturating_sub(self.cells_used())
    }

    /// Cells that `make_room` could free (idle conversations in slots other than `protect`, and
    /// engine-parked sequences other than `keep`'s).
    pub(crate) fn cells_evictable(&self, protect: Option<usize>, keep: Option<RequestId>) -> u64 {
        let conv: u64 = self
            .slots
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != protect)
            .map(|(_, s)| match &s.state {
                SlotState::Conversation(c) => u64::from(c.tokens.len()),
                _ => 0,
            })
            .sum();
        let parked: u64 = self
            .spares
            .iter()
            .flatten()
            .filter(|id| Some(**id) != keep)
            .map(|id| {
                self.requests
                    .get(id)
                    .map_or(0, |r| u64::from(r.held_cells()))
            })
            .sum();
        conv + parked
    }

    fn conv_cells(&self, idx: usize) -> u64 {
        match &self.slots[idx].state {
            SlotState::Conversation(c) => u64::from(c.tokens.len()),
            _ => 0,
        }
    }

    /// Makes `need` cells available for slot `target` (whose own conversation is replaced, so it
    /// counts as free) and for `keep`, the request being admitted or restored, whose own spare
    /// sequence is never moved out. Evicts least recently used conversations first, then moves
    /// other engine-parked sequences to host RAM. Acts only when it can succeed.
    pub(crate) fn make_room(
        &mut self,
        need: u64,
        target: Option<usize>,
        keep: Option<RequestId>,
        now: Now,
    ) -> bool {
        let own = target.map_or(0, |t| self.conv_cells(t));
        let mut avail = self.cells_free() + own;
        if avail >= need {
            return true;
        }
        if avail + self.cells_evictable(target, keep) < need {
            return false;
        }
        while avail < need {
            let lru = self
                .slots
                .iter()
                .enumerate()
                .filter(|(i, s)| {
                    Some(*i) != target && matches!(s.state, SlotState::Conversation(_))
                })
                .min_by_key(|(i, s)| (s.last_used, *i))
                .map(|(i, _)| i);
            if let Some(i) = lru {
                avail += self.conv_cells(i);
                self.evict_conversation(i, now);
                continue;
            }
            let Some(pos) = self.spares.iter().position(|s| s.is_some() && *s != keep) else {
                return false;
            };
            let Some(id) = self.spares[pos] else {
                return false;
            };
            avail += self
                .requests
                .get(&id)
                .map_or(0, |r| u64::from(r.held_cells()));
            self.move_spare_to_host(id, pos);
        }
        true
    }

    /// Moves slot `idx`'s idle conversation to the host-RAM cache (or drops it when the cache
    /// is off), clearing the slot.
    pub(crate) fn evict_conversation(&mut self, idx: usize, now: Now) {
        let SlotState::Conversation(conv) = self.slots[idx].state.clone() else {
            return;
        };
        let seq = self.slots[idx].seq;
        let to_cache = self.push_host(conv);
        self.out
            .actions
            .push(Action::EvictConversation { seq, to_cache });
        self.set_slot(idx, SlotState::Empty, now);
    }

    fn push_host(&mut self, conv: Conversation) -> Option<ConversationId> {
        let max = self.settings.host_cache_conversations_max as usize;
        if max == 0 {
            return None;
        }
        let id = ConversationId(conv.key);
        self.host_cache.push_back((id, conv));
        while self.host_cache.len() > max {
            if let Some((old, _)) = self.host_cache.pop_front() {
                self.out
                    .actions
                    .push(Action::DropConversation { conversation: old });
            }
        }
        Some(id)
    }

    fn move_spare_to_host(&mut self, id: RequestId, pos: usize) {
        let Some(Phase::Parked { place, kind }) = self.requests.get(&id).map(|r| r.phase.clone())
        else {
            return;
        };
        let ParkPlace::Spare(seq) = place else {
            return;
        };
        self.out.actions.push(Action::Park {
            request: id,
            from_seq: seq,
            to: ParkPlace::HostRam,
        });
        self.set_phase(
            id,
            Phase::Parked {
                place: ParkPlace::HostRam,
                kind,
            },
        );
        self.spares[pos] = None;
    }

    /// A new conversation from a request's held tokens.
    pub(crate) fn new_conversation(&mut self, tokens: TokenSeq) -> Conversation {
        self.next_conv_key += 1;
        Conversation {
            key: self.next_conv_key,
            tokens: Arc::new(tokens),
        }
    }

    /// The usable prefix of `id`'s prompt from one conversation (memoized per conversation).
    fn usable_from(&mut self, id: RequestId, key: u64, tokens: &TokenSeq) -> u32 {
        let trims = self.facts.trims_at_any_token;
        let live = self.slots.len() + self.host_cache.len() + 4;
        let Some(r) = self.requests.get_mut(&id) else {
            return 0;
        };
        if let Some(v) = r.prefix_memo.get(&key) {
            return *v;
        }
        let lcp = r.prompt.common_prefix(tokens);
        let u = r.prompt.usable_prefix(lcp, tokens.len(), trims);
        if r.prefix_memo.len() > 4 * live {
            r.prefix_memo.clear();
        }
        r.prefix_memo.insert(key, u);
        u
    }

    /// The best source of held-for-sure tokens for a request that has no slot: the free slot
    /// conversation or host-RAM conversation sharing the longest usable prefix. At equal
    /// length a slot beats host RAM (no restore needed), and between slots the one whose
    /// overwrite drops the fewest tokens, then the least recently used.
    pub(crate) fn best_source(&mut self, id: RequestId) -> Option<(Source, u32)> {
        let mut convs: Vec<(Source, u64, Arc<TokenSeq>)> = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if let SlotState::Conversation(c) = &s.state {
                convs.push((Source::Slot(i), c.key, c.tokens.clone()));
            }
        }
        for (i, (_, c)) in self.host_cache.iter().enumerate() {
            convs.push((Source::Host(i), c.key, c.tokens.clone()));
        }
        // (source, usable prefix, tokens an overwrite drops, last used)
        let mut best: Option<(Source, u32, u32, Now)> = None;
        for (src, key, tokens) in convs {
            let u = self.usable_from(id, key, &tokens);
            let dropped = tokens.len().saturating_sub(u);
            let used = match src {
                Source::Slot(i) => self.slots[i].last_used,
                Source::Host(_) => Now::ZERO,
            };
            let better = match best {
                None => u > 0,
                Some((_, b, _, _)) if u != b => u > b,
                Some((Source::Host(_), ..)) => matches!(src, Source::Slot(_)),
                Some((Source::Slot(_), _, b_dropped, b_used)) => {
                    matches!(src, Source::Slot(_)) && (dropped, used) < (b_dropped, b_used)
                }
            };
            if better {
                best = Some((src, u, dropped, used));
            }
        }
        best.map(|(src, u, _, _)| (src, u))
    }

    /// Held for sure of a request without a slot, without touching the memo (for snapshots).
    pub(crate) fn held_for_sure_peek(&self, id: RequestId) -> u32 {
        let Some(r) = self.requests.get(&id) else {
            return 0;
        };
        let trims = self.facts.trims_at_any_token;
        let slot_convs = self.slots.iter().filter_map(|s| match &s.state {
            SlotState::Conversation(c) => Some(c),
            _ => None,
        });
        let host_convs = self.host_cache.iter().map(|(_, c)| c);
        slot_convs
            .chain(host_convs)
            .map(|c| match r.prefix_memo.get(&c.key) {
                Some(v) => *v,
                None => {
                    let lcp = r.prompt.common_prefix(&c.tokens);
                    r.prompt.usable_prefix(lcp, c.tokens.len(), trims)
                }
            })
            .max()
            .unwrap_or(0)
    }

    /// Prompt tokens left to read for any request.
    pub(crate) fn left_to_read(&mut self, id: RequestId) -> u32 {
        let Some(r) = self.requests.get(&id) else {
            return 0;
        };
        match r.phase {
            Phase::Reading { read_to, .. }
            | Phase::Parked {
                kind: ParkedKind::Read { read_to },
                ..
            } => r.left_after(read_to),
            Phase::Decoding { .. }
            | Phase::Parked {
                kind: ParkedKind::Decode,
                ..
            }
            | Phase::Ended => 0,
            Phase::Waiting => {
                let len = r.prompt_len();
                let held = self.best_source(id).map_or(0, |(_, u)| u);
                len - held
            }
        }
    }

    /// The cells a request needs to get a slot now.
    pub(crate) fn admission_need(&self, id: RequestId) -> u64 {
        let Some(r) = self.requests.get(&id) else {
            return 0;
        };
        match r.phase {
            Phase::Waiting => u64::from(self.initial_reservation(r.prompt_len(), r.max_tokens)),
            Phase::Parked {
                place: ParkPlace::HostRam,
                ..
            } => u64::from(self.restore_reservation(id)),
            // a spare sequence's cells are counted already; its reservation comes on top
            Phase::Parked {
                place: ParkPlace::Spare(_),
                ..
            } => u64::from(self.restore_reservation(id).saturating_sub(r.held_cells())),
            _ => 0,
        }
    }

    /// Prompt plus a first share of the output, capped by the context.
    pub(crate) fn initial_reservation(&self, prompt_len: u32, max_tokens: u32) -> u32 {
        let share = self.settings.output_reserve_tokens.min(max_tokens);
        prompt_len.saturating_add(share).min(self.context_tokens())
    }

    /// What a host-parked request needs to come back: its reservation, at least one cell more
    /// than it holds.
    pub(crate) fn restore_reservation(&self, id: RequestId) -> u32 {
        self.requests.get(&id).map_or(0, |r| {
            r.reserved_cells
                .max(r.held_cells() + 1)
                .min(self.context_tokens())
        })
    }

    /// Moves a slot holder out of its slot to a spare sequence (when `allow_spare` and one is
    /// free) or to host RAM. The slot is cleared.
    pub(crate) fn park(&mut self, id: RequestId, kind: ParkedKind, allow_spare: bool, now: Now) {
        let Some(seq) = self.requests.get(&id).and_then(|r| r.phase.seq()) else {
            self.illegal(format!("park of {id}, which holds no slot"));
            return;
        };
        let spare = if allow_spare {
            self.spares.iter().position(Option::is_none)
        } else {
            None
        };
        let place = match spare {
            Some(i) => {
                self.spares[i] = Some(id);
                ParkPlace::Spare(SeqId(self.facts.parallel + i as u32))
            }
            None => ParkPlace::HostRam,
        };
        self.out.actions.push(Action::Park {
            request: id,
            from_seq: seq,
            to: place,
        });
        self.set_phase(id, Phase::Parked { place, kind });
        let idx = seq.0 as usize;
        self.set_slot(idx, SlotState::Empty, now);
        self.parked.push(id);
        if let Some(r) = self.requests.get_mut(&id) {
            r.idle_since = Some(now);
        }
        if self.lane == Some(id) {
            self.lane = None;
        }
    }

    /// For a solo pause or give-way of `running` in favour of `w`: where the running request
    /// can be parked so that `w` fits (`Some(allow_spare)`), or `None` when `w` cannot fit.
    pub(crate) fn park_plan(&self, running: RequestId, w: RequestId) -> Option<bool> {
        let need = self.admission_need(w);
        let held = self
            .requests
            .get(&running)
            .map_or(0, |r| u64::from(r.reserved_cells.max(r.held_cells())));
        // `w`'s own spare sequence is not freeable for `w`: its cells come along into the slot
        let base = self.cells_free() + self.cells_evictable(None, Some(w));
        let spare_free = self.spares.iter().any(Option::is_none);
        // parked in a spare sequence, the running request's cells stay in the pool
        let spare_held = self
            .requests
            .get(&running)
            .map_or(0, |r| u64::from(r.held_cells()));
        if spare_free && base + held - spare_held >= need {
            Some(true)
        } else if base + held >= need {
            Some(false)
        } else {
            None
        }
    }
}
