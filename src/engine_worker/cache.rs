//! The host-RAM conversation cache: saved sequence states by key, bounded in bytes, least
//! recently used out. Written here because the entries are opaque llama.cpp states with our
//! own byte sizes and the eviction must report which keys left: a general LRU crate would
//! need the same bookkeeping around it.

use std::collections::HashMap;

#[derive(Debug)]
struct Entry<S> {
    saved: S,
    tokens: u32,
    bytes: u64,
    last_used: u64,
}

#[derive(Debug)]
pub struct ConversationCache<S> {
    entries: HashMap<u64, Entry<S>>,
    capacity_bytes: u64,
    used_bytes: u64,
    clock: u64,
}

impl<S> ConversationCache<S> {
    pub fn new(capacity_bytes: u64) -> Self {
        Self {
            entries: HashMap::new(),
            capacity_bytes,
            used_bytes: 0,
            clock: 0,
        }
    }

    /// Stores an entry (replacing one under the same key); returns the keys that left to
    /// keep within the bound, least recently used first, never one in `keep`. An entry that
    /// does not fit even then is not kept: its own key is returned last.
    pub fn insert(
        &mut self,
        key: u64,
        saved: S,
        tokens: u32,
        bytes: u64,
        keep: &[u64],
    ) -> Vec<u64> {
        self.remove(key);
        let kept_bytes: u64 = keep
            .iter()
            .filter_map(|k| self.entries.get(k))
            .map(|e| e.bytes)
            .sum();
        if bytes + kept_bytes > self.capacity_bytes {
            return vec![key];
        }
        let mut evicted = Vec::new();
        while self.used_bytes + bytes > self.capacity_bytes {
            let Some(oldest) = self
                .entries
                .iter()
                .filter(|(k, _)| !keep.contains(k))
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            self.remove(oldest);
            evicted.push(oldest);
        }
        self.clock += 1;
        self.used_bytes += bytes;
        self.entries.insert(
            key,
            Entry {
                saved,
                tokens,
                bytes,
                last_used: self.clock,
            },
        );
        evicted
    }

    /// The entry, marked as just used.
    pub fn get(&mut self, key: u64) -> Option<(&S, u32, u64)> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(&key).map(|e| {
            e.last_used = clock;
            (&e.saved, e.tokens, e.bytes)
        })
    }

    /// The entry's token count, without marking it used.
    pub fn tokens_of(&self, key: u64) -> Option<u32> {
        self.entries.get(&key).map(|e| e.tokens)
    }

    /// Takes the entry out (a move into a sequence).
    pub fn take(&mut self, key: u64) -> Option<S> {
        let e = self.entries.remove(&key)?;
        self.used_bytes -= e.bytes;
        Some(e.saved)
    }

    pub fn remove(&mut self, key: u64) -> bool {
        match self.entries.remove(&key) {
            Some(e) => {
                self.used_bytes -= e.bytes;
                true
            }
            None => false,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::ConversationCache;

    #[test]
    fn the_least_recently_used_entries_leave_first_to_stay_within_the_bound() {
        let mut cache = ConversationCache::new(100);
        assert!(cache.insert(1, (), 10, 40, &[]).is_empty());
        assert!(cache.insert(2, (), 10, 40, &[]).is_empty());
        assert!(cache.get(1).is_some()); // 2 is now the least recently used
        assert_eq!(cache.insert(3, (), 10, 40, &[]), vec![2]);
        assert_eq!(cache.used_bytes(), 80);
        assert!(cache.get(2).is_none());
        assert_eq!(cache.insert(4, (), 10, 100, &[]), vec![1, 3]);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn an_entry_larger_than_the_bound_is_not_kept() {
        let mut cache = ConversationCache::new(10);
        assert!(cache.insert(1, (), 1, 5, &[]).is_empty());
        assert_eq!(cache.insert(2, (), 1, 11, &[]), vec![2]);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.used_bytes(), 5);
    }

    #[test]
    fn entries_about_to_be_loaded_are_never_evicted_to_make_room() {
        let mut cache = ConversationCache::new(100);
        assert!(cache.insert(1, (), 10, 40, &[]).is_empty());
        assert!(cache.insert(2, (), 10, 40, &[]).is_empty());
        // 1 is the least recently used, but it is about to be loaded: 2 leaves instead.
        assert_eq!(cache.insert(3, (), 10, 40, &[1]), vec![2]);
        assert!(cache.get(1).is_some());
        // No room without evicting a kept entry: the new one is not kept.
        assert_eq!(cache.insert(4, (), 10, 70, &[1, 3]), vec![4]);
        assert!(cache.get(1).is_some() && cache.get(3).is_some());
    }
}
