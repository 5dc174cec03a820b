//! [`HeldFrames`]: frames a detached receive queue keeps in the peer's memory, named by token,
//! their slots given back to the peer in ring order once released.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::region::Region;
use crate::ring::{RingRef, Role};

use super::shared::{refill_upto, Queue, Segment, Shared};

/// One held slot: a private, validated copy of its descriptor, and whether it is held.
#[derive(Debug, Default)]
pub(super) struct HeldSlot {
    offset: AtomicU64,
    /// Region index (high 32 bits) and length (low 32 bits).
    region_len: AtomicU64,
    held: AtomicBool,
}

/// Frames a detached [`RxQueue`](crate::RxQueue) received without copying, still in the peer's
/// memory and named by token (their ring slot). Shared by the queue and whoever holds the frames:
/// it keeps the connection's memory mapped while the queue lives or any frame is held, so a held
/// frame stays readable after the peer left (its bytes then are whatever the peer last wrote), and
/// lets go of it with the last release after the queue is dropped.
///
/// The frame's bytes are only ever copied out (the peer may change them at any time); each token is
/// released exactly once, by the holder, on the holder's thread; the queue gives the slots back to
/// the peer in ring order, so one frame held long holds back the slots after it.
#[derive(Debug)]
pub struct HeldFrames {
    /// The connection's regions, read only for a held frame: valid while `keep` holds the
    /// connection's memory, which it does until the queue is gone and no frame is held.
    regions: *const [Region],
    /// The connection's memory, let go of (unmapped, its fds closed, unless the queue or the
    /// interface still has it) as soon as nothing can read it through `regions` any more.
    keep: Mutex<Option<Arc<Shared>>>,
    slots: Box<[HeldSlot]>,
    /// Frames held so far (written by the receiving queue only).
    taken: AtomicU64,
    /// Frames released so far (written by the holder only).
    returned: AtomicU64,
    /// Releases of a token that was not held (a holder's bug, ignored).
    bad_releases: AtomicU64,
    /// Set when the queue is dropped: no frame will be held any more.
    pub(super) queue_gone: AtomicBool,
}

#[inline]
pub(super) fn bump_single(c: &AtomicU64) {
    // Single writer: a plain load and store, no locked instruction.
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

// SAFETY: `regions` points into the `Shared` that `keep` owns and is dereferenced only while a
// frame is held, when `keep` still owns it (see `retire_if_done`); `Region` is `Sync`, and
// everything else is atomics and a mutex.
unsafe impl Send for HeldFrames {}
// SAFETY: as above.
unsafe impl Sync for HeldFrames {}

impl HeldFrames {
    pub(super) fn new(shared: Arc<Shared>, slots: u16) -> HeldFrames {
        HeldFrames {
            regions: shared.regions.as_slice() as *const [Region],
            keep: Mutex::new(Some(shared)),
            slots: (0..slots).map(|_| HeldSlot::default()).collect(),
            taken: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            bad_releases: AtomicU64::new(0),
            queue_gone: AtomicBool::new(false),
        }
    }

    pub(super) fn hold(&self, token: u32, seg: Segment) {
        self.hold_uncounted(token, seg);
        bump_single(&self.taken);
    }

    /// [`HeldFrames::hold`] for a burst that counts its frames once ([`HeldFrames::count_taken`]).
    #[inline(always)]
    pub(super) fn hold_uncounted(&self, token: u32, seg: Segment) {
        let Some(s) = self.slots.get(token as usize) else {
            return;
        };
        s.offset.store(seg.offset, Ordering::Relaxed);
        s.region_len.store(
            (u64::from(seg.region) << 32) | u64::from(seg.len),
            Ordering::Relaxed,
        );
        s.held.store(true, Ordering::Release);
    }

    /// Counts `n` frames held by [`HeldFrames::hold_uncounted`].
    pub(super) fn count_taken(&self, n: u64) {
        let t = &self.taken;
        t.store(t.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// The held frame `token`: (region, offset, length), or `None` if it is not held.
    #[inline]
    pub(super) fn frame(&self, token: u32) -> Option<(&Region, u64, usize)> {
        let s = self.slots.get(token as usize)?;
        if !s.held.load(Ordering::Acquire) {
            return None;
        }
        let rl = s.region_len.load(Ordering::Relaxed);
        // SAFETY: a frame is held, so the queue is alive or the last release has not happened:
        // `keep` still owns the `Shared` the pointer points into (its `regions` never change).
        let regions = unsafe { &*self.regions };
        let region = regions.get((rl >> 32) as usize)?;
        Some((
            region,
            s.offset.load(Ordering::Relaxed),
            (rl & 0xffff_ffff) as usize,
        ))
    }

    /// Length of the held frame `token` (0 if it is not held).
    pub fn len(&self, token: u32) -> usize {
        self.frame(token).map_or(0, |(_, _, len)| len)
    }

    /// Copies bytes `[offset, offset + dst.len())` of the held frame `token` into `dst`;
    /// false, copying nothing, when the frame is not held or the range is not inside it.
    pub fn copy_out(&self, token: u32, offset: usize, dst: &mut [u8]) -> bool {
        match self.frame(token) {
            Some((region, at, len)) if offset.checked_add(dst.len()).is_some_and(|e| e <= len) => {
                region.copy_out(at + offset as u64, dst)
            }
            _ => false,
        }
    }

    /// Gives the frame `token` back: its slot returns to the peer with the queue's next burst
    /// (once every slot before it is back too). A token not held is counted and ignored.
    pub fn release(&self, token: u32) {
        match self.slots.get(token as usize) {
            Some(s) if s.held.load(Ordering::Relaxed) => {
                s.held.store(false, Ordering::Release);
                bump_single(&self.returned);
                if self.queue_gone.load(Ordering::Acquire) {
                    self.retire_if_done();
                }
            }
            _ => bump_single(&self.bad_releases),
        }
    }

    /// [`HeldFrames::release`] of each of `tokens`, counted and checked for retirement once
    /// for the whole batch (a transmit burst frees its frames together).
    pub fn release_many(&self, tokens: &[u32]) {
        self.release_each(tokens.iter().copied());
    }

    /// [`HeldFrames::release_many`] of a burst received by
    /// [`RxQueue::receive_held`](crate::RxQueue::receive_held).
    pub fn release_frames(&self, frames: &[HeldRx]) {
        self.release_each(frames.iter().map(|f| f.token));
    }

    #[inline(always)]
    fn release_each(&self, tokens: impl Iterator<Item = u32>) {
        let (mut returned, mut bad) = (0, 0);
        for token in tokens {
            match self.slots.get(token as usize) {
                Some(s) if s.held.load(Ordering::Relaxed) => {
                    s.held.store(false, Ordering::Release);
                    returned += 1;
                }
                _ => bad += 1,
            }
        }
        if returned > 0 {
            let r = &self.returned;
            r.store(r.load(Ordering::Relaxed) + returned, Ordering::Relaxed);
            if self.queue_gone.load(Ordering::Acquire) {
                self.retire_if_done();
            }
        }
        if bad > 0 {
            let b = &self.bad_releases;
            b.store(b.load(Ordering::Relaxed) + bad, Ordering::Relaxed);
        }
    }

    /// Frames held and not released yet.
    pub fn in_flight(&self) -> u64 {
        self.taken
            .load(Ordering::Acquire)
            .wrapping_sub(self.returned.load(Ordering::Acquire))
    }

    /// Releases of tokens that were not held.
    pub fn bad_releases(&self) -> u64 {
        self.bad_releases.load(Ordering::Relaxed)
    }

    /// Whether the queue is gone and no frame is held: nothing will use this any more.
    pub fn is_retired(&self) -> bool {
        self.queue_gone.load(Ordering::Acquire) && self.in_flight() == 0
    }

    /// Whether this still keeps the connection's memory mapped (until it retires).
    pub fn keeps_memory(&self) -> bool {
        self.keep
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Once retired, lets go of the connection's memory: no frame is held and none will be, so
    /// `regions` is never read again.
    #[cold]
    pub(super) fn retire_if_done(&self) {
        if self.is_retired() {
            let gone = self.keep.lock().unwrap_or_else(|e| e.into_inner()).take();
            drop(gone);
        }
    }

    pub(super) fn is_held(&self, slot: usize) -> bool {
        self.slots
            .get(slot)
            .is_some_and(|s| s.held.load(Ordering::Acquire))
    }
}

/// A detached receive queue's holding state.
#[derive(Debug)]
pub(super) struct HoldState {
    pub(super) frames: Arc<HeldFrames>,
    /// The slots before this index are back with the peer (master: the tail written; slave:
    /// the buffers posted again); from here to the queue's `idx` they are received, some held.
    pub(super) released: u16,
}

/// Gives back to the peer the slots from `h.released` up to the first still held.
pub(super) fn reclaim(shared: &Shared, q: &mut Queue, role: Role, h: &mut HoldState) {
    let Some(r) = shared.ring(q) else {
        return;
    };
    let mask = usize::from(r.size() - 1);
    let mut b = h.released;
    while b != q.idx && !h.frames.is_held(usize::from(b) & mask) {
        b = b.wrapping_add(1);
    }
    if b == h.released {
        return;
    }
    give_back_to(r, q, role, h, b, shared.buffer_size);
}

/// Gives back to the peer every slot before free-running index `b` (none of them held).
#[inline]
pub(super) fn give_back_to(
    r: RingRef<'_>,
    q: &mut Queue,
    role: Role,
    h: &mut HoldState,
    b: u16,
    bsize: u32,
) {
    h.released = b;
    match role {
        Role::Master => r.tail().store(b, Ordering::Release),
        Role::Slave => refill_upto(r, q, bsize, b),
    }
}

/// A frame received by [`RxQueue::receive_held`](crate::RxQueue::receive_held): held in the peer's
/// memory under `token` (in the queue's [`HeldFrames`]), `len` bytes long.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldRx {
    /// The token naming the frame in its [`HeldFrames`].
    pub token: u32,
    /// The frame's length in bytes.
    pub len: u32,
}
