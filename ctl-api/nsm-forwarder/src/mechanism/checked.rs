//! A mechanism as Quiver took it: [`ClientMechanism`] on the client side, [`EndpointMechanism`]
//! on the endpoint's, each checked (local ones in [`super`], REMOTE ones in `remote`).

use std::net::IpAddr;
use std::path::PathBuf;

/// The client-side mechanism, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMechanism {
    /// Quiver is memif master on a socket it creates in `netns`.
    Memif {
        /// The client's namespace.
        netns: PathBuf,
        /// `MTU`, if given.
        mtu: Option<u32>,
    },
    /// Quiver moves one end of a veth into `netns`, named `ifname` (`None`: Quiver names it).
    Kernel {
        /// The client's namespace.
        netns: PathBuf,
        /// `name`, if given.
        ifname: Option<String>,
        /// `MTU`, if given.
        mtu: Option<u32>,
    },
    /// Quiver is the answering end of a VXLAN tunnel from another node's forwarder.
    Vxlan {
        /// The requesting forwarder's tunnel address (`src_ip`).
        remote: IpAddr,
        /// The UDP port it receives on (`src_port`).
        remote_port: u16,
        /// The VNI Quiver chose before (on a refresh), to keep.
        vni: Option<u32>,
    },
    /// Quiver is the answering end of a WireGuard tunnel from another node's forwarder.
    Wireguard {
        /// The requesting forwarder's tunnel address (`src_ip`).
        remote: IpAddr,
        /// The UDP port it receives on (`src_port`).
        remote_port: u16,
        /// Its public key (`src_public_key`).
        remote_key: [u8; 32],
        /// The port Quiver chose before (`dst_port`, on a refresh), to keep.
        port: Option<u16>,
    },
}

/// The endpoint-side mechanism the NSE answered with, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointMechanism {
    /// Quiver is memif slave on the endpoint's `socket` (in `netns`, if given).
    Memif {
        /// The endpoint's namespace.
        netns: Option<PathBuf>,
        /// `socketfile`.
        socket: String,
        /// `MTU`, if given.
        mtu: Option<u32>,
    },
    /// Quiver moves one end of a veth into the endpoint's `netns`, named `ifname`.
    Kernel {
        /// The endpoint's namespace.
        netns: PathBuf,
        /// `name` (or Quiver's suggestion when the endpoint left it out).
        ifname: String,
        /// `MTU`, if given.
        mtu: Option<u32>,
    },
    /// Quiver is the requesting end of a VXLAN tunnel to another node's forwarder.
    Vxlan {
        /// The answering forwarder's tunnel address (`dst_ip`).
        remote: IpAddr,
        /// The UDP port it receives on (`dst_port`).
        remote_port: u16,
        /// The VNI it chose.
        vni: u32,
    },
    /// Quiver is the requesting end of a WireGuard tunnel to another node's forwarder.
    Wireguard {
        /// The answering forwarder's tunnel address (`dst_ip`).
        remote: IpAddr,
        /// The UDP port it receives on (`dst_port`).
        remote_port: u16,
        /// Its public key (`dst_public_key`).
        remote_key: [u8; 32],
    },
    /// Quiver tags the connection's frames with `vlan` on a host interface (the endpoint is
    /// on an external network; the connection's `via` label names which).
    Vlan {
        /// The endpoint's `vlan-id`.
        vlan: u16,
        /// The host interface the device selector names for the answer's `via` label.
        host: String,
    },
}
