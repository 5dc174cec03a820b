//! WireGuard tunnels in the control side's forwarding configuration: the interface, and the
//! per-tunnel data-path state the control side's handshakes replace (see `crate::wireguard`).

use super::*;
use crate::wireguard::{WgPeer, WgReceiver, WgShared, WgTunnel, WG4_OVERHEAD};

impl Forwarding {
    /// Adds a WireGuard tunnel `name` listening on our `local:port` with `peers` peers (no
    /// sessions yet); returns its L3 interface and tunnel index. Its MTU is `underlay_mtu` less
    /// WireGuard's 60 bytes.
    pub fn add_wireguard_tunnel(
        &mut self,
        name: &str,
        local: u32,
        port: u16,
        peers: Vec<WgPeer>,
        underlay_mtu: u16,
    ) -> Result<(IfIndex, u32), ForwardingError> {
        if self
            .wireguard
            .iter()
            .flatten()
            .any(|t| t.local == local && t.port == port)
        {
            return Err(ForwardingError::NameTaken(format!(
                "{}:{port} (a WireGuard tunnel listens there)",
                wire::ip4_to_string(local)
            )));
        }
        let slot = self
            .wireguard
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.wireguard.len());
        let interface = self.add_interface(
            name,
            [0; 6],
            underlay_mtu.saturating_sub(WG4_OVERHEAD),
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
        if slot == self.wireguard.len() {
            self.wireguard.push(Some(t));
        } else {
            self.wireguard[slot] = Some(t);
        }
        Ok((interface, slot as u32))
    }

    /// Tunnel `t` as the data path will see it at the next commit.
    pub fn wireguard_tunnel(&self, t: u32) -> Option<&WgTunnel> {
        self.wireguard.get(t as usize)?.as_ref()
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
    pub fn wireguard_output(&self) -> &Arc<ArrayQueue<crate::wireguard::WgDatagram>> {
        &self.wg_output
    }
}
