//! [`VxlanTunnels`]: VXLAN tunnels (RFC 7348) over IPv4 and over IPv6 and the port they are
//! received on, and the [`Forwarding`] methods that add them.

use std::net::Ipv6Addr;

use super::{Forwarding, ForwardingError};
use crate::index::IfIndex;
use crate::state::{FastMap, InterfaceKind, InterfaceMode, Vxlan6Tunnel, VxlanTunnel};
use crate::wire::Mac;
use crate::wire::{self, ipv6, Ipv4, Ipv6, Udp, Vxlan};

/// Bytes of the outer headers over IPv6: IPv6, UDP, VXLAN.
pub const VXLAN6_HEADER: usize = ipv6::HEADER_LEN + wire::UDP_HEADER + wire::VXLAN_HEADER;

/// The tunnels of both families by index (a removed one's slot is free) and the UDP port
/// VXLAN arrives on.
pub(super) struct VxlanTunnels {
    tunnels: Vec<Option<VxlanTunnel>>,
    tunnels6: Vec<Option<Vxlan6Tunnel>>,
    pub(super) port: u16,
}

/// The first free slot of `slots`, or its end.
fn free_slot<T>(slots: &[Option<T>]) -> usize {
    slots
        .iter()
        .position(Option::is_none)
        .unwrap_or(slots.len())
}

/// Puts `t` in `slots[at]` (a free slot, or the end).
fn fill_slot<T>(slots: &mut Vec<Option<T>>, at: usize, t: T) {
    if at == slots.len() {
        slots.push(Some(t));
    } else {
        slots[at] = Some(t);
    }
}

impl VxlanTunnels {
    pub(super) fn new() -> Self {
        VxlanTunnels {
            tunnels: Vec::new(),
            tunnels6: Vec::new(),
            port: wire::VXLAN_PORT,
        }
    }

    /// Frees IPv4 tunnel `t`'s slot.
    pub(super) fn remove(&mut self, t: u32) {
        if let Some(slot) = self.tunnels.get_mut(t as usize) {
            *slot = None;
        }
    }

    /// Frees IPv6 tunnel `t`'s slot.
    pub(super) fn remove6(&mut self, t: u32) {
        if let Some(slot) = self.tunnels6.get_mut(t as usize) {
            *slot = None;
        }
    }

    /// The IPv6 tunnels as the snapshot holds them (a removed one's slot sends nowhere).
    pub(super) fn snapshot6(&self) -> Vec<Vxlan6Tunnel> {
        self.tunnels6
            .iter()
            .map(|t| {
                t.clone().unwrap_or(Vxlan6Tunnel {
                    header: [0; VXLAN6_HEADER],
                    fixed_sum: 0,
                    interface: IfIndex::NONE,
                    routed: false,
                    src: 0,
                    dst: 0,
                    vni: 0,
                    dst_port: 0,
                })
            })
            .collect()
    }

    /// The IPv6 tunnels by (outer source, outer destination, VNI) as packets arrive on them.
    pub(super) fn by_key6(&self) -> FastMap<(u128, u128, u32), u32> {
        let mut by_key = FastMap::default();
        for (i, t) in self.tunnels6.iter().enumerate() {
            if let Some(t) = t {
                by_key.insert((t.dst, t.src, t.vni), i as u32);
            }
        }
        by_key
    }

    /// The tunnels as the snapshot holds them (a removed one's slot sends nowhere).
    pub(super) fn snapshot(&self) -> Vec<VxlanTunnel> {
        self.tunnels
            .iter()
            .map(|t| {
                t.clone().unwrap_or(VxlanTunnel {
                    interface: IfIndex::NONE,
                    routed: false,
                    src: 0,
                    dst: 0,
                    vni: 0,
                    dst_port: 0,
                    header: [0; 36],
                    ip_sum: 0,
                })
            })
            .collect()
    }

    /// The tunnels by (outer source, outer destination, VNI) as packets arrive on them.
    pub(super) fn by_key(&self) -> FastMap<(u32, u32, u32), u32> {
        let mut by_key = FastMap::default();
        for (i, t) in self.tunnels.iter().enumerate() {
            if let Some(t) = t {
                // Received packets come from the far end to us.
                by_key.insert((t.dst, t.src, t.vni), i as u32);
            }
        }
        by_key
    }
}

impl Forwarding {
    /// Adds a VXLAN tunnel from our `src` to `dst` with `vni`, sending to UDP port `dst_port`;
    /// returns its L2 interface.
    pub fn add_vxlan_tunnel(
        &mut self,
        name: &str,
        src: u32,
        dst: u32,
        vni: u32,
        dst_port: u16,
    ) -> Result<IfIndex, ForwardingError> {
        if vni >= 1 << 24 {
            return Err(ForwardingError::BadVni(vni));
        }
        let tunnels = &self.vxlan.tunnels;
        if tunnels
            .iter()
            .flatten()
            .any(|t| t.src == src && t.dst == dst && t.vni == vni)
        {
            return Err(ForwardingError::DuplicateTunnel {
                src: wire::ip4_to_string(src),
                dst: wire::ip4_to_string(dst),
                vni,
            });
        }
        let slot = free_slot(tunnels);
        let interface = self.add_interface(
            name,
            [0; 6],
            9000,
            InterfaceMode::L2,
            InterfaceKind::Vxlan {
                tunnel: slot as u32,
            },
        )?;
        let (header, ip_sum) = vxlan_template(src, dst, vni, dst_port);
        let t = VxlanTunnel {
            interface,
            routed: false,
            src,
            dst,
            vni,
            dst_port,
            header,
            ip_sum,
        };
        fill_slot(&mut self.vxlan.tunnels, slot, t);
        Ok(interface)
    }

    /// Adds a VXLAN tunnel over IPv6 from our `src` to `dst` with `vni`, sending to UDP port
    /// `dst_port`; returns its L2 interface.
    pub fn add_vxlan6_tunnel(
        &mut self,
        name: &str,
        src: u128,
        dst: u128,
        vni: u32,
        dst_port: u16,
    ) -> Result<IfIndex, ForwardingError> {
        if vni >= 1 << 24 {
            return Err(ForwardingError::BadVni(vni));
        }
        let tunnels = &self.vxlan.tunnels6;
        if tunnels
            .iter()
            .flatten()
            .any(|t| t.src == src && t.dst == dst && t.vni == vni)
        {
            return Err(ForwardingError::DuplicateTunnel {
                src: Ipv6Addr::from(src).to_string(),
                dst: Ipv6Addr::from(dst).to_string(),
                vni,
            });
        }
        let slot = free_slot(tunnels);
        let interface = self.add_interface(
            name,
            [0; 6],
            9000,
            InterfaceMode::L2,
            InterfaceKind::Vxlan6 {
                tunnel: slot as u32,
            },
        )?;
        let (header, fixed_sum) = vxlan6_template(src, dst, vni, dst_port);
        let t = Vxlan6Tunnel {
            header,
            fixed_sum,
            interface,
            routed: false,
            src,
            dst,
            vni,
            dst_port,
        };
        fill_slot(&mut self.vxlan.tunnels6, slot, t);
        Ok(interface)
    }

    /// Makes VXLAN tunnel interface `i` routed: an L3 interface with MAC `mac` and MTU `mtu`
    /// (the inner frames' IP packets), which takes addresses, a table and routes like a port;
    /// what arrives through the tunnel goes to `ethernet-input`. Before it has addresses or
    /// a cross-connect.
    pub fn set_vxlan_routed(
        &mut self,
        i: IfIndex,
        mac: Mac,
        mtu: u16,
    ) -> Result<(), ForwardingError> {
        let iface = self.interfaces.get(i)?;
        if self
            .xconnect
            .l2
            .get(i.as_usize())
            .is_some_and(|x| !x.is_none())
        {
            return Err(ForwardingError::WrongMode(i));
        }
        let slot = match iface.kind {
            InterfaceKind::Vxlan { tunnel } => self
                .vxlan
                .tunnels
                .get_mut(tunnel as usize)
                .and_then(Option::as_mut)
                .map(|t| &mut t.routed),
            InterfaceKind::Vxlan6 { tunnel } => self
                .vxlan
                .tunnels6
                .get_mut(tunnel as usize)
                .and_then(Option::as_mut)
                .map(|t| &mut t.routed),
            _ => None,
        };
        *slot.ok_or(ForwardingError::WrongMode(i))? = true;
        let iface = self.interfaces.get_mut(i)?;
        iface.mode = InterfaceMode::L3;
        iface.mac = mac;
        iface.mtu = mtu;
        Ok(())
    }

    /// Sets the UDP port VXLAN is received on (default 4789).
    pub fn set_vxlan_port(&mut self, port: u16) {
        self.vxlan.port = port;
    }
}

/// A VXLAN tunnel's outer IPv4 + UDP + VXLAN header from `src` to `dst:dst_port` for `vni`,
/// with what changes per packet (IPv4 total length and checksum, UDP source port and length)
/// zero, and the ones'-complement sum of its IPv4 part.
fn vxlan_template(src: u32, dst: u32, vni: u32, dst_port: u16) -> ([u8; 36], u32) {
    let mut header = [0u8; 36];
    let (ip, rest) = header.split_at_mut(wire::IP4_HEADER);
    let (udp, vx) = rest.split_at_mut(wire::UDP_HEADER);
    if let (Ok(mut ip), Ok(mut udp), Ok(mut vx)) = (
        Ipv4::new_checked(ip),
        Udp::new_checked(udp),
        Vxlan::new_checked(vx),
    ) {
        ip.reset_header();
        ip.set_ttl(64);
        ip.set_protocol(wire::PROTO_UDP);
        ip.set_src(src);
        ip.set_dst(dst);
        udp.set_dst_port(dst_port);
        vx.set_flags(wire::vxlan::FLAG_I);
        vx.set_vni(vni);
    }
    let ip_sum = wire::sum16(&header[..wire::IP4_HEADER]);
    (header, ip_sum)
}

/// A VXLAN tunnel's outer IPv6 + UDP + VXLAN header from `src` to `dst:dst_port` for `vni`,
/// with what changes per packet (flow label, payload length, UDP source port, length and
/// checksum) zero, and the unfolded sum of what the UDP checksum covers that never changes
/// (the pseudo-header's addresses and next header, the destination port, the VXLAN header).
fn vxlan6_template(src: u128, dst: u128, vni: u32, dst_port: u16) -> ([u8; VXLAN6_HEADER], u32) {
    let mut header = [0u8; VXLAN6_HEADER];
    let (ip, rest) = header.split_at_mut(ipv6::HEADER_LEN);
    let (udp, vx) = rest.split_at_mut(wire::UDP_HEADER);
    if let (Ok(mut ip), Ok(mut udp), Ok(mut vx)) = (
        Ipv6::new_checked(ip),
        Udp::new_checked(udp),
        Vxlan::new_checked(vx),
    ) {
        ip.reset_header();
        ip.set_next_header(wire::PROTO_UDP);
        ip.set_hop_limit(64);
        ip.set_src(&src.to_be_bytes());
        ip.set_dst(&dst.to_be_bytes());
        udp.set_dst_port(dst_port);
        vx.set_flags(wire::vxlan::FLAG_I);
        vx.set_vni(vni);
    }
    let sum = wire::checksum::ones_sum(&header[8..ipv6::HEADER_LEN])
        + u64::from(wire::PROTO_UDP)
        + u64::from(dst_port)
        + wire::checksum::ones_sum(&header[ipv6::HEADER_LEN + wire::UDP_HEADER..]);
    (header, u32::from(wire::checksum::fold(sum)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vxlan_template_is_the_headers_bytes() {
        let (header, sum) = vxlan_template(0x0a00_0001, 0x0a00_0002, 0x12_3456, 4789);
        let want: [u8; 36] = [
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
            0, 0, 0x12, 0xb5, 0, 0, 0, 0, // UDP
            0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0, // VXLAN
        ];
        assert_eq!(header, want);
        assert_eq!(sum, wire::sum16(&want[..20]));
    }
}
