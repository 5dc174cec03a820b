//! Runs of one flow's packets in a transmit burst that leave a kernel-interface port (AF_PACKET,
//! TAP) as one GSO super-frame behind a virtio-net header: a tunnel's UDP datagrams ([`udp`])
//! and one connection's TCP segments ([`tcp`]). The kernel then carries one skb where it would
//! carry dozens, and segments it as late as it can (or never: a local receiver takes it whole).

use dataplane::BufferIndex;
use dataplane::WorkerBuffers;

mod super_frame;
mod tcp;
mod udp;

pub(crate) use super_frame::{gather, SuperHeaders, MAX_RUN};

/// The fewest packets worth a super-frame.
const MIN_RUN: usize = 2;
/// What a run is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A tunnel's UDP datagrams: a UDP GSO super-frame.
    Udp,
    /// One connection's TCP segments, in sequence: a TCP GSO super-frame.
    Tcp,
}

/// Which kinds of run a queue makes (both until the kernel refuses one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kinds {
    pub udp: bool,
    pub tcp: bool,
}

impl Kinds {
    /// Whether any run is made at all.
    pub fn any(&self) -> bool {
        self.udp || self.tcp
    }

    /// Stops making runs of `kind`.
    pub fn refuse(&mut self, kind: Kind) {
        match kind {
            Kind::Udp => self.udp = false,
            Kind::Tcp => self.tcp = false,
        }
    }
}

/// A run found in a burst: `packets[start..start + len]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub start: usize,
    pub len: usize,
    pub kind: Kind,
}

/// The first run of `packets` of a kind in `kinds`, if any: the packets before it are sent one
/// by one. Packets of a run are frames of at most `max_len` bytes (the egress device's MTU and
/// Ethernet header): a longer one is for the caller to refuse, counted, not for the kernel to
/// segment into pieces too long for the device.
pub(crate) fn next_run(
    buffers: &WorkerBuffers,
    packets: &[BufferIndex],
    kinds: Kinds,
    max_len: usize,
) -> Option<Run> {
    let mut start = 0;
    while start + MIN_RUN <= packets.len() {
        let rest = &packets[start..];
        // Every packet of a run is at most as long as its first.
        if buffers.data(rest[0]).len() > max_len {
            start += 1;
            continue;
        }
        let mut len = 0;
        if kinds.udp {
            len = udp::run_len(buffers, rest);
            if len >= MIN_RUN {
                return Some(Run {
                    start,
                    len,
                    kind: Kind::Udp,
                });
            }
        }
        if kinds.tcp && len == 0 {
            len = tcp::run_len(buffers, rest);
            if len >= MIN_RUN {
                return Some(Run {
                    start,
                    len,
                    kind: Kind::Tcp,
                });
            }
        }
        // Packets that could not start a run longer than theirs cannot start one either.
        start += len.max(1);
    }
    None
}

/// The super-frame headers of `packets`, a run of `kind` from [`next_run`].
pub(crate) fn super_headers(
    buffers: &WorkerBuffers,
    packets: &[BufferIndex],
    kind: Kind,
) -> SuperHeaders {
    match kind {
        Kind::Udp => udp::super_headers(buffers, packets),
        Kind::Tcp => tcp::super_headers(buffers, packets),
    }
}
