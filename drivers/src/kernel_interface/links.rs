//! The netlink requests the kernel interfaces are made of: find, set up and delete links,
//! apply an IP context, add neighbours.

use std::net::{IpAddr, Ipv4Addr};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage,
};
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
use super::route::PlannedRoute;
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
/// IPv6 addresses skip duplicate address detection, so they are usable at once.
pub(super) fn apply_ip_context(rtnl: &mut Rtnl, index: u32, plan: &Plan, name: &str) -> Result<()> {
    for &(ip, len) in &plan.addresses {
        let mut msg = AddressMessage::default();
        msg.header.family = family(ip);
        msg.header.prefix_len = len;
        msg.header.index = index;
        msg.attributes.push(AddressAttribute::Local(ip));
        msg.attributes.push(AddressAttribute::Address(ip));
        match ip {
            IpAddr::V4(v4) if len < 31 => {
                let host_bits = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                let broadcast = Ipv4Addr::from(u32::from(v4) | host_bits);
                msg.attributes.push(AddressAttribute::Broadcast(broadcast));
            }
            IpAddr::V4(_) => {}
            IpAddr::V6(_) => {
                msg.header.flags = AddressHeaderFlags::Nodad;
                msg.attributes
                    .push(AddressAttribute::Flags(AddressFlags::Nodad));
            }
        }
        rtnl.request(
            RouteNetlinkMessage::NewAddress(msg),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
        .map_err(netlink(format!("add address {ip}/{len} to {name}")))?;
    }
    for &route in &plan.routes {
        add_route(rtnl, index, route, u32::from(libc::RT_TABLE_MAIN), name)?;
    }
    for &(ip, mac) in &plan.neighbors {
        add_neighbor(rtnl, index, ip, mac, name)?;
    }
    Ok(())
}

fn family(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// Adds (or replaces) the route `(dst, len, via)` through interface `index` (`name`) in
/// routing table `table`.
pub(super) fn add_route(
    rtnl: &mut Rtnl,
    index: u32,
    (dst, len, via): PlannedRoute,
    table: u32,
    name: &str,
) -> Result<()> {
    let mut msg = RouteMessage::default();
    msg.header.address_family = family(dst);
    msg.header.destination_prefix_length = len;
    // Tables above 255 are named by the attribute alone.
    msg.header.table = u8::try_from(table).unwrap_or(0);
    msg.header.protocol = RouteProtocol::Static;
    msg.header.kind = RouteType::Unicast;
    msg.header.scope = if via.is_some() || dst.is_ipv6() {
        RouteScope::Universe
    } else {
        RouteScope::Link
    };
    if len > 0 {
        msg.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(dst)));
    }
    if let Some(gw) = via {
        msg.attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(gw)));
    }
    msg.attributes.push(RouteAttribute::Oif(index));
    msg.attributes.push(RouteAttribute::Table(table));
    let what = match via {
        Some(gw) => format!("add route {dst}/{len} via {gw} dev {name} table {table}"),
        None => format!("add route {dst}/{len} dev {name} table {table}"),
    };
    rtnl.request(
        RouteNetlinkMessage::NewRoute(msg),
        NLM_F_CREATE | NLM_F_REPLACE,
    )
    .map_err(netlink(what))
}

/// Adds (or replaces) the permanent neighbour `ip` at `mac` on interface `index` (`name`).
pub(super) fn add_neighbor(
    rtnl: &mut Rtnl,
    index: u32,
    ip: IpAddr,
    mac: [u8; 6],
    name: &str,
) -> Result<()> {
    let mut msg = NeighbourMessage::default();
    msg.header.family = family(ip);
    msg.header.ifindex = index;
    msg.header.state = NeighbourState::Permanent;
    msg.header.kind = RouteType::Unicast;
    let dst = match ip {
        IpAddr::V4(v4) => NeighbourAddress::Inet(v4),
        IpAddr::V6(v6) => NeighbourAddress::Inet6(v6),
    };
    msg.attributes.push(NeighbourAttribute::Destination(dst));
    msg.attributes
        .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
    rtnl.request(
        RouteNetlinkMessage::NewNeighbour(msg),
        NLM_F_CREATE | NLM_F_REPLACE,
    )
    .map_err(netlink(format!("add neighbour {ip} on {name}")))
}
