//! WireGuard tunnels at run time (issue 23): the control side of `wg4-encrypt`/`wg4-decrypt`.
//!
//! Each tunnel's handshakes, cookies and timers run in a `wireguard::Device` here, on the
//! configuration owner's thread, in [`Forwarder::housekeeping`] (every few milliseconds): it
//! takes what the workers punted (handshake messages, transport messages of sessions not yet
//! confirmed; at most [`PUNTS_PER_PASS`] a pass, and under load — the punt queue over half full —
//! the `Device` answers with cookies), starts the handshakes the data path asked for, runs the
//! timers, and sends what the `Device` writes through the graph (`wg4-control-input`). When a
//! peer's sessions or endpoint change it publishes the tunnel's new data-path state with an
//! ordinary commit: workers read the new keys at their next pass, none stops. A session's
//! replay window moves to the data path when it is first published (a copy of the `Device`'s),
//! and from then on only the data path opens that session's messages (a late punt of one is
//! dropped, so no message is accepted by both windows).

use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use ::wireguard::allowed_ips::Prefix;
use ::wireguard::timers::{REKEY_AFTER_TIME, REKEY_ON_RECEIVE_AGE};
use ::wireguard::wire::TYPE_TRANSPORT;
use ::wireguard::{Device, DeviceError, PeerId, PresharedKey, PrivateKey, PublicKey, Received};
use graph_nodes::state::FastMap;
use graph_nodes::wireguard::{
    ArrayQueue, WgDatagram, WgPeer, WgReceiver, WgRecvSession, WgSendSession, WgShared,
    PUNT_QUEUE_LEN,
};

use super::*;
use crate::config::{RouteSection, WireguardPeerSection, WireguardSection};

/// Punted datagrams one housekeeping pass handles per tunnel at most.
pub const PUNTS_PER_PASS: usize = 256;

/// One peer's counters as `show wireguard` reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WgPeerStatus {
    /// Its public key, base64.
    pub public_key: String,
    /// Its endpoint, if known.
    pub endpoint: Option<SocketAddrV4>,
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
    /// Where we listen.
    pub listen: SocketAddrV4,
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
type SendSig = (Option<u32>, (u32, u16));

/// A tunnel's control side.
pub(super) struct WgEntry {
    name: String,
    interface: IfIndex,
    tunnel: u32,
    local: Ipv4Addr,
    port: u16,
    device: Device,
    allowed: Vec<Vec<(u32, u8)>>,
    shared: Arc<WgShared>,
    /// Receiving sessions handed to the data path, by local index (kept while published).
    recv: HashMap<u32, Arc<WgRecvSession>>,
    /// What was published last (to publish only changes).
    published: Vec<SendSig>,
    published_rx: Vec<(u32, bool)>,
    /// Data-path packet counts seen last, per peer (to tell the timers of traffic).
    seen: Vec<(u64, u64)>,
    last_handshake: Vec<(u64, Option<SystemTime>)>,
    bad_macs: u64,
    refused: u64,
    punts: u64,
    output_full: u64,
}

fn invalid(name: &str, what: impl std::fmt::Display) -> ForwarderError {
    ForwarderError::InvalidArgument(format!("wireguard {name}: {what}"))
}

fn parse_v4_prefix(name: &str, s: &str) -> Result<(Ipv4Addr, u8), ForwarderError> {
    let (a, l) = s.split_once('/').unwrap_or((s, "32"));
    let a: Ipv4Addr = a
        .trim()
        .parse()
        .map_err(|_| invalid(name, format!("allowed IP {s:?} is not an IPv4 prefix")))?;
    let l: u8 = l
        .trim()
        .parse()
        .ok()
        .filter(|&l| l <= 32)
        .ok_or_else(|| invalid(name, format!("allowed IP {s:?}: bad length")))?;
    Ok((a, l))
}

/// Tunnel `name`'s `Device` with its peers, what the data path gets of each, and each one's
/// allowed IPs as (masked address, length).
fn wireguard_peers(
    name: &str,
    key: PrivateKey,
    peers: &[WireguardPeerSection],
) -> Result<WireguardPeers, ForwarderError> {
    let mut device = Device::new(key);
    let now = Instant::now();
    let mut wg_peers = Vec::new();
    let mut allowed_all = Vec::new();
    for p in peers {
        let public = PublicKey::from_base64(p.public_key.trim()).map_err(|e| invalid(name, e))?;
        let endpoint = match p.endpoint.as_str() {
            "" => None,
            e => Some(
                e.parse::<SocketAddrV4>()
                    .map_err(|_| invalid(name, format!("endpoint {e:?}: not IPv4:port")))?,
            ),
        };
        let id = device.add_peer(
            public,
            PresharedKey::default(),
            endpoint.map(SocketAddr::V4),
        );
        let mut allowed = Vec::new();
        for a in &p.allowed_ips {
            let (ip, len) = parse_v4_prefix(name, a)?;
            let prefix = Prefix::new(ip.into(), len).map_err(|e| invalid(name, e.0))?;
            device.peer_mut(id).allowed_ips.insert(prefix);
            allowed.push((u32::from(ip) & graph_nodes::fib::lpm::mask(len), len));
        }
        if p.persistent_keepalive > 0 {
            let every = Duration::from_secs(p.persistent_keepalive.into());
            device
                .peer_mut(id)
                .timers
                .set_persistent_keepalive(Some(every), now);
        }
        wg_peers.push(WgPeer {
            endpoint: endpoint.map_or((0, 0), |e| (u32::from(*e.ip()), e.port())),
            allowed: allowed.clone(),
            send: None,
        });
        allowed_all.push(allowed);
    }
    Ok((device, wg_peers, allowed_all))
}

/// What [`wireguard_peers`] builds.
type WireguardPeers = (Device, Vec<WgPeer>, Vec<Vec<(u32, u8)>>);

impl Forwarder {
    /// Adds WireGuard tunnel `cfg` (see `config::wireguard`); returns its interface. On error
    /// nothing is left.
    pub fn add_wireguard(
        &mut self,
        cfg: &WireguardSection,
        owner: Option<&str>,
    ) -> Result<IfIndex, ForwarderError> {
        let name = cfg.name.as_str();
        let (key, local) = self.check_new_wireguard(cfg)?;
        let (device, peers, allowed_all) = wireguard_peers(name, key, &cfg.peers)?;
        let mtu = if cfg.underlay_mtu == 0 {
            1500
        } else {
            cfg.underlay_mtu
        };
        let n = peers.len();
        let (interface, tunnel) = self.forwarding.add_wireguard_tunnel(
            name,
            u32::from(local),
            cfg.listen_port,
            peers,
            mtu,
        )?;
        if let Err(e) = self.commit() {
            let _ = self.forwarding.remove_interface(interface);
            return Err(e);
        }
        let shared = self
            .forwarding
            .wireguard_tunnel(tunnel)
            .map(|t| t.shared.clone())
            .ok_or_else(|| ForwarderError::Internal("tunnel vanished".into()))?;
        self.wireguard.push(WgEntry {
            name: name.into(),
            interface,
            tunnel,
            local,
            port: cfg.listen_port,
            device,
            allowed: allowed_all,
            shared,
            recv: HashMap::new(),
            published: Vec::new(),
            published_rx: Vec::new(),
            seen: vec![(0, 0); n],
            last_handshake: vec![(0, None); n],
            bad_macs: 0,
            refused: 0,
            punts: 0,
            output_full: 0,
        });
        self.record(owner, Owned::Tunnel(name.into()));
        Ok(interface)
    }

    /// Checks a new tunnel's name, key, address and port; returns its key and address.
    fn check_new_wireguard(
        &self,
        cfg: &WireguardSection,
    ) -> Result<(PrivateKey, Ipv4Addr), ForwarderError> {
        let name = cfg.name.as_str();
        if name.is_empty() || name.len() > 64 || name.chars().any(char::is_whitespace) {
            return Err(invalid(name, "name: 1 to 64 characters, no spaces"));
        }
        if self.interface(name).is_ok() {
            return Err(ForwarderError::AlreadyExists(format!(
                "an interface named `{name}` exists"
            )));
        }
        let key = match (cfg.private_key.is_empty(), cfg.private_key_file.is_empty()) {
            (false, true) => cfg.private_key.clone(),
            (true, false) => std::fs::read_to_string(&cfg.private_key_file)
                .map_err(|e| invalid(name, format!("{}: {e}", cfg.private_key_file)))?,
            _ => return Err(invalid(name, "give one of private_key, private_key_file")),
        };
        let key = PrivateKey::from_base64(key.trim()).map_err(|e| invalid(name, e))?;
        let local: Ipv4Addr = cfg
            .address
            .parse()
            .map_err(|_| invalid(name, format!("address {:?} is not IPv4", cfg.address)))?;
        if !self.is_own_address(local) {
            return Err(invalid(
                name,
                format!("{local} is not an address of Quiver's (add it to a port first)"),
            ));
        }
        if cfg.listen_port == 0 {
            return Err(invalid(name, "listen_port 0"));
        }
        Ok((key, local))
    }

    /// Removes WireGuard tunnel `name` (its interface, routes and cross-connects).
    pub fn remove_wireguard(&mut self, name: &str) -> Result<(), ForwarderError> {
        let at = self
            .wireguard
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| ForwarderError::NotFound(format!("no WireGuard tunnel `{name}`")))?;
        self.forwarding
            .remove_interface(self.wireguard[at].interface)?;
        self.commit()?;
        self.wireguard.remove(at);
        self.forget(|o| !o.uses_port(name));
        Ok(())
    }

    /// Starts a handshake with every peer of tunnel `name` that has an endpoint, whatever the
    /// timers say (a rekey on demand); the new keys reach the workers once it completes.
    pub fn rekey_wireguard(&mut self, name: &str) -> Result<usize, ForwarderError> {
        let out = self.forwarding.wireguard_output().clone();
        let e = self
            .wireguard
            .iter_mut()
            .find(|t| t.name == name)
            .ok_or_else(|| ForwarderError::NotFound(format!("no WireGuard tunnel `{name}`")))?;
        let now = Instant::now();
        let mut buf = [0u8; 256];
        let mut sent = 0;
        for i in 0..e.allowed.len() {
            let Some(to) = e.endpoint(PeerId(i)) else {
                continue;
            };
            let n = e
                .device
                .initiate(PeerId(i), now, &mut buf)
                .map_err(|err| ForwarderError::Internal(format!("wireguard {name}: {err}")))?;
            let b = buf;
            e.send(&out, to, &b[..n]);
            sent += 1;
        }
        Ok(sent)
    }

    /// The WireGuard tunnel called `name`'s interface.
    pub(super) fn wireguard_interface(&self, name: &str) -> Option<IfIndex> {
        self.wireguard
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.interface)
    }

    /// The name of WireGuard tunnel interface `i`.
    pub(super) fn wireguard_name(&self, i: IfIndex) -> Option<&str> {
        self.wireguard
            .iter()
            .find(|t| t.interface == i)
            .map(|t| t.name.as_str())
    }

    /// `show wireguard`.
    pub fn wireguard_status(&self) -> Vec<WgTunnelStatus> {
        self.wireguard.iter().map(WgEntry::status).collect()
    }

    /// The WireGuard half of housekeeping: punts, handshakes asked for, timers, publication.
    /// True when the data path's state changed (commit).
    pub(super) fn wireguard_housekeeping(&mut self) -> bool {
        let out = self.forwarding.wireguard_output().clone();
        let mut changed = false;
        for e in &mut self.wireguard {
            e.run(&out);
            if let Some((peers, receivers)) = e.changed_state() {
                changed |= self
                    .forwarding
                    .set_wireguard_sessions(e.tunnel, peers, receivers)
                    .is_ok();
            }
        }
        changed
    }
}

/// Whether `[[route]]` `r` goes through a `[[wireguard]]` tunnel of `cfg`.
pub(super) fn through_wireguard(cfg: &Config, r: &RouteSection) -> bool {
    r.via.iter().any(|v| {
        v.split_once('@')
            .is_some_and(|(_, p)| cfg.wireguard.iter().any(|w| w.name == p))
    })
}

/// Adds `cfg`'s `[[wireguard]]` tunnels and the routes through them.
pub(super) fn configure(cfg: &Config, f: &mut Forwarder) -> Result<(), StartError> {
    for w in &cfg.wireguard {
        f.add_wireguard(w, None)
            .map_err(|source| StartError::Wireguard {
                name: w.name.clone(),
                source,
            })?;
    }
    for r in cfg.route.iter().filter(|r| through_wireguard(cfg, r)) {
        let value = |source| StartError::RouteValue {
            prefix: r.prefix.clone(),
            source,
        };
        let (prefix, len) = parse_prefix(&r.prefix).map_err(value)?;
        let mut via = Vec::new();
        for v in &r.via {
            let (ip, p) = v.split_once('@').ok_or_else(|| StartError::Via {
                prefix: r.prefix.clone(),
                via: v.clone(),
            })?;
            via.push((Ipv4Addr::from(parse_ip(ip).map_err(value)?), p));
        }
        f.add_route(Ipv4Addr::from(prefix), len, &via, None)
            .map_err(|source| StartError::WireguardRoute {
                prefix: r.prefix.clone(),
                source,
            })?;
    }
    Ok(())
}

impl WgEntry {
    fn send(&mut self, out: &ArrayQueue<WgDatagram>, to: SocketAddr, msg: &[u8]) {
        let SocketAddr::V4(to) = to else {
            return;
        };
        let mut dg = WgDatagram::new(self.tunnel, u32::from(*to.ip()), to.port());
        dg.bytes[..msg.len()].copy_from_slice(msg);
        dg.len = msg.len() as u16;
        if out.push(dg).is_err() {
            self.output_full += 1;
        }
    }

    fn endpoint(&self, id: PeerId) -> Option<SocketAddr> {
        self.device.peer(id).endpoint
    }

    fn run(&mut self, out: &ArrayQueue<WgDatagram>) {
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
    fn receive_punts(&mut self, out: &ArrayQueue<WgDatagram>, now: Instant) {
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
            let src = SocketAddr::V4(SocketAddrV4::new(dg.addr.into(), dg.port));
            match self.device.receive(now, src, msg, &mut reply) {
                Ok(Received::Reply { to, len, .. }) => {
                    let r = reply;
                    self.send(out, to, &r[..len]);
                }
                Ok(Received::Data { range, .. }) => {
                    let mut inner = WgDatagram::new(self.tunnel, dg.addr, dg.port);
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
    fn drive_peers(&mut self, out: &ArrayQueue<WgDatagram>, now: Instant) {
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
    fn signature(&self, now: Instant) -> (Vec<SendSig>, Vec<(u32, bool)>) {
        let mut sig = Vec::new();
        let mut sig_rx = Vec::new();
        for i in 0..self.allowed.len() {
            let p = self.device.peer(PeerId(i));
            let endpoint = match p.endpoint {
                Some(SocketAddr::V4(e)) => (u32::from(*e.ip()), e.port()),
                _ => (0, 0),
            };
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
    fn changed_state(&mut self) -> Option<(Vec<WgPeer>, FastMap<u32, WgReceiver>)> {
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
                allowed: self.allowed[i].clone(),
                send,
            });
        }
        self.recv
            .retain(|k, _| matches!(receivers.get(k), Some(WgReceiver::Session { .. })));
        self.published = sig;
        self.published_rx = sig_rx;
        Some((peers, receivers))
    }

    fn status(&self) -> WgTunnelStatus {
        let peers = (0..self.allowed.len())
            .map(|i| {
                let p = self.device.peer(PeerId(i));
                let c = &self.shared.peers[i];
                let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
                WgPeerStatus {
                    public_key: p.identity.public_key().to_base64(),
                    endpoint: match p.endpoint {
                        Some(SocketAddr::V4(e)) => Some(e),
                        _ => None,
                    },
                    allowed_ips: self.allowed[i]
                        .iter()
                        .map(|&(a, l)| format!("{}/{l}", Ipv4Addr::from(a)))
                        .collect(),
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
            listen: SocketAddrV4::new(self.local, self.port),
            bad_macs: self.bad_macs,
            refused: self.refused,
            punts: self.punts,
            output_full: self.output_full,
            peers,
        }
    }
}
