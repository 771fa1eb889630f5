//! Context checkpoints: for a model whose cache cannot be cut at any token (sliding-window
//! layers that keep only their window, recurrent and hybrid layers), the part of a sequence's
//! state a cut cannot rebuild, saved when the sequence held exactly `tokens` tokens. A cut back
//! to `tokens` puts it back and drops the rest (llama-server's context checkpoints). Written
//! here because the entries are opaque engine states bounded per sequence and in bytes, and
//! the worker must report exactly which sequences' positions changed.

use crate::ids::SeqId;
use crate::protocol::{CheckpointAt, SeqCheckpoints};
use std::collections::{BTreeMap, BTreeSet};

/// One checkpoint: the state when its sequence held `tokens` tokens.
#[derive(Debug, Clone)]
pub struct Checkpoint<S> {
    pub tokens: u32,
    pub saved: S,
    pub bytes: u64,
    /// When it was taken (the store's clock): the oldest leave first.
    taken: u64,
}

/// The checkpoints of the sequences in the pool, by sequence, ascending in `tokens`. (Those
/// of a parked request or a saved conversation travel with its state, outside the store.)
#[derive(Debug)]
pub struct CheckpointStore<S> {
    by_seq: BTreeMap<SeqId, Vec<Checkpoint<S>>>,
    per_seq_max: usize,
    capacity_bytes: u64,
    used_bytes: u64,
    clock: u64,
}

impl<S> CheckpointStore<S> {
    pub fn new(per_seq_max: u32, capacity_bytes: u64) -> Self {
        Self {
            by_seq: BTreeMap::new(),
            per_seq_max: per_seq_max as usize,
            capacity_bytes,
            used_bytes: 0,
            clock: 0,
        }
    }

    /// Whether checkpoints are kept at all (`ctx_checkpoints` 0 turns them off).
    pub fn enabled(&self) -> bool {
        self.per_seq_max > 0 && self.capacity_bytes > 0
    }

    /// Where `seq`'s last checkpoint is (0 when it has none).
    pub fn last_tokens(&self, seq: SeqId) -> u32 {
        self.by_seq
            .get(&seq)
            .and_then(|list| list.last())
            .map_or(0, |c| c.tokens)
    }

    /// Keeps a checkpoint of `seq` at `tokens` (replacing one at the same place); older ones
    /// leave to stay within the bounds: `seq`'s own oldest past the count, then the oldest
    /// of any sequence past the bytes. Returns the sequences whose positions changed.
    pub fn take(&mut self, seq: SeqId, tokens: u32, saved: S, bytes: u64) -> BTreeSet<SeqId> {
        let mut changed = BTreeSet::from([seq]);
        if !self.enabled() || bytes > self.capacity_bytes {
            changed.clear();
            return changed;
        }
        self.cut(seq, tokens.saturating_sub(1));
        self.clock += 1;
        let list = self.by_seq.entry(seq).or_default();
        list.push(Checkpoint {
            tokens,
            saved,
            bytes,
            taken: self.clock,
        });
        self.used_bytes += bytes;
        if list.len() > self.per_seq_max {
            let gone = list.remove(0);
            self.used_bytes -= gone.bytes;
        }
        while self.used_bytes > self.capacity_bytes {
            let Some((oldest_seq, index)) = self.oldest() else {
                break;
            };
            let list = self.by_seq.get_mut(&oldest_seq).expect("found");
            let gone = list.remove(index);
            self.used_bytes -= gone.bytes;
            changed.insert(oldest_seq);
        }
        changed
    }

    fn oldest(&self) -> Option<(SeqId, usize)> {
        self.by_seq
            .iter()
            .flat_map(|(seq, list)| {
                list.iter()
                    .enumerate()
                    .map(move |(i, c)| (c.taken, *seq, i))
            })
            .min()
            .map(|(_, seq, i)| (seq, i))
    }

    /// The checkpoint of `seq` at exactly `tokens`.
    pub fn at(&self, seq: SeqId, tokens: u32) -> Option<&Checkpoint<S>> {
        self.by_seq.get(&seq)?.iter().find(|c| c.tokens == tokens)
    }

    /// Drops `seq`'s checkpoints past `keep_tokens` (a cut: they no longer describe it).
    pub fn cut(&mut self, seq: SeqId, keep_tokens: u32) {
        if let Some(list) = self.by_seq.get_mut(&seq) {
            let gone: u64 = list
                .iter()
                .filter(|c| c.tokens > keep_tokens)
                .map(|c| c.bytes)
                .sum();
            list.retain(|c| c.tokens <= keep_tokens);
            self.used_bytes -= gone;
        }
    }

    /// Takes all of `seq`'s checkpoints out (they go with its state to host RAM).
    pub fn take_all(&mut self, seq: SeqId) -> Vec<Checkpoint<S>> {
        let list = self.by_seq.remove(&seq).unwrap_or_default();
        self.used_bytes -= list.iter().map(|c| c.bytes).sum::<u64>();
        list
    }

    /// Puts checkpoints back into `seq` (a restore or a load), replacing what it had. They
    /// count toward the bytes again; the bound is kept at the next checkpoint taken.
    pub fn put_all(&mut self, seq: SeqId, list: Vec<Checkpoint<S>>) {
        self.take_all(seq);
        if list.is_empty() {
            return;
        }
        self.used_bytes += list.iter().map(|c| c.bytes).sum::<u64>();
        self.by_seq.insert(seq, list);
    }

    /// The report of these sequences' checkpoints.
    pub fn report(&self, seqs: impl IntoIterator<Item = SeqId>) -> Vec<SeqCheckpoints> {
        seqs.into_iter()
            .map(|seq| SeqCheckpoints {
                seq,
                checkpoints: self
                    .by_seq
                    .get(&seq)
                    .map(|list| {
                        list.iter()
                            .map(|c| CheckpointAt {
                                tokens: c.tokens,
                                bytes: c.bytes,
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect()
    }

    #[cfg(test)]
    pub fn positions(&self, seq: SeqId) -> Vec<u32> {
        self.by_seq
            .get(&seq)
            .map(|list| list.iter().map(|c| c.tokens).collect())
            .unwrap_or_default()
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub fn len(&self) -> usize {
        self.by_seq.values().map(Vec::len).sum()
    }
}

/// The bytes of a list of checkpoints (what they add to a parked or saved state).
pub fn bytes_of<S>(list: &[Checkpoint<S>]) -> u64 {
    list.iter().map(|c| c.bytes).sum()
}

#[cfg(test)]
mod tests {
    use super::CheckpointStore;
    use crate::ids::SeqId;

    #[test]
    fn a_sequence_keeps_its_newest_checkpoints_up_to_the_count() {
        let mut store = CheckpointStore::new(2, 1000);
        store.take(SeqId(0), 100, (), 10);
        store.take(SeqId(0), 200, (), 10);
        store.take(SeqId(0), 300, (), 10);
        assert_eq!(store.positions(SeqId(0)), vec![200, 300]);
        assert_eq!(store.used_bytes(), 20);
    }

    #[test]
    fn past_the_bytes_the_oldest_of_any_sequence_leaves_and_its_sequence_is_reported() {
        let mut store = CheckpointStore::new(8, 30);
        store.take(SeqId(1), 100, (), 10);
        store.take(SeqId(0), 100, (), 10);
        store.take(SeqId(0), 200, (), 10);
        let changed = store.take(SeqId(0), 300, (), 10);
        assert_eq!(
            changed.into_iter().collect::<Vec<_>>(),
            [SeqId(0), SeqId(1)]
        );
        assert!(store.positions(SeqId(1)).is_empty());
        assert_eq!(store.positions(SeqId(0)), vec![100, 200, 300]);
        // one larger than the whole bound is not kept, and nothing leaves for it
        assert!(store.take(SeqId(1), 50, (), 31).is_empty());
        assert_eq!(store.len(), 3);
    }

    #[test]
    fn a_cut_drops_the_checkpoints_past_it_and_a_new_one_replaces_those_after_its_place() {
        let mut store = CheckpointStore::new(8, 1000);
        for at in [100, 200, 300] {
            store.take(SeqId(0), at, (), 10);
        }
        store.cut(SeqId(0), 250);
        assert_eq!(store.positions(SeqId(0)), vec![100, 200]);
        store.take(SeqId(0), 150, (), 10);
        assert_eq!(store.positions(SeqId(0)), vec![100, 150]);
        assert_eq!(store.used_bytes(), 20);
        let moved = store.take_all(SeqId(0));
        assert_eq!(store.used_bytes(), 0);
        store.put_all(SeqId(2), moved);
        assert_eq!(store.positions(SeqId(2)), vec![100, 150]);
        assert!(store.at(SeqId(2), 150).is_some() && store.at(SeqId(2), 120).is_none());
    }
}
