//! The admin API's requests to make ports and tunnels, as the configuration the owner's
//! changes carry.

use quiver_admin_api::proto as pb;
use quiver_admin_api::{format_mac, AdminError, AdminResult, AfPacketSpec, MemifSpec};

use crate::config::topology::{AF_PACKET_RING_KB, DEFAULT_AF_PACKET_RING_KB};
use crate::config::{
    AfPacketSection, MemifMode, MemifRole, MemifSection, PortSection, WireguardPeerSection,
    WireguardSection,
};

/// The memif port `spec` asks for.
pub(super) fn memif(spec: &MemifSpec) -> PortSection {
    PortSection::Memif(MemifSection {
        name: spec.name.clone(),
        mac: spec.mac.map(format_mac),
        mtu: spec.mtu,
        role: if spec.master {
            MemifRole::Master
        } else {
            MemifRole::Slave
        },
        socket: spec.socket.clone(),
        id: spec.id,
        secret: spec.secret.clone(),
        mode: if spec.ip_mode {
            MemifMode::Ip
        } else {
            MemifMode::Ethernet
        },
        ring_size: spec.ring_size,
        buffer_size: spec.buffer_size,
        queues: spec.queues,
        netns: None,
    })
}

/// The AF_PACKET port `spec` asks for; an invalid argument if its ring size is one a
/// `[[port]]`'s `ring_kb` may not be (a power of two in [`AF_PACKET_RING_KB`]).
pub(super) fn af_packet(spec: &AfPacketSpec) -> AdminResult<PortSection> {
    let ring_kb = spec.ring_kb.unwrap_or(DEFAULT_AF_PACKET_RING_KB);
    if !ring_kb.is_power_of_two() || !AF_PACKET_RING_KB.contains(&ring_kb) {
        return Err(AdminError::InvalidArgument(format!(
            "ring_kb: {ring_kb} must be a power of two from {} to {}",
            AF_PACKET_RING_KB.start(),
            AF_PACKET_RING_KB.end()
        )));
    }
    Ok(PortSection::AfPacket(AfPacketSection {
        name: spec.name.clone(),
        mac: None,
        mtu: spec.mtu,
        interface: spec.host_interface.clone(),
        promiscuous: spec.promiscuous,
        netns: None,
        ring_kb,
    }))
}

/// The WireGuard tunnel `r` asks for; an invalid argument if a port or MTU does not fit 16
/// bits.
pub(super) fn wireguard(r: &pb::AddWireguardRequest) -> AdminResult<WireguardSection> {
    let port = |n: u32, what: &str| {
        u16::try_from(n).map_err(|_| AdminError::InvalidArgument(format!("{what} {n}")))
    };
    Ok(WireguardSection {
        name: r.name.clone(),
        private_key: r.private_key.clone(),
        private_key_file: r.private_key_file.clone(),
        listen_port: port(r.listen_port, "listen_port")?,
        address: r.address.clone(),
        underlay_mtu: port(r.underlay_mtu, "underlay_mtu")?,
        peers: r
            .peers
            .iter()
            .map(|p| {
                Ok(WireguardPeerSection {
                    public_key: p.public_key.clone(),
                    endpoint: p.endpoint.clone(),
                    allowed_ips: p.allowed_ips.clone(),
                    persistent_keepalive: port(p.persistent_keepalive, "persistent_keepalive")?,
                })
            })
            .collect::<AdminResult<Vec<_>>>()?,
    })
}
