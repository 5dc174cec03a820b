//! WireGuard tunnels at run time (issue 23): the control side of `wg4-encrypt`/`wg4-decrypt`
//! and, for a tunnel whose address is IPv6 (issue 31), `wg6-encrypt`/`wg6-decrypt`.
//!
//! Each tunnel's handshakes, cookies and timers run in a `wireguard::Device` here, on the
//! configuration owner's thread, in [`Forwarder::housekeeping`] (every few milliseconds): it
//! takes what the workers punted (handshake messages, transport messages of sessions not yet
//! confirmed; at most [`PUNTS_PER_PASS`](tunnel::PUNTS_PER_PASS) a pass, and under load — the punt queue over half full —
//! the `Device` answers with cookies), starts the handshakes the data path asked for, runs the
//! timers, and sends what the `Device` writes through the graph (`wg-control-input`). When a
//! peer's sessions or endpoint change it publishes the tunnel's new data-path state with an
//! ordinary commit: workers read the new keys at their next pass, none stops. A session's
//! replay window moves to the data path when it is first published (a copy of the `Device`'s),
//! and from then on only the data path opens that session's messages (a late punt of one is
//! dropped, so no message is accepted by both windows).
//!
//! A tunnel's underlay is its address's family: its peers' endpoints are of that family (a
//! peer that roams does so within it: the `Device` follows the source of a handshake message
//! it accepts, and the tunnel hears only its own family).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ::wireguard::allowed_ips::Prefix;
use ::wireguard::{Device, PeerId, PresharedKey, PrivateKey, PublicKey};
use graph_nodes::wireguard::WgPeer;

pub(super) mod tunnel;

use tunnel::WgEntry;

use super::*;
use crate::config::{WireguardPeerSection, WireguardSection};

fn invalid(name: &str, what: impl std::fmt::Display) -> ForwarderError {
    ForwarderError::InvalidArgument(format!("wireguard {name}: {what}"))
}

/// A peer's allowed IPs as the data path matches them: (masked address, length) by family.
#[derive(Debug, Clone, Default)]
pub(super) struct PeerAllowed {
    pub(super) v4: Vec<(u32, u8)>,
    pub(super) v6: Vec<(u128, u8)>,
}

impl PeerAllowed {
    /// Both families, as `address/length`.
    pub(super) fn to_strings(&self) -> Vec<String> {
        let v4 = self
            .v4
            .iter()
            .map(|&(a, l)| format!("{}/{l}", Ipv4Addr::from(a)));
        let v6 = self
            .v6
            .iter()
            .map(|&(a, l)| format!("{}/{l}", std::net::Ipv6Addr::from(a)));
        v4.chain(v6).collect()
    }
}

/// Whether `ip` may be a tunnel's address or a peer's endpoint: unicast, and for IPv6 not
/// link-local (whose scope an endpoint cannot name).
fn is_tunnel_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast() || a.is_unicast_link_local()),
    }
}

/// A peer's endpoint, `IPv4:port` or `[IPv6]:port`, of the family of the tunnel's address
/// `local`.
fn peer_endpoint(name: &str, e: &str, local: IpAddr) -> Result<SocketAddr, ForwarderError> {
    let to = crate::config::values::endpoint(e).map_err(|err| invalid(name, err))?;
    if to.is_ipv6() != local.is_ipv6() {
        return Err(invalid(
            name,
            format!("endpoint {to} is not of the family of the tunnel's address {local}"),
        ));
    }
    if !is_tunnel_unicast(to.ip()) || to.port() == 0 {
        return Err(invalid(
            name,
            format!("endpoint {to}: not a unicast address beyond the link and a port"),
        ));
    }
    Ok(to)
}

/// Tunnel `name`'s `Device` with its peers, what the data path gets of each, and each one's
/// allowed IPs; endpoints of `local`'s family.
fn wireguard_peers(
    name: &str,
    key: PrivateKey,
    local: IpAddr,
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
            e => Some(peer_endpoint(name, e, local)?),
        };
        let id = device.add_peer(public, PresharedKey::default(), endpoint);
        let mut allowed = PeerAllowed::default();
        for a in &p.allowed_ips {
            let (ip, len) = crate::config::values::allowed_ip(a).map_err(|e| invalid(name, e))?;
            let prefix = Prefix::new(ip, len).map_err(|e| invalid(name, e.0))?;
            device.peer_mut(id).allowed_ips.insert(prefix);
            match ip {
                IpAddr::V4(v4) => allowed
                    .v4
                    .push((u32::from(v4) & graph_nodes::fib::lpm::mask(len), len)),
                IpAddr::V6(v6) => allowed
                    .v6
                    .push((u128::from(v6) & graph_nodes::wireguard::mask6(len), len)),
            }
        }
        if p.persistent_keepalive > 0 {
            let every = Duration::from_secs(p.persistent_keepalive.into());
            device
                .peer_mut(id)
                .timers
                .set_persistent_keepalive(Some(every), now);
        }
        wg_peers.push(WgPeer {
            endpoint,
            allowed: allowed.v4.clone(),
            allowed6: allowed.v6.clone(),
            send: None,
        });
        allowed_all.push(allowed);
    }
    Ok((device, wg_peers, allowed_all))
}

/// What [`wireguard_peers`] builds.
type WireguardPeers = (Device, Vec<WgPeer>, Vec<PeerAllowed>);

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
        let (device, peers, allowed_all) = wireguard_peers(name, key, local, &cfg.peers)?;
        let mtu = if cfg.underlay_mtu == 0 {
            1500
        } else {
            cfg.underlay_mtu
        };
        let n = peers.len();
        let (interface, tunnel) =
            self.forwarding
                .add_wireguard_tunnel(name, local, cfg.listen_port, peers, mtu)?;
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

    /// Checks a new tunnel's name, key, address (IPv4 or IPv6) and port; returns its key and
    /// address.
    fn check_new_wireguard(
        &self,
        cfg: &WireguardSection,
    ) -> Result<(PrivateKey, IpAddr), ForwarderError> {
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
        let local: IpAddr = cfg.address.parse().map_err(|_| {
            invalid(
                name,
                format!("address {:?} is not an IPv4 or IPv6 address", cfg.address),
            )
        })?;
        if !is_tunnel_unicast(local) {
            return Err(invalid(
                name,
                format!("address {local}: not a unicast address beyond the link"),
            ));
        }
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

impl Forwarder {
    /// Adds `cfg`'s `[[wireguard]]` tunnels (each in the `[[table]]` that lists it, if one
    /// does) and the routes through them.
    pub(super) fn configure_wireguard(&mut self, cfg: &Config) -> Result<(), StartError> {
        let f = self;
        for w in &cfg.wireguard {
            let table = cfg.table.iter().find(|t| t.interfaces.contains(&w.name));
            f.add_wireguard(w, None)
                .and_then(|_| match table {
                    Some(t) => f.set_interface_table(&w.name, &t.name),
                    None => Ok(()),
                })
                .map_err(|source| StartError::Wireguard {
                    name: w.name.clone(),
                    source,
                })?;
        }
        let topology = cfg.topology()?;
        for r in topology
            .routes
            .iter()
            .filter(|r| cfg.route_through_wireguard(r.section))
        {
            match r.table {
                Some(table) => f.add_route_in(table, r.prefix, r.len, &r.via),
                None => f.add_route(r.prefix, r.len, &r.via, None),
            }
            .map_err(|source| StartError::WireguardRoute {
                prefix: r.section.prefix.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
