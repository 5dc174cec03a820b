//! Runs of one flow's packets in a transmit burst that leave as one GSO super-frame through the
//! socket's super-frame socket: a tunnel's UDP datagrams ([`udp_gso`]) and TCP segments
//! ([`tcp_coalesce`]). The kernel then carries one skb where it would carry dozens, and
//! segments it as late as it can (or never: a local receiver takes it whole).

use std::io::IoSlice;

use dataplane::offload::VIRTIO_NET_HDR_LEN;
use dataplane::WorkerBuffers;

use super::super::counters::{Counter, QueueCounters};
use super::super::socket::PacketSocket;
use super::{tcp_coalesce, udp_gso};

/// The fewest packets worth a super-frame.
const MIN_RUN: usize = 2;
/// The most packets in one super-frame (the kernel's `UDP_MAX_SEGMENTS` is at least 64).
pub(super) const MAX_RUN: usize = 64;
/// The longest IPv4 packet.
pub(super) const MAX_IP_LEN: usize = u16::MAX as usize;
/// The longest headers a super-frame has: Ethernet, IPv4 without options, TCP with 40 bytes of
/// options.
pub(super) const MAX_HEADERS: usize = 14 + 20 + 60;

/// What a run is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A tunnel's UDP datagrams: a UDP GSO super-frame.
    Udp,
    /// One connection's TCP segments, in sequence: a TCP GSO super-frame.
    Tcp,
}

/// Which kinds of run a queue makes (both until the kernel refuses one).
#[derive(Debug, Clone, Copy)]
pub(super) struct Kinds {
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
pub(super) struct Run {
    pub start: usize,
    pub len: usize,
    pub kind: Kind,
}

/// The first run of `packets` of a kind in `kinds`, if any: the packets before it are sent one
/// by one.
pub(super) fn next_run(buffers: &WorkerBuffers, packets: &[u32], kinds: Kinds) -> Option<Run> {
    let mut start = 0;
    while start + MIN_RUN <= packets.len() {
        let rest = &packets[start..];
        let mut len = 0;
        if kinds.udp {
            len = udp_gso::run_len(buffers, rest);
            if len >= MIN_RUN {
                return Some(Run {
                    start,
                    len,
                    kind: Kind::Udp,
                });
            }
        }
        if kinds.tcp && len == 0 {
            len = tcp_coalesce::run_len(buffers, rest);
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

/// A super-frame's virtio-net header and headers (the first packet's, made to describe the
/// whole), to be sent before each packet's payload.
pub(super) struct SuperHeaders {
    pub vnet: [u8; VIRTIO_NET_HDR_LEN],
    pub bytes: [u8; MAX_HEADERS],
    pub len: usize,
}

/// What became of a run offered as one super-frame.
pub(super) enum RunSent {
    /// Sent (or dropped, counted) and freed.
    Done,
    /// The socket is busy: the packets are still the caller's.
    Busy,
    /// The kernel refused the super-frame (no such GSO here): the packets are still the
    /// caller's, to be sent one by one.
    Refused,
}

/// Sends `packets` (a run of `kind` from [`next_run`]) as one super-frame through the socket's
/// super-frame socket, gathered from the buffers (no copy here).
pub(super) fn send_run(
    socket: &PacketSocket,
    buffers: &mut WorkerBuffers,
    packets: &[u32],
    kind: Kind,
    counters: &QueueCounters,
) -> RunSent {
    let headers = match kind {
        Kind::Udp => udp_gso::super_headers(buffers, packets),
        Kind::Tcp => tcp_coalesce::super_headers(buffers, packets),
    };
    let result = {
        let mut parts = [IoSlice::new(&[]); MAX_RUN + 2];
        parts[0] = IoSlice::new(&headers.vnet);
        parts[1] = IoSlice::new(&headers.bytes[..headers.len]);
        for (part, &bi) in parts[2..].iter_mut().zip(packets) {
            *part = IoSlice::new(&buffers.data(bi)[headers.len..]);
        }
        socket.send_big(&parts[..2 + packets.len()])
    };
    let count = packets.len() as u64;
    match result {
        Err(nix::Error::EAGAIN | nix::Error::ENOBUFS) => return RunSent::Busy,
        Err(nix::Error::EINVAL | nix::Error::EOPNOTSUPP | nix::Error::EPROTONOSUPPORT) => {
            return RunSent::Refused
        }
        Ok(_) => {
            let bytes: u64 = packets
                .iter()
                .map(|&bi| u64::from(buffers.meta(bi).total_length()))
                .sum();
            counters.bump(Counter::TxPackets, count);
            counters.bump(Counter::TxBytes, bytes);
            let (frames, members) = match kind {
                Kind::Udp => (Counter::TxUdpGso, Counter::TxUdpGsoDatagrams),
                Kind::Tcp => (Counter::TxTcpGso, Counter::TxTcpGsoSegments),
            };
            counters.bump(frames, 1);
            counters.bump(members, count);
        }
        Err(nix::Error::EMSGSIZE) => counters.bump(Counter::TxTooLong, count),
        Err(_) => counters.bump(Counter::TxErrors, count),
    }
    buffers.free(packets);
    RunSent::Done
}

/// Folds a ones'-complement sum to 16 bits (not inverted).
pub(super) fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}
