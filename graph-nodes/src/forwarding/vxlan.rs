//! [`VxlanTunnels`]: VXLAN tunnels over IPv4 (RFC 7348) and the port they are received on, and
//! the [`Forwarding`] methods that add them.

use super::{Forwarding, ForwardingError};
use crate::index::IfIndex;
use crate::state::{FastMap, InterfaceKind, InterfaceMode, VxlanTunnel};
use crate::wire::{self, Ipv4, Udp, Vxlan};

/// The tunnels by index (a removed one's slot is free) and the UDP port VXLAN arrives on.
pub(super) struct VxlanTunnels {
    tunnels: Vec<Option<VxlanTunnel>>,
    pub(super) port: u16,
}

impl VxlanTunnels {
    pub(super) fn new() -> Self {
        VxlanTunnels {
            tunnels: Vec::new(),
            port: wire::VXLAN_PORT,
        }
    }

    /// Frees tunnel `t`'s slot.
    pub(super) fn remove(&mut self, t: u32) {
        if let Some(slot) = self.tunnels.get_mut(t as usize) {
            *slot = None;
        }
    }

    /// The tunnels as the snapshot holds them (a removed one's slot sends nowhere).
    pub(super) fn snapshot(&self) -> Vec<VxlanTunnel> {
        self.tunnels
            .iter()
            .map(|t| {
                t.clone().unwrap_or(VxlanTunnel {
                    interface: IfIndex::NONE,
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
        let slot = tunnels
            .iter()
            .position(Option::is_none)
            .unwrap_or(tunnels.len());
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
            src,
            dst,
            vni,
            dst_port,
            header,
            ip_sum,
        };
        let tunnels = &mut self.vxlan.tunnels;
        if slot == tunnels.len() {
            tunnels.push(Some(t));
        } else {
            tunnels[slot] = Some(t);
        }
        Ok(interface)
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
