//! Receive: each descriptor read once into a private copy and checked ([`check_desc`]), frames
//! offered to a sink ([`receive_holding`]) or, the common case of a holding queue, held in a
//! tight loop ([`receive_held`]).

use std::sync::atomic::Ordering;

use crate::counters::Counters;
use crate::ring::{Desc, RingRef, Role, DESC_FLAG_NEXT, MAX_FRAME};

use super::frame::{Hold, HoldSink, PeerFrame, RxSink, Taken};
use super::held::{reclaim, HeldRx, HoldState};
use super::shared::{refill, Queue, Segment, Shared};

/// Most descriptors one received frame may span.
pub const MAX_SEGMENTS: usize = 256;

/// Bad-descriptor reasons.
#[derive(Debug, Clone, Copy)]
pub(super) enum Bad {
    Region,
    Offset,
    Zero,
    TooLong,
    Chain,
}

pub(super) fn count_bad(c: &mut Counters, b: Bad) {
    match b {
        Bad::Region => c.bad_desc_region += 1,
        Bad::Offset => c.bad_desc_offset += 1,
        Bad::Zero => c.bad_desc_zero_length += 1,
        Bad::TooLong => c.bad_desc_too_long += 1,
        Bad::Chain => c.bad_desc_chain += 1,
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
pub(super) fn rx_ready(shared: &Shared, q: &Queue, role: Role) -> u16 {
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
pub(super) struct CopyingSink<'s, S: ?Sized>(pub(super) &'s mut S);

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
pub(super) fn desc_place(
    shared: &Shared,
    q: &Queue,
    role: Role,
    d: &Desc,
    slot: u16,
) -> (u16, u64) {
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
pub(super) fn rx_window(
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

/// [`receive`], where `hold` (a detached queue's [`HeldFrames`](crate::queue::HeldFrames)) lets the
/// sink keep frames in the peer's memory: their slots are given back to the peer only once
/// released, in ring order.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
pub(super) fn receive_holding(
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
            match gather_chain(shared, q, role, r, &mut cur, end, segments) {
                Ok(sum) => {
                    total = sum;
                    segments
                }
                Err(b) => {
                    count_bad(counters, b);
                    continue;
                }
            }
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
    q.idx = cur;
    give_back(shared, q, role, r, start, hold);
    delivered
}

/// Reads and checks the descriptor chain at `*cur` (its first descriptor has NEXT set) into
/// `segments`, moving `*cur` past it; returns the frame's length, or why the chain is bad
/// (then skipped whole). A chain that runs into `end` is bad.
#[inline(always)]
fn gather_chain(
    shared: &Shared,
    q: &Queue,
    role: Role,
    r: RingRef<'_>,
    cur: &mut u16,
    end: u16,
    segments: &mut Vec<Segment>,
) -> Result<usize, Bad> {
    let n = r.size();
    segments.clear();
    let mut sum = 0usize;
    let mut bad: Option<Bad> = None;
    loop {
        let d = r.read_desc(*cur);
        let slot = *cur & (n - 1);
        *cur = cur.wrapping_add(1);
        if bad.is_none() {
            let (region, at) = desc_place(shared, q, role, &d, slot);
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
        if *cur == end {
            bad = Some(Bad::Chain);
            break;
        }
    }
    match bad {
        Some(b) => Err(b),
        None => Ok(sum),
    }
}

/// After a burst that received the slots from `start` up to `q.idx`: a holding queue gives
/// back those released (in ring order); any other gives them all back (master: the tail;
/// slave: its buffers posted again, same slots, N indices later).
#[inline(always)]
fn give_back(
    shared: &Shared,
    q: &mut Queue,
    role: Role,
    r: RingRef<'_>,
    start: u16,
    hold: Option<&mut HoldState>,
) {
    if let Some(h) = hold {
        reclaim(shared, q, role, h);
        return;
    }
    if q.idx != start {
        match role {
            Role::Master => r.tail().store(q.idx, Ordering::Release),
            Role::Slave => refill(r, q, shared.buffer_size),
        }
    }
}

/// The common case of [`receive_holding`] in a tight loop: one-descriptor frames of at most
/// `max_len` bytes, each checked and held, into `out`. Stops before the first frame that is
/// chained or longer (left in the ring for the general path); bad descriptors are counted and
/// skipped, as there.
#[inline(never)]
pub(super) fn receive_held(
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

pub(super) fn check_desc(
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
