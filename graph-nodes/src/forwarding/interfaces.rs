//! Interfaces: ports, VLAN sub-interfaces, VXLAN tunnels, and their removal.

use super::*;
use crate::wire::{Ipv4, Udp, Vxlan};

impl Forwarding {
    /// The interface called `name`.
    pub fn interface_by_name(&self, name: &str) -> Option<&Interface> {
        self.interfaces.iter().flatten().find(|i| i.name == name)
    }

    /// Every interface.
    pub fn interfaces(&self) -> impl Iterator<Item = &Interface> {
        self.interfaces.iter().flatten()
    }

    pub(super) fn add_interface(
        &mut self,
        name: &str,
        mac: Mac,
        mtu: u16,
        mode: InterfaceMode,
        kind: InterfaceKind,
    ) -> Result<IfIndex, ForwardingError> {
        if self.interface_by_name(name).is_some() {
            return Err(ForwardingError::NameTaken(name.into()));
        }
        let index = match self.interfaces.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.interfaces.len() < MAX_INTERFACES => {
                self.interfaces.push(None);
                self.interfaces.len() - 1
            }
            None => return Err(ForwardingError::TooManyInterfaces),
        };
        let index = IfIndex::new(index as u32);
        self.interfaces[index.as_usize()] = Some(Interface {
            index,
            name: name.into(),
            mac,
            mtu,
            mode,
            kind,
            addresses: Vec::new(),
            vlans: Vec::new(),
            point_to_point: false,
        });
        if self.xconnect.len() <= index.as_usize() {
            self.xconnect.resize(index.as_usize() + 1, IfIndex::NONE);
        }
        Ok(index)
    }

    /// Adds a port (its transmit queues are given to `interface-output` when graphs are built).
    pub fn add_port(&mut self, name: &str, mac: Mac, mtu: u16) -> Result<IfIndex, ForwardingError> {
        self.add_interface(name, mac, mtu, InterfaceMode::L3, InterfaceKind::Port)
    }

    /// Makes port `i` a point-to-point link (or not): every packet routed or L3
    /// cross-connected out of it goes to the peer at its far end without neighbour resolution,
    /// behind an Ethernet header to [`POINT_TO_POINT_PEER_MAC`] that the port leaves out (an
    /// IP-mode memif port). A point-to-point port has no VLAN sub-interfaces.
    pub fn set_point_to_point(&mut self, i: IfIndex, on: bool) -> Result<(), ForwardingError> {
        let iface = self.iface_mut(i)?;
        if iface.kind != InterfaceKind::Port || (on && !iface.vlans.is_empty()) {
            return Err(ForwardingError::WrongMode(i));
        }
        iface.point_to_point = on;
        Ok(())
    }

    /// Sets interface `i`'s MTU: the largest IP packet it sends (routed packets over it are
    /// checked against it, and so are frames an L2 cross-connect sends to it, less their L2
    /// header). Its VLAN sub-interfaces follow it.
    pub fn set_mtu(&mut self, i: IfIndex, mtu: u16) -> Result<(), ForwardingError> {
        let vlans: Vec<IfIndex> = self.iface(i)?.vlans.iter().map(|&(_, s)| s).collect();
        self.iface_mut(i)?.mtu = mtu;
        for sub in vlans {
            self.iface_mut(sub)?.mtu = mtu;
        }
        Ok(())
    }

    /// Adds an 802.1Q sub-interface of `parent` for tag `vlan` (routed).
    pub fn add_vlan(
        &mut self,
        parent: IfIndex,
        vlan: u16,
        name: &str,
    ) -> Result<IfIndex, ForwardingError> {
        let p = self.iface(parent)?;
        if p.point_to_point {
            return Err(ForwardingError::WrongMode(parent));
        }
        let (mac, mtu) = (p.mac, p.mtu);
        let i = self.add_interface(
            name,
            mac,
            mtu,
            InterfaceMode::L3,
            InterfaceKind::Vlan {
                parent,
                vlan: vlan & 0xfff,
            },
        )?;
        self.iface_mut(parent)?.vlans.push((vlan & 0xfff, i));
        Ok(i)
    }

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
        if self
            .tunnels
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
        let slot = self
            .tunnels
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.tunnels.len());
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
        if slot == self.tunnels.len() {
            self.tunnels.push(Some(t));
        } else {
            self.tunnels[slot] = Some(t);
        }
        Ok(interface)
    }

    /// Sets the UDP port VXLAN is received on (default 4789).
    pub fn set_vxlan_port(&mut self, port: u16) {
        self.vxlan_port = port;
    }

    /// Removes an interface and everything that refers to it: addresses, every route through it,
    /// neighbours, cross-connects, its tunnel and sub-interfaces.
    pub fn remove_interface(&mut self, i: IfIndex) -> Result<(), ForwardingError> {
        let iface = self.iface(i)?.clone();
        for (a, l) in iface.addresses.clone() {
            self.remove_address(i, a, l)?;
        }
        for (_, sub) in iface.vlans.clone() {
            self.remove_interface(sub)?;
        }
        if let InterfaceKind::Vlan { parent, .. } = iface.kind {
            if let Ok(p) = self.iface_mut(parent) {
                p.vlans.retain(|&(_, s)| s != i);
            }
        }
        if let InterfaceKind::Vxlan { tunnel } = iface.kind {
            self.tunnels[tunnel as usize] = None;
        }
        if let InterfaceKind::Wireguard { tunnel } = iface.kind {
            self.wireguard[tunnel as usize] = None;
        }
        // Every route through the interface goes with it: its index may be given to a new
        // interface, which must not inherit them.
        let through: Vec<(u32, u8)> = self
            .routes
            .iter()
            .filter(|(_, (lb, _))| self.lb_uses_interface(*lb, i))
            .map(|(k, _)| *k)
            .collect();
        for (p, l) in through {
            self.unset_route(p, l);
        }
        self.neighbors.retain(|(ifx, _), _| *ifx != i);
        self.disconnect(i);
        self.l3_disconnect(i);
        self.interfaces[i.as_usize()] = None;
        Ok(())
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
