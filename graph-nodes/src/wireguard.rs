//! WireGuard tunnels as the data path reads them.
//!
//! A tunnel is an L3 interface (IP payload, no L2 header) with a listen address and UDP port
//! of ours and a fixed list of peers. Its underlay is of its listen address's family: IPv4
//! (`wg4-encrypt`, `wg4-decrypt`) or IPv6 (`wg6-encrypt`, `wg6-decrypt`), and its peers'
//! endpoints are of the same family. What a worker needs per packet is in the published
//! snapshot ([`WgTunnel`], cloned into each [`crate::ForwardingState`]): each peer's endpoint,
//! allowed IPs and current sending session, and the receiver-index → session map. The control
//! side (which runs the handshakes with `wireguard::Device`) publishes a new snapshot when keys
//! change; workers pick it up at their next pass, none stops.
//!
//! What workers write is behind `Arc`s that outlive a snapshot:
//! - a sending session's counter ([`wireguard::transport::SendCounter`], atomic, shared with the
//!   control side's `Device`, which draws keepalives from the same counter, so no nonce is used
//!   twice);
//! - a receiving session's replay window ([`WgRecvSession::window`]): one per keypair, kept
//!   across snapshots while the session lives (a new snapshot never resets it). It is taken with
//!   `try_lock` only — never waited for: each worker polls its own queues and the underlay flow
//!   of a peer (one UDP 5-tuple) lands on one worker, so the window has one writer in practice;
//!   should two workers ever hold packets of one keypair at the same instant, the second drops
//!   its packet as `replay-window-busy` rather than spin or block. The lock is held for the
//!   replay check and for the accept, not across the decryption;
//! - per-peer counters ([`WgPeerCounters`], relaxed atomics) and the flag by which the data
//!   path asks the control side for a handshake;
//! - the punt queue (handshake messages and transport messages of sessions not yet confirmed,
//!   worker → control; bounded, a full queue is a counted drop) and the output queue (what the
//!   control side sends: handshake messages to a peer, and packets it decrypted itself, control
//!   → `wg-control-input` on any worker).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use crossbeam_queue::ArrayQueue;
use wireguard::replay::ReplayWindow;
use wireguard::transport::{SendCounter, TransportKeys};

use crate::fast_map::FastMap;
use crate::index::IfIndex;

/// The largest datagram the punt and output queues carry (a buffer's data).
pub const WG_DATAGRAM_MAX: usize = 2048;

/// Punted datagrams a tunnel holds before the data path drops them (`punt-queue-full`).
pub const PUNT_QUEUE_LEN: usize = 256;

/// Datagrams the control side may have queued for the workers to send.
pub const OUTPUT_QUEUE_LEN: usize = 256;

/// WireGuard's overhead over IPv4: outer IPv4 20 + UDP 8 + transport header 16 + tag 16.
pub const WG4_OVERHEAD: u16 = 60;

/// WireGuard's overhead over IPv6: outer IPv6 40 + UDP 8 + transport header 16 + tag 16.
pub const WG6_OVERHEAD: u16 = 80;

/// WireGuard's overhead over an underlay of `local`'s family ([`WG4_OVERHEAD`] or
/// [`WG6_OVERHEAD`]).
pub fn overhead(local: IpAddr) -> u16 {
    match local {
        IpAddr::V4(_) => WG4_OVERHEAD,
        IpAddr::V6(_) => WG6_OVERHEAD,
    }
}

/// A datagram between the data path and the control side.
#[derive(Clone)]
pub struct WgDatagram {
    /// The tunnel (index into [`crate::ForwardingState::wireguard`]).
    pub tunnel: u32,
    /// The peer's underlay address and UDP port (source of a punted datagram, destination of
    /// an outer one), of the tunnel's family.
    pub peer: SocketAddr,
    /// For output: an inner IP packet the control side decrypted, to be received on the
    /// tunnel's interface (else a WireGuard message to send to `addr:port`).
    pub inner: bool,
    /// Bytes used in `bytes`.
    pub len: u16,
    /// The message.
    pub bytes: [u8; WG_DATAGRAM_MAX],
}

impl WgDatagram {
    /// An empty datagram.
    pub fn new(tunnel: u32, peer: SocketAddr) -> Self {
        WgDatagram {
            tunnel,
            peer,
            inner: false,
            len: 0,
            bytes: [0; WG_DATAGRAM_MAX],
        }
    }

    /// The message bytes.
    pub fn data(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(WG_DATAGRAM_MAX)]
    }
}

impl std::fmt::Debug for WgDatagram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgDatagram")
            .field("tunnel", &self.tunnel)
            .field("peer", &self.peer)
            .field("inner", &self.inner)
            .field("len", &self.len)
            .finish()
    }
}

/// A peer's data-path counters (relaxed atomics; any worker writes them).
#[derive(Debug, Default)]
pub struct WgPeerCounters {
    /// Transport messages sent.
    pub tx_packets: AtomicU64,
    /// Inner bytes sent.
    pub tx_bytes: AtomicU64,
    /// Transport messages received and accepted.
    pub rx_packets: AtomicU64,
    /// Inner bytes received.
    pub rx_bytes: AtomicU64,
    /// Transport messages refused as replayed or too old.
    pub replays: AtomicU64,
    /// Transport messages whose tag did not verify.
    pub bad_tags: AtomicU64,
    /// The data path had a packet for this peer and no session: the control side should
    /// start a handshake.
    pub want_handshake: AtomicBool,
}

impl WgPeerCounters {
    /// Adds `n` to `c` (relaxed).
    #[inline(always)]
    pub fn bump(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// What a tunnel's workers and control side share for the tunnel's whole life.
#[derive(Debug)]
pub struct WgShared {
    /// Worker → control: handshake messages, transport messages of unconfirmed sessions.
    pub punts: ArrayQueue<WgDatagram>,
    /// Per peer, by position.
    pub peers: Box<[WgPeerCounters]>,
}

impl WgShared {
    /// Shared state for a tunnel of `peers` peers.
    pub fn new(peers: usize) -> Self {
        WgShared {
            punts: ArrayQueue::new(PUNT_QUEUE_LEN),
            peers: (0..peers).map(|_| WgPeerCounters::default()).collect(),
        }
    }
}

/// A session's sending half.
#[derive(Debug)]
pub struct WgSendSession {
    /// Keys and indices.
    pub keys: TransportKeys,
    /// The counter, shared with the control side's `Device`.
    pub counter: Arc<SendCounter>,
}

/// A session's receiving half.
#[derive(Debug)]
pub struct WgRecvSession {
    /// Keys and indices.
    pub keys: TransportKeys,
    /// The replay window (see the module docs: `try_lock` only).
    pub window: Mutex<ReplayWindow>,
}

/// What a received transport message's receiver index names.
#[derive(Debug, Clone)]
pub enum WgReceiver {
    /// A session the data path decrypts for peer `peer`.
    Session {
        /// The peer's position.
        peer: u16,
        /// The session.
        session: Arc<WgRecvSession>,
    },
    /// A session the control side has not confirmed yet (a responder's): punt.
    Pending,
}

/// One peer as the data path sees it.
#[derive(Debug, Clone, Default)]
pub struct WgPeer {
    /// Its endpoint, of the tunnel's family; `None` (or port 0): unknown, nothing can be
    /// sent.
    pub endpoint: Option<SocketAddr>,
    /// Its allowed IPv4 prefixes (address, length).
    pub allowed: Vec<(u32, u8)>,
    /// Its allowed IPv6 prefixes (address, length).
    pub allowed6: Vec<(u128, u8)>,
    /// The session to send with, if any.
    pub send: Option<Arc<WgSendSession>>,
}

/// A WireGuard tunnel in the snapshot.
#[derive(Debug, Clone)]
pub struct WgTunnel {
    /// Its L3 interface.
    pub interface: IfIndex,
    /// Our underlay address: IPv4 or IPv6, the family of every outer header the tunnel sends
    /// and receives.
    pub local: IpAddr,
    /// Our UDP port.
    pub port: u16,
    /// Peers by position.
    pub peers: Vec<WgPeer>,
    /// Receiver index → session.
    pub receivers: FastMap<u32, WgReceiver>,
    /// What lives as long as the tunnel.
    pub shared: Arc<WgShared>,
}

impl WgTunnel {
    /// Whether the tunnel's underlay is IPv6.
    #[inline(always)]
    pub fn is_ipv6(&self) -> bool {
        self.local.is_ipv6()
    }

    /// The peer whose allowed IPs hold `dst` most specifically.
    #[inline]
    pub fn peer_for(&self, dst: u32) -> Option<usize> {
        let mut best: Option<(u8, usize)> = None;
        for (i, p) in self.peers.iter().enumerate() {
            for &(a, l) in &p.allowed {
                if crate::fib::lpm::mask(l) & (a ^ dst) == 0 && best.is_none_or(|(b, _)| l > b) {
                    best = Some((l, i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// Whether `src` is in peer `peer`'s allowed IPs.
    #[inline]
    pub fn allows(&self, peer: usize, src: u32) -> bool {
        self.peers.get(peer).is_some_and(|p| {
            p.allowed
                .iter()
                .any(|&(a, l)| crate::fib::lpm::mask(l) & (a ^ src) == 0)
        })
    }

    /// The peer whose allowed IPv6 prefixes hold `dst` most specifically.
    #[inline]
    pub fn peer_for6(&self, dst: u128) -> Option<usize> {
        let mut best: Option<(u8, usize)> = None;
        for (i, p) in self.peers.iter().enumerate() {
            for &(a, l) in &p.allowed6 {
                if mask6(l) & (a ^ dst) == 0 && best.is_none_or(|(b, _)| l > b) {
                    best = Some((l, i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// Whether `src` is in peer `peer`'s allowed IPv6 prefixes.
    #[inline]
    pub fn allows6(&self, peer: usize, src: u128) -> bool {
        self.peers
            .get(peer)
            .is_some_and(|p| p.allowed6.iter().any(|&(a, l)| mask6(l) & (a ^ src) == 0))
    }
}

/// The IPv6 netmask of a `len`-bit prefix (`len` over 128 is 128).
#[inline]
pub fn mask6(len: u8) -> u128 {
    match len {
        0 => 0,
        l => u128::MAX << (128 - u32::from(l.min(128))),
    }
}
