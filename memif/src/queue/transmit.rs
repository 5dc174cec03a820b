//! Transmit: copying frames from a [`TxSource`] into the peer's buffers and publishing them.
//!
//! A slave fills its own buffers (slot `s` always uses buffer `s`) and publishes `head`; a
//! master fills the buffers the slave posted on its M2S ring, after checking each posted
//! descriptor, and publishes `tail`. The loop is compiled once per role, so neither carries
//! the other's branches.
//!
//! A frame held in another peer's memory ([`TxSource::held`]) is looked up once, a few frames
//! before it is copied, and its bytes are prefetched then: they were last written by another
//! core, as was (for a master) the buffer the slave posted for it.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use nix::poll::PollFlags;

use crate::counters::Counters;
use crate::region::Region;
use crate::ring::{Desc, RingRef, Role, DESC_FLAG_NEXT, MAX_FRAME};

use super::frame::TxSource;
use super::shared::{fd_ready, Queue, Shared};

/// How many frames ahead a burst looks up and prefetches (a power of two).
const AHEAD: usize = 4;

/// Where the bytes of a held frame to send are: from byte `at` of `region`, `len` of them.
#[derive(Clone, Copy)]
struct HeldBytes<'a> {
    region: &'a Region,
    at: u64,
    len: usize,
}

/// The held frames of the next [`AHEAD`] frames of a burst, looked up (and prefetched) ahead.
struct Lookahead<'a, S: ?Sized> {
    src: &'a S,
    frames: usize,
    slots: [Option<HeldBytes<'a>>; AHEAD],
}

impl<'a, S: TxSource + ?Sized> Lookahead<'a, S> {
    fn new(src: &'a S) -> Self {
        let mut l = Lookahead {
            src,
            frames: src.frames(),
            slots: [None; AHEAD],
        };
        for i in 0..AHEAD {
            l.slots[i] = l.look_up(i);
        }
        l
    }

    #[inline(always)]
    fn look_up(&self, i: usize) -> Option<HeldBytes<'a>> {
        if i >= self.frames {
            return None;
        }
        let (held, token, start) = self.src.held(i)?;
        let (region, at, len) = held.frame(token)?;
        let b = HeldBytes {
            region,
            at: at + start as u64,
            len: len.checked_sub(start)?,
        };
        b.region.prefetch(b.at);
        Some(b)
    }

    /// Frame `i`'s held bytes (looked up earlier), and looks up frame `i + AHEAD`. Called for
    /// `i = 0, 1, 2 …` in order.
    #[inline(always)]
    fn next(&mut self, i: usize) -> Option<HeldBytes<'a>> {
        let ahead = self.look_up(i + AHEAD);
        std::mem::replace(&mut self.slots[i % AHEAD], ahead)
    }
}

/// Slots a slave put on its transmit ring that the master has not consumed yet (0 for a master,
/// whose transmit ring holds buffers the slave posted, and without a ring).
pub(crate) fn unconsumed(shared: &Shared, q: &Queue, role: Role) -> usize {
    match (role, shared.ring(q)) {
        (Role::Slave, Some(r)) => {
            let in_flight = q.idx.wrapping_sub(r.tail().load(Ordering::Acquire));
            usize::from(in_flight.min(r.size()))
        }
        _ => 0,
    }
}

/// Slots a transmit from ring index `cur` may fill now: a slave's free slots (ring size less
/// those in flight), a master's buffers the slave posted. `Err` (with what is safe to use) when
/// the peer's index is impossible: a master then fills the whole ring at most, a slave nothing.
#[inline(always)]
pub(super) fn fillable(r: RingRef<'_>, cur: u16, master: bool) -> Result<u16, u16> {
    let n = r.size();
    if master {
        let posted = r.head().load(Ordering::Acquire).wrapping_sub(cur);
        if posted > n {
            Err(n)
        } else {
            Ok(posted)
        }
    } else {
        let in_flight = cur.wrapping_sub(r.tail().load(Ordering::Acquire));
        if in_flight > n {
            Err(0)
        } else {
            Ok(n - in_flight)
        }
    }
}

/// Ring slots a transmit on `q` could fill now (0 without a ring): one frame each when the
/// frames fit one buffer.
pub(crate) fn room(shared: &Shared, q: &Queue, role: Role) -> usize {
    shared.ring(q).map_or(0, |r| {
        let (Ok(slots) | Err(slots)) = fillable(r, q.idx, role == Role::Master);
        usize::from(slots)
    })
}

/// Sends the frames of `src` on `q`, in order, until the ring is full. Returns how many frames
/// were taken (sent, or dropped and counted in `tx_dropped`); the caller keeps the rest.
/// Frames copied straight from another peer's memory are counted in `held_copies`.
pub(crate) fn transmit(
    shared: &Shared,
    q: &mut Queue,
    role: Role,
    counters: &mut Counters,
    src: &(impl TxSource + ?Sized),
    held_copies: &mut u64,
) -> usize {
    match role {
        Role::Master => transmit_as::<true>(shared, q, counters, src, held_copies),
        Role::Slave => transmit_as::<false>(shared, q, counters, src, held_copies),
    }
}

#[inline(never)]
fn transmit_as<const MASTER: bool>(
    shared: &Shared,
    q: &mut Queue,
    counters: &mut Counters,
    src: &(impl TxSource + ?Sized),
    held_copies: &mut u64,
) -> usize {
    let Some(r) = shared.ring(q) else {
        return 0;
    };
    let n = r.size();
    let bsize = shared.buffer_size;
    let start = q.idx;
    let mut cur = start;
    let avail = fillable(r, start, MASTER).unwrap_or_else(|slots| {
        counters.ring_index_overrun += 1;
        slots
    });
    let end = start.wrapping_add(avail);
    let mut ahead = Lookahead::new(src);
    let mut sent = 0;
    // Counted once per burst, in registers meanwhile.
    let (mut tx_packets, mut tx_bytes, mut from_held) = (0u64, 0u64, 0u64);
    'frames: for i in 0..ahead.frames {
        let held = ahead.next(i);
        if MASTER {
            prefetch_posted(shared, r, cur, start, avail);
        }
        let len = src.frame_len(i);
        let too_many_slots = !MASTER && len.div_ceil(bsize as usize) > usize::from(n);
        if len == 0 || len > MAX_FRAME || too_many_slots {
            counters.tx_dropped += 1;
            sent += 1;
            continue;
        }
        if MASTER && cur != end {
            if let Some(h) = held.filter(|h| len <= h.len) {
                if held_to_posted(shared, r, cur, h, len) {
                    cur = cur.wrapping_add(1);
                    tx_packets += 1;
                    tx_bytes += len as u64;
                    from_held += 1;
                    sent += 1;
                    continue;
                }
            }
        }
        let pkt_start = cur;
        let mut done = 0usize;
        while done < len {
            if cur == end {
                let whole_ring = end.wrapping_sub(pkt_start) == n;
                cur = pkt_start;
                if whole_ring {
                    // It would not fit even in an empty ring: drop it rather than block.
                    counters.tx_dropped += 1;
                    sent += 1;
                    continue 'frames;
                }
                break 'frames;
            }
            if MASTER {
                if let Err(why) = fill_posted(shared, r, cur, src, i, held, len, &mut done) {
                    why.count(counters);
                    // The slot went back as an empty descriptor; the frame is lost.
                    cur = cur.wrapping_add(1);
                    counters.tx_dropped += 1;
                    sent += 1;
                    continue 'frames;
                }
            } else {
                fill_own(shared, q.buf_base, r, cur, src, i, held, len, &mut done);
            }
            cur = cur.wrapping_add(1);
        }
        from_held += u64::from(held.is_some_and(|h| len <= h.len));
        tx_packets += 1;
        tx_bytes += len as u64;
        sent += 1;
    }
    counters.tx_packets += tx_packets;
    counters.tx_bytes += tx_bytes;
    *held_copies += from_held;
    if cur != start {
        publish(r, q, cur, MASTER);
    }
    sent
}

/// Hands the slots up to free-running index `cur` to the peer (a master's tail, a slave's
/// head) and wakes it unless it masked interrupts.
#[inline]
pub(super) fn publish(r: RingRef<'_>, q: &mut Queue, cur: u16, master: bool) {
    q.idx = cur;
    if master {
        r.tail().store(cur, Ordering::Release);
    } else {
        r.head().store(cur, Ordering::Release);
    }
    std::sync::atomic::fence(Ordering::SeqCst);
    if !r.interrupts_masked() && fd_ready(q.eventfd.as_fd(), PollFlags::POLLOUT) {
        let _ = nix::unistd::write(&q.eventfd, &1u64.to_ne_bytes());
    }
}

/// As master, the common case: held frame `h` (its first `len` bytes) into the one buffer the
/// slave posted at `cur`, when that buffer is valid and large enough; false (nothing written)
/// otherwise, for the general path to handle.
#[inline(always)]
fn held_to_posted(shared: &Shared, r: RingRef<'_>, cur: u16, h: HeldBytes<'_>, len: usize) -> bool {
    let d = r.read_desc(cur);
    let fits = len <= d.length as usize;
    let copied = fits
        && shared
            .regions
            .get(usize::from(d.region))
            .is_some_and(|reg| {
                let at = u64::from(d.offset);
                reg.contains(at, u64::from(d.length)) && h.region.copy_to(h.at, reg, at, len)
            });
    if copied {
        r.write_flags_len(cur, 0, d.region, len as u32);
    }
    copied
}

/// As master: prefetches the buffer the slave posted a few frames ahead of `cur` (of the
/// `avail` from `start`), last written by its core: its descriptor was prefetched further
/// ahead still, so reading it does not stall.
#[inline(always)]
fn prefetch_posted(shared: &Shared, r: RingRef<'_>, cur: u16, start: u16, avail: u16) {
    r.prefetch_desc_ahead(cur);
    let far = cur.wrapping_add(AHEAD as u16);
    if far.wrapping_sub(start) < avail {
        let d = r.read_desc(far);
        if let Some(reg) = shared.regions.get(usize::from(d.region)) {
            reg.prefetch(u64::from(d.offset));
        }
    }
}

/// As slave: copies the next piece of frame `i` (from byte `*done` of `len`) into our own
/// buffer of ring index `cur` (buffers from `buf_base` in region 0) and writes its descriptor,
/// chained to the next when more of the frame follows (empty when the copy failed).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn fill_own(
    shared: &Shared,
    buf_base: u64,
    r: RingRef<'_>,
    cur: u16,
    src: &(impl TxSource + ?Sized),
    i: usize,
    held: Option<HeldBytes<'_>>,
    len: usize,
    done: &mut usize,
) {
    let bsize = shared.buffer_size;
    let slot = cur & (r.size() - 1);
    let take = (len - *done).min(bsize as usize);
    let off = buf_base + u64::from(slot) * u64::from(bsize);
    let ok = shared
        .regions
        .first()
        .is_some_and(|r0| copy_piece(r0, off, src, i, held, *done, take));
    *done += take;
    r.write_desc(
        cur,
        Desc {
            flags: if *done < len { DESC_FLAG_NEXT } else { 0 },
            region: 0,
            length: if ok { take as u32 } else { 0 },
            offset: off as u32,
            metadata: 0,
        },
    );
}

/// Why a buffer a slave posted could not be filled.
enum Posted {
    Region,
    Zero,
    Offset,
}

impl Posted {
    /// Counts it as a bad descriptor.
    fn count(self, counters: &mut Counters) {
        match self {
            Posted::Region => counters.bad_desc_region += 1,
            Posted::Zero => counters.bad_desc_zero_length += 1,
            Posted::Offset => counters.bad_desc_offset += 1,
        }
    }
}

/// As master: copies the next piece of frame `i` (from byte `*done` of `len`) into the buffer
/// the slave posted at `cur`, after checking it, and hands the slot back with the piece's
/// length. A bad posted buffer goes back empty.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn fill_posted(
    shared: &Shared,
    r: RingRef<'_>,
    cur: u16,
    src: &(impl TxSource + ?Sized),
    i: usize,
    held: Option<HeldBytes<'_>>,
    len: usize,
    done: &mut usize,
) -> Result<(), Posted> {
    let d = r.read_desc(cur);
    let take = (len - *done).min(d.length as usize);
    let copied = match shared.regions.get(usize::from(d.region)) {
        None => Err(Posted::Region),
        Some(_) if take == 0 => Err(Posted::Zero),
        Some(reg) => {
            let at = u64::from(d.offset);
            if reg.contains(at, u64::from(d.length))
                && copy_piece(reg, at, src, i, held, *done, take)
            {
                Ok(())
            } else {
                Err(Posted::Offset)
            }
        }
    };
    if copied.is_err() {
        r.write_flags_len(cur, 0, d.region, 0);
        return copied;
    }
    *done += take;
    let flags = if *done < len { DESC_FLAG_NEXT } else { 0 };
    r.write_flags_len(cur, flags, d.region, take as u32);
    Ok(())
}

/// Copies `take` bytes of frame `i` from byte `from` into `region` at `at`: straight from the
/// other peer's memory when the frame is held there and the range lies inside it, else piece
/// by piece from [`TxSource::bytes_at`].
#[inline(always)]
fn copy_piece(
    region: &Region,
    at: u64,
    src: &(impl TxSource + ?Sized),
    i: usize,
    held: Option<HeldBytes<'_>>,
    from: usize,
    take: usize,
) -> bool {
    if let Some(h) = held {
        // A window that moved past the held frame is read the other way.
        if from + take <= h.len && h.region.copy_to(h.at + from as u64, region, at, take) {
            return true;
        }
    }
    let mut copied = 0;
    while copied < take {
        let bytes = src.bytes_at(i, from + copied);
        let k = bytes.len().min(take - copied);
        if k == 0 || !region.copy_in(at + copied as u64, &bytes[..k]) {
            return false;
        }
        copied += k;
    }
    true
}
