//! Forwarding: frames from one connection's receive queue straight into another's transmit
//! queue, copied once (from the first peer's buffer into the second's) and held by nobody
//! afterwards. This is a memif cross-connect at its cheapest: no frame is copied into the
//! forwarder's own memory, and a frame leaves its receive slot only when the other ring has
//! taken it.

use crate::counters::Counters;
use crate::region::Region;
use crate::ring::{Desc, RingRef, Role, DESC_FLAG_NEXT};

use super::detached::{RxQueue, TxQueue, MAX_FORWARD_BURST};
use super::frame::TxSource;
use super::held::{give_back_to, reclaim, HeldFrames, HeldRx};
use super::receive::{check_desc, count_bad, desc_place, receive_held, rx_ready, rx_window};
use super::shared::{Queue, Shared};
use super::transmit;

/// What one [`RxQueue::forward_to`] burst did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Forwarded {
    /// Frames received (each was then sent, or dropped and counted by the transmit queue).
    pub received: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Of them, frames the transmit ring took: sent, or dropped there and counted (an empty or
    /// oversized frame, a bad buffer posted by the other peer).
    pub taken: usize,
    /// Frames sent.
    pub sent: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Whether a frame this path cannot take (chained) waits at the head of the receive ring:
    /// the caller takes it with [`RxQueue::receive_holding`].
    pub more: bool,
}

/// A burst of held frames as a transmit source.
struct HeldBurst<'a> {
    held: &'a HeldFrames,
    frames: &'a [HeldRx],
}

impl TxSource for HeldBurst<'_> {
    fn frames(&self) -> usize {
        self.frames.len()
    }

    #[inline(always)]
    fn frame_len(&self, i: usize) -> usize {
        self.frames[i].len as usize
    }

    /// Never asked while the frame is held (it is, until released after the burst); should
    /// it be, the frame has no bytes to give and the transmit drops it, counted.
    fn bytes_at(&self, _i: usize, _offset: usize) -> &[u8] {
        &[]
    }

    #[inline(always)]
    fn held(&self, i: usize) -> Option<(&HeldFrames, u32, usize)> {
        Some((self.held, self.frames[i].token, 0))
    }
}

impl RxQueue {
    /// Forwards up to `max` frames (at most [`MAX_FORWARD_BURST`]) to `tx`: each frame is
    /// copied straight from the buffer this queue's peer wrote into one `tx`'s peer posted
    /// (or, for a slave, its own), and its slot given back. It never receives more frames than
    /// `tx`'s ring can take now, so when the other peer falls behind the frames wait here (the
    /// sender sees its ring fill) instead of being dropped. It stops before a chained frame
    /// ([`Forwarded::more`]); bad descriptors are counted and skipped as by every receive, and
    /// bad buffers posted by `tx`'s peer as by every transmit. Room is counted in ring slots,
    /// so frames that each need several of `tx`'s buffers may not all fit: those are dropped
    /// and counted in `tx`'s `tx_dropped` (as a full ring would drop them).
    ///
    /// Needs [`RxQueue::enable_holding`] (receives nothing before): frames held earlier keep
    /// their slots from the peer until released, as always. Counts the received frames on
    /// this queue's interface and the sent ones on `tx`'s, as the separate calls would.
    pub fn forward_to(&mut self, tx: &mut TxQueue, max: usize) -> Forwarded {
        if self.hold.is_none() || !self.shared.is_live() || !tx.is_live() {
            return Forwarded::default();
        }
        let room = tx.room();
        let want = max.min(room).min(MAX_FORWARD_BURST);
        let ready = usize::from(rx_ready(&self.shared, &self.q, self.role));
        if want == 0 || ready == 0 {
            if let Some(h) = self.hold.as_mut() {
                // Slots of frames released since the last burst still go back to the peer.
                reclaim(&self.shared, &mut self.q, self.role, h);
            }
            return Forwarded::default();
        }
        let want = want.min(ready);
        let direct = match tx.role {
            Role::Master => forward_direct::<true>(self, tx, want),
            Role::Slave => forward_direct::<false>(self, tx, want),
        };
        let mut f = Forwarded {
            received: direct.frames,
            bytes: direct.bytes,
            taken: direct.frames,
            sent: direct.frames as u64,
            sent_bytes: direct.bytes,
            more: false,
        };
        if direct.slots < want && rx_ready(&self.shared, &self.q, self.role) > 0 {
            // What the direct loop does not take (a frame for several of the other peer's
            // buffers, a bad buffer posted there, a chained frame) the general way.
            let g = self.forward_held(tx, want - direct.slots);
            f.received += g.received;
            f.bytes += g.bytes;
            f.taken += g.taken;
            f.sent += g.sent;
            f.sent_bytes += g.sent_bytes;
            f.more = g.more;
        }
        f
    }

    /// The general forward: up to `want` frames held, sent with [`TxQueue::transmit_report`]
    /// (which chains and checks as for any source), then released.
    fn forward_held(&mut self, tx: &mut TxQueue, want: usize) -> Forwarded {
        let Some(h) = self.hold.as_mut() else {
            return Forwarded::default();
        };
        let mut delta = Counters::default();
        let received = receive_held(
            &self.shared,
            &mut self.q,
            self.role,
            &mut delta,
            &mut self.burst[..want],
            u32::MAX,
            h,
        );
        self.counters.add(&delta);
        let burst = &self.burst[..received];
        let report = tx.transmit_report(&HeldBurst {
            held: &h.frames,
            frames: burst,
        });
        h.frames.release_frames(burst);
        // Slots of the frames just released go back to the peer now, not a burst later.
        reclaim(&self.shared, &mut self.q, self.role, h);
        // Frames spanning several of the other side's buffers may not all have fitted: those
        // are lost, counted as dropped there (a full ring), never silently.
        let refused = received - report.taken.min(received);
        if refused > 0 {
            tx.counters.add(&Counters {
                tx_dropped: refused as u64,
                ..Counters::default()
            });
        }
        Forwarded {
            received,
            bytes: delta.rx_bytes,
            taken: report.taken,
            sent: report.sent,
            sent_bytes: report.bytes,
            // Fewer than asked while frames wait: a chained one is at the head.
            more: received < want && rx_ready(&self.shared, &self.q, self.role) > 0,
        }
    }
}

/// What [`forward_direct`] did.
struct Direct {
    /// Receive slots consumed: frames forwarded and bad descriptors skipped.
    slots: usize,
    frames: usize,
    bytes: u64,
}

/// How many frames ahead the direct loop prefetches both ends' buffers.
const AHEAD: u16 = 8;

/// The transmit end of a direct forward: its ring and where its buffers are, read once per
/// burst.
#[derive(Clone, Copy)]
struct TxEnd<'a> {
    ring: RingRef<'a>,
    shared: &'a Shared,
    /// A slave's own buffers (region 0).
    own_buffers: Option<&'a Region>,
    slots: u16,
    buffer_size: u32,
    buf_base: u64,
}

impl TxEnd<'_> {
    /// Where a slave's buffer for ring index `t` is.
    #[inline(always)]
    fn own_buffer(&self, t: u16) -> u64 {
        self.buf_base + u64::from(t & (self.slots - 1)) * u64::from(self.buffer_size)
    }

    /// Prefetches the buffer ring index `t` will be copied into (the one the slave posted,
    /// when this end is a master).
    #[inline(always)]
    fn prefetch_buffer<const TX_MASTER: bool>(&self, t: u16) {
        if TX_MASTER {
            let p = self.ring.read_desc(t);
            if let Some(r) = self.shared.regions.get(usize::from(p.region)) {
                r.prefetch(u64::from(p.offset));
            }
        } else if let Some(r) = self.own_buffers {
            r.prefetch(self.own_buffer(t));
        }
    }

    /// Copies `len` bytes at `from` in `src` into the buffer of ring index `t` and writes its
    /// descriptor; false, writing nothing, when the frame does not fit that one buffer or the
    /// buffer the slave posted is bad.
    #[inline(always)]
    fn copy_into<const TX_MASTER: bool>(&self, t: u16, src: &Region, from: u64, len: u32) -> bool {
        if TX_MASTER {
            let p = self.ring.read_desc(t);
            let ok = len <= p.length
                && self
                    .shared
                    .regions
                    .get(usize::from(p.region))
                    .is_some_and(|dst| {
                        let to = u64::from(p.offset);
                        dst.contains(to, u64::from(p.length))
                            && src.copy_to(from, dst, to, len as usize)
                    });
            if ok {
                self.ring.write_flags_len(t, 0, p.region, len);
            }
            ok
        } else {
            let to = self.own_buffer(t);
            let ok = len <= self.buffer_size
                && self
                    .own_buffers
                    .is_some_and(|dst| src.copy_to(from, dst, to, len as usize));
            if ok {
                self.ring.write_desc(
                    t,
                    Desc {
                        flags: 0,
                        region: 0,
                        length: len,
                        offset: to as u32,
                        metadata: 0,
                    },
                );
            }
            ok
        }
    }
}

/// Prefetches the bytes of the frame at receive ring index `ahead`: last written by another
/// core.
#[inline(always)]
fn prefetch_frame(ra: RingRef<'_>, shared: &Shared, q: &Queue, role: Role, ahead: u16) {
    let d = ra.read_desc(ahead);
    let (region, at) = desc_place(shared, q, role, &d, ahead & (ra.size() - 1));
    if let Some(r) = shared.regions.get(usize::from(region)) {
        r.prefetch(at);
    }
}

/// The common case of a forward in one pass over both rings: each one-descriptor frame,
/// checked, is copied into the next buffer of `tx`'s ring (posted by its slave, when `tx` is
/// a master; its own, when a slave) when it fits that one buffer and the buffer is good; the
/// first frame that does not stops the loop, left in the ring for the general path. Up to
/// `want` receive slots, which the caller made sure `tx` has room for.
#[inline(never)]
fn forward_direct<const TX_MASTER: bool>(
    rx: &mut RxQueue,
    tx: &mut TxQueue,
    want: usize,
) -> Direct {
    let mut done = Direct {
        slots: 0,
        frames: 0,
        bytes: 0,
    };
    let (Some(h), Some(ra), Some(rb)) = (
        rx.hold.as_mut(),
        rx.shared.ring(&rx.q),
        tx.shared.ring(&tx.q),
    ) else {
        return done;
    };
    let mut rxc = Counters::default();
    let unreleased = rx.q.idx.wrapping_sub(h.released);
    // Nothing held (the usual case when only this path receives): the slots go back at the
    // end without looking at each one.
    let none_held = unreleased == 0;
    let rx_avail = rx_window(ra, &rx.q, rx.role, unreleased, &mut rxc);
    let mut txc = Counters::default();
    let tx_avail = transmit::fillable(rb, tx.q.idx, TX_MASTER).unwrap_or_else(|n| {
        txc.ring_index_overrun += 1;
        n
    });
    let n = want.min(usize::from(rx_avail)).min(usize::from(tx_avail)) as u16;
    let rx_shared = &*rx.shared;
    let end = TxEnd {
        ring: rb,
        shared: &tx.shared,
        own_buffers: tx.shared.regions.first(),
        slots: rb.size(),
        buffer_size: tx.shared.buffer_size,
        buf_base: tx.q.buf_base,
    };
    let (mut rcur, mut tcur) = (rx.q.idx, tx.q.idx);
    let mut k = 0u16;
    while k < n {
        ra.prefetch_desc_ahead(rcur);
        if TX_MASTER {
            rb.prefetch_desc_ahead(tcur);
        }
        if k + AHEAD < n {
            // Both ends' buffers a few frames ahead: last written (or read) by other cores.
            prefetch_frame(ra, rx_shared, &rx.q, rx.role, rcur.wrapping_add(AHEAD));
            end.prefetch_buffer::<TX_MASTER>(tcur.wrapping_add(AHEAD));
        }
        let d = ra.read_desc(rcur);
        if d.flags & DESC_FLAG_NEXT != 0 {
            break;
        }
        let (region, at) = desc_place(rx_shared, &rx.q, rx.role, &d, rcur & (ra.size() - 1));
        let seg = match check_desc(rx_shared, region, at, d.length, 0) {
            Ok(seg) => seg,
            Err(bad) => {
                // Skipped, its slot given back with the others.
                count_bad(&mut rxc, bad);
                rcur = rcur.wrapping_add(1);
                k += 1;
                continue;
            }
        };
        let Some(src) = rx_shared.regions.get(usize::from(seg.region)) else {
            break;
        };
        if !end.copy_into::<TX_MASTER>(tcur, src, seg.offset, seg.len) {
            // Not a one-buffer case (or a bad posted buffer): the general path takes it.
            break;
        }
        rcur = rcur.wrapping_add(1);
        tcur = tcur.wrapping_add(1);
        k += 1;
        done.frames += 1;
        done.bytes += u64::from(seg.len);
    }
    done.slots = usize::from(k);
    rxc.rx_packets += done.frames as u64;
    rxc.rx_bytes += done.bytes;
    rx.counters.add(&rxc);
    txc.tx_packets += done.frames as u64;
    txc.tx_bytes += done.bytes;
    tx.counters.add(&txc);
    if done.frames > 0 {
        transmit::publish(rb, &mut tx.q, tcur, TX_MASTER);
    }
    rx.q.idx = rcur;
    // The slots just forwarded (never held) go back to the peer, after any still held.
    if none_held {
        if rcur != h.released {
            give_back_to(ra, &mut rx.q, rx.role, h, rcur, rx_shared.buffer_size);
        }
    } else {
        reclaim(rx_shared, &mut rx.q, rx.role, h);
    }
    done
}

impl TxQueue {
    /// Ring slots a transmit could fill now: frames it would take, when each fits one of the
    /// peer's buffers (0 once the connection is down).
    pub fn room(&self) -> usize {
        if !self.shared.is_live() {
            return 0;
        }
        transmit::room(&self.shared, &self.q, self.role)
    }
}
