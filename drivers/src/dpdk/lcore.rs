//! Worker threads as DPDK lcores.
//!
//! Quiver's workers are its own pinned threads, not EAL lcores. A thread without an lcore id
//! still may call rx/tx bursts, but gets no mempool cache: every buffer a driver allocates or
//! frees would go through the mempool ops, and so through the pool's mutex. So each worker
//! registers itself (`rte_thread_register`, which hands out a free lcore id) on its own thread
//! when it builds its first DPDK queue pair, and unregisters when its last DPDK queue is dropped —
//! which happens on that same thread, when the worker's graph is dropped as the worker stops.

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::thread::ThreadId;

use dpdk_sys as sys;

use super::eal::DpdkError;

/// A thread's lcore, held by every DPDK queue the thread uses.
#[derive(Debug)]
pub(crate) struct Lcore {
    id: u32,
    thread: ThreadId,
    /// We registered the thread (rather than finding it an EAL thread already).
    registered: bool,
}

thread_local! {
    static CURRENT: RefCell<Weak<Lcore>> = const { RefCell::new(Weak::new()) };
}

impl Lcore {
    /// The calling thread's lcore, registering the thread with DPDK if it has none yet.
    pub(crate) fn current() -> Result<Arc<Lcore>, DpdkError> {
        if let Some(l) = CURRENT.with(|c| c.borrow().upgrade()) {
            return Ok(l);
        }
        // SAFETY: reads this thread's lcore id.
        let id = unsafe { sys::rte_lcore_id() };
        let lcore = if id != sys::LCORE_ID_ANY {
            // An EAL thread (the main lcore: the thread that started the EAL).
            Lcore {
                id,
                thread: std::thread::current().id(),
                registered: false,
            }
        } else {
            // SAFETY: registers the calling thread; the EAL is running (queues exist only then).
            if unsafe { sys::rte_thread_register() } != 0 {
                return Err(DpdkError::from_rte_errno(
                    "rte_thread_register (DPDK lcore ids exhausted?)",
                ));
            }
            // SAFETY: as above.
            let id = unsafe { sys::rte_lcore_id() };
            tracing::debug!(lcore = id, "worker thread registered as a DPDK lcore");
            Lcore {
                id,
                thread: std::thread::current().id(),
                registered: true,
            }
        };
        let lcore = Arc::new(lcore);
        CURRENT.with(|c| *c.borrow_mut() = Arc::downgrade(&lcore));
        Ok(lcore)
    }

    /// Whether the calling thread is this lcore's thread.
    pub(crate) fn is_current_thread(&self) -> bool {
        std::thread::current().id() == self.thread
    }

    /// The lcore id.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for Lcore {
    fn drop(&mut self) {
        if !self.registered {
            return;
        }
        if self.is_current_thread() {
            // SAFETY: unregisters the calling thread, which we registered.
            unsafe { sys::rte_thread_unregister() };
            tracing::debug!(lcore = self.id, "worker thread unregistered from DPDK");
        } else {
            // rte_thread_unregister works only on the thread itself; the id stays taken.
            tracing::warn!(
                lcore = self.id,
                "DPDK queues dropped away from their worker thread: lcore id not released"
            );
        }
    }
}
