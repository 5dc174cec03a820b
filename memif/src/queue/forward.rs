//! Forwarding: frames from one connection's receive queue straight into another's transmit
//! queue, copied once (from the first peer's buffer into the second's) and held by nobody
//! afterwards. This is a memif cross-connect at its cheapest: no frame is copied into the
//! forwarder's own memory, and a frame leaves its receive slot only when the other ring has
//! taken it.

use super::{receive_held, HeldFrames, HeldRx, RxQueue, TxQueue, TxSource};
use crate::interface::Counters;

/// Most frames one [`RxQueue::forward_to`] burst moves.
pub const MAX_FORWARD_BURST: usize = 256;

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
    /// Forwards up to `max` frames (at most [`MAX_FORWARD_BURST`]) to `tx`: one-descriptor
    /// frames are held where this queue's peer wrote them, copied straight into the buffers of
    /// `tx`'s peer, and released. It never receives more frames than `tx`'s ring can take now,
    /// so when the other peer falls behind the frames wait here (the sender sees its ring
    /// fill) instead of being dropped. It stops before a chained frame
    /// ([`Forwarded::more`]); bad descriptors are counted and skipped as by every receive.
    ///
    /// Needs [`RxQueue::enable_holding`] (receives nothing before). Counts the received frames
    /// on this queue's interface and the sent ones on `tx`'s, as the separate calls would.
    pub fn forward_to(&mut self, tx: &mut TxQueue, max: usize) -> Forwarded {
        let Some(h) = self.hold.as_mut() else {
            return Forwarded::default();
        };
        if !self.shared.is_live() || !tx.is_live() {
            return Forwarded::default();
        }
        let room = tx.room();
        let want = max.min(room).min(MAX_FORWARD_BURST);
        let ready = usize::from(super::rx_ready(&self.shared, &self.q, self.role));
        if want == 0 || ready == 0 {
            // Slots of frames released since the last burst still go back to the peer.
            super::reclaim(&self.shared, &mut self.q, self.role, h);
            return Forwarded::default();
        }
        let want = want.min(ready);
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
        super::reclaim(&self.shared, &mut self.q, self.role, h);
        Forwarded {
            received,
            bytes: delta.rx_bytes,
            taken: report.taken,
            sent: report.sent,
            sent_bytes: report.bytes,
            // Fewer than asked while frames wait: a chained one is at the head.
            more: received < want && super::rx_ready(&self.shared, &self.q, self.role) > 0,
        }
    }
}

impl TxQueue {
    /// Ring slots a transmit could fill now: frames it would take, when each fits one of the
    /// peer's buffers (0 once the connection is down).
    pub fn room(&self) -> usize {
        if !self.shared.is_live() {
            return 0;
        }
        super::transmit::room(&self.shared, &self.q, self.role)
    }
}
