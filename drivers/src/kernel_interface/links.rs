//! The netlink (and one ioctl) requests the kernel interfaces are made of: find, set up and
//! delete links, apply an IP context, add neighbours, turn off transmit checksum offload.

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use nix::errno::Errno;

use super::config::Plan;
use super::error::{netlink, Result};
use crate::netlink::Rtnl;

/// A link as `find_link` finds it.
pub(super) struct FoundLink {
    pub(super) index: u32,
    pub(super) mac: [u8; 6],
    pub(super) alias: Option<String>,
}

/// The link called `name`, if there is one.
pub(super) fn find_link(rtnl: &mut Rtnl, name: &str) -> Result<Option<FoundLink>> {
    let mut msg = LinkMessage::default();
    msg.attributes.push(LinkAttribute::IfName(name.into()));
    // A by-name GET answers with one message; a dump-shaped reader collects it.
    match rtnl.get(RouteNetlinkMessage::GetLink(msg)) {
        Ok(Some(RouteNetlinkMessage::NewLink(link))) => {
            let mut mac = [0u8; 6];
            let mut alias = None;
            for a in &link.attributes {
                match a {
                    LinkAttribute::Address(m) if m.len() == 6 => mac.copy_from_slice(m),
                    LinkAttribute::IfAlias(s) => alias = Some(s.clone()),
                    _ => {}
                }
            }
            Ok(Some(FoundLink {
                index: link.header.index,
                mac,
                alias,
            }))
        }
        Ok(_) | Err(Errno::ENODEV) => Ok(None),
        Err(e) => Err(netlink(format!("get link {name}"))(e)),
    }
}

pub(super) fn set_link(
    rtnl: &mut Rtnl,
    index: u32,
    what: &str,
    attrs: Vec<LinkAttribute>,
    up: bool,
) -> Result<()> {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    if up {
        msg.header.flags = LinkFlags::Up;
        msg.header.change_mask = LinkFlags::Up;
    }
    msg.attributes = attrs;
    rtnl.request(RouteNetlinkMessage::SetLink(msg), 0)
        .map_err(netlink(what))
}

pub(super) fn delete_link(rtnl: &mut Rtnl, index: u32) -> std::result::Result<bool, Errno> {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    match rtnl.request(RouteNetlinkMessage::DelLink(msg), 0) {
        Ok(()) => Ok(true),
        Err(Errno::ENODEV) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Adds the addresses, then the routes (which may need them for their next hops), then the
/// neighbours, on interface `index` through `rtnl` (a socket in the interface's namespace).
pub(super) fn apply_ip_context(rtnl: &mut Rtnl, index: u32, plan: &Plan, name: &str) -> Result<()> {
    for &(ip, len) in &plan.addresses {
        let mut msg = AddressMessage::default();
        msg.header.family = AddressFamily::Inet;
        msg.header.prefix_len = len;
        msg.header.index = index;
        msg.attributes.push(AddressAttribute::Local(ip.into()));
        msg.attributes.push(AddressAttribute::Address(ip.into()));
        if len < 31 {
            let host_bits = if len == 0 { u32::MAX } else { u32::MAX >> len };
            let broadcast = Ipv4Addr::from(u32::from(ip) | host_bits);
            msg.attributes.push(AddressAttribute::Broadcast(broadcast));
        }
        rtnl.request(
            RouteNetlinkMessage::NewAddress(msg),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
        .map_err(netlink(format!("add address {ip}/{len} to {name}")))?;
    }
    for &(dst, len, via) in &plan.routes {
        let mut msg = RouteMessage::default();
        msg.header.address_family = AddressFamily::Inet;
        msg.header.destination_prefix_length = len;
        msg.header.table = libc::RT_TABLE_MAIN;
        msg.header.protocol = RouteProtocol::Static;
        msg.header.kind = RouteType::Unicast;
        msg.header.scope = if via.is_some() {
            RouteScope::Universe
        } else {
            RouteScope::Link
        };
        if len > 0 {
            msg.attributes
                .push(RouteAttribute::Destination(RouteAddress::Inet(dst)));
        }
        if let Some(gw) = via {
            msg.attributes
                .push(RouteAttribute::Gateway(RouteAddress::Inet(gw)));
        }
        msg.attributes.push(RouteAttribute::Oif(index));
        let what = match via {
            Some(gw) => format!("add route {dst}/{len} via {gw} dev {name}"),
            None => format!("add route {dst}/{len} dev {name}"),
        };
        rtnl.request(
            RouteNetlinkMessage::NewRoute(msg),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
        .map_err(netlink(what))?;
    }
    for &(ip, mac) in &plan.neighbors {
        add_neighbor(rtnl, index, ip, mac, name)?;
    }
    Ok(())
}

/// Adds (or replaces) the permanent neighbour `ip` at `mac` on interface `index` (`name`).
pub(super) fn add_neighbor(
    rtnl: &mut Rtnl,
    index: u32,
    ip: Ipv4Addr,
    mac: [u8; 6],
    name: &str,
) -> Result<()> {
    let mut msg = NeighbourMessage::default();
    msg.header.family = AddressFamily::Inet;
    msg.header.ifindex = index;
    msg.header.state = NeighbourState::Permanent;
    msg.header.kind = RouteType::Unicast;
    msg.attributes
        .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)));
    msg.attributes
        .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
    rtnl.request(
        RouteNetlinkMessage::NewNeighbour(msg),
        NLM_F_CREATE | NLM_F_REPLACE,
    )
    .map_err(netlink(format!("add neighbour {ip} on {name}")))
}

/// `struct ethtool_value` (linux/ethtool.h).
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `ETHTOOL_STXCSUM`: set transmit checksum offload.
const ETHTOOL_STXCSUM: u32 = 0x17;

/// Turns off transmit checksum offload on `name` (in the calling thread's namespace); the
/// kernel then drops TSO too, so frames leave whole and checksummed.
pub(super) fn tx_checksum_off(name: &str) -> std::result::Result<(), Errno> {
    use nix::sys::socket::{socket, AddressFamily as Af, SockFlag, SockType};
    let sock = socket(Af::Inet, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None)?;
    let mut value = EthtoolValue {
        cmd: ETHTOOL_STXCSUM,
        data: 0,
    };
    let mut req = crate::af_packet::netdev::ifreq(name).ok_or(Errno::EINVAL)?;
    req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL reads the ifreq (a valid name) and the ethtool_value it points to,
    // both alive and exclusively ours for the call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(())
}
