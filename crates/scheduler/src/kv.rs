//! The KV pool: its cells (what every sequence holds, prefix copies shared, plus what running
//! requests have pledged), its sequence ids, and making room. Room is made by moving idle
//! conversations to the host-RAM conversation cache, least recently used first, then parked
//! requests to host RAM; never a running request's cells. Also held-for-sure lookups against
//! every kept conversation, and parking places.

use crate::ids::{RequestId, SeqId};
use std::sync::Arc;

use super::Scheduler;
use super::lifecycle::{Conversation, ParkedKind, Phase, SeqState};
use super::prefix::{BLOCK, TokenSeq};
use super::types::{Action, ConversationId, Now, ParkPlace};
use strata_protocol::pool::CellPool;

/// Where a waiting request's held prefix comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// An idle conversation in this sequence.
    Kept(SeqId),
    /// A live request's sequence (shared by a prefix copy, never taken).
    Live(SeqId),
    /// The host-RAM conversation cache, at this position.
    Host(usize),
}

/// What makes room, in the order it is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    Conversation(SeqId),
    Parked(RequestId, SeqId),
}

/// Whether a usable prefix `u` from a source of `source_len` tokens is worth continuing for a
/// prompt of `prompt_len`: at least one block (a shared template header alone is not), or a
/// kept conversation continued whole (a follow-up), or, in the pool, the whole prompt but the
/// token it must read (the same request sent again).
fn worth(src: Source, u: u32, source_len: u32, prompt_len: u32) -> bool {
    let in_pool = matches!(src, Source::Kept(_) | Source::Live(_));
    u as usize >= BLOCK
        || (u > 0 && matches!(src, Source::Kept(_)) && u == source_len)
        || (u > 0 && in_pool && u + 1 == prompt_len)
}

fn victim_seq(victim: Victim) -> SeqId {
    match victim {
        Victim::Conversation(s) | Victim::Parked(_, s) => s,
    }
}

impl Scheduler {
    /// What could make room, in order: idle conversations least recently used first, then
    /// parked requests (the one that would come back last first). Never a sequence in
    /// `protect`.
    fn victims(&self, protect: &[SeqId], now: Now) -> Vec<Victim> {
        let mut kept: Vec<(Now, SeqId)> = self
            .seqs
            .iter()
            .filter(|s| matches!(s.state, SeqState::Kept(_)) && !protect.contains(&s.id))
            .map(|s| (s.last_used, s.id))
            .collect();
        kept.sort();
        let mut parked: Vec<RequestId> = self
            .parked
            .iter()
            .copied()
            .filter(|id| {
                self.requests
                    .get(id)
                    .and_then(|r| r.phase.own_seq())
                    .is_some_and(|s| !protect.contains(&s))
            })
            .collect();
        parked.sort_by_key(|id| std::cmp::Reverse(self.admission_key(*id, now)));
        kept.into_iter()
            .map(|(_, seq)| Victim::Conversation(seq))
            .chain(parked.into_iter().filter_map(|id| {
                let seq = self.requests.get(&id)?.phase.own_seq()?;
                Some(Victim::Parked(id, seq))
            }))
            .collect()
    }

    /// The victims to take so that `need` cells are free, or `None` when all of them would
    /// not do. Sharing is counted exactly: cells two victims share free with the second.
    fn room_plan(&self, need: u64, protect: &[SeqId], now: Now) -> Option<Vec<Victim>> {
        self.room_plan_from(self.pool.clone(), need, protect, now)
    }

    /// [`Scheduler::room_plan`] from another state of the pool (one about to be trimmed).
    fn room_plan_from(
        &self,
        mut pool: CellPool,
        need: u64,
        protect: &[SeqId],
        now: Now,
    ) -> Option<Vec<Victim>> {
        let total = u64::from(self.facts.kv_cells_total);
        let pledged = self.pledged();
        let mut plan = Vec::new();
        let free = |pool: &CellPool| total.saturating_sub(pool.used() + pledged);
        if free(&pool) >= need {
            return Some(plan);
        }
        // Victims that free nothing by themselves (every cell shared) are taken last: the
        // cells they share only with other victims free with those.
        let mut later = Vec::new();
        for victim in self.victims(protect, now) {
            let seq = victim_seq(victim);
            if pool.exclusive(seq) == 0 {
                later.push(victim);
                continue;
            }
            pool.clear(seq);
            plan.push(victim);
            if free(&pool) >= need {
                return Some(plan);
            }
        }
        for victim in later {
            pool.clear(victim_seq(victim));
            plan.push(victim);
            if free(&pool) >= need {
                return Some(plan);
            }
        }
        None
    }

    /// Makes `need` cells free, never touching the sequences in `protect`. Acts only when it
    /// can succeed.
    pub(crate) fn make_room(&mut self, need: u64, protect: &[SeqId], now: Now) -> bool {
        let Some(plan) = self.room_plan(need, protect, now) else {
            return false;
        };
        for victim in plan {
            self.take_victim(victim, now);
        }
        true
    }

    /// Whether `need` cells could be made free without the sequences in `protect`.
    pub(crate) fn can_make_room(&self, need: u64, protect: &[SeqId], now: Now) -> bool {
        self.room_plan(need, protect, now).is_some()
    }

    /// Whether `need` cells could be made free once `seq` is trimmed to `keep` (a request
    /// taking over a conversation it continues only in part).
    pub(crate) fn can_make_room_trimmed(&self, seq: SeqId, keep: u32, need: u64, now: Now) -> bool {
        let mut pool = self.pool.clone();
        pool.trim(seq, keep);
        self.room_plan_from(pool, need, &[seq], now).is_some()
    }

    fn take_victim(&mut self, victim: Victim, now: Now) {
        match victim {
            Victim::Conversation(seq) => self.evict_conversation(seq, now),
            Victim::Parked(id, _) => self.move_parked_to_host(id, now),
        }
    }

    /// A free sequence id, freeing one (the least recently used idle conversation, else a
    /// parked request's) when none is; never one in `protect`.
    pub(crate) fn free_seq(&mut self, protect: &[SeqId], now: Now) -> Option<SeqId> {
        if let Some(s) = self.seqs.iter().find(|s| matches!(s.state, SeqState::Free)) {
            return Some(s.id);
        }
        let victim = *self.victims(protect, now).first()?;
        self.take_victim(victim, now);
        Some(victim_seq(victim))
    }

    /// Whether a sequence id could be had without the sequences in `protect`.
    pub(crate) fn seq_obtainable(&self, protect: &[SeqId], now: Now) -> bool {
        self.seqs.iter().any(|s| matches!(s.state, SeqState::Free))
            || !self.victims(protect, now).is_empty()
    }

    /// Moves the idle conversation in `seq` to the host-RAM cache (or drops it when the cache
    /// is off); its cells shared with other sequences stay for them.
    pub(crate) fn evict_conversation(&mut self, seq: SeqId, now: Now) {
        let SeqState::Kept(conv) = self.seqs[seq.0 as usize].state.clone() else {
            return;
        };
        let to_cache = self.push_host(conv);
        self.out
            .actions
            .push(Action::EvictConversation { seq, to_cache });
        self.pool.clear(seq);
        self.set_seq(seq, SeqState::Free, now);
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

    /// A request parked in its sequence moves to host RAM (its cells or its id are needed).
    fn move_parked_to_host(&mut self, id: RequestId, now: Now) {
        let Some(Phase::Parked {
            place: ParkPlace::Pool(seq),
            kind,
        }) = self.requests.get(&id).map(|r| r.phase.clone())
        else {
            return;
        };
        self.out.actions.push(Action::Park {
            request: id,
            from_seq: seq,
            to: ParkPlace::HostRam,
        });
        self.counters.parks_to_host += 1;
        self.set_phase(
            id,
            Phase::Parked {
                place: ParkPlace::HostRam,
                kind,
            },
        );
        self.pool.clear(seq);
        self.set_seq(seq, SeqState::Free, now);
    }

    /// A new conversation from a request's held tokens.
    pub(crate) fn new_conversation(&mut self, tokens: TokenSeq) -> Conversation {
        self.next_conv_key += 1;
        Conversation {
            key: self.next_conv_key,
            tokens: Arc::new(tokens),
        }
    }

    /// The usable prefix of `id`'s prompt from a conversation or a live request's tokens
    /// (memoized per key: a kept conversation never changes).
    fn usable_from(&mut self, id: RequestId, key: Option<u64>, tokens: &TokenSeq) -> u32 {
        let trims = self.facts.trims_at_any_token;
        let rewindable = self.facts.rewindable_tokens;
        let live = self.seqs.len() + self.host_cache.len() + 4;
        let Some(r) = self.requests.get_mut(&id) else {
            return 0;
        };
        if let Some(v) = key.and_then(|k| r.prefix_memo.get(&k)) {
            return *v;
        }
        let lcp = r.prompt.common_prefix(tokens);
        let u = r.prompt.usable_prefix(lcp, tokens, trims, rewindable);
        if let Some(k) = key {
            if r.prefix_memo.len() > 4 * live {
                r.prefix_memo.clear();
            }
            r.prefix_memo.insert(k, u);
        }
        u
    }

    /// Every source a waiting request could continue: kept conversations, the tokens live
    /// requests hold (prefix copies only, on engines that trim anywhere), the host cache.
    fn sources(&self, id: RequestId) -> Vec<(Source, Option<u64>, Arc<TokenSeq>)> {
        let mut out = Vec::new();
        for s in &self.seqs {
            match &s.state {
                SeqState::Kept(c) => out.push((Source::Kept(s.id), Some(c.key), c.tokens.clone())),
                SeqState::Owned(other) if *other != id && self.facts.trims_at_any_token => {
                    if let Some(r) = self.requests.get(other) {
                        let held = r.held_tokens();
                        out.push((Source::Live(s.id), None, Arc::new(held)));
                    }
                }
                _ => {}
            }
        }
        for (i, (_, c)) in self.host_cache.iter().enumerate() {
            out.push((Source::Host(i), Some(c.key), c.tokens.clone()));
        }
        out
    }

    /// The best source of held-for-sure tokens for a waiting request: the longest usable
    /// prefix that is worth it (see [`worth`]); at equal length a kept conversation (no copy),
    /// then a live sequence (a copy, no restore), then host RAM, and between kept ones the
    /// least recently used.
    pub(crate) fn best_source(&mut self, id: RequestId) -> Option<(Source, u32)> {
        let prompt_len = self.requests.get(&id).map_or(0, |r| r.prompt_len());
        let mut best: Option<(Source, u32, (u8, Now))> = None;
        for (src, key, tokens) in self.sources(id) {
            let u = self.usable_from(id, key, &tokens);
            if !worth(src, u, tokens.len(), prompt_len) {
                continue;
            }
            let rank = match src {
                Source::Kept(s) => (0, self.seqs[s.0 as usize].last_used),
                Source::Live(_) => (1, Now::ZERO),
                Source::Host(_) => (2, Now::ZERO),
            };
            let better = match &best {
                None => true,
                Some((_, b, b_rank)) => u > *b || (u == *b && rank < *b_rank),
            };
            if better {
                best = Some((src, u, rank));
            }
        }
        best.map(|(src, u, _)| (src, u))
    }

    /// Held for sure of a waiting request, without touching the memo (for snapshots).
    pub(crate) fn held_for_sure_peek(&self, id: RequestId) -> u32 {
        let Some(r) = self.requests.get(&id) else {
            return 0;
        };
        let trims = self.facts.trims_at_any_token;
        let rewindable = self.facts.rewindable_tokens;
        self.sources(id)
            .into_iter()
            .map(|(src, key, tokens)| {
                let u = match key.and_then(|k| r.prefix_memo.get(&k)) {
                    Some(v) => *v,
                    None => {
                        let lcp = r.prompt.common_prefix(&tokens);
                        r.prompt.usable_prefix(lcp, &tokens, trims, rewindable)
                    }
                };
                if worth(src, u, tokens.len(), r.prompt_len()) {
                    u
                } else {
                    0
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

    /// The cells a request needs to take a slot now, and the sequence it keeps from its
    /// source (protected while room is made).
    pub(crate) fn admission_need(&mut self, id: RequestId) -> (u64, Option<SeqId>) {
        let Some(r) = self.requests.get(&id) else {
            return (0, None);
        };
        match r.phase.clone() {
            Phase::Waiting => {
                let reserve = self.initial_reservation(r.prompt_len(), r.max_tokens);
                match self.best_source(id) {
                    // its prefix is in the pool already (kept, or shared by a copy)
                    Some((Source::Kept(s) | Source::Live(s), u)) => {
                        (u64::from(reserve.saturating_sub(u)), Some(s))
                    }
                    // loaded whole before it is cut (transient room)
                    Some((Source::Host(h), _)) => {
                        let cid = self.host_cache[h].0;
                        (u64::from(self.restore_need(cid, reserve)), None)
                    }
                    None => (u64::from(reserve), None),
                }
            }
            Phase::Parked {
                place: ParkPlace::HostRam,
                ..
            } => (u64::from(self.restore_reservation(id)), None),
            Phase::Parked {
                place: ParkPlace::Pool(seq),
                ..
            } => {
                let more = self
                    .restore_reservation(id)
                    .saturating_sub(self.pool.len(seq));
                (u64::from(more), Some(seq))
            }
            _ => (0, None),
        }
    }

    /// Prompt plus a first share of the output, capped by the context.
    pub(crate) fn initial_reservation(&self, prompt_len: u32, max_tokens: u32) -> u32 {
        let share = self.settings.output_reserve_tokens.min(max_tokens);
        prompt_len.saturating_add(share).min(self.context_tokens())
    }

    /// What a parked request needs to come back: its reservation, at least one cell more
    /// than it holds.
    pub(crate) fn restore_reservation(&self, id: RequestId) -> u32 {
        self.requests.get(&id).map_or(0, |r| {
            r.reserved_cells
                .max(r.held_cells() + 1)
                .min(self.context_tokens())
        })
    }

    /// Takes a slot holder out of its slot: parked in its own sequence (cells kept, nothing
    /// moves) when `in_pool`, else to host RAM (its sequence is freed).
    pub(crate) fn park(&mut self, id: RequestId, kind: ParkedKind, in_pool: bool, now: Now) {
        let Some(seq) = self.requests.get(&id).and_then(|r| r.phase.seq()) else {
            self.illegal(format!("park of {id}, which holds no slot"));
            return;
        };
        let place = if in_pool {
            self.counters.parks_in_pool += 1;
            ParkPlace::Pool(seq)
        } else {
            self.counters.parks_to_host += 1;
            ParkPlace::HostRam
        };
        self.out.actions.push(Action::Park {
            request: id,
            from_seq: seq,
            to: place,
        });
        self.set_phase(id, Phase::Parked { place, kind });
        self.free_slot_of(id, now);
        if !in_pool {
            self.pool.clear(seq);
            self.set_seq(seq, SeqState::Free, now);
        }
        self.parked.push(id);
        if let Some(r) = self.requests.get_mut(&id) {
            // parked, it pledges nothing (only running requests do); its reservation is what
            // it asks for again when it comes back
            r.idle_since = Some(now);
        }
        if self.lane == Some(id) {
            self.lane = None;
        }
    }

    /// For a solo pause or give-way of `running` in favour of `w`: where the running request
    /// can be parked so that `w` gets the slot now (`Some(true)`: in the pool, its cells
    /// kept; `Some(false)`: host RAM), or `None` when `w` cannot get it either way. Counted
    /// as admission (R1) takes it: a kept conversation `w` continues in part may be
    /// continued in place, cut at the shared prefix (its tail freed); a waiting `w` may start
    /// fresh instead (its source not kept); and parked to host RAM, the running request frees
    /// its sequence and its cells, those it shares as the others leave too.
    pub(crate) fn park_plan(&mut self, running: RequestId, w: RequestId, now: Now) -> Option<bool> {
        let (need, source) = self.admission_need(w);
        let own = self.requests.get(&running)?.phase.seq()?;
        let pledge = self.requests.get(&running).map_or(0, |r| {
            u64::from(r.reserved_cells.saturating_sub(self.pool.len(own)))
        });
        let wr = self.requests.get(&w)?;
        let waiting = matches!(wr.phase, Phase::Waiting);
        let fresh = u64::from(self.initial_reservation(wr.prompt_len(), wr.max_tokens));
        // (cells needed, the sequence kept for it, cut to this prefix, whether that sequence
        // becomes its own): what admission tries, in its order
        type Way = (u64, Option<SeqId>, Option<u32>, bool);
        let mut ways: Vec<Way> = Vec::new();
        match (waiting, source) {
            (false, _) => ways.push((need, source, None, source.is_some())),
            (true, Some(s)) => match self.best_source(w) {
                // continued in its own sequence when a copy does not fit (R1)
                Some((Source::Kept(k), u)) if k == s => ways.push((need, Some(s), Some(u), true)),
                _ => ways.push((need, Some(s), None, false)),
            },
            (true, None) => {}
        }
        if waiting {
            ways.push((fresh, None, None, false));
        }
        let fits = |me: &Self, host: bool, &(need, src, cut, takes_src): &Way| {
            if host && src == Some(own) {
                return false; // its source leaves with it
            }
            let mut pool = me.pool.clone();
            let mut protect: Vec<SeqId> = src.into_iter().collect();
            let seq_ok = if host {
                if let (Some(s), Some(u)) = (src, cut) {
                    pool.trim(s, u);
                }
                pool.clear(own);
                true // its sequence comes free
            } else {
                protect.push(own);
                takes_src || me.seq_obtainable(&protect, now)
            };
            seq_ok
                && me
                    .room_plan_from(pool, need.saturating_sub(pledge), &protect, now)
                    .is_some()
        };
        // in the pool only by the way admission tries first, its source whole: another would
        // be tried only after moving the parked request to host RAM for a sequence or cells
        if ways.first().is_some_and(|way| fits(self, false, way)) {
            Some(true)
        } else {
            ways.iter()
                .any(|way| fits(self, true, way))
                .then_some(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_worth_continuing_from_one_block_or_when_it_is_a_whole_conversation_or_all_but_one_token()
     {
        let kept = Source::Kept(SeqId(0));
        let live = Source::Live(SeqId(1));
        let host = Source::Host(0);
        let block = BLOCK as u32;
        // (source, usable prefix, source length, prompt length, worth)
        let cases = [
            // one block or more: from anywhere
            (kept, block, 500, 900, true),
            (live, block, 500, 900, true),
            (host, block, 500, 900, true),
            (host, block - 1, 500, 900, false),
            (kept, block - 1, 500, 900, false),
            // a short kept conversation continued whole (a follow-up), not a part of one
            (kept, 10, 10, 900, true),
            (kept, 10, 11, 900, false),
            (live, 10, 10, 900, false),
            (host, 10, 10, 900, false),
            // the same short request sent again: all but the token it must read, in the pool
            (kept, 10, 40, 11, true),
            (live, 10, 40, 11, true),
            (host, 10, 40, 11, false),
            (live, 10, 40, 12, false),
            // nothing usable is never worth it
            (kept, 0, 0, 900, false),
            (live, 0, 40, 1, false),
        ];
        for (src, u, source_len, prompt_len, expect) in cases {
            assert_eq!(
                worth(src, u, source_len, prompt_len),
                expect,
                "{src:?} u {u} source {source_len} prompt {prompt_len}"
            );
        }
    }
}
