//! The copy-mode data path of one ring, shared by [`Interface`](crate::Interface)'s own burst
//! API and by queues detached from it for other threads ([`RxQueue`], [`TxQueue`]).
//!
//! Received frames are offered as a [`PeerFrame`]: the chain's descriptors, read once into a
//! private list and validated, plus a bounds-checked copy out of the peer's memory. So a frame is
//! copied exactly once, from the peer's buffer straight into wherever the application wants it
//! (a packet buffer of a forwarder, say). Transmitted frames come from any [`TxSource`] and are
//! copied once, into the peer's buffer.
//!
//! A detached [`RxQueue`] can also receive without copying ([`RxQueue::receive_holding`]): a
//! one-descriptor frame stays in the peer's memory, named by a token of the queue's
//! [`HeldFrames`], its slot kept from the peer until released. A frame held from one peer can be
//! transmitted to another ([`TxSource::held`]): one copy, region to region.
//! [`RxQueue::forward_to`] does both in one call for a cross-connect: held frames go straight
//! to another connection's transmit queue and are released, never more than its ring can take.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::interface::{Counters, Role, MAX_FRAME};
use crate::region::Region;
use crate::ring::{Desc, Ring, RingRef, DESC_FLAG_NEXT};

mod forward;
mod transmit;

pub use forward::{Forwarded, MAX_FORWARD_BURST};
pub(crate) use transmit::{transmit, unconsumed};

/// Most descriptors one received frame may span.
pub const MAX_SEGMENTS: usize = 256;

/// One ring as used by this side.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) ring: Ring,
    pub(crate) region: usize,
    pub(crate) eventfd: OwnedFd,
    /// Master rx: consumed = tail written. Master tx: tail. Slave tx: head. Slave rx: consumed.
    pub(crate) idx: u16,
    /// Slave rx only: head (buffers posted).
    pub(crate) posted: u16,
    /// Slave only: offset in region 0 of this ring's first buffer.
    pub(crate) buf_base: u64,
}

/// The memory of a live connection: shared by the interface and every queue detached from it,
/// so a mapping outlives the connection until the last queue using it is dropped.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) regions: Vec<Region>,
    pub(crate) buffer_size: u32,
    /// Cleared when the connection goes down: detached queues stop using it.
    live: AtomicBool,
}

impl Shared {
    pub(crate) fn new(regions: Vec<Region>, buffer_size: u32) -> Arc<Shared> {
        Arc::new(Shared {
            regions,
            buffer_size,
            live: AtomicBool::new(true),
        })
    }

    pub(crate) fn set_dead(&self) {
        self.live.store(false, Ordering::Release);
    }

    fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    fn ring<'a>(&'a self, q: &Queue) -> Option<RingRef<'a>> {
        self.regions.get(q.region).map(|r| q.ring.at(r))
    }
}

/// Bad-descriptor reasons.
#[derive(Debug, Clone, Copy)]
enum Bad {
    Region,
    Offset,
    Zero,
    TooLong,
    Chain,
}

fn count_bad(c: &mut Counters, b: Bad) {
    match b {
        Bad::Region => c.bad_desc_region += 1,
        Bad::Offset => c.bad_desc_offset += 1,
        Bad::Zero => c.bad_desc_zero_length += 1,
        Bad::TooLong => c.bad_desc_too_long += 1,
        Bad::Chain => c.bad_desc_chain += 1,
    }
}

/// A validated piece of a received frame in the peer's memory.
#[derive(Debug, Clone, Copy, Default)]
struct Segment {
    region: u16,
    offset: u64,
    len: u32,
}

/// A received frame, still in the peer's memory: its length and a bounds-checked copy.
///
/// The descriptors were read once and checked; the bytes are copied only by
/// [`PeerFrame::copy_to`], so the peer can change them under us but never make us read outside
/// its regions.
pub struct PeerFrame<'a> {
    regions: &'a [Region],
    segments: &'a [Segment],
    len: usize,
}

impl PeerFrame<'_> {
    /// The frame's length in bytes (at least 1, at most [`MAX_FRAME`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: empty descriptors are refused before a frame is offered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the frame's bytes `[offset, offset + dst.len())` into `dst`. Returns false,
    /// copying nothing, if that range is not inside the frame.
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) -> bool {
        if offset
            .checked_add(dst.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        let (mut skip, mut out) = (offset, 0usize);
        for s in self.segments {
            if out == dst.len() {
                break;
            }
            let len = s.len as usize;
            if skip >= len {
                skip -= len;
                continue;
            }
            let take = (len - skip).min(dst.len() - out);
            let ok = self
                .regions
                .get(usize::from(s.region))
                .is_some_and(|r| r.copy_out(s.offset + skip as u64, &mut dst[out..out + take]));
            if !ok {
                return false;
            }
            out += take;
            skip = 0;
        }
        out == dst.len()
    }
}

/// Where a receive burst puts frames.
pub trait RxSink {
    /// Takes `frame` (copying it out) and returns true, or returns false when it has no room:
    /// the frame then stays in the ring for the next burst and the burst ends.
    fn deliver(&mut self, frame: &PeerFrame<'_>) -> bool;
}

impl<F: FnMut(&PeerFrame<'_>) -> bool> RxSink for F {
    fn deliver(&mut self, frame: &PeerFrame<'_>) -> bool {
        self(frame)
    }
}

/// Frames to transmit, read piecewise so they need not be contiguous.
pub trait TxSource {
    /// How many frames.
    fn frames(&self) -> usize;
    /// Length of frame `i`.
    fn frame_len(&self, i: usize) -> usize;
    /// The contiguous bytes of frame `i` starting at `offset` (non-empty while
    /// `offset < frame_len(i)`).
    fn bytes_at(&self, i: usize, offset: usize) -> &[u8];
    /// When frame `i` is a frame held in another peer's memory (see [`HeldFrames`]): where,
    /// as (frames, token, offset of frame `i`'s first byte in the held frame). It is then
    /// copied from that memory straight into this peer's, and [`TxSource::bytes_at`] is not
    /// asked for it. `None` (the default): read it with `bytes_at`.
    fn held(&self, i: usize) -> Option<(&HeldFrames, u32, usize)> {
        let _ = i;
        None
    }
}

/// What a [`HoldSink`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Copied out: the frame's slot can go back to the peer.
    Copied,
    /// Kept in the peer's memory under the [`Hold`] it was offered: the slot stays taken until
    /// [`HeldFrames::release`] is called with its token.
    Held,
    /// No room: the frame stays in the ring for the next burst and the burst ends.
    NoRoom,
}

/// The right to keep a received frame in the peer's memory, offered for one-descriptor frames
/// by [`RxQueue::receive_holding`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    token: u32,
}

impl Hold {
    /// The token naming the frame in its [`HeldFrames`].
    pub fn token(&self) -> u32 {
        self.token
    }
}

/// Where a receive burst that may hold frames puts them.
pub trait HoldSink {
    /// Copies `frame` out, or (when offered a `hold`) keeps it where it is, or has no room.
    fn take(&mut self, frame: &PeerFrame<'_>, hold: Option<Hold>) -> Taken;
}

/// One held slot: a private, validated copy of its descriptor, and whether it is held.
#[derive(Debug, Default)]
struct HeldSlot {
    offset: AtomicU64,
    /// Region index (high 32 bits) and length (low 32 bits).
    region_len: AtomicU64,
    held: AtomicBool,
}

/// Frames a detached [`RxQueue`] received without copying, still in the peer's memory and
/// named by token (their ring slot). Shared by the queue and whoever holds the frames: it keeps
/// the connection's memory mapped while the queue lives or any frame is held, so a held frame
/// stays readable after the peer left (its bytes then are whatever the peer last wrote), and
/// lets go of it with the last release after the queue is dropped.
///
/// The frame's bytes are only ever copied out (the peer may change them at any time); each
/// token is released exactly once, by the holder, on the holder's thread; the queue gives the
/// slots back to the peer in ring order, so one frame held long holds back the slots after it.
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
    queue_gone: AtomicBool,
}

#[inline]
fn bump_single(c: &AtomicU64) {
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
    fn new(shared: Arc<Shared>, slots: u16) -> HeldFrames {
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

    fn hold(&self, token: u32, seg: Segment) {
        self.hold_uncounted(token, seg);
        bump_single(&self.taken);
    }

    /// [`HeldFrames::hold`] for a burst that counts its frames once ([`HeldFrames::count_taken`]).
    #[inline(always)]
    fn hold_uncounted(&self, token: u32, seg: Segment) {
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
    fn count_taken(&self, n: u64) {
        let t = &self.taken;
        t.store(t.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// The held frame `token`: (region, offset, length), or `None` if it is not held.
    #[inline]
    fn frame(&self, token: u32) -> Option<(&Region, u64, usize)> {
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

    /// [`HeldFrames::release_many`] of a burst received by [`RxQueue::receive_held`].
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
    fn retire_if_done(&self) {
        if self.is_retired() {
            let gone = self.keep.lock().unwrap_or_else(|e| e.into_inner()).take();
            drop(gone);
        }
    }

    fn is_held(&self, slot: usize) -> bool {
        self.slots
            .get(slot)
            .is_some_and(|s| s.held.load(Ordering::Acquire))
    }
}

/// A detached receive queue's holding state.
#[derive(Debug)]
struct HoldState {
    frames: Arc<HeldFrames>,
    /// The slots before this index are back with the peer (master: the tail written; slave:
    /// the buffers posted again); from here to the queue's `idx` they are received, some held.
    released: u16,
}

/// Gives back to the peer the slots from `h.released` up to the first still held.
fn reclaim(shared: &Shared, q: &mut Queue, role: Role, h: &mut HoldState) {
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
fn give_back_to(r: RingRef<'_>, q: &mut Queue, role: Role, h: &mut HoldState, b: u16, bsize: u32) {
    h.released = b;
    match role {
        Role::Master => r.tail().store(b, Ordering::Release),
        Role::Slave => refill_upto(r, q, bsize, b),
    }
}

impl TxSource for [&[u8]] {
    fn frames(&self) -> usize {
        self.len()
    }
    fn frame_len(&self, i: usize) -> usize {
        self[i].len()
    }
    fn bytes_at(&self, i: usize, offset: usize) -> &[u8] {
        self[i].get(offset..).unwrap_or(&[])
    }
}

/// The receive side's scratch: the private copy of one chain's descriptors.
#[derive(Debug)]
pub(crate) struct RxScratch {
    segments: Vec<Segment>,
}

impl RxScratch {
    pub(crate) fn new() -> RxScratch {
        RxScratch {
            segments: Vec::with_capacity(MAX_SEGMENTS),
        }
    }
}

/// Frames (or slots) ready to receive on `q`, without consuming them.
fn rx_ready(shared: &Shared, q: &Queue, role: Role) -> u16 {
    let Some(r) = shared.ring(q) else {
        return 0;
    };
    let (produced, limit) = match role {
        Role::Master => (r.head().load(Ordering::Acquire), r.size()),
        Role::Slave => (
            r.tail().load(Ordering::Acquire),
            q.posted.wrapping_sub(q.idx).min(r.size()),
        ),
    };
    produced.wrapping_sub(q.idx).min(limit)
}

/// Receive up to `max` frames from `q` into `sink`; returns how many were delivered.
pub(crate) fn receive(
    shared: &Shared,
    q: &mut Queue,
    role: Role,
    scratch: &mut RxScratch,
    counters: &mut Counters,
    max: usize,
    sink: &mut impl RxSink,
) -> usize {
    receive_holding(
        shared,
        q,
        role,
        scratch,
        counters,
        max,
        &mut CopyingSink(sink),
        None,
    )
}

/// An [`RxSink`] as a [`HoldSink`] that never holds.
struct CopyingSink<'s, S: ?Sized>(&'s mut S);

impl<S: RxSink + ?Sized> HoldSink for CopyingSink<'_, S> {
    #[inline]
    fn take(&mut self, frame: &PeerFrame<'_>, _hold: Option<Hold>) -> Taken {
        if self.0.deliver(frame) {
            Taken::Copied
        } else {
            Taken::NoRoom
        }
    }
}

/// Where received descriptor `d` of ring slot `slot` points, as (region, offset): a slave's own
/// receive buffers are at fixed places (the master's offset and region are ignored: it may
/// only set length and flags).
#[inline(always)]
fn desc_place(shared: &Shared, q: &Queue, role: Role, d: &Desc, slot: u16) -> (u16, u64) {
    match role {
        Role::Master => (d.region, u64::from(d.offset)),
        Role::Slave => (
            0,
            q.buf_base + u64::from(slot) * u64::from(shared.buffer_size),
        ),
    }
}

/// How many slots from `q.idx` on the peer has published for us to receive, `unreleased` of
/// the ring's slots being still held here. An index claiming more than the ring can hold is
/// counted in `ring_index_overrun` and cut to what it can.
#[inline(always)]
fn rx_window(
    r: RingRef<'_>,
    q: &Queue,
    role: Role,
    unreleased: u16,
    counters: &mut Counters,
) -> u16 {
    let n = r.size();
    // The producer's index: head on S2M (master rx), tail on M2S (slave rx).
    let (produced, limit) = match role {
        Role::Master => (
            r.head().load(Ordering::Acquire),
            n.saturating_sub(unreleased),
        ),
        Role::Slave => (
            r.tail().load(Ordering::Acquire),
            q.posted.wrapping_sub(q.idx).min(n),
        ),
    };
    let avail = produced.wrapping_sub(q.idx);
    if avail > limit {
        counters.ring_index_overrun += 1;
        return limit;
    }
    avail
}

/// [`receive`], where `hold` (a detached queue's [`HeldFrames`]) lets the sink keep frames in
/// the peer's memory: their slots are given back to the peer only once released, in ring order.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn receive_holding(
    shared: &Shared,
    q: &mut Queue,
    role: Role,
    scratch: &mut RxScratch,
    counters: &mut Counters,
    max: usize,
    sink: &mut impl HoldSink,
    mut hold: Option<&mut HoldState>,
) -> usize {
    let Some(r) = shared.ring(q) else {
        return 0;
    };
    let n = r.size();
    // Slots received but still held: the peer cannot have refilled them yet.
    let unreleased = hold.as_ref().map_or(0, |h| q.idx.wrapping_sub(h.released));
    let avail = rx_window(r, q, role, unreleased, counters);
    let start = q.idx;
    let end = start.wrapping_add(avail);
    let mut cur = start;
    let mut delivered = 0;
    let mut rx_bytes = 0u64;
    let segments = &mut scratch.segments;
    let place = |d: &Desc, slot: u16| desc_place(shared, q, role, d, slot);
    while cur != end && delivered < max {
        let chain_start = cur;
        // Descriptors the peer's core wrote: fetched a few cache lines ahead, so reading them
        // does not stall.
        r.prefetch_desc_ahead(cur);
        let d = r.read_desc(cur);
        let one: [Segment; 1];
        let total: usize;
        let frame_segments: &[Segment] = if d.flags & DESC_FLAG_NEXT == 0 {
            // The common case, a frame in one descriptor: no chain to gather.
            cur = cur.wrapping_add(1);
            let (region, at) = place(&d, chain_start & (n - 1));
            match check_desc(shared, region, at, d.length, 0) {
                Ok(seg) => {
                    total = seg.len as usize;
                    one = [seg];
                    &one
                }
                Err(b) => {
                    count_bad(counters, b);
                    continue;
                }
            }
        } else {
            segments.clear();
            let mut sum = 0usize;
            let mut bad: Option<Bad> = None;
            loop {
                let d = r.read_desc(cur);
                let slot = cur & (n - 1);
                cur = cur.wrapping_add(1);
                if bad.is_none() {
                    let (region, at) = place(&d, slot);
                    match check_desc(shared, region, at, d.length, sum) {
                        Ok(seg) if segments.len() < MAX_SEGMENTS => {
                            sum += seg.len as usize;
                            segments.push(seg);
                        }
                        Ok(_) => bad = Some(Bad::TooLong),
                        Err(b) => bad = Some(b),
                    }
                }
                if d.flags & DESC_FLAG_NEXT == 0 {
                    break;
                }
                if cur == end {
                    bad = Some(Bad::Chain);
                    break;
                }
            }
            if let Some(b) = bad {
                count_bad(counters, b);
                continue;
            }
            total = sum;
            segments
        };
        let frame = PeerFrame {
            regions: &shared.regions,
            segments: frame_segments,
            len: total,
        };
        // Only a one-descriptor frame can be held: its slot is its whole buffer.
        let offer = match (&hold, frame_segments) {
            (Some(_), [_]) => Some(Hold {
                token: u32::from(chain_start & (n - 1)),
            }),
            _ => None,
        };
        match sink.take(&frame, offer) {
            Taken::NoRoom => {
                cur = chain_start;
                break;
            }
            Taken::Copied => {}
            Taken::Held => {
                if let (Some(h), Some(o)) = (hold.as_deref_mut(), offer) {
                    h.frames.hold(o.token, frame_segments[0]);
                }
            }
        }
        rx_bytes += total as u64;
        delivered += 1;
    }
    // Counted once per burst: kept in registers across the sink calls in the loop.
    counters.rx_packets += delivered as u64;
    counters.rx_bytes += rx_bytes;
    if let Some(h) = hold {
        q.idx = cur;
        reclaim(shared, q, role, h);
        return delivered;
    }
    if cur != start {
        q.idx = cur;
        match role {
            // Release the slots to the slave.
            Role::Master => r.tail().store(cur, Ordering::Release),
            // Post the consumed buffers again (same slots, N indices later).
            Role::Slave => refill(r, q, shared.buffer_size),
        }
    }
    delivered
}

/// A frame received by [`RxQueue::receive_held`]: held in the peer's memory under `token` (in
/// the queue's [`HeldFrames`]), `len` bytes long.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldRx {
    /// The token naming the frame in its [`HeldFrames`].
    pub token: u32,
    /// The frame's length in bytes.
    pub len: u32,
}

/// The common case of [`receive_holding`] in a tight loop: one-descriptor frames of at most
/// `max_len` bytes, each checked and held, into `out`. Stops before the first frame that is
/// chained or longer (left in the ring for the general path); bad descriptors are counted and
/// skipped, as there.
#[inline(never)]
fn receive_held(
    shared: &Shared,
    q: &mut Queue,
    role: Role,
    counters: &mut Counters,
    out: &mut [HeldRx],
    max_len: u32,
    h: &mut HoldState,
) -> usize {
    let Some(r) = shared.ring(q) else {
        return 0;
    };
    let n = r.size();
    let avail = rx_window(r, q, role, q.idx.wrapping_sub(h.released), counters);
    let end = q.idx.wrapping_add(avail);
    let mut cur = q.idx;
    let mut k = 0;
    let mut rx_bytes = 0u64;
    while cur != end && k < out.len() {
        r.prefetch_desc_ahead(cur);
        let d = r.read_desc(cur);
        if d.flags & DESC_FLAG_NEXT != 0 || d.length > max_len {
            break;
        }
        let slot = cur & (n - 1);
        let (region, at) = desc_place(shared, q, role, &d, slot);
        cur = cur.wrapping_add(1);
        match check_desc(shared, region, at, d.length, 0) {
            Ok(seg) => {
                h.frames.hold_uncounted(u32::from(slot), seg);
                out[k] = HeldRx {
                    token: u32::from(slot),
                    len: seg.len,
                };
                rx_bytes += u64::from(seg.len);
                k += 1;
            }
            Err(b) => count_bad(counters, b),
        }
    }
    h.frames.count_taken(k as u64);
    counters.rx_packets += k as u64;
    counters.rx_bytes += rx_bytes;
    q.idx = cur;
    reclaim(shared, q, role, h);
    k
}

fn check_desc(
    shared: &Shared,
    region: u16,
    offset: u64,
    length: u32,
    so_far: usize,
) -> Result<Segment, Bad> {
    let r = shared.regions.get(usize::from(region)).ok_or(Bad::Region)?;
    if length == 0 {
        return Err(Bad::Zero);
    }
    if length > shared.buffer_size || so_far + length as usize > MAX_FRAME {
        return Err(Bad::TooLong);
    }
    if !r.contains(offset, u64::from(length)) {
        return Err(Bad::Offset);
    }
    Ok(Segment {
        region,
        offset,
        len: length,
    })
}

/// Slave receive ring: post every free buffer (slot s always uses buffer s) and publish head.
pub(crate) fn refill(r: RingRef<'_>, q: &mut Queue, buffer_size: u32) {
    let consumed = q.idx;
    refill_upto(r, q, buffer_size, consumed);
}

/// [`refill`] where the slots from `consumed` on are not free yet (held frames).
fn refill_upto(r: RingRef<'_>, q: &mut Queue, buffer_size: u32, consumed: u16) {
    let n = r.size();
    let outstanding = q.posted.wrapping_sub(consumed);
    if outstanding >= n {
        return;
    }
    let mut h = q.posted;
    for _ in 0..(n - outstanding) {
        let slot = h & (n - 1);
        r.write_desc(
            h,
            Desc {
                flags: 0,
                region: 0,
                length: buffer_size,
                offset: (q.buf_base + u64::from(slot) * u64::from(buffer_size)) as u32,
                metadata: 0,
            },
        );
        h = h.wrapping_add(1);
    }
    q.posted = h;
    r.head().store(h, Ordering::Release);
}

pub(crate) fn fd_ready(fd: BorrowedFd<'_>, what: PollFlags) -> bool {
    let mut p = [PollFd::new(fd, what)];
    matches!(nix::poll::poll(&mut p, PollTimeout::ZERO), Ok(1))
        && p[0].revents().is_some_and(|r| r.intersects(what))
}

/// Counters shared between a detached queue (the writer) and its interface (the reader).
#[derive(Debug, Default)]
pub(crate) struct SharedCounters {
    fields: [AtomicU64; Counters::FIELDS],
}

impl SharedCounters {
    /// Adds the non-zero fields of `delta`.
    fn add(&self, delta: &Counters) {
        for (f, v) in self.fields.iter().zip(delta.to_array()) {
            if v != 0 {
                f.fetch_add(v, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn snapshot(&self) -> Counters {
        Counters::from_array(std::array::from_fn(|i| {
            self.fields[i].load(Ordering::Relaxed)
        }))
    }
}

/// A receive queue detached from its [`Interface`](crate::Interface), to be polled by another
/// thread (one worker of a forwarder, say). It keeps the connection's memory mapped while it
/// lives; once the connection goes down it receives nothing.
#[derive(Debug)]
pub struct RxQueue {
    shared: Arc<Shared>,
    q: Queue,
    role: Role,
    scratch: RxScratch,
    counters: Arc<SharedCounters>,
    hold: Option<HoldState>,
    /// Room for one [`RxQueue::forward_to`] burst (allocated with the hold).
    burst: Vec<HeldRx>,
}

impl Drop for RxQueue {
    fn drop(&mut self) {
        if let Some(h) = &self.hold {
            h.frames.queue_gone.store(true, Ordering::Release);
            h.frames.retire_if_done();
        }
    }
}

/// A transmit queue detached from its [`Interface`](crate::Interface); see [`RxQueue`].
#[derive(Debug)]
pub struct TxQueue {
    shared: Arc<Shared>,
    q: Queue,
    role: Role,
    counters: Arc<SharedCounters>,
}

impl RxQueue {
    pub(crate) fn new(
        shared: Arc<Shared>,
        q: Queue,
        role: Role,
        counters: Arc<SharedCounters>,
    ) -> RxQueue {
        RxQueue {
            shared,
            q,
            role,
            scratch: RxScratch::new(),
            counters,
            hold: None,
            burst: Vec::new(),
        }
    }

    /// Lets [`RxQueue::receive_holding`] keep frames in the peer's memory; returns the
    /// [`HeldFrames`] that names them (the same one on every call).
    pub fn enable_holding(&mut self) -> Arc<HeldFrames> {
        if let Some(h) = &self.hold {
            return h.frames.clone();
        }
        let size = self.shared.ring(&self.q).map_or(0, |r| r.size());
        let frames = Arc::new(HeldFrames::new(self.shared.clone(), size));
        self.hold = Some(HoldState {
            frames: frames.clone(),
            released: self.q.idx,
        });
        self.burst = vec![HeldRx::default(); MAX_FORWARD_BURST];
        frames
    }

    /// Gives back to the peer the slots of held frames released since the last burst (the
    /// bursts do it too).
    pub fn give_back(&mut self) {
        if let Some(h) = self.hold.as_mut() {
            if self.shared.is_live() {
                reclaim(&self.shared, &mut self.q, self.role, h);
            }
        }
    }

    /// Like [`RxQueue::receive`], but `sink` may keep one-descriptor frames in the peer's
    /// memory (after [`RxQueue::enable_holding`]; before, every frame is offered without a
    /// hold). Also gives back to the peer the slots of frames released since the last call,
    /// so call it regularly even when [`RxQueue::ready`] says 0.
    pub fn receive_holding(&mut self, max: usize, sink: &mut impl HoldSink) -> usize {
        if !self.shared.is_live() {
            return 0;
        }
        let mut delta = Counters::default();
        let n = receive_holding(
            &self.shared,
            &mut self.q,
            self.role,
            &mut self.scratch,
            &mut delta,
            max,
            sink,
            self.hold.as_mut(),
        );
        self.counters.add(&delta);
        n
    }

    /// The fast path of [`RxQueue::receive_holding`] for a receiver that keeps every frame it
    /// can: holds up to `out.len()` one-descriptor frames of at most `max_len` bytes in the
    /// peer's memory and describes them in `out`; returns how many. It stops before a frame
    /// it cannot hold (chained, or longer), which [`RxQueue::receive_holding`] then takes;
    /// bad descriptors are counted and skipped. 0 before [`RxQueue::enable_holding`]. Also
    /// gives back the slots of frames released since the last call.
    pub fn receive_held(&mut self, out: &mut [HeldRx], max_len: u32) -> usize {
        let Some(h) = self.hold.as_mut() else {
            return 0;
        };
        if !self.shared.is_live() {
            return 0;
        }
        let mut delta = Counters::default();
        let n = receive_held(
            &self.shared,
            &mut self.q,
            self.role,
            &mut delta,
            out,
            max_len,
            h,
        );
        self.counters.add(&delta);
        n
    }

    /// Whether the connection this queue belongs to is still up.
    pub fn is_live(&self) -> bool {
        self.shared.is_live()
    }

    /// How many descriptors the peer has published and not yet received (an upper bound on the
    /// frames the next burst delivers; 0 once the connection is down).
    pub fn ready(&self) -> usize {
        if !self.shared.is_live() {
            return 0;
        }
        usize::from(rx_ready(&self.shared, &self.q, self.role))
    }

    /// Receives up to `max` frames into `sink`; returns how many it took. Bad descriptors are
    /// dropped and counted on the interface.
    pub fn receive(&mut self, max: usize, sink: &mut impl RxSink) -> usize {
        self.receive_holding(max, &mut CopyingSink(sink))
    }
}

impl TxQueue {
    pub(crate) fn new(
        shared: Arc<Shared>,
        q: Queue,
        role: Role,
        counters: Arc<SharedCounters>,
    ) -> TxQueue {
        TxQueue {
            shared,
            q,
            role,
            counters,
        }
    }

    /// Whether the connection this queue belongs to is still up.
    pub fn is_live(&self) -> bool {
        self.shared.is_live()
    }

    /// Sends frames from `src` until the ring is full; returns how many frames it took (sent,
    /// or dropped and counted); the caller keeps the rest. Takes nothing once the connection is
    /// down.
    pub fn transmit(&mut self, src: &(impl TxSource + ?Sized)) -> usize {
        self.transmit_report(src).taken
    }

    /// [`TxQueue::transmit`], telling what the burst did.
    pub fn transmit_report(&mut self, src: &(impl TxSource + ?Sized)) -> TxReport {
        if !self.shared.is_live() {
            return TxReport::default();
        }
        let mut delta = Counters::default();
        let mut held_copies = 0;
        let taken = transmit(
            &self.shared,
            &mut self.q,
            self.role,
            &mut delta,
            src,
            &mut held_copies,
        );
        self.counters.add(&delta);
        TxReport {
            taken,
            sent: delta.tx_packets,
            bytes: delta.tx_bytes,
            held_copies,
        }
    }
}

/// What one [`TxQueue::transmit_report`] burst did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TxReport {
    /// Frames taken (sent, or dropped and counted); the caller keeps the rest.
    pub taken: usize,
    /// Frames sent.
    pub sent: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Frames copied straight from another peer's memory (see [`TxSource::held`]).
    pub held_copies: u64,
}
