//! Configuration snapshots published without stopping workers (quiescent-state-based
//! reclamation, QSBR).
//!
//! The control side builds a new immutable value and [`Published::publish`]es it with one atomic
//! pointer swap. A worker [`Reader::read`]s the current value at the top of every loop pass; that
//! call is also the worker's declaration that it holds no older value (a *quiescent state*),
//! which the borrow checker enforces: the reference returned borrows the reader until the next
//! call. A replaced value is freed by the control side, never by a worker, once every online
//! reader has passed a quiescent state after the swap. Readers never block and never write a
//! shared cache line unless a new value was published.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_utils::CachePadded;

const OFFLINE: u64 = u64::MAX;

struct ReaderSlot {
    seen: CachePadded<AtomicU64>,
}

struct Retired {
    epoch: u64,
    _value: Box<dyn Any + Send>,
}

/// A reclamation domain: the readers (workers) and the values waiting to be freed.
pub struct Epochs {
    epoch: AtomicU64,
    readers: Mutex<Vec<Arc<ReaderSlot>>>,
    retired: Mutex<Vec<Retired>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Epochs {
    /// A domain with no readers.
    pub fn new() -> Arc<Epochs> {
        Arc::new(Epochs {
            epoch: AtomicU64::new(1),
            readers: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
        })
    }

    /// Registers a reader (one per worker thread).
    pub fn reader(self: &Arc<Self>) -> Reader {
        let now = self.epoch.load(SeqCst);
        let slot = Arc::new(ReaderSlot {
            seen: CachePadded::new(AtomicU64::new(now)),
        });
        lock(&self.readers).push(slot.clone());
        Reader {
            slot,
            domain: self.clone(),
            last: now,
        }
    }

    fn retire(&self, epoch: u64, value: Box<dyn Any + Send>) {
        lock(&self.retired).push(Retired {
            epoch,
            _value: value,
        });
    }

    /// Frees every retired value that no reader can still see; returns how many.
    pub fn reclaim(&self) -> usize {
        let oldest_seen = lock(&self.readers)
            .iter()
            .map(|r| r.seen.load(SeqCst))
            .min()
            .unwrap_or(OFFLINE);
        let freed: Vec<Retired> = {
            let mut retired = lock(&self.retired);
            let (free, keep) = retired.drain(..).partition(|r| r.epoch <= oldest_seen);
            *retired = keep;
            free
        };
        // Dropped here, outside the lock, on the control side's thread.
        freed.len()
    }

    /// Waits until every online reader has passed a quiescent state after this call began, so
    /// that nothing it could see before the call is still in use. Readers never wait for this;
    /// the caller yields its CPU while it waits.
    pub fn synchronize(&self) {
        let target = self.epoch.fetch_add(1, SeqCst) + 1;
        let started = std::time::Instant::now();
        let mut warned = false;
        loop {
            let behind = lock(&self.readers)
                .iter()
                .any(|r| r.seen.load(SeqCst) < target);
            if !behind {
                return;
            }
            if !warned && started.elapsed() > std::time::Duration::from_secs(1) {
                tracing::warn!("a worker has not passed a quiescent state for 1 s");
                warned = true;
            }
            std::thread::yield_now();
        }
    }

    /// Retired values still waiting for a reader to move on.
    pub fn pending(&self) -> usize {
        lock(&self.retired).len()
    }
}

/// A value workers read and the control side replaces.
pub struct Published<T> {
    domain: Arc<Epochs>,
    current: AtomicPtr<T>,
    _owns: PhantomData<Box<T>>,
}

impl<T: Send + Sync + 'static> Published<T> {
    /// Publishes `value` as the first version.
    pub fn new(domain: &Arc<Epochs>, value: T) -> Published<T> {
        Published {
            domain: domain.clone(),
            current: AtomicPtr::new(Box::into_raw(Box::new(value))),
            _owns: PhantomData,
        }
    }

    /// Replaces the value. Workers see the new one from their next loop pass; the old one is
    /// freed by a later [`Epochs::reclaim`] (this call reclaims what it can).
    pub fn publish(&self, value: T) {
        let new = Box::into_raw(Box::new(value));
        let old = self.current.swap(new, SeqCst);
        let epoch = self.domain.epoch.fetch_add(1, SeqCst) + 1;
        // SAFETY: `old` came from `Box::into_raw` (in `new` or an earlier `publish`) and was just
        // unlinked, so this is its only owner; readers that may still hold it announced an epoch
        // below `epoch`, so `reclaim` keeps it until they move on.
        let old = unsafe { Box::from_raw(old) };
        self.domain.retire(epoch, old);
        self.domain.reclaim();
    }

    /// The domain this value belongs to.
    pub fn domain(&self) -> &Arc<Epochs> {
        &self.domain
    }
}

impl<T> Drop for Published<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no reader borrows the value (a `Reader::read` result borrows
        // the `Published`), and the pointer came from `Box::into_raw`.
        drop(unsafe { Box::from_raw(*self.current.get_mut()) });
    }
}

// SAFETY: a `Published<T>` hands out `&T` to other threads (needs `T: Sync`) and drops `T` on
// whichever thread retires it (needs `T: Send`).
unsafe impl<T: Send + Sync> Sync for Published<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Send for Published<T> {}

/// One worker's registration in a domain.
pub struct Reader {
    slot: Arc<ReaderSlot>,
    domain: Arc<Epochs>,
    last: u64,
}

impl Reader {
    /// Declares a quiescent state and returns the current value. The reference lives until the
    /// next call on this reader.
    #[inline]
    pub fn read<'r, T>(&'r mut self, cell: &'r Published<T>) -> &'r T {
        assert!(
            Arc::ptr_eq(&self.domain, &cell.domain),
            "reading a snapshot of another domain"
        );
        let epoch = self.domain.epoch.load(SeqCst);
        if epoch != self.last {
            self.slot.seen.store(epoch, SeqCst);
            self.last = epoch;
        }
        // SAFETY: the pointer is always a live `Box` (swapped in by `publish`). It was loaded
        // after this reader announced `epoch`, and a value unlinked at a later epoch is freed
        // only after this reader announces that epoch, which needs `&mut self` again, so not
        // while the returned reference lives. The domain check above makes this reader's
        // announcements count for `cell`.
        unsafe { &*cell.current.load(SeqCst) }
    }

    /// Declares that this reader holds nothing until its next [`Reader::read`] (call before a
    /// long sleep, so that reclamation need not wait for it).
    pub fn go_offline(&mut self) {
        self.slot.seen.store(OFFLINE, SeqCst);
        self.last = OFFLINE;
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.go_offline();
        lock(&self.domain.readers).retain(|r| !Arc::ptr_eq(r, &self.slot));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    #[test]
    fn an_old_value_is_freed_only_after_every_reader_moved_on() {
        let drops = Arc::new(AtomicUsize::new(0));
        let epochs = Epochs::new();
        let cell = Published::new(&epochs, Counted(drops.clone()));
        let mut r1 = epochs.reader();
        let mut r2 = epochs.reader();
        let _ = r1.read(&cell);
        let _ = r2.read(&cell);
        cell.publish(Counted(drops.clone()));
        assert_eq!(
            drops.load(SeqCst),
            0,
            "both readers may still hold the first value"
        );
        let _ = r1.read(&cell);
        assert_eq!(epochs.reclaim(), 0, "r2 has not moved on");
        let _ = r2.read(&cell);
        assert_eq!(epochs.reclaim(), 1);
        assert_eq!(drops.load(SeqCst), 1);
        r2.go_offline();
        cell.publish(Counted(drops.clone()));
        let _ = r1.read(&cell);
        assert_eq!(
            epochs.reclaim(),
            1,
            "an offline reader does not hold anything back"
        );
        drop(r1);
        drop(r2);
        cell.publish(Counted(drops.clone()));
        assert_eq!(
            epochs.pending(),
            0,
            "with no readers, publish frees at once"
        );
        drop(cell);
        assert_eq!(drops.load(SeqCst), 4);
    }
}
