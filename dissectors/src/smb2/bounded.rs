//! A map with a hard entry cap and oldest-first eviction, so per-protocol state cannot grow
//! with hostile or endless input. Eviction order is insertion order (deterministic, unlike
//! HashMap iteration order), so a run's output does not depend on hashing seeds.

use std::collections::VecDeque;
use crate::fasthash::FastMap as HashMap;
use std::hash::Hash;

#[derive(Debug)]
pub struct BoundedMap<K, V> {
    cap: usize,
    map: HashMap<K, (V, u64)>,
    /// Keys in insertion order with the sequence number they were inserted under; entries
    /// whose sequence no longer matches the map were removed or replaced and are skipped.
    order: VecDeque<(K, u64)>,
    seq: u64,
}

impl<K: Hash + Eq + Clone, V> BoundedMap<K, V> {
    pub fn new(cap: usize) -> Self {
        BoundedMap { cap: cap.max(1), map: HashMap::default(), order: VecDeque::new(), seq: 0 }
    }

    /// Inserts or replaces; returns true if an older entry had to be evicted to make room.
    pub fn insert(&mut self, k: K, v: V) -> bool {
        self.seq += 1;
        let replaced = self.map.insert(k.clone(), (v, self.seq)).is_some();
        self.order.push_back((k, self.seq));
        let mut evicted = false;
        if !replaced {
            while self.map.len() > self.cap {
                match self.order.pop_front() {
                    Some((old, s)) => {
                        if self.map.get(&old).map(|e| e.1) == Some(s) {
                            self.map.remove(&old);
                            evicted = true;
                        }
                    }
                    None => break,
                }
            }
        }
        // Stale order entries (removed or replaced keys) are compacted away so the queue
        // stays within twice the live entries (not the cap: a map whose entries are removed
        // soon after they come, such as requests awaiting their response, held up to twice
        // the cap of stale keys, several MiB). Each compaction keeps at most half of what it
        // reads, so its cost is constant per insert.
        if self.order.len() > 2 * self.map.len() + 16 {
            let map = &self.map;
            self.order.retain(|(k, s)| map.get(k).map(|e| e.1) == Some(*s));
        }
        evicted
    }

    pub fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k).map(|e| &e.0)
    }

    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.map.get_mut(k).map(|e| &mut e.0)
    }

    pub fn remove(&mut self, k: &K) -> Option<V> {
        self.map.remove(k).map(|e| e.0)
    }

    pub fn contains_key(&self, k: &K) -> bool {
        self.map.contains_key(k)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_oldest_and_stays_bounded() {
        let mut m = BoundedMap::new(3);
        assert!(!m.insert(1, "a"));
        assert!(!m.insert(2, "b"));
        assert!(!m.insert(3, "c"));
        assert!(m.insert(4, "d"));
        assert!(m.get(&1).is_none());
        assert_eq!(m.get(&4), Some(&"d"));
        // Replacing does not evict, and a removed key is not evicted twice.
        assert!(!m.insert(2, "B"));
        assert_eq!(m.remove(&3), Some("c"));
        assert!(!m.insert(5, "e"));
        assert!(m.insert(6, "f"));
        // 2 was re-inserted after 4, so 4 is the oldest live entry.
        assert!(m.get(&4).is_none());
        assert_eq!(m.get(&2), Some(&"B"));
        for i in 0..10_000 {
            m.insert(100 + i % 7, "x");
            m.remove(&(100 + (i + 3) % 7));
        }
        assert!(m.len() <= 3);
        assert!(m.order.len() <= 2 * 3 + 16 + 1);
    }

    /// Entries removed soon after they come (requests awaiting their response) leave the
    /// insertion queue within twice the live entries, whatever the cap; eviction still
    /// takes the oldest live entry.
    #[test]
    fn a_large_cap_with_short_lived_entries_holds_little() {
        let mut m = BoundedMap::new(1 << 18);
        for k in 0..100_000u64 {
            m.insert(k, ());
            assert!(m.order.len() <= 2 * m.len() + 16, "{} queued for {} live", m.order.len(), m.len());
            if k >= 5 {
                m.remove(&(k - 5));
            }
        }
        assert_eq!(m.len(), 5);
        let mut small = BoundedMap::new(4);
        for k in 0..1000u64 {
            small.insert(k, ());
            if k % 3 == 0 {
                small.remove(&k);
            }
        }
        let live: Vec<u64> = (990..1000).filter(|k| small.contains_key(k)).collect();
        // 999 came when 994, 995, 997 and 998 were live: 994 went, then 999 was removed.
        assert_eq!(live, vec![995, 997, 998], "the newest live entries are kept");
    }
}
