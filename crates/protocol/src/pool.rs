//! The cells of the engine's one unified KV pool, as the protocol's commands move them: what a
//! sequence holds, what a prefix copy shares, what a trim or a clear frees. The scheduler plans
//! with it and the worker checks with it, so both count the same cells.
//!
//! llama.cpp's unified pool keeps, per cell, the set of sequences that use it: a prefix copy
//! (`seq_cp`) adds the destination to the source's cells (no data moves, no new cell), a trim
//! (`seq_rm`) removes a sequence from the cells past a position, and a cell is free once no
//! sequence uses it. New tokens always take new cells.
//!
//! The model: tokens appended to a sequence form a *group* of cells; a sequence's content is a
//! list of runs, each a prefix `0..len` of one group (appends, trims and prefix copies keep
//! every run a prefix of its group). A group's cells in use are its longest run, so the pool's
//! use is the sum of each group's longest run. Written here rather than taken from a crate:
//! it is the pool's own sharing rule, a few operations over a small map.

use crate::ids::SeqId;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Default)]
struct Group {
    /// The sequence that appends to this group (others only copied a prefix of it).
    owner: u32,
    /// How many runs reference each length.
    refs: BTreeMap<u32, u32>,
}

impl Group {
    fn longest(&self) -> u32 {
        self.refs.keys().next_back().copied().unwrap_or(0)
    }

    fn add(&mut self, len: u32) {
        *self.refs.entry(len).or_insert(0) += 1;
    }

    fn remove(&mut self, len: u32) {
        if let Some(n) = self.refs.get_mut(&len) {
            *n -= 1;
            if *n == 0 {
                self.refs.remove(&len);
            }
        }
    }
}

/// A command that would need more cells than the pool has free: the worker refuses it, and
/// the scheduler plans so that it never has to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolFull {
    /// Cells in use, less what the command frees first.
    pub used: u64,
    pub added: u64,
    pub total: u64,
}

impl std::fmt::Display for PoolFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the KV pool is full: {} cells used + {} > {} cells",
            self.used, self.added, self.total
        )
    }
}

/// The unified pool's cells by sequence. Every operation keeps [`CellPool::used`] exact.
#[derive(Debug, Clone, Default)]
pub struct CellPool {
    /// Runs `(group, len)` of each sequence, in position order.
    seqs: Vec<Vec<(u64, u32)>>,
    groups: HashMap<u64, Group>,
    next_group: u64,
    used: u64,
}

impl CellPool {
    /// A pool with `sequences` empty sequences.
    pub fn new(sequences: u32) -> Self {
        Self {
            seqs: vec![Vec::new(); sequences as usize],
            ..Self::default()
        }
    }

    pub fn sequences(&self) -> u32 {
        self.seqs.len() as u32
    }

    /// Cells in use (each shared cell once).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Tokens `seq` holds (positions `0..len`).
    pub fn len(&self, seq: SeqId) -> u32 {
        self.runs(seq).iter().map(|(_, l)| *l).sum()
    }

    pub fn is_empty(&self, seq: SeqId) -> bool {
        self.len(seq) == 0
    }

    fn runs(&self, seq: SeqId) -> &[(u64, u32)] {
        self.seqs.get(seq.0 as usize).map_or(&[], Vec::as_slice)
    }

    fn add_ref(&mut self, group: u64, len: u32) {
        let g = self.groups.entry(group).or_default();
        let before = g.longest();
        g.add(len);
        self.used += u64::from(g.longest() - before);
    }

    fn remove_ref(&mut self, group: u64, len: u32) {
        let Some(g) = self.groups.get_mut(&group) else {
            return;
        };
        let before = g.longest();
        g.remove(len);
        let after = g.longest();
        self.used -= u64::from(before - after);
        if g.refs.is_empty() {
            self.groups.remove(&group);
        }
    }

    /// `n` new tokens at the end of `seq` (new cells).
    pub fn append(&mut self, seq: SeqId, n: u32) {
        if n == 0 {
            return;
        }
        let s = seq.0 as usize;
        if let Some(&(group, len)) = self.seqs[s].last()
            && let Some(g) = self.groups.get(&group)
            && g.owner == seq.0
            && g.longest() == len
        {
            // the sequence's own group, and nobody holds more of it: it grows
            self.remove_ref(group, len);
            self.add_ref(group, len + n);
            if let Some(last) = self.seqs[s].last_mut() {
                last.1 = len + n;
            }
            return;
        }
        let group = self.next_group;
        self.next_group += 1;
        self.groups.insert(
            group,
            Group {
                owner: seq.0,
                refs: BTreeMap::new(),
            },
        );
        self.add_ref(group, n);
        self.seqs[s].push((group, n));
    }

    /// Keeps positions `0..keep` of `seq`; the cells past it that no other sequence uses are
    /// freed.
    pub fn trim(&mut self, seq: SeqId, keep: u32) {
        let s = seq.0 as usize;
        let runs = std::mem::take(&mut self.seqs[s]);
        let mut kept = Vec::with_capacity(runs.len());
        let mut at = 0u32;
        for (group, len) in runs {
            let take = keep.saturating_sub(at).min(len);
            at += len;
            if take < len {
                self.remove_ref(group, len);
                if take > 0 {
                    self.add_ref(group, take);
                }
            }
            if take > 0 {
                kept.push((group, take));
            }
        }
        self.seqs[s] = kept;
    }

    /// Empties `seq`.
    pub fn clear(&mut self, seq: SeqId) {
        self.trim(seq, 0);
    }

    /// `to` (emptied first) shares positions `0..n` of `from`: no new cells.
    pub fn copy_prefix(&mut self, from: SeqId, to: SeqId, n: u32) {
        if from == to {
            self.trim(to, n);
            return;
        }
        self.clear(to);
        let mut runs = Vec::new();
        let mut at = 0u32;
        for &(group, len) in self.runs(from) {
            let take = n.saturating_sub(at).min(len);
            if take == 0 {
                break;
            }
            runs.push((group, take));
            at += len;
        }
        for &(group, len) in &runs {
            self.add_ref(group, len);
        }
        self.seqs[to.0 as usize] = runs;
    }

    /// The room rule every engine command is checked by: `added` new cells fit beside what the
    /// pool holds, out of `total`. A step adds its chunk's tokens and one per decode.
    pub fn room_for(&self, added: u64, total: u64) -> Result<(), PoolFull> {
        self.room_after(0, added, total)
    }

    /// Room for `tokens` put into `seq` in place of what it holds (a restore or a conversation
    /// load: the whole state goes in at once, before anything cuts it).
    pub fn room_replacing(&self, seq: SeqId, tokens: u64, total: u64) -> Result<(), PoolFull> {
        self.room_after(self.exclusive(seq), tokens, total)
    }

    fn room_after(&self, freed: u64, added: u64, total: u64) -> Result<(), PoolFull> {
        let used = self.used.saturating_sub(freed);
        if used + added > total {
            return Err(PoolFull { used, added, total });
        }
        Ok(())
    }

    /// Cells that emptying `seq` would free (those no other sequence uses).
    pub fn exclusive(&self, seq: SeqId) -> u64 {
        let mut freed = 0u64;
        for &(group, len) in self.runs(seq) {
            let Some(g) = self.groups.get(&group) else {
                continue;
            };
            let before = g.longest();
            if len < before {
                continue;
            }
            let mut rest = g.clone();
            rest.remove(len);
            freed += u64::from(before - rest.longest());
        }
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: SeqId = SeqId(0);
    const B: SeqId = SeqId(1);
    const C: SeqId = SeqId(2);

    #[test]
    fn appends_take_new_cells_and_a_trim_frees_them() {
        let mut pool = CellPool::new(3);
        pool.append(A, 100);
        pool.append(A, 1);
        assert_eq!((pool.len(A), pool.used()), (101, 101));
        pool.trim(A, 40);
        assert_eq!((pool.len(A), pool.used()), (40, 40));
        pool.clear(A);
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn a_prefix_copy_shares_cells_until_the_last_user_lets_go() {
        let mut pool = CellPool::new(3);
        pool.append(A, 1000);
        pool.copy_prefix(A, B, 600);
        assert_eq!((pool.len(B), pool.used()), (600, 1000));
        // B's own tokens take new cells; A's tail past 600 is A's alone
        pool.append(B, 50);
        assert_eq!(pool.used(), 1050);
        assert_eq!(pool.exclusive(A), 400);
        assert_eq!(pool.exclusive(B), 50);
        pool.clear(A);
        // the shared 600 stay while B uses them
        assert_eq!((pool.used(), pool.exclusive(B)), (650, 650));
        pool.clear(B);
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn three_agents_sharing_a_system_prompt_hold_it_once() {
        let mut pool = CellPool::new(4);
        pool.append(A, 2000);
        pool.trim(A, 1500);
        pool.append(A, 300);
        pool.copy_prefix(A, B, 1500);
        pool.append(B, 200);
        pool.copy_prefix(B, C, 1500);
        pool.append(C, 100);
        assert_eq!(pool.used(), 1500 + 300 + 200 + 100);
        // trimming B into the shared part frees only B's own cells
        pool.trim(B, 1000);
        assert_eq!(pool.used(), 1500 + 300 + 100);
        // B appending again after the trim takes new cells, never the shared ones
        pool.append(B, 10);
        assert_eq!((pool.len(B), pool.used()), (1010, 1500 + 300 + 100 + 10));
    }

    #[test]
    fn room_counts_shared_cells_once_and_a_replacement_frees_only_what_is_its_own() {
        let mut pool = CellPool::new(3);
        pool.append(A, 600);
        pool.copy_prefix(A, B, 400);
        pool.append(B, 100);
        // 700 used of 1000: 300 fit, 301 do not
        assert!(pool.room_for(300, 1000).is_ok());
        let full = pool.room_for(301, 1000).unwrap_err();
        assert_eq!((full.used, full.added, full.total), (700, 301, 1000));
        assert!(full.to_string().contains("700 cells used + 301 > 1000"));
        // replacing B frees its own 100, not the 400 it shares with A
        assert!(pool.room_replacing(B, 400, 1000).is_ok());
        assert!(pool.room_replacing(B, 401, 1000).is_err());
        // an empty sequence frees nothing: a load of 300 fits, one of 301 does not
        assert!(pool.room_replacing(C, 300, 1000).is_ok());
        assert!(pool.room_replacing(C, 301, 1000).is_err());
    }

    #[test]
    fn a_copy_cannot_grow_the_source_s_group_under_another_sequence() {
        let mut pool = CellPool::new(2);
        pool.append(A, 100);
        pool.copy_prefix(A, B, 100);
        // A grows its own group: B still shares only the first 100
        pool.append(A, 20);
        pool.append(B, 5);
        assert_eq!(pool.used(), 125);
        assert_eq!((pool.len(A), pool.len(B)), (120, 105));
    }
}
