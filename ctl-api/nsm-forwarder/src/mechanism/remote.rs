//! REMOTE mechanisms, between forwarders on two nodes: VXLAN for ETHERNET payload, WireGuard
//! for IP payload (as cmd-forwarder-vpp offers them). The requesting forwarder names its own
//! end in `src_*` parameters, the answering one its end in `dst_*`.

use std::collections::HashMap;
use std::net::IpAddr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use tonic::Status;

use super::checked::{ClientMechanism, EndpointMechanism};
use super::names::{MTU, REMOTE};
use crate::validate;
use nsm_proto::connection::Mechanism;

/// VXLAN between nodes (ETHERNET payload).
pub const VXLAN: &str = "VXLAN";
/// WireGuard between nodes (IP payload).
pub const WIREGUARD: &str = "WIREGUARD";
/// Parameter: the VXLAN network identifier.
pub const VNI: &str = "vni";
/// Parameter: the requesting forwarder's tunnel address.
pub const SRC_IP: &str = "src_ip";
/// Parameter: the answering forwarder's tunnel address.
pub const DST_IP: &str = "dst_ip";
/// Parameter: the UDP port the requesting forwarder receives the tunnel's datagrams on.
pub const SRC_PORT: &str = "src_port";
/// Parameter: the UDP port the answering forwarder receives the tunnel's datagrams on.
pub const DST_PORT: &str = "dst_port";
/// Parameter: the requesting forwarder's WireGuard public key (base64).
pub const SRC_PUBLIC_KEY: &str = "src_public_key";
/// Parameter: the answering forwarder's WireGuard public key (base64).
pub const DST_PUBLIC_KEY: &str = "dst_public_key";
/// VXLAN's UDP port when a mechanism names none.
pub const VXLAN_DEFAULT_PORT: u16 = 4789;
/// WireGuard's UDP port when a mechanism names none (and the first Quiver gives a connection).
pub const WIREGUARD_DEFAULT_PORT: u16 = 51820;

/// Which REMOTE mechanism a connection's payload travels in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remote {
    /// VXLAN: ETHERNET payload.
    Vxlan,
    /// WireGuard: IP payload.
    Wireguard,
}

impl Remote {
    /// The mechanism type's name.
    pub fn type_name(self) -> &'static str {
        match self {
            Remote::Vxlan => VXLAN,
            Remote::Wireguard => WIREGUARD,
        }
    }
}

/// Quiver's end of tunnels to other nodes: its tunnel address, VXLAN's UDP port, the uplink's
/// MTU, and its WireGuard public key when it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelEnd {
    /// `NSM_TUNNEL_IP` (or the address of the default route's interface), IPv4 or IPv6.
    pub ip: IpAddr,
    /// `NSM_VXLAN_PORT`.
    pub port: u16,
    /// The MTU of the uplink holding `ip` (a tunnel carries its overhead less:
    /// [`crate::mtu::through`]).
    pub mtu: u32,
    /// Quiver's WireGuard public key (`None`: no WireGuard).
    pub wg_public_key: Option<[u8; 32]>,
}

impl TunnelEnd {
    /// The REMOTE mechanism for a payload (`ip`: IP, else ETHERNET), if Quiver has one:
    /// VXLAN, or WireGuard (with a key), over the tunnel address's family, either.
    pub fn remote_for(&self, ip: bool) -> Option<Remote> {
        match ip {
            false => Some(Remote::Vxlan),
            true => self.wg_public_key.map(|_| Remote::Wireguard),
        }
    }

    /// What Quiver offers an endpoint on another node: the tunnel `kind`, from its tunnel
    /// address (and for WireGuard its public key and `wg_port`, the connection's port).
    pub fn offer(&self, kind: Remote, wg_port: u16) -> Mechanism {
        let mut parameters = HashMap::from([(SRC_IP.to_string(), self.ip.to_string())]);
        match kind {
            Remote::Vxlan => {
                parameters.insert(SRC_PORT.into(), self.port.to_string());
            }
            Remote::Wireguard => {
                parameters.insert(SRC_PORT.into(), wg_port.to_string());
                if let Some(k) = self.wg_public_key {
                    parameters.insert(SRC_PUBLIC_KEY.into(), encode_key(&k));
                }
            }
        }
        Mechanism {
            cls: REMOTE.into(),
            r#type: kind.type_name().into(),
            parameters,
        }
    }
}

/// A WireGuard key as `wg` writes it (standard base64).
pub fn encode_key(k: &[u8; 32]) -> String {
    STANDARD.encode(k)
}

/// Checks the syntax of a REMOTE mechanism's parameters (those present).
pub(super) fn check_syntax(what: &str, m: &Mechanism) -> Result<(), Status> {
    let p = &m.parameters;
    if let Some(v) = p.get(VNI).filter(|v| !v.is_empty()) {
        validate::vni(what, v)?;
    }
    for key in [SRC_IP, DST_IP] {
        if let Some(a) = p.get(key).filter(|a| !a.is_empty()) {
            validate::ip(&format!("{what}.{key}"), a)?;
        }
    }
    for key in [SRC_PORT, DST_PORT] {
        if let Some(v) = p.get(key).filter(|v| !v.is_empty()) {
            v.parse::<u16>().map_err(|_| {
                Status::invalid_argument(format!("{what}: {key} {v:?} is not a port"))
            })?;
        }
    }
    if m.r#type == WIREGUARD {
        for key in [SRC_PUBLIC_KEY, DST_PUBLIC_KEY] {
            if p.get(key).is_some_and(|v| !v.is_empty()) {
                public_key(what, m, key)?;
            }
        }
    }
    validate::mtu(what, p.get(MTU))?;
    Ok(())
}

/// A tunnel mechanism's address parameter `key`, which must be unicast (IPv4 or IPv6).
fn tunnel_ip(what: &str, m: &Mechanism, key: &str) -> Result<IpAddr, Status> {
    match m.parameters.get(key).filter(|v| !v.is_empty()) {
        None => Err(Status::invalid_argument(format!(
            "{what}: {key} is missing"
        ))),
        Some(v) => match v.parse::<IpAddr>() {
            Ok(ip) if is_routable_unicast(ip) => Ok(ip),
            _ => Err(Status::invalid_argument(format!(
                "{what}: {key} {v:?} is not a unicast address beyond the link"
            ))),
        },
    }
}

/// Whether `ip` can be a tunnel's end: unicast, and (IPv6) not link-local, whose scope a
/// route to another node cannot name.
fn is_routable_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast()),
        IpAddr::V6(a) => {
            !(a.is_unspecified() || a.is_multicast() || a.segments()[0] & 0xffc0 == 0xfe80)
        }
    }
}

/// A tunnel mechanism's port parameter `key` (`default` when absent or 0); syntax was checked.
fn tunnel_port(m: &Mechanism, key: &str, default: u16) -> Option<u16> {
    m.parameters
        .get(key)
        .and_then(|v| v.parse::<u16>().ok())
        .filter(|&p| p != 0)
        .or((default != 0).then_some(default))
}

/// A WireGuard public key parameter `key`: 32 bytes in standard base64.
fn public_key(what: &str, m: &Mechanism, key: &str) -> Result<[u8; 32], Status> {
    let v = m
        .parameters
        .get(key)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Status::invalid_argument(format!("{what}: {key} is missing")))?;
    STANDARD
        .decode(v.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
        .ok_or_else(|| {
            Status::invalid_argument(format!(
                "{what}: {key} {v:?} is not a WireGuard key (32 bytes in base64)"
            ))
        })
}

/// The client side of a REMOTE mechanism: Quiver answers a tunnel from the requesting
/// forwarder (its `src_*`).
pub(super) fn client_side(what: &str, m: &Mechanism) -> Result<ClientMechanism, Status> {
    let p = &m.parameters;
    let remote = tunnel_ip(what, m, SRC_IP)?;
    if m.r#type == WIREGUARD {
        return Ok(ClientMechanism::Wireguard {
            remote,
            remote_port: tunnel_port(m, SRC_PORT, WIREGUARD_DEFAULT_PORT)
                .unwrap_or(WIREGUARD_DEFAULT_PORT),
            remote_key: public_key(what, m, SRC_PUBLIC_KEY)?,
            port: tunnel_port(m, DST_PORT, 0),
        });
    }
    Ok(ClientMechanism::Vxlan {
        remote,
        remote_port: tunnel_port(m, SRC_PORT, VXLAN_DEFAULT_PORT).unwrap_or(VXLAN_DEFAULT_PORT),
        vni: p.get(VNI).and_then(|v| v.parse().ok()),
    })
}

/// The endpoint side of a REMOTE mechanism: the answering forwarder's end (its `dst_*`).
/// Anything missing is the endpoint's fault (`FailedPrecondition`).
pub(super) fn endpoint_side(what: &str, m: &Mechanism) -> Result<EndpointMechanism, Status> {
    let precondition = |s: Status| Status::failed_precondition(s.message().to_string());
    let remote = tunnel_ip(what, m, DST_IP).map_err(precondition)?;
    if m.r#type == WIREGUARD {
        return Ok(EndpointMechanism::Wireguard {
            remote,
            remote_port: tunnel_port(m, DST_PORT, WIREGUARD_DEFAULT_PORT)
                .unwrap_or(WIREGUARD_DEFAULT_PORT),
            remote_key: public_key(what, m, DST_PUBLIC_KEY).map_err(precondition)?,
        });
    }
    let vni = m
        .parameters
        .get(VNI)
        .and_then(|v| v.parse::<u32>().ok())
        .ok_or_else(|| Status::failed_precondition(format!("{what}: vni is missing")))?;
    Ok(EndpointMechanism::Vxlan {
        remote,
        remote_port: tunnel_port(m, DST_PORT, VXLAN_DEFAULT_PORT).unwrap_or(VXLAN_DEFAULT_PORT),
        vni,
    })
}

/// Whether `m` names a REMOTE mechanism of `kind` (an empty `cls` counts).
pub(super) fn is(m: &Mechanism, kind: Option<Remote>) -> bool {
    kind.is_some_and(|k| m.r#type == k.type_name()) && (m.cls.is_empty() || m.cls == REMOTE)
}

/// Describes what Quiver serves for `kind` in a refusal.
pub(super) fn served(kind: Option<Remote>) -> String {
    match kind {
        Some(k) => format!(" and REMOTE/{}", k.type_name()),
        None => " (and REMOTE/VXLAN for ETHERNET payload, REMOTE/WIREGUARD for IP, with a \
                  tunnel IP)"
            .into(),
    }
}
