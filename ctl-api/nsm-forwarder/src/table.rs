//! The connection table: one slot per connection id, each behind its own async mutex, so
//! work for one connection (Request, Close, expiry, a link event) is serialised while
//! different connections proceed in parallel. A slot that ends up empty leaves the table.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

type Slot<T> = Arc<tokio::sync::Mutex<Option<T>>>;

/// Connection id → its state, each behind its own lock.
pub struct Table<T> {
    slots: Mutex<HashMap<String, Slot<T>>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

/// Exclusive access to one connection's slot (`None`: no such connection). Dropping it with
/// the slot empty removes the id from the table.
pub struct SlotGuard<'a, T> {
    table: &'a Table<T>,
    id: String,
    slot: Slot<T>,
    guard: tokio::sync::OwnedMutexGuard<Option<T>>,
}

impl<T> Table<T> {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot<T>>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for exclusive access to `id`'s slot.
    pub async fn lock(&self, id: &str) -> SlotGuard<'_, T> {
        loop {
            let slot = self.map().entry(id.to_string()).or_default().clone();
            let guard = slot.clone().lock_owned().await;
            // The slot may have been emptied and removed while we waited: then start over
            // on whatever the table holds now, so that two tasks never own one id.
            if self.map().get(id).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                return SlotGuard {
                    table: self,
                    id: id.to_string(),
                    slot,
                    guard,
                };
            }
        }
    }

    /// The ids in the table now (some may be on their way in or out).
    pub fn ids(&self) -> Vec<String> {
        self.map().keys().cloned().collect()
    }

    /// Calls `f` on every entry no task holds right now, without waiting: an entry whose lock
    /// is held (a Request, Close or expiry in progress) is skipped.
    pub fn peek(&self, mut f: impl FnMut(&str, &T)) {
        let slots: Vec<(String, Slot<T>)> = self
            .map()
            .iter()
            .map(|(id, slot)| (id.clone(), slot.clone()))
            .collect();
        for (id, slot) in slots {
            if let Ok(guard) = slot.try_lock() {
                if let Some(entry) = guard.as_ref() {
                    f(&id, entry);
                }
            }
        }
    }

    /// How many ids the table holds now.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// True if the table holds no id.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Deref for SlotGuard<'_, T> {
    type Target = Option<T>;
    fn deref(&self) -> &Option<T> {
        &self.guard
    }
}

impl<T> DerefMut for SlotGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut Option<T> {
        &mut self.guard
    }
}

impl<T> Drop for SlotGuard<'_, T> {
    fn drop(&mut self) {
        if self.guard.is_none() {
            let mut map = self.table.map();
            if map
                .get(&self.id)
                .is_some_and(|s| Arc::ptr_eq(s, &self.slot))
            {
                map.remove(&self.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn empty_slots_leave_and_filled_ones_stay() {
        let t: Table<u32> = Table::default();
        {
            let g = t.lock("a").await;
            assert!(g.is_none());
        }
        assert!(t.is_empty());
        *t.lock("a").await = Some(1);
        assert_eq!(t.ids(), vec!["a".to_string()]);
        assert_eq!(*t.lock("a").await, Some(1));
        *t.lock("a").await = None;
        assert!(t.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_on_one_id_is_serialised() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let t = Arc::new(Table::<u64>::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..64u64 {
            let (t, inside, most) = (t.clone(), inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                let mut g = t.lock("x").await;
                let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                }
                // Every fourth task empties the slot (it leaves the table): a waiter on the
                // old slot must not get in beside one on the new.
                *g = if i % 4 == 3 {
                    None
                } else {
                    Some(g.unwrap_or(0) + 1)
                };
                inside.fetch_sub(1, Ordering::SeqCst);
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1);
        assert!(t.len() <= 1);
    }
}
