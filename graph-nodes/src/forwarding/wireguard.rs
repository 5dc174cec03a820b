//! [`WgTunnels`]: WireGuard tunnels in the control side's forwarding configuration (the
//! interface, and the per-tunnel data-path state the control side's handshakes replace; see
//! `crate::wireguard`), and the [`Forwarding`] methods that add and change them.

use std::net::IpAddr;
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use super::{Forwarding, ForwardingError};
use crate::index::IfIndex;
use crate::state::{FastMap, InterfaceKind, InterfaceMode, TxClass};
use crate::wireguard::{
    self, WgDatagram, WgPeer, WgReceiver, WgShared, WgTunnel, OUTPUT_QUEUE_LEN,
};

/// The tunnels by index (a removed one's slot is free), and the queue the control side sends
/// datagrams through the graph with.
pub(super) struct WgTunnels {
    pub(super) tunnels: Vec<Option<WgTunnel>>,
    pub(super) output: Arc<ArrayQueue<WgDatagram>>,
}

impl WgTunnels {
    pub(super) fn new() -> Self {
        WgTunnels {
            tunnels: Vec::new(),
            output: Arc::new(ArrayQueue::new(OUTPUT_QUEUE_LEN)),
        }
    }

    /// How `interface-output` reaches tunnel `t`'s interface: encrypted by the node of its
    /// underlay's family.
    pub(super) fn tx_class(&self, t: u32) -> TxClass {
        match self.tunnels.get(t as usize).and_then(Option::as_ref) {
            Some(w) if w.is_ipv6() => TxClass::wireguard6(t),
            _ => TxClass::wireguard(t),
        }
    }

    /// Frees tunnel `t`'s slot.
    pub(super) fn remove(&mut self, t: u32) {
        if let Some(slot) = self.tunnels.get_mut(t as usize) {
            *slot = None;
        }
    }
}

impl Forwarding {
    /// Adds a WireGuard tunnel `name` listening on our `local:port` (IPv4 or IPv6: the
    /// underlay's family) with `peers` peers (no sessions yet; their endpoints of `local`'s
    /// family); returns its L3 interface and tunnel index. Its MTU is `underlay_mtu` less
    /// WireGuard's overhead over that family (60 bytes over IPv4, 80 over IPv6).
    pub fn add_wireguard_tunnel(
        &mut self,
        name: &str,
        local: IpAddr,
        port: u16,
        peers: Vec<WgPeer>,
        underlay_mtu: u16,
    ) -> Result<(IfIndex, u32), ForwardingError> {
        if let Some(e) = peers
            .iter()
            .filter_map(|p| p.endpoint)
            .find(|e| e.is_ipv6() != local.is_ipv6())
        {
            return Err(ForwardingError::BadAddress(format!(
                "endpoint {e} is not of the family of the tunnel's address {local}"
            )));
        }
        let tunnels = &self.wireguard.tunnels;
        if tunnels
            .iter()
            .flatten()
            .any(|t| t.local == local && t.port == port)
        {
            return Err(ForwardingError::NameTaken(format!(
                "{} (a WireGuard tunnel listens there)",
                std::net::SocketAddr::new(local, port)
            )));
        }
        let slot = tunnels
            .iter()
            .position(Option::is_none)
            .unwrap_or(tunnels.len());
        let mtu = underlay_mtu.saturating_sub(wireguard::overhead(local));
        let interface = self.add_interface(
            name,
            [0; 6],
            mtu,
            InterfaceMode::L3,
            InterfaceKind::Wireguard {
                tunnel: slot as u32,
            },
        )?;
        let t = WgTunnel {
            interface,
            local,
            port,
            shared: Arc::new(WgShared::new(peers.len())),
            peers,
            receivers: FastMap::default(),
        };
        let tunnels = &mut self.wireguard.tunnels;
        if slot == tunnels.len() {
            tunnels.push(Some(t));
        } else {
            tunnels[slot] = Some(t);
        }
        Ok((interface, slot as u32))
    }

    /// Tunnel `t` as the data path will see it at the next commit.
    pub fn wireguard_tunnel(&self, t: u32) -> Option<&WgTunnel> {
        self.wireguard.tunnels.get(t as usize)?.as_ref()
    }

    /// Replaces tunnel `t`'s peers (endpoints, allowed IPs, sending sessions) and receiving
    /// sessions; commit to publish. The peer count cannot change.
    pub fn set_wireguard_sessions(
        &mut self,
        t: u32,
        peers: Vec<WgPeer>,
        receivers: FastMap<u32, WgReceiver>,
    ) -> Result<(), ForwardingError> {
        let tunnel = self
            .wireguard
            .tunnels
            .get_mut(t as usize)
            .and_then(Option::as_mut)
            .ok_or(ForwardingError::NoSuchInterface(IfIndex::NONE))?;
        if peers.len() != tunnel.shared.peers.len() {
            return Err(ForwardingError::NoPaths);
        }
        tunnel.peers = peers;
        tunnel.receivers = receivers;
        Ok(())
    }

    /// The queue the control side sends WireGuard datagrams through the graph with.
    pub fn wireguard_output(&self) -> &Arc<ArrayQueue<WgDatagram>> {
        &self.wireguard.output
    }
}
