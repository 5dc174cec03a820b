//! The counters of one worker's queue pair: written by that worker only, summed by
//! [`super::MemifPort`]'s `stats`.

use std::sync::atomic::{AtomicU64, Ordering};

/// A receive queue's counters.
#[derive(Default)]
pub(super) struct RxCounters {
    pub(super) packets: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) no_buffer: AtomicU64,
    /// Frames received without a copy (left in the peer's memory).
    pub(super) zero_copy: AtomicU64,
    /// Frames copied into Quiver buffers on receive.
    pub(super) copied: AtomicU64,
    /// Frames received without a copy and not released yet, as of the queue's last poll.
    pub(super) held: AtomicU64,
    /// Frames received and sent straight to the cross-connected memif port (no Quiver buffer).
    pub(super) cut_through: AtomicU64,
}

/// A transmit queue's counters.
#[derive(Default)]
pub(super) struct TxCounters {
    pub(super) packets: AtomicU64,
    pub(super) bytes: AtomicU64,
    /// Frames copied straight from another memif peer's memory into this one's.
    pub(super) peer_to_peer: AtomicU64,
    pub(super) link_down: AtomicU64,
    pub(super) too_short: AtomicU64,
}

/// Adds `n` to a counter with a single writer.
#[inline]
pub(super) fn bump(c: &AtomicU64, n: u64) {
    if n != 0 {
        // Single writer: a plain load and store, no locked instruction.
        c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }
}

/// A counter's value.
pub(super) fn read(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}
