//! [`Interned`]: reference-counted table slots interned by key (adjacencies, load balances).

use std::collections::HashMap;

/// Slots with reference counts, interned by key. A slot whose last reference goes keeps its
/// content (the FIB may still point at it until the commit's FIB writes are done) and becomes
/// reusable only when the commit recycles it.
pub(super) struct Interned<K> {
    pub(super) keys: Vec<Option<K>>,
    pub(super) index: HashMap<K, u32>,
    pub(super) refs: Vec<u32>,
    free: Vec<u32>,
    freed_uncommitted: Vec<u32>,
}

impl<K: Clone + Eq + std::hash::Hash> Interned<K> {
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
    pub(super) fn acquire(&mut self, key: K) -> (u32, bool) {
        if let Some(&i) = self.index.get(&key) {
            self.refs[i as usize] += 1;
            return (i, false);
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.keys[i as usize] = Some(key.clone());
                self.refs[i as usize] = 1;
                i
            }
            None => {
                self.keys.push(Some(key.clone()));
                self.refs.push(1);
                (self.keys.len() - 1) as u32
            }
        };
        self.index.insert(key, i);
        (i, true)
    }

    /// Drops a reference; returns the key when it was the last. The slot keeps its content
    /// until [`Interned::recycle`].
    pub(super) fn release(&mut self, i: u32) -> Option<K> {
        let r = &mut self.refs[i as usize];
        *r = r
            .checked_sub(1)
            .expect("released an object with no references");
        if *r > 0 {
            return None;
        }
        let key = self.keys[i as usize].clone()?;
        self.index.remove(&key);
        self.freed_uncommitted.push(i);
        Some(key)
    }

    /// Empties the slots released since the last call and makes them reusable (call once the
    /// FIB no longer points at them and every worker has moved on).
    pub(super) fn recycle(&mut self) {
        for &i in &self.freed_uncommitted {
            self.keys[i as usize] = None;
        }
        self.free.append(&mut self.freed_uncommitted);
    }

    pub(super) fn live(&self) -> usize {
        self.index.len()
    }
}
