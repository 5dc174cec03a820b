//! Cut-through: a worker's receive queue of one memif port sends what arrives straight into
//! another memif port's transmit ring on the same worker ([`memif::RxQueue::forward_to`]: one
//! copy, from one peer's buffer into the other's, no Quiver buffer, no graph node), counted as
//! `rx-cut-through`.
//!
//! The pairing is the memif driver's own: [`super::MemifPort::cut_through`] leaves a
//! [`CutThrough`] in the receive queue's hand-over slot, naming the other port's [`TxHome`],
//! which the receive queue picks up at its next burst. The receive queue forwards only when
//! the input node polling it allows a bypass (`dataplane::RxQueue::receive_or_bypass`: no
//! trace, no capture); otherwise, and whenever the other port is down, frames go through the
//! graph as usual. The cut-through ends when the control side clears its flag (seen at the next
//! burst) or when the other port's transmit queue is dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use memif::queue::HeldFrames;

use super::counters::{bump, RxCounters};
use super::tx::TxHome;

/// One receive queue's cut-through to another port's transmit queue.
pub(super) struct CutThrough {
    to: Arc<TxHome>,
    /// Told (packets, bytes) of each burst that forwarded something.
    count: Box<dyn FnMut(u64, u64) + Send>,
    /// Cleared by the control side to end the cut-through.
    on: Arc<AtomicBool>,
}

/// What one [`CutThrough::forward`] burst did.
pub(super) enum Burst {
    /// Frames went straight to the other port; `more`: a frame the cut-through cannot take
    /// (chained) waits at the head of the ring, for the usual receive.
    Forwarded { packets: usize, more: bool },
    /// Nothing now (the other port is down): receive as usual.
    NotNow,
    /// The cut-through is over (its flag cleared, or the other port's queue gone): receive as
    /// usual from now on.
    Over,
}

impl CutThrough {
    /// A cut-through to the transmit queue living in `to`, for as long as `on` stays set.
    pub(super) fn new(
        to: Arc<TxHome>,
        count: Box<dyn FnMut(u64, u64) + Send>,
        on: Arc<AtomicBool>,
    ) -> CutThrough {
        CutThrough { to, count, on }
    }

    /// Frames of `q` (whose held frames are `held`, whose counters are `rx`) straight into the
    /// other port's ring, at most `max`: never more than that ring takes, so a slow peer there
    /// holds frames back here instead of losing them.
    #[inline]
    pub(super) fn forward(
        &mut self,
        q: &mut memif::RxQueue,
        held: &HeldFrames,
        rx: &RxCounters,
        max: usize,
    ) -> Burst {
        if !self.on.load(Ordering::Acquire) {
            return Burst::Over;
        }
        let Some(done) = self
            .to
            .with_queue(|txq| txq.map(|txq| q.forward_to(txq, max)))
        else {
            return Burst::Over;
        };
        // Not while the other port is down: its transmit queue drops and counts, as the graph
        // path does.
        let Some(f) = done else {
            return Burst::NotNow;
        };
        bump(&rx.packets, f.received as u64);
        bump(&rx.bytes, f.bytes);
        bump(&rx.zero_copy, f.received as u64);
        bump(&rx.cut_through, f.received as u64);
        rx.held.store(held.in_flight(), Ordering::Relaxed);
        let t = &self.to.counters;
        bump(&t.packets, f.sent);
        bump(&t.bytes, f.sent_bytes);
        bump(&t.peer_to_peer, f.sent);
        if f.received > 0 {
            (self.count)(f.received as u64, f.bytes);
        }
        Burst::Forwarded {
            packets: f.received,
            more: f.more,
        }
    }
}
