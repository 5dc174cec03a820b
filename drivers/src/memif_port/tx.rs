//! A worker's transmit queue of a memif port ([`MemifTx`]) and where it lives ([`TxHome`]), so
//! that a receive queue cut through to the port can use it too.

use dataplane::BufferIndex;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use crossbeam_utils::atomic::AtomicCell;
use dataplane::{TxQueue, WorkerBuffers};
use memif::queue::HeldFrames;
use memif::TxSource;

use super::counters::{bump, TxCounters};
use super::held::HeldSource;
use super::slots::HandOver;

/// A worker's transmit queue of a memif port.
pub(super) struct MemifTx {
    home: Arc<TxHome>,
    /// Bytes of Ethernet header left out (IP mode).
    skip: usize,
}

/// Where a worker's memif transmit queue lives: used by the port's `interface-output` and by
/// a receive queue cut through to the port (`super::cut_through`), both on the worker's
/// thread, each taking the state for the length of one call and putting it back (an atomic
/// swap each way, never a wait). Empty until a [`MemifTx`] takes it, and again once that is
/// dropped.
pub(super) struct TxHome {
    /// Each new connection's queue, as the control thread hands it over (`Some(None)`: the
    /// link went down).
    slot: HandOver<Option<Option<TxLane>>>,
    /// The queue's counters.
    pub(super) counters: TxCounters,
    state: AtomicCell<Option<Box<TxState>>>,
    /// Whether a [`MemifTx`] uses this home now.
    open: AtomicBool,
}

// The swap is one atomic instruction, not crossbeam's lock-based fallback.
const _: () = assert!(AtomicCell::<Option<Box<TxState>>>::is_lock_free());

/// A worker's memif transmit queue, as handed over by the control thread.
struct TxState {
    seen: u64,
    queue: Option<TxLane>,
}

/// A transmit queue as a worker holds it: its own, or one it shares with other workers when the
/// peer gave fewer queues than there are workers (worker `w` sends on queue `w % queues`).
pub(super) enum TxLane {
    /// This worker's alone.
    Own(memif::TxQueue),
    /// Shared: taken for one burst at a time (VPP shares a device's transmit queues between
    /// threads the same way when it has fewer of them than threads).
    Shared(Arc<SharedTx>),
}

/// A transmit queue several workers send on, one burst at a time.
pub(super) struct SharedTx(Mutex<memif::TxQueue>);

impl SharedTx {
    pub(super) fn new(q: memif::TxQueue) -> SharedTx {
        SharedTx(Mutex::new(q))
    }

    /// The queue, spinning while another worker sends a burst on it: a worker never sleeps
    /// in the kernel for it, and no burst holds it longer than one ring's worth of copies.
    #[inline]
    fn lock(&self) -> MutexGuard<'_, memif::TxQueue> {
        loop {
            match self.0.try_lock() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => std::hint::spin_loop(),
            }
        }
    }
}

impl TxHome {
    pub(super) fn new() -> TxHome {
        TxHome {
            slot: HandOver::new(),
            counters: TxCounters::default(),
            state: AtomicCell::new(None),
            open: AtomicBool::new(false),
        }
    }

    /// The control thread's side: a new connection's queue, or `None` when the link is down.
    pub(super) fn hand_over(&self, q: Option<TxLane>) {
        self.slot.update(|s| *s = Some(q));
    }

    /// Whether a [`MemifTx`] uses this home now (its port's transmit queue on this worker is
    /// attached and not dropped).
    pub(super) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Runs `f` on the queue (`None` while the link is down), having picked up a new one from
    /// the control thread first; `None` when no [`MemifTx`] holds this home. Called on the
    /// worker's thread only, never from within `f`.
    #[inline(always)]
    pub(super) fn with_queue<R>(
        &self,
        f: impl FnOnce(Option<&mut memif::TxQueue>) -> R,
    ) -> Option<R> {
        let mut state = self.state.take()?;
        if let Some(Some(q)) = self.slot.take_if_changed(&mut state.seen) {
            state.queue = q;
        }
        let r = match state.queue.as_mut() {
            Some(TxLane::Own(q)) => f(Some(q).filter(|q| q.is_live())),
            Some(TxLane::Shared(s)) => {
                let mut q = s.lock();
                f(Some(&mut *q).filter(|q| q.is_live()))
            }
            None => f(None),
        };
        self.state.store(Some(state));
        Some(r)
    }
}

impl MemifTx {
    /// The transmit queue of `home`'s worker, leaving out `skip` bytes of Ethernet header.
    pub(super) fn new(home: Arc<TxHome>, skip: usize) -> MemifTx {
        home.state.store(Some(Box::new(TxState {
            seen: 0,
            queue: None,
        })));
        home.open.store(true, Ordering::Release);
        MemifTx { home, skip }
    }
}

impl Drop for MemifTx {
    fn drop(&mut self) {
        // A receive queue still cut through to this one finds nothing and leaves its frames
        // to the graph from now on.
        self.home.open.store(false, Ordering::Release);
        drop(self.home.state.take());
    }
}

impl TxQueue for MemifTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        let home = &*self.home;
        let skip = self.skip;
        let done = home
            .with_queue(|q| {
                let src = FromBuffers {
                    buffers,
                    packets,
                    skip,
                    short: Cell::new(0),
                    last_source: Cell::new(None),
                };
                q.map(|q| (q.transmit_report(&src), src.short.get()))
            })
            .flatten();
        let c = &home.counters;
        let Some((report, short)) = done else {
            // Link down: the frames are dropped here, counted, not left to look like a full ring.
            bump(&c.link_down, packets.len() as u64);
            buffers.free(packets);
            return packets.len();
        };
        let n = report.taken;
        bump(&c.packets, report.sent);
        bump(&c.bytes, report.bytes);
        bump(&c.too_short, short);
        bump(&c.peer_to_peer, report.held_copies);
        buffers.free(&packets[..n]);
        n
    }

    fn copies_external(&self) -> bool {
        true
    }
}

/// Quiver packets (chains too) as a memif transmit source.
struct FromBuffers<'a> {
    buffers: &'a WorkerBuffers,
    packets: &'a [BufferIndex],
    skip: usize,
    /// Frames no longer than the header left out (sent as nothing).
    short: Cell<u64>,
    /// The external source last looked up, by id: a burst's held frames mostly come from one.
    last_source: Cell<Option<(u32, &'a HeldFrames)>>,
}

impl<'a> FromBuffers<'a> {
    /// The memif queue's held frames behind external source `id`, if it is one.
    #[inline]
    fn held_frames(&self, id: u32) -> Option<&'a HeldFrames> {
        match self.last_source.get() {
            Some((last, held)) if last == id => Some(held),
            _ => {
                let buffers: &'a WorkerBuffers = self.buffers;
                let held = &buffers.external_source_as::<HeldSource>(id)?.0;
                self.last_source.set(Some((id, held)));
                Some(held)
            }
        }
    }
}

impl TxSource for FromBuffers<'_> {
    fn frames(&self) -> usize {
        self.packets.len()
    }

    #[inline]
    fn frame_len(&self, i: usize) -> usize {
        let len = self.buffers.meta(self.packets[i]).total_length() as usize;
        // A frame no longer than the header left out is sent as nothing: memif drops and counts
        // empty frames (and takes them, so each is counted here once).
        if len <= self.skip {
            self.short.set(self.short.get() + 1);
        }
        len.saturating_sub(self.skip)
    }

    /// A frame received on a memif port of this worker and not copied yet is copied from
    /// that peer's memory straight into this one's.
    #[inline]
    fn held(&self, i: usize) -> Option<(&HeldFrames, u32, usize)> {
        let bi = self.packets[i];
        let (source, token) = self.buffers.external_ref(bi)?;
        let held = self.held_frames(source)?;
        let meta = self.buffers.meta(bi);
        if meta.next().is_some() {
            return None;
        }
        // The window may have moved (metadata only) inside the frame; a window reaching past
        // the frame is refused by the copy, which then reads the bytes the usual way.
        let start =
            usize::from(meta.data_offset()).checked_sub(usize::from(self.buffers.headroom()))?;
        Some((held, token, start + self.skip))
    }

    #[inline]
    fn bytes_at(&self, i: usize, offset: usize) -> &[u8] {
        let mut off = offset + self.skip;
        for bi in self.buffers.chain(self.packets[i]) {
            let d = self.buffers.data(bi);
            if off < d.len() {
                return &d[off..];
            }
            off -= d.len();
        }
        &[]
    }
}
