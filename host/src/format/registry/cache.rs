//! The registry client's cache: schemas by global id, by GUID, and by subject and version
//! (how references name them). A registered schema never changes, so entries never
//! expire; each map holds at most [`CAPACITY`] entries and drops the least recently used
//! one to take another.
//!
//! [`Lru`] is a small least-recently-used map: a `HashMap` from key to a slot of a `Vec`,
//! the slots linked in recency order (most recent at the head). Get, insert and eviction
//! are O(1); an evicted slot is reused, so memory stays at the capacity.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use crate::format::RegisteredSchema;

/// Entries each of the cache's maps keeps.
pub const CAPACITY: usize = 10_000;

/// No slot (the end of the recency list).
const NONE: usize = usize::MAX;

struct Slot<K, V> {
    key: K,
    value: V,
    /// The more recently used neighbour, or [`NONE`] at the head.
    newer: usize,
    /// The less recently used neighbour, or [`NONE`] at the tail.
    older: usize,
}

/// A map of at most `capacity` entries that evicts the least recently used.
pub struct Lru<K, V> {
    capacity: usize,
    index: HashMap<K, usize>,
    slots: Vec<Slot<K, V>>,
    /// Most recently used slot.
    head: usize,
    /// Least recently used slot: the next to go.
    tail: usize,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty map holding up to `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            index: HashMap::new(),
            slots: Vec::new(),
            head: NONE,
            tail: NONE,
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The value of `key` (or of what borrows as it: `&str` for a `String` key), which
    /// becomes the most recently used.
    pub fn get<Q>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let slot = *self.index.get(key)?;
        self.unlink(slot);
        self.push_front(slot);
        self.slots.get(slot).map(|s| &s.value)
    }

    /// Sets `key` to `value`, the most recently used; when full, the least recently used
    /// entry goes.
    pub fn insert(&mut self, key: K, value: V) {
        if let Some(&slot) = self.index.get(&key) {
            if let Some(s) = self.slots.get_mut(slot) {
                s.value = value;
            }
            self.unlink(slot);
            self.push_front(slot);
            return;
        }
        let slot = if self.index.len() >= self.capacity && self.tail != NONE {
            // Reuse the least recently used slot.
            let slot = self.tail;
            self.unlink(slot);
            if let Some(s) = self.slots.get_mut(slot) {
                let old = std::mem::replace(&mut s.key, key.clone());
                s.value = value;
                self.index.remove(&old);
            }
            slot
        } else {
            self.slots.push(Slot {
                key: key.clone(),
                value,
                newer: NONE,
                older: NONE,
            });
            self.slots.len() - 1
        };
        self.index.insert(key, slot);
        self.push_front(slot);
    }

    /// Takes `slot` out of the recency list.
    fn unlink(&mut self, slot: usize) {
        let Some(s) = self.slots.get(slot) else {
            return;
        };
        let (newer, older) = (s.newer, s.older);
        match self.slots.get_mut(newer) {
            Some(n) => n.older = older,
            None => self.head = older,
        }
        match self.slots.get_mut(older) {
            Some(o) => o.newer = newer,
            None => self.tail = newer,
        }
        if let Some(s) = self.slots.get_mut(slot) {
            s.newer = NONE;
            s.older = NONE;
        }
    }

    /// Puts `slot` (unlinked) at the head of the recency list.
    fn push_front(&mut self, slot: usize) {
        let old_head = self.head;
        if let Some(s) = self.slots.get_mut(slot) {
            s.newer = NONE;
            s.older = old_head;
        }
        match self.slots.get_mut(old_head) {
            Some(h) => h.newer = slot,
            None => self.tail = slot,
        }
        self.head = slot;
    }

    /// Keys from most to least recently used (for tests and debugging).
    pub fn keys_by_recency(&self) -> Vec<K> {
        let mut keys = Vec::with_capacity(self.len());
        let mut at = self.head;
        while let Some(s) = self.slots.get(at) {
            keys.push(s.key.clone());
            at = s.older;
        }
        keys
    }
}

/// The three maps of resolved schemas.
pub struct SchemaCache {
    pub by_id: Lru<u32, Arc<RegisteredSchema>>,
    pub by_guid: Lru<String, Arc<RegisteredSchema>>,
    /// Referenced schemas, by `(subject, version)`.
    pub by_version: Lru<(String, i32), Arc<RegisteredSchema>>,
}

impl SchemaCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            by_id: Lru::new(capacity),
            by_guid: Lru::new(capacity),
            by_version: Lru::new(capacity),
        }
    }

    /// Schemas held by id and by GUID (the `sluice_schema_registry_schemas` gauge).
    pub fn cached(&self) -> usize {
        self.by_id.len() + self.by_guid.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn evicts_the_least_recently_used() {
        let mut lru = Lru::new(3);
        lru.insert(1, "a");
        lru.insert(2, "b");
        lru.insert(3, "c");
        assert_eq!(lru.keys_by_recency(), vec![3, 2, 1]);
        // Reading 1 makes 2 the oldest.
        assert_eq!(lru.get(&1), Some(&"a"));
        assert_eq!(lru.keys_by_recency(), vec![1, 3, 2]);
        lru.insert(4, "d");
        assert_eq!(lru.get(&2), None, "2 was least recently used");
        assert_eq!(lru.keys_by_recency(), vec![4, 1, 3]);
        // Overwriting refreshes without growing.
        lru.insert(3, "C");
        assert_eq!(lru.len(), 3);
        lru.insert(5, "e");
        assert_eq!(lru.get(&1), None);
        assert_eq!(lru.get(&3), Some(&"C"));
        assert_eq!(lru.keys_by_recency(), vec![3, 5, 4]);
        assert_eq!(lru.slots.len(), 3, "evicted slots are reused");
    }

    #[test]
    fn capacity_one_and_zero_keep_the_last() {
        for capacity in [0, 1] {
            let mut lru = Lru::new(capacity);
            lru.insert("x", 1);
            lru.insert("y", 2);
            assert_eq!(lru.get(&"x"), None);
            assert_eq!(lru.get(&"y"), Some(&2));
            assert_eq!(lru.len(), 1);
        }
    }

    /// A naive model: a Vec in recency order.
    fn model_apply(
        model: &mut Vec<(u8, u16)>,
        capacity: usize,
        op: (bool, u8, u16),
    ) -> Option<u16> {
        let (is_insert, key, value) = op;
        let found = model.iter().position(|(k, _)| *k == key);
        if is_insert {
            if let Some(i) = found {
                model.remove(i);
            } else if model.len() >= capacity {
                model.pop();
            }
            model.insert(0, (key, value));
            None
        } else {
            let i = found?;
            let entry = model.remove(i);
            model.insert(0, entry);
            Some(entry.1)
        }
    }

    proptest! {
        #[test]
        fn behaves_like_a_naive_model(
            capacity in 1usize..6,
            ops in proptest::collection::vec((any::<bool>(), 0u8..10, any::<u16>()), 0..200),
        ) {
            let mut lru = Lru::new(capacity);
            let mut model = Vec::new();
            for op in ops {
                let expected = model_apply(&mut model, capacity, op);
                let got = if op.0 { lru.insert(op.1, op.2); None } else { lru.get(&op.1).copied() };
                prop_assert_eq!(got, expected);
                let keys: Vec<u8> = model.iter().map(|(k, _)| *k).collect();
                prop_assert_eq!(lru.keys_by_recency(), keys);
            }
        }
    }
}
