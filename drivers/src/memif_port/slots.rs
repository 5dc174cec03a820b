//! [`HandOver`]: how the control side leaves something for one worker (a new connection's
//! queue, a cut-through) without the worker ever waiting for it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Something the control side leaves for one worker: the worker checks a generation with one
/// atomic load per burst and takes the lock only when it changed.
pub(super) struct HandOver<T> {
    generation: AtomicU64,
    value: Mutex<T>,
}

impl<T: Default> HandOver<T> {
    pub(super) fn new() -> Self {
        HandOver {
            generation: AtomicU64::new(0),
            value: Mutex::new(T::default()),
        }
    }

    /// Changes what is left with `f`, then tells the worker.
    pub(super) fn update(&self, f: impl FnOnce(&mut T)) {
        f(&mut self.value.lock().unwrap_or_else(|e| e.into_inner()));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// What was left, taken (a default left in its place), if anything changed since
    /// generation `seen`.
    #[inline]
    pub(super) fn take_if_changed(&self, seen: &mut u64) -> Option<T> {
        let g = self.generation.load(Ordering::Acquire);
        if g == *seen {
            return None;
        }
        *seen = g;
        Some(std::mem::take(
            &mut *self.value.lock().unwrap_or_else(|e| e.into_inner()),
        ))
    }
}
