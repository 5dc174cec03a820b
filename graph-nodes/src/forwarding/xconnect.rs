//! [`CrossConnects`]: L2 cross-connects (every frame from one interface leaves by the other)
//! and L3 ones (every IP packet from one leaves by the other toward its peer, the next hop of
//! its family), and the [`Forwarding`] methods that make and remove them.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::objects::AdjKey;
use super::{Forwarding, ForwardingError};
use crate::index::{AdjIndex, IfIndex};
use crate::state::{InterfaceKind, InterfaceMode};

/// The cross-connects, both ways of each.
pub(super) struct CrossConnects {
    /// L2: `l2[rx] = tx` ([`IfIndex::NONE`]: none), one slot per interface index.
    pub(super) l2: Vec<IfIndex>,
    /// L3: receiving interface → where its packets go.
    pub(super) l3: HashMap<IfIndex, L3Direction>,
}

/// Where one direction of an L3 cross-connect sends: toward an IPv4 next hop, an IPv6 one, or
/// both. IPv4 packets leave toward `v4` (resolved by ARP), IPv6 ones toward `v6` (resolved by
/// neighbour discovery), or, without one, toward `v4`'s MAC (a dual-stack peer is one station).
/// A point-to-point or WireGuard interface needs neither: its peer is the far end of the link,
/// or the tunnel's peer for the packet's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct L3Peer {
    /// The IPv4 next hop.
    pub v4: Option<Ipv4Addr>,
    /// The IPv6 next hop.
    pub v6: Option<Ipv6Addr>,
}

impl L3Peer {
    /// No next hop (for a point-to-point or WireGuard interface).
    pub const NONE: L3Peer = L3Peer { v4: None, v6: None };

    /// Whether it has no next hop at all.
    pub fn is_none(&self) -> bool {
        self.v4.is_none() && self.v6.is_none()
    }

    /// Its next hops, IPv4 first.
    pub fn addrs(&self) -> impl Iterator<Item = std::net::IpAddr> {
        let v4 = self.v4.map(std::net::IpAddr::V4);
        v4.into_iter().chain(self.v6.map(std::net::IpAddr::V6))
    }
}

impl From<Ipv4Addr> for L3Peer {
    fn from(a: Ipv4Addr) -> Self {
        L3Peer {
            v4: Some(a),
            v6: None,
        }
    }
}

/// An IPv4 next hop as a number (as the rest of the forwarding API takes addresses).
impl From<u32> for L3Peer {
    fn from(a: u32) -> Self {
        Ipv4Addr::from(a).into()
    }
}

impl From<Ipv6Addr> for L3Peer {
    fn from(a: Ipv6Addr) -> Self {
        L3Peer {
            v4: None,
            v6: Some(a),
        }
    }
}

impl std::fmt::Display for L3Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sep = "";
        for a in self.addrs() {
            write!(f, "{sep}{a}")?;
            sep = ",";
        }
        if self.is_none() {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// One direction of an L3 cross-connect.
#[derive(Debug, Clone, Copy)]
pub(super) struct L3Direction {
    /// The interface its packets leave by.
    pub(super) tx: IfIndex,
    /// Toward what.
    pub(super) peer: L3Peer,
    /// The adjacency IPv4 packets leave by (held; `None`: IPv4 is dropped, `no-next-hop`).
    pub(super) adj4: Option<AdjIndex>,
    /// The adjacency IPv6 packets leave by (held).
    pub(super) adj6: Option<AdjIndex>,
}

impl CrossConnects {
    pub(super) fn new() -> Self {
        CrossConnects {
            l2: Vec::new(),
            l3: HashMap::new(),
        }
    }

    /// Gives every interface index below `interfaces` a slot.
    pub(super) fn make_room(&mut self, interfaces: usize) {
        if self.l2.len() < interfaces {
            self.l2.resize(interfaces, IfIndex::NONE);
        }
    }
}

impl Forwarding {
    /// Puts two interfaces in L2 mode and cross-connects them both ways.
    pub fn cross_connect(&mut self, a: IfIndex, b: IfIndex) -> Result<(), ForwardingError> {
        self.interfaces.get(a)?;
        self.interfaces.get(b)?;
        self.interfaces.get_mut(a)?.mode = InterfaceMode::L2;
        self.interfaces.get_mut(b)?.mode = InterfaceMode::L2;
        self.xconnect.l2[a.as_usize()] = b;
        self.xconnect.l2[b.as_usize()] = a;
        Ok(())
    }

    /// Removes the cross-connect of `a` (both ways). Ports go back to L3 mode.
    pub fn disconnect(&mut self, a: IfIndex) {
        if let Some(&b) = self.xconnect.l2.get(a.as_usize()) {
            if !b.is_none() {
                self.xconnect.l2[b.as_usize()] = IfIndex::NONE;
                self.back_to_l3(b);
            }
            self.xconnect.l2[a.as_usize()] = IfIndex::NONE;
        }
        self.back_to_l3(a);
    }

    /// A port (not a tunnel's or a sub-interface's side) goes back to routing.
    fn back_to_l3(&mut self, i: IfIndex) {
        if let Ok(iface) = self.interfaces.get_mut(i) {
            if iface.kind == InterfaceKind::Port {
                iface.mode = InterfaceMode::L3;
            }
        }
    }

    /// L3 cross-connects two routed ports: every IP packet received on `a` leaves by `b`
    /// toward `to_b` (B's peer), and every one received on `b` by `a` toward `to_a`, TTL or
    /// hop limit decremented, whatever their destinations (after `ip4-input`'s and
    /// `ip6-input`'s checks; IPv6 through `ip6-l3xc`). Each packet goes toward the next hop of
    /// its family (see [`L3Peer`]); IPv4 with no IPv4 next hop is dropped (`no-next-hop`). The
    /// next hops' MACs come from neighbours (configured, or learned by ARP or neighbour
    /// discovery when the interface has an address in the next hop's subnet). ARP, neighbour
    /// discovery and packets for our own addresses still work on both. Replaces an L3
    /// cross-connect either had.
    ///
    /// Refused: a direction without a next hop toward an interface that has a link layer
    /// (neither point-to-point nor WireGuard), and a multicast, unspecified, broadcast or
    /// (IPv6) link-local next hop.
    pub fn l3_cross_connect(
        &mut self,
        a: IfIndex,
        b: IfIndex,
        to_b: impl Into<L3Peer>,
        to_a: impl Into<L3Peer>,
    ) -> Result<(), ForwardingError> {
        let (to_b, to_a) = (to_b.into(), to_a.into());
        for i in [a, b] {
            let iface = self.interfaces.get(i)?;
            let kind_ok = matches!(
                iface.kind,
                InterfaceKind::Port | InterfaceKind::Wireguard { .. }
            );
            if iface.mode != InterfaceMode::L3 || !kind_ok {
                return Err(ForwardingError::WrongMode(i));
            }
        }
        let mut keys = Vec::with_capacity(2);
        for (rx, tx, peer) in [(a, b, to_b), (b, a, to_a)] {
            keys.push((rx, tx, peer, self.l3_keys(tx, peer)?));
        }
        self.l3_disconnect(a);
        self.l3_disconnect(b);
        for (rx, tx, peer, (k4, k6)) in keys {
            let adj4 = k4.map(|k| self.objects.adjacency(k));
            let adj6 = Some(self.objects.adjacency(k6));
            self.xconnect.l3.insert(
                rx,
                L3Direction {
                    tx,
                    peer,
                    adj4,
                    adj6,
                },
            );
        }
        Ok(())
    }

    /// The adjacencies (IPv4's, if any, and IPv6's) of a direction toward `peer` out of `tx`.
    fn l3_keys(
        &self,
        tx: IfIndex,
        peer: L3Peer,
    ) -> Result<(Option<AdjKey>, AdjKey), ForwardingError> {
        let bad = |a: &dyn std::fmt::Display, why: &str| {
            Err(ForwardingError::BadAddress(format!(
                "L3 cross-connect next hop {a}: {why}"
            )))
        };
        if let Some(a) = peer.v4 {
            if a.is_unspecified() || a.is_multicast() || a.is_broadcast() {
                return bad(&a, "not a unicast IPv4 address");
            }
        }
        if let Some(a) = peer.v6 {
            if a.is_unspecified() || a.is_multicast() {
                return bad(&a, "not a unicast IPv6 address");
            }
            if a.segments()[0] & 0xffc0 == 0xfe80 {
                return bad(
                    &a,
                    "link-local (the next hop must be one of the peer's addresses)",
                );
            }
        }
        let iface = self.interfaces.get(tx)?;
        // No link layer to resolve: the far end of the link, or the tunnel's peer.
        let linkless =
            iface.point_to_point || matches!(iface.kind, InterfaceKind::Wireguard { .. });
        let k4 = match peer.v4 {
            Some(a) => Some(AdjKey::Neighbor(tx, u32::from(a))),
            None if linkless => Some(AdjKey::Neighbor(tx, 0)),
            None => None,
        };
        let k6 = match (peer.v6, k4) {
            (Some(a), _) => AdjKey::Neighbor6(tx, u128::from(a)),
            // A dual-stack peer with only its IPv4 address given: one station.
            (None, Some(k)) => k,
            (None, None) => {
                return Err(ForwardingError::BadAddress(format!(
                "an L3 cross-connect out of interface {tx} needs a next hop (IPv4, IPv6 or both)"
            )))
            }
        };
        Ok((k4, k6))
    }

    /// Removes the L3 cross-connect of `a` (both ways); `false` when it had none.
    pub fn l3_disconnect(&mut self, a: IfIndex) -> bool {
        let Some(d) = self.xconnect.l3.remove(&a) else {
            return false;
        };
        let back = self.xconnect.l3.remove(&d.tx);
        for dir in std::iter::once(d).chain(back) {
            for adj in [dir.adj4, dir.adj6].into_iter().flatten() {
                self.objects.release_adjacency(adj);
            }
        }
        true
    }

    /// The L3 cross-connect of `a`: (the interface its packets leave by, its next hops).
    pub fn l3_cross_connect_of(&self, a: IfIndex) -> Option<(IfIndex, L3Peer)> {
        self.xconnect.l3.get(&a).map(|d| (d.tx, d.peer))
    }

    /// The cross-connect peer of `a`.
    pub fn cross_connect_of(&self, a: IfIndex) -> Option<IfIndex> {
        self.xconnect
            .l2
            .get(a.as_usize())
            .copied()
            .filter(|&b| !b.is_none())
    }
}
