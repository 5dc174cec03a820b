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
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteProtocol, RouteScope, RouteType,
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

/// Adds the addresses, then the routes to the other side's prefixes, then the context's routes
/// (replacing those to the same prefixes), then the neighbours, on interface `index` through
/// `rtnl` (a socket in the interface's namespace). IPv6 addresses skip duplicate address
/// detection, so they are usable at once.
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
    for &route in plan.peer_routes.iter().chain(&plan.routes) {
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
/// routing table `table`. A next hop is marked on-link (`RTNH_F_ONLINK`), as sdk-kernel marks
/// every gateway of NSM's routes and policies: the kernel takes it as on the interface's link
/// whether or not a subnet of the interface holds it.
pub(super) fn add_route(
    rtnl: &mut Rtnl,
    index: u32,
    route: PlannedRoute,
    table: u32,
    name: &str,
) -> Result<()> {
    let (dst, len, via) = route;
    let what = match via {
        Some(gw) => format!("add route {dst}/{len} via {gw} dev {name} onlink table {table}"),
        None => format!("add route {dst}/{len} dev {name} table {table}"),
    };
    rtnl.request(
        RouteNetlinkMessage::NewRoute(route_message(index, route, table)),
        NLM_F_CREATE | NLM_F_REPLACE,
    )
    .map_err(netlink(what))
}

/// The message [`add_route`] sends: a unicast route of protocol `boot`, link-scoped without a
/// next hop (IPv4), its next hop on-link.
fn route_message(index: u32, (dst, len, via): PlannedRoute, table: u32) -> RouteMessage {
    let mut msg = RouteMessage::default();
    msg.header.address_family = family(dst);
    msg.header.destination_prefix_length = len;
    // Tables above 255 are named by the attribute alone.
    msg.header.table = u8::try_from(table).unwrap_or(0);
    // As sdk-kernel's routes are (vishvananda/netlink's default): `ip route` names no
    // protocol, and NSM's checks of `ip route get` match Quiver's.
    msg.header.protocol = RouteProtocol::Boot;
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
        msg.header.flags = RouteFlags::Onlink;
        msg.attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(gw)));
    }
    msg.attributes.push(RouteAttribute::Oif(index));
    msg.attributes.push(RouteAttribute::Table(table));
    msg
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

#[cfg(test)]
mod tests {
    use super::*;

    /// sdk-kernel's `routes` and `iprule` set `FLAG_ONLINK` on every route with a gateway:
    /// a next hop outside the interface's subnets still works.
    #[test]
    fn a_next_hop_is_on_link_and_a_route_without_one_is_the_links() {
        let via = route_message(
            7,
            (
                "172.16.3.0".parse().unwrap(),
                24,
                Some("192.0.2.1".parse().unwrap()),
            ),
            300,
        );
        assert_eq!(via.header.flags, RouteFlags::Onlink);
        assert_eq!(via.header.scope, RouteScope::Universe);
        assert_eq!(via.header.protocol, RouteProtocol::Boot, "as NSM's routes");
        assert_eq!(via.header.table, 0, "above 255: the attribute only");
        assert!(via.attributes.contains(&RouteAttribute::Table(300)));
        assert!(via.attributes.contains(&RouteAttribute::Oif(7)));
        let v6 = route_message(
            7,
            (
                "2004::".parse().unwrap(),
                120,
                Some("2004::6".parse().unwrap()),
            ),
            5,
        );
        assert_eq!(v6.header.flags, RouteFlags::Onlink);
        let dev = route_message(7, ("0.0.0.0".parse().unwrap(), 0, None), 3);
        assert!(dev.header.flags.is_empty());
        assert_eq!(dev.header.scope, RouteScope::Link);
        assert_eq!(dev.header.destination_prefix_length, 0);
        assert!(
            !dev.attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Destination(_))),
            "a default route names no destination"
        );
    }
}
