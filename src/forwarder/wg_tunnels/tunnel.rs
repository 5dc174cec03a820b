//! A WireGuard tunnel's control side: its `wireguard::Device`, the sessions it published to
//! the data path, and what `show wireguard` reports of it. Knows nothing of the forwarder: the
//! forwarder (`crate::forwarder`) holds one [`WgEntry`] per tunnel and runs it in housekeeping.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use ::wireguard::timers::{REKEY_AFTER_TIME, REKEY_ON_RECEIVE_AGE};
use ::wireguard::wire::TYPE_TRANSPORT;
use ::wireguard::{Device, DeviceError, PeerId, Received};
use graph_nodes::state::FastMap;
use graph_nodes::wireguard::{
    ArrayQueue, WgDatagram, WgPeer, WgReceiver, WgRecvSession, WgSendSession, WgShared,
    PUNT_QUEUE_LEN,
};
use graph_nodes::IfIndex;

/// Punted datagrams one housekeeping pass handles per tunnel at most.
pub const PUNTS_PER_PASS: usize = 256;

/// One peer's counters as `show wireguard` reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WgPeerStatus {
    /// Its public key, base64.
    pub public_key: String,
    /// Its endpoint, if known (of the tunnel's family).
    pub endpoint: Option<SocketAddr>,
    /// Its allowed IPs.
    pub allowed_ips: Vec<String>,
    /// When the last handshake completed.
    pub last_handshake: Option<SystemTime>,
    /// Handshakes completed.
    pub handshakes: u64,
    /// Of which rekeys.
    pub rekeys: u64,
    /// Initiations we sent.
    pub initiations_sent: u64,
    /// Transport messages refused as replays (data path and control side).
    pub replays: u64,
    /// Transport messages whose tag failed (data path).
    pub bad_tags: u64,
    /// Inner bytes received.
    pub rx_bytes: u64,
    /// Inner bytes sent.
    pub tx_bytes: u64,
    /// Transport messages received by the data path.
    pub rx_packets: u64,
    /// Transport messages sent by the data path.
    pub tx_packets: u64,
}

/// One tunnel as `show wireguard` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WgTunnelStatus {
    /// Its name.
    pub name: String,
    /// Our public key, base64.
    pub public_key: String,
    /// Where we listen (IPv4 or IPv6: the tunnel's underlay family).
    pub listen: SocketAddr,
    /// Handshake messages refused for a bad mac1.
    pub bad_macs: u64,
    /// Other refusals of the control side (unknown index, bad handshake, flood…).
    pub refused: u64,
    /// Punted datagrams handled.
    pub punts: u64,
    /// Datagrams the control side could not queue for sending.
    pub output_full: u64,
    /// Peers.
    pub peers: Vec<WgPeerStatus>,
}

/// A peer as published: its sending session's local index, its endpoint.
type SendSig = (Option<u32>, Option<SocketAddr>);

/// A tunnel's control side.
pub struct WgEntry {
    pub(super) name: String,
    pub(super) interface: IfIndex,
    pub(super) tunnel: u32,
    /// Our underlay address, IPv4 or IPv6.
    pub(super) local: IpAddr,
    pub(super) port: u16,
    pub(super) device: Device,
    pub(super) allowed: Vec<super::PeerAllowed>,
    pub(super) shared: Arc<WgShared>,
    /// Receiving sessions handed to the data path, by local index (kept while published).
    pub(super) recv: HashMap<u32, Arc<WgRecvSession>>,
    /// What was published last (to publish only changes).
    pub(super) published: Vec<SendSig>,
    pub(super) published_rx: Vec<(u32, bool)>,
    /// Data-path packet counts seen last, per peer (to tell the timers of traffic).
    pub(super) seen: Vec<(u64, u64)>,
    pub(super) last_handshake: Vec<(u64, Option<SystemTime>)>,
    pub(super) bad_macs: u64,
    pub(super) refused: u64,
    pub(super) punts: u64,
    pub(super) output_full: u64,
}

impl WgEntry {
    /// Queues `msg` to `to` for `wg-control-input`; a destination of the other family than
    /// the tunnel's (which the `Device` cannot have learned) is not sent.
    pub(super) fn send(&mut self, out: &ArrayQueue<WgDatagram>, to: SocketAddr, msg: &[u8]) {
        if to.is_ipv6() != self.local.is_ipv6() {
            return;
        }
        let mut dg = WgDatagram::new(self.tunnel, to);
        dg.bytes[..msg.len()].copy_from_slice(msg);
        dg.len = msg.len() as u16;
        if out.push(dg).is_err() {
            self.output_full += 1;
        }
    }

    pub(super) fn endpoint(&self, id: PeerId) -> Option<SocketAddr> {
        self.device.peer(id).endpoint
    }

    pub(super) fn run(&mut self, out: &ArrayQueue<WgDatagram>) {
        let now = Instant::now();
        self.receive_punts(out, now);
        self.drive_peers(out, now);
        let mut buf = [0u8; 256];
        while let Some((id, n)) = self.device.poll(now, &mut buf) {
            if let Some(to) = self.endpoint(id) {
                let b = buf;
                self.send(out, to, &b[..n]);
            }
        }
        for i in 0..self.last_handshake.len() {
            let h = self.device.peer(PeerId(i)).stats.handshakes;
            if h != self.last_handshake[i].0 {
                self.last_handshake[i] = (h, Some(SystemTime::now()));
            }
        }
    }

    /// Hands what the workers punted to the `Device` (cookies when the punt queue is over half
    /// full); sends its replies, hands decrypted data to the graph.
    pub(super) fn receive_punts(&mut self, out: &ArrayQueue<WgDatagram>, now: Instant) {
        self.device
            .set_under_load(self.shared.punts.len() > PUNT_QUEUE_LEN / 2);
        let mut reply = [0u8; 256];
        for _ in 0..PUNTS_PER_PASS {
            let Some(mut dg) = self.shared.punts.pop() else {
                break;
            };
            self.punts += 1;
            let len = usize::from(dg.len).min(dg.bytes.len());
            let msg = &mut dg.bytes[..len];
            if msg.first() == Some(&TYPE_TRANSPORT) && len >= 8 {
                let index = u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]);
                if self.recv.contains_key(&index) {
                    // Published since it was punted: only the data path's window decides now.
                    continue;
                }
            }
            let src = dg.peer;
            match self.device.receive(now, src, msg, &mut reply) {
                Ok(Received::Reply { to, len, .. }) => {
                    let r = reply;
                    self.send(out, to, &r[..len]);
                }
                Ok(Received::Data { range, .. }) => {
                    let mut inner = WgDatagram::new(self.tunnel, dg.peer);
                    inner.inner = true;
                    inner.len = range.len() as u16;
                    inner.bytes[..range.len()].copy_from_slice(&msg[range]);
                    if out.push(inner).is_err() {
                        self.output_full += 1;
                    }
                }
                Ok(Received::Nothing) => {}
                Err(DeviceError::BadMac1) => self.bad_macs += 1,
                Err(e) => {
                    self.refused += 1;
                    tracing::debug!(tunnel = %self.name, error = %e, "wireguard: refused");
                }
            }
        }
    }

    /// Tells each peer's timers what the data path sent and received since the last pass, and
    /// starts the handshakes the data path asked for or a session's age calls for.
    pub(super) fn drive_peers(&mut self, out: &ArrayQueue<WgDatagram>, now: Instant) {
        let mut buf = [0u8; 256];
        for i in 0..self.shared.peers.len() {
            let id = PeerId(i);
            let c = &self.shared.peers[i];
            let (tx, rx) = (
                c.tx_packets.load(Ordering::Relaxed),
                c.rx_packets.load(Ordering::Relaxed),
            );
            let (seen_tx, seen_rx) = self.seen[i];
            let peer = self.device.peer_mut(id);
            if tx != seen_tx {
                peer.timers.data_sent(now);
            }
            if rx != seen_rx {
                peer.timers.data_received(now);
            }
            self.seen[i] = (tx, rx);
            // A session we may keep sending with: not expired, and (as its initiator) younger
            // than REKEY_AFTER_TIME.
            let usable = peer.current().is_some_and(|s| {
                let age = now.saturating_duration_since(s.keys.created);
                let stale = s.expired(now) || (s.keys.initiator && age >= REKEY_AFTER_TIME);
                !stale
            });
            let wanted = c.want_handshake.swap(false, Ordering::Relaxed);
            // As the initiator: a rekey once sending on a session past REKEY_AFTER_TIME, or
            // receiving on one past REKEY_ON_RECEIVE_AGE (the data path's counts moved).
            let received_late = rx != seen_rx
                && peer.current().is_some_and(|s| {
                    s.keys.initiator
                        && now.saturating_duration_since(s.keys.created) >= REKEY_ON_RECEIVE_AGE
                });
            let aged = (tx != seen_tx && !usable && peer.current().is_some()) || received_late;
            if (wanted || aged)
                && !usable
                && !peer.timers.handshake_pending()
                && peer.timers.may_initiate(now)
            {
                if let (Ok(n), Some(to)) =
                    (self.device.initiate(id, now, &mut buf), self.endpoint(id))
                {
                    let b = buf;
                    self.send(out, to, &b[..n]);
                }
            }
        }
    }

    /// What the data path should see, in short: per peer the sending session's index and the
    /// endpoint; the receiving sessions' indices (confirmed or not).
    pub(super) fn signature(&self, now: Instant) -> (Vec<SendSig>, Vec<(u32, bool)>) {
        let mut sig = Vec::new();
        let mut sig_rx = Vec::new();
        for i in 0..self.allowed.len() {
            let p = self.device.peer(PeerId(i));
            let endpoint = p.endpoint.filter(|e| e.is_ipv6() == self.local.is_ipv6());
            let cur = p.current().filter(|s| !s.expired(now));
            sig.push((cur.map(|s| s.keys.local_index), endpoint));
            sig_rx.extend(
                [p.current(), p.previous()]
                    .into_iter()
                    .flatten()
                    .filter(|s| !s.expired(now))
                    .map(|s| (s.keys.local_index, true))
                    .chain(p.next().map(|s| (s.keys.local_index, false))),
            );
        }
        (sig, sig_rx)
    }

    /// The data path's state if it differs from what was published (checked every pass, so
    /// nothing is built while nothing changed).
    pub(super) fn changed_state(&mut self) -> Option<(Vec<WgPeer>, FastMap<u32, WgReceiver>)> {
        let now = Instant::now();
        let (sig, sig_rx) = self.signature(now);
        if sig == self.published && sig_rx == self.published_rx {
            return None;
        }
        let mut peers = Vec::new();
        let mut receivers = FastMap::default();
        for (i, &(send_index, endpoint)) in sig.iter().enumerate() {
            let p = self.device.peer(PeerId(i));
            let send = p
                .current()
                .filter(|s| Some(s.keys.local_index) == send_index)
                .map(|s| {
                    Arc::new(WgSendSession {
                        keys: s.keys.clone(),
                        counter: s.counter.clone(),
                    })
                });
            for s in [p.current(), p.previous()].into_iter().flatten() {
                let index = s.keys.local_index;
                if !sig_rx.contains(&(index, true)) {
                    continue;
                }
                // The window is copied once, when the session is first published.
                let session = self
                    .recv
                    .entry(index)
                    .or_insert_with(|| {
                        Arc::new(WgRecvSession {
                            keys: s.keys.clone(),
                            window: std::sync::Mutex::new(s.window.clone()),
                        })
                    })
                    .clone();
                receivers.insert(
                    index,
                    WgReceiver::Session {
                        peer: i as u16,
                        session,
                    },
                );
            }
            if let Some(n) = p.next() {
                receivers.insert(n.keys.local_index, WgReceiver::Pending);
            }
            peers.push(WgPeer {
                endpoint,
                allowed: self.allowed[i].v4.clone(),
                allowed6: self.allowed[i].v6.clone(),
                send,
            });
        }
        self.recv
            .retain(|k, _| matches!(receivers.get(k), Some(WgReceiver::Session { .. })));
        self.published = sig;
        self.published_rx = sig_rx;
        Some((peers, receivers))
    }

    pub(super) fn status(&self) -> WgTunnelStatus {
        let peers = (0..self.allowed.len())
            .map(|i| {
                let p = self.device.peer(PeerId(i));
                let c = &self.shared.peers[i];
                let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
                WgPeerStatus {
                    public_key: p.identity.public_key().to_base64(),
                    endpoint: p.endpoint,
                    allowed_ips: self.allowed[i].to_strings(),
                    last_handshake: self.last_handshake[i].1,
                    handshakes: p.stats.handshakes,
                    rekeys: p.stats.rekeys,
                    initiations_sent: p.stats.initiations_sent,
                    replays: p.stats.replays + ld(&c.replays),
                    bad_tags: ld(&c.bad_tags),
                    rx_bytes: p.stats.rx_bytes + ld(&c.rx_bytes),
                    tx_bytes: p.stats.tx_bytes + ld(&c.tx_bytes),
                    rx_packets: ld(&c.rx_packets),
                    tx_packets: ld(&c.tx_packets),
                }
            })
            .collect();
        WgTunnelStatus {
            name: self.name.clone(),
            public_key: self.device.public_key().to_base64(),
            listen: SocketAddr::new(self.local, self.port),
            bad_macs: self.bad_macs,
            refused: self.refused,
            punts: self.punts,
            output_full: self.output_full,
            peers,
        }
    }
}
