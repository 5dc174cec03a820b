//! [`Counters`]: an interface's counters, and [`SharedCounters`], the same shared between a
//! detached queue (the writer) and its interface (the reader).

use std::sync::atomic::{AtomicU64, Ordering};

/// Interface counters. Bad-descriptor drops are counted by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames not sent for lack of ring space (or an empty/oversized frame).
    pub tx_dropped: u64,
    /// Descriptors naming a region that does not exist.
    pub bad_desc_region: u64,
    /// Descriptors whose offset + length lies outside their region.
    pub bad_desc_offset: u64,
    /// Descriptors of length zero.
    pub bad_desc_zero_length: u64,
    /// Descriptors longer than a buffer, or chains longer than [`MAX_FRAME`](crate::MAX_FRAME).
    pub bad_desc_too_long: u64,
    /// Descriptor chains whose NEXT flag runs past the last available slot.
    pub bad_desc_chain: u64,
    /// Times the peer advanced its ring index by more than the ring holds (clamped).
    pub ring_index_overrun: u64,
    /// Connections established.
    pub connects: u64,
    /// Disconnections.
    pub disconnects: u64,
}

impl Counters {
    pub(crate) const FIELDS: usize = 13;

    pub(crate) fn to_array(self) -> [u64; Self::FIELDS] {
        [
            self.rx_packets,
            self.rx_bytes,
            self.tx_packets,
            self.tx_bytes,
            self.tx_dropped,
            self.bad_desc_region,
            self.bad_desc_offset,
            self.bad_desc_zero_length,
            self.bad_desc_too_long,
            self.bad_desc_chain,
            self.ring_index_overrun,
            self.connects,
            self.disconnects,
        ]
    }

    pub(crate) fn from_array(a: [u64; Self::FIELDS]) -> Counters {
        Counters {
            rx_packets: a[0],
            rx_bytes: a[1],
            tx_packets: a[2],
            tx_bytes: a[3],
            tx_dropped: a[4],
            bad_desc_region: a[5],
            bad_desc_offset: a[6],
            bad_desc_zero_length: a[7],
            bad_desc_too_long: a[8],
            bad_desc_chain: a[9],
            ring_index_overrun: a[10],
            connects: a[11],
            disconnects: a[12],
        }
    }

    /// Adds `other` field by field.
    pub fn add(&mut self, other: &Counters) {
        let (a, b) = (self.to_array(), other.to_array());
        *self = Counters::from_array(std::array::from_fn(|i| a[i] + b[i]));
    }
}

/// Counters shared between a detached queue (the writer) and its interface (the reader).
#[derive(Debug, Default)]
pub(crate) struct SharedCounters {
    fields: [AtomicU64; Counters::FIELDS],
}

impl SharedCounters {
    /// Adds the non-zero fields of `delta`.
    pub(crate) fn add(&self, delta: &Counters) {
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
