//! [`Interned`]: reference-counted table slots interned by key (adjacencies, load balances).

use std::collections::HashMap;

use crate::index::AdjIndex;

/// What indexes an [`Interned`] table: a `u32` slot number, typed or not.
pub(super) trait Slot: Copy {
    fn from_slot(i: u32) -> Self;
    fn slot(self) -> usize;
}

impl Slot for u32 {
    fn from_slot(i: u32) -> Self {
        i
    }
    fn slot(self) -> usize {
        self as usize
    }
}

impl Slot for AdjIndex {
    fn from_slot(i: u32) -> Self {
        AdjIndex::new(i)
    }
    fn slot(self) -> usize {
        self.as_usize()
    }
}

/// Slots with reference counts, interned by key. A slot whose last reference goes keeps its
/// content (the FIB may still point at it until the commit's FIB writes are done) and becomes
/// reusable only when the commit recycles it. Slots are numbered by `I`.
pub(super) struct Interned<K, I = u32> {
    pub(super) keys: Vec<Option<K>>,
    pub(super) index: HashMap<K, I>,
    pub(super) refs: Vec<u32>,
    free: Vec<I>,
    freed_uncommitted: Vec<I>,
}

impl<K: Clone + Eq + std::hash::Hash, I: Slot> Interned<K, I> {
    pub(super) fn new() -> Self {
        Interned {
            keys: Vec::new(),
            index: HashMap::new(),
            refs: Vec::new(),
            free: Vec::new(),
            freed_uncommitted: Vec::new(),
        }
    }

    /// Takes a reference to `key`'s slot (creating it); returns the index and whether it is new.
    pub(super) fn acquire(&mut self, key: K) -> (I, bool) {
        if let Some(&i) = self.index.get(&key) {
            self.refs[i.slot()] += 1;
            return (i, false);
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.keys[i.slot()] = Some(key.clone());
                self.refs[i.slot()] = 1;
                i
            }
            None => {
                self.keys.push(Some(key.clone()));
                self.refs.push(1);
                I::from_slot((self.keys.len() - 1) as u32)
            }
        };
        self.index.insert(key, i);
        (i, true)
    }

    /// Drops a reference; returns the key when it was the last. The slot keeps its content
    /// until [`Interned::recycle`].
    pub(super) fn release(&mut self, i: I) -> Option<K> {
        let r = &mut self.refs[i.slot()];
        *r = r
            .checked_sub(1)
            .expect("released an object with no references");
        if *r > 0 {
            return None;
        }
        let key = self.keys[i.slot()].clone()?;
        self.index.remove(&key);
        self.freed_uncommitted.push(i);
        Some(key)
    }

    /// Empties the slots released since the last call and makes them reusable (call once the
    /// FIB no longer points at them and every worker has moved on).
    pub(super) fn recycle(&mut self) {
        for &i in &self.freed_uncommitted {
            self.keys[i.slot()] = None;
        }
        self.free.append(&mut self.freed_uncommitted);
    }

    pub(super) fn live(&self) -> usize {
        self.index.len()
    }
}
