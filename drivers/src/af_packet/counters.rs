//! Per-queue counters of the kernel-interface drivers (AF_PACKET and TAP), summed into a
//! [`PortStats`] on the control side.
//!
//! The data-path counters of a queue have one writer, the worker that owns the queue: they are
//! bumped with a plain load and store (no locked instruction) and read by anyone. The kernel's
//! own drop counters are folded in by the control side (they are read from the socket, which
//! resets them), so those few are added with `fetch_add`.

use std::sync::atomic::{AtomicU64, Ordering};

use dataplane::{RxMode, RxModeCell};

use crate::coalesce::Kind;
use crate::port::PortStats;

/// What a counter counts, and whether it is a loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    RxDrop,
    TxDrop,
    Info,
}

macro_rules! counters {
    ($($(#[$doc:meta])* $variant:ident = $name:literal, $class:ident;)*) => {
        /// A counter of one queue.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(usize)]
        pub(crate) enum Counter {
            $($(#[$doc])* $variant,)*
        }

        const COUNT: usize = [$(Counter::$variant),*].len();
        const NAMES: [&str; COUNT] = [$($name),*];
        const CLASSES: [Class; COUNT] = [$(Class::$class),*];
    };
}

counters! {
    /// Frames handed to the graph.
    RxPackets = "rx-packets", Info;
    /// Their bytes.
    RxBytes = "rx-bytes", Info;
    /// Frames handed to the kernel.
    TxPackets = "tx-packets", Info;
    /// Their bytes.
    TxBytes = "tx-bytes", Info;
    /// Frames the kernel cut short (captured length below the frame's length).
    RxTruncated = "rx-truncated", RxDrop;
    /// Frames longer than the interface's MTU plus an Ethernet header and one VLAN tag (GSO
    /// super-frames from a peer with segmentation offload on).
    RxTooLong = "rx-too-long", RxDrop;
    /// Frames dropped because no buffer was left to chain their tail into.
    RxNoBuffer = "rx-no-buffer", RxDrop;
    /// Ring slots whose header the kernel wrote inconsistently (skipped).
    RxBadSlot = "rx-bad-slot", RxDrop;
    /// Reads that failed for another reason than "nothing to read".
    RxErrors = "rx-errors", RxDrop;
    /// Polls that found frames waiting but no free buffer (the frames stay queued).
    RxBufferStalls = "rx-buffer-stalls", Info;
    /// Frames received with a checksum the sender's stack left for offload (not filled in).
    RxChecksumPartial = "rx-checksum-partial", Info;
    /// Frames whose virtio-net header does not fit them (offsets or sizes outside the frame,
    /// an unsupported GSO type): dropped.
    RxBadVnetHdr = "rx-bad-vnet-hdr", RxDrop;
    /// GSO super-frames received whole (their segmentation left for later).
    RxGso = "rx-gso-frames", Info;
    /// The segments (datagrams, TCP segments) those super-frames hold.
    RxGsoSegments = "rx-gso-segments", Info;
    /// GSO super-frames handed to the kernel whole, which segments them.
    TxGso = "tx-gso-frames", Info;
    /// UDP GSO super-frames made of a burst's datagrams of one flow (see `queue::udp_gso`).
    TxUdpGso = "tx-udp-gso-frames", Info;
    /// Datagrams that left in those super-frames (also in `tx-packets`).
    TxUdpGsoDatagrams = "tx-udp-gso-datagrams", Info;
    /// TCP GSO super-frames made of a burst's segments of one connection (see
    /// `queue::tcp_coalesce`).
    TxTcpGso = "tx-tcp-gso-frames", Info;
    /// Segments that left in those super-frames (also in `tx-packets`).
    TxTcpGsoSegments = "tx-tcp-gso-segments", Info;
    /// Frames too long for the device (or a transmit slot): freed, not sent.
    TxTooLong = "tx-too-long", TxDrop;
    /// Frames the kernel refused on write.
    TxErrors = "tx-errors", TxDrop;
    /// Transmit calls that found the ring full (the caller counts and frees the rest).
    TxRingFull = "tx-ring-full", Info;
    /// Kicks (`sendto`) the kernel refused; the frames stay queued for the next kick.
    TxKickErrors = "tx-kick-errors", Info;
    /// Frames the kernel dropped because the receive ring was full (PACKET_STATISTICS).
    KernelDrops = "kernel-drops", RxDrop;
    /// Times the kernel found the receive ring full and froze it (PACKET_STATISTICS).
    KernelFreezes = "kernel-ring-freezes", Info;
}

/// One queue's counters, and its receive mode.
#[derive(Debug)]
pub(crate) struct QueueCounters {
    values: [AtomicU64; COUNT],
    /// How the worker serves the receive queue (`RxQueue::set_mode`).
    rx_mode: RxModeCell,
}

impl Default for QueueCounters {
    fn default() -> Self {
        QueueCounters {
            values: std::array::from_fn(|_| AtomicU64::new(0)),
            rx_mode: RxModeCell::default(),
        }
    }
}

impl QueueCounters {
    /// Adds `n`; only the queue's own worker may call this for a data-path counter.
    #[inline(always)]
    pub(crate) fn bump(&self, c: Counter, n: u64) {
        let v = &self.values[c as usize];
        v.store(v.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Counts one super-frame of `kind` made of `count` packets (a run, `crate::coalesce`);
    /// only the queue's own worker may call this.
    pub(crate) fn count_run(&self, kind: Kind, count: u64) {
        let (frames, members) = match kind {
            Kind::Udp => (Counter::TxUdpGso, Counter::TxUdpGsoDatagrams),
            Kind::Tcp => (Counter::TxTcpGso, Counter::TxTcpGsoSegments),
        };
        self.bump(frames, 1);
        self.bump(members, count);
    }

    /// Adds `n` from any thread (for counters the control side folds in).
    pub(crate) fn add_shared(&self, c: Counter, n: u64) {
        self.values[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// The current value.
    pub(crate) fn get(&self, c: Counter) -> u64 {
        self.values[c as usize].load(Ordering::Relaxed)
    }

    /// Records the receive queue's mode (its worker only, when it changes).
    pub(crate) fn set_rx_mode(&self, mode: RxMode) {
        self.rx_mode.set(mode);
    }

    /// The receive queue's mode.
    pub(crate) fn rx_mode(&self) -> RxMode {
        self.rx_mode.get()
    }
}

/// Sums queues into a port's counters. `detail` lists every other named counter summed over the
/// queues, then — with several queues — each queue's received and sent frames
/// (`rx-packets-q0` …), so that the spread over queues can be seen.
pub(crate) fn port_stats<'a>(queues: impl IntoIterator<Item = &'a QueueCounters>) -> PortStats {
    let queues: Vec<&QueueCounters> = queues.into_iter().collect();
    let total = |i: usize| -> u64 {
        queues
            .iter()
            .map(|q| q.values[i].load(Ordering::Relaxed))
            .sum()
    };
    let totals: Vec<u64> = (0..COUNT).map(total).collect();
    let dropped = |class: Class| -> u64 {
        (0..COUNT)
            .filter(|&i| CLASSES[i] == class)
            .map(|i| totals[i])
            .sum()
    };
    let headline = [
        Counter::RxPackets,
        Counter::RxBytes,
        Counter::TxPackets,
        Counter::TxBytes,
    ]
    .map(|c| c as usize);
    let mut detail: Vec<(String, u64)> = (0..COUNT)
        .filter(|i| !headline.contains(i))
        .map(|i| (NAMES[i].to_string(), totals[i]))
        .collect();
    for (q, c) in queues.iter().enumerate().filter(|_| queues.len() > 1) {
        detail.push((format!("rx-packets-q{q}"), c.get(Counter::RxPackets)));
        detail.push((format!("tx-packets-q{q}"), c.get(Counter::TxPackets)));
    }
    PortStats {
        rx_packets: totals[Counter::RxPackets as usize],
        rx_bytes: totals[Counter::RxBytes as usize],
        tx_packets: totals[Counter::TxPackets as usize],
        tx_bytes: totals[Counter::TxBytes as usize],
        rx_dropped: dropped(Class::RxDrop),
        tx_dropped: dropped(Class::TxDrop),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_sum_queues_and_classify_drops() {
        let (a, b) = (QueueCounters::default(), QueueCounters::default());
        a.bump(Counter::RxPackets, 3);
        b.bump(Counter::RxPackets, 4);
        a.bump(Counter::RxTruncated, 1);
        b.add_shared(Counter::KernelDrops, 2);
        b.bump(Counter::TxTooLong, 5);
        a.bump(Counter::TxRingFull, 7);
        let s = port_stats([&a, &b]);
        assert_eq!(s.rx_packets, 7);
        assert_eq!(s.rx_dropped, 3);
        assert_eq!(s.tx_dropped, 5, "a full ring is not a drop of ours");
        let get = |n: &str| s.detail.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get("rx-packets-q0"), Some(3));
        assert_eq!(get("rx-packets-q1"), Some(4));
        assert_eq!(get("tx-ring-full"), Some(7));
        assert_eq!(get("kernel-drops"), Some(2));
    }
}
