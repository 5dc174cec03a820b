//! The kernel's side of a node uplink: a NIC that Quiver shares with the kernel (an AF_XDP port
//! in tunnel mode, [`crate::af_xdp`]) rather than owns. The kernel keeps the NIC's address,
//! answers ARP and ping for it and carries the node's own traffic; Quiver takes only its tunnels'
//! datagrams. So Quiver learns from the kernel, never competes with it: which link holds the
//! tunnel address ([`find_uplink`]), the link's gateway, and the link's neighbours
//! ([`NeighbourWatch`]: the table, its changes as they happen, and a request that the kernel
//! resolve a next hop Quiver needs). Either family: an IPv4 address's link, ARP table and
//! default route, or an IPv6 address's link, neighbour (ND) table and default route, whose
//! gateway is usually the router's link-local address.

use std::net::IpAddr;
use std::time::Duration;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use nix::errno::Errno;

use crate::netlink::Rtnl;

/// `RTMGRP_NEIGH`: the multicast group of neighbour table changes.
const RTMGRP_NEIGH: u32 = 4;
/// The main routing table.
const RT_TABLE_MAIN: u32 = 254;

/// A route-netlink call that failed.
#[derive(Debug, thiserror::Error)]
#[error("netlink: {what}: {errno}")]
pub struct UplinkError {
    /// What was asked.
    pub what: &'static str,
    /// The kernel's answer.
    pub errno: Errno,
}

fn failed(what: &'static str) -> impl Fn(Errno) -> UplinkError {
    move |errno| UplinkError { what, errno }
}

/// The kernel link that holds an address, as [`find_uplink`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelUplink {
    /// The link's name.
    pub interface: String,
    /// Its index.
    pub index: u32,
    /// The address asked for (its family is the uplink's).
    pub ip: IpAddr,
    /// The address's prefix length: the link's connected subnet.
    pub prefix_len: u8,
    /// The link's MTU.
    pub mtu: u32,
    /// The main table's default gateway through this link, if it has one (of the address's
    /// family).
    pub gateway: Option<IpAddr>,
}

impl KernelUplink {
    /// The next hop toward `remote` through this link: `remote` itself when it is in the
    /// link's subnet (or link-local, for IPv6), else the gateway (`None`: no way there, or
    /// `remote` is of the other family).
    pub fn next_hop(&self, remote: IpAddr) -> Option<IpAddr> {
        match (self.ip, remote) {
            (IpAddr::V4(ip), IpAddr::V4(r)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix_len.min(32)))
                    .unwrap_or(0);
                (u32::from(r) & mask == u32::from(ip) & mask)
                    .then_some(remote)
                    .or(self.gateway)
            }
            (IpAddr::V6(ip), IpAddr::V6(r)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix_len.min(128)))
                    .unwrap_or(0);
                let on_link =
                    u128::from(r) & mask == u128::from(ip) & mask || r.is_unicast_link_local();
                on_link.then_some(remote).or(self.gateway)
            }
            _ => None,
        }
    }
}

/// The netlink family of `ip`.
fn family(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// The link of the calling thread's namespace that holds `ip` (IPv4 or IPv6), with its
/// subnet, MTU and default gateway of that family; `None` when no link has it.
pub fn find_uplink(ip: IpAddr) -> Result<Option<KernelUplink>, UplinkError> {
    let mut rtnl = Rtnl::open().map_err(failed("socket"))?;
    let mut query = AddressMessage::default();
    query.header.family = family(ip);
    let addresses = rtnl
        .dump(RouteNetlinkMessage::GetAddress(query))
        .map_err(failed("dump addresses"))?;
    // IPv6 addresses carry IFA_ADDRESS only (IFA_LOCAL is for point-to-point IPv4 links).
    let held = addresses.iter().find_map(|m| {
        match m {
        RouteNetlinkMessage::NewAddress(a)
            if a.attributes.iter().any(|x| {
                matches!(x, AddressAttribute::Local(v) | AddressAttribute::Address(v) if *v == ip)
            }) =>
        {
            Some((a.header.index, a.header.prefix_len))
        }
        _ => None,
    }
    });
    let Some((index, prefix_len)) = held else {
        return Ok(None);
    };
    let mut query = LinkMessage::default();
    query.header.index = index;
    let (mut interface, mut mtu) = (String::new(), 1500);
    if let Some(RouteNetlinkMessage::NewLink(link)) = rtnl
        .get(RouteNetlinkMessage::GetLink(query))
        .map_err(failed("get link"))?
    {
        for a in &link.attributes {
            match a {
                LinkAttribute::IfName(n) => interface = n.clone(),
                LinkAttribute::Mtu(m) => mtu = *m,
                _ => {}
            }
        }
    }
    let mut query = RouteMessage::default();
    query.header.address_family = family(ip);
    let routes = rtnl
        .dump(RouteNetlinkMessage::GetRoute(query))
        .map_err(failed("dump routes"))?;
    let gateway = routes.iter().find_map(|m| match m {
        RouteNetlinkMessage::NewRoute(r) => default_gateway(r, index),
        _ => None,
    });
    Ok(Some(KernelUplink {
        interface,
        index,
        ip,
        prefix_len,
        mtu,
        gateway,
    }))
}

/// The gateway of `r` when it is the main table's default route out of link `index`.
fn default_gateway(r: &RouteMessage, index: u32) -> Option<IpAddr> {
    if r.header.destination_prefix_length != 0 {
        return None;
    }
    let table = r
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table));
    let out_of_it = r
        .attributes
        .iter()
        .any(|a| matches!(a, RouteAttribute::Oif(i) if *i == index));
    if table != RT_TABLE_MAIN || !out_of_it {
        return None;
    }
    r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Gateway(RouteAddress::Inet(gw)) => Some(IpAddr::V4(*gw)),
        RouteAttribute::Gateway(RouteAddress::Inet6(gw)) => Some(IpAddr::V6(*gw)),
        _ => None,
    })
}

/// Asks the kernel to resolve `ip` on link `index` of the calling thread's namespace (as
/// [`NeighbourWatch::resolve`], from a socket of its own).
pub fn resolve(index: u32, ip: IpAddr) -> Result<(), UplinkError> {
    let mut rtnl = Rtnl::open().map_err(failed("socket"))?;
    resolve_with(&mut rtnl, index, ip)
}

fn resolve_with(rtnl: &mut Rtnl, index: u32, ip: IpAddr) -> Result<(), UplinkError> {
    let mut msg = NeighbourMessage::default();
    msg.header.family = family(ip);
    msg.header.ifindex = index;
    // What `ip neigh replace … use` sends: with NTF_USE the state is not applied, the kernel
    // starts resolving (or confirming) the entry instead.
    msg.header.state = NeighbourState::Permanent;
    msg.header.flags = NeighbourFlags::Use;
    msg.attributes
        .push(NeighbourAttribute::Destination(match ip {
            IpAddr::V4(v4) => NeighbourAddress::Inet(v4),
            IpAddr::V6(v6) => NeighbourAddress::Inet6(v6),
        }));
    rtnl.request(
        RouteNetlinkMessage::NewNeighbour(msg),
        NLM_F_CREATE | NLM_F_REPLACE,
    )
    .map_err(failed("resolve a neighbour"))
}

/// What the kernel's neighbour table says about one neighbour of the watched link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Neighbour {
    /// It is at this MAC (reachable, stale, being probed, or static).
    At(IpAddr, [u8; 6]),
    /// It is unknown: gone from the table, failed, or still being resolved.
    Unknown(IpAddr),
}

/// The neighbour table of one link, watched: the whole table ([`NeighbourWatch::table`]), its
/// changes as the kernel makes them ([`NeighbourWatch::changes`]), and requests that the kernel
/// resolve a next hop ([`NeighbourWatch::resolve`]).
pub struct NeighbourWatch {
    events: Rtnl,
    requests: Rtnl,
    index: u32,
    family: AddressFamily,
}

impl NeighbourWatch {
    /// Watches the neighbours of `uplink`'s family on its link (the calling thread's
    /// namespace's); [`NeighbourWatch::changes`] waits at most `wait`. Subscribes before
    /// anything is read, so no change falls between the table and the first change.
    pub fn open(uplink: &KernelUplink, wait: Duration) -> Result<NeighbourWatch, UplinkError> {
        let events = Rtnl::subscribe(RTMGRP_NEIGH, wait).map_err(failed("subscribe"))?;
        let requests = Rtnl::open().map_err(failed("socket"))?;
        Ok(NeighbourWatch {
            events,
            requests,
            index: uplink.index,
            family: family(uplink.ip),
        })
    }

    /// Every neighbour of the link (of the watch's family) the table has now.
    pub fn table(&mut self) -> Result<Vec<Neighbour>, UplinkError> {
        let mut query = NeighbourMessage::default();
        query.header.family = self.family;
        let all = self
            .requests
            .dump(RouteNetlinkMessage::GetNeighbour(query))
            .map_err(failed("dump neighbours"))?;
        Ok(all.iter().filter_map(|m| self.neighbour(m)).collect())
    }

    /// The changes of one notification datagram, or none after the wait. `Ok(None)`: the
    /// kernel dropped notifications (the socket overflowed); read [`NeighbourWatch::table`]
    /// again.
    pub fn changes(&mut self) -> Result<Option<Vec<Neighbour>>, UplinkError> {
        match self.events.notifications() {
            Ok(all) => Ok(Some(all.iter().filter_map(|m| self.neighbour(m)).collect())),
            Err(Errno::ENOBUFS) => Ok(None),
            Err(e) => Err(failed("neighbour notifications")(e)),
        }
    }

    /// Asks the kernel to resolve `ip` on the link (`NTF_USE`: as if the kernel sent to it),
    /// creating the entry if there is none; its answer comes as a change.
    pub fn resolve(&mut self, ip: IpAddr) -> Result<(), UplinkError> {
        resolve_with(&mut self.requests, self.index, ip)
    }

    /// `m` as a neighbour of the watched link, if it is one.
    fn neighbour(&self, m: &RouteNetlinkMessage) -> Option<Neighbour> {
        let (n, gone) = match m {
            RouteNetlinkMessage::NewNeighbour(n) => (n, false),
            RouteNetlinkMessage::DelNeighbour(n) => (n, true),
            _ => return None,
        };
        if n.header.ifindex != self.index || n.header.family != self.family {
            return None;
        }
        let ip = n.attributes.iter().find_map(|a| match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)) => Some(IpAddr::V4(*ip)),
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(ip)) => Some(IpAddr::V6(*ip)),
            _ => None,
        })?;
        let mac = n.attributes.iter().find_map(|a| match a {
            NeighbourAttribute::LinkLayerAddress(m) => <[u8; 6]>::try_from(m.as_slice()).ok(),
            _ => None,
        });
        let usable = matches!(
            n.header.state,
            NeighbourState::Reachable
                | NeighbourState::Stale
                | NeighbourState::Delay
                | NeighbourState::Probe
                | NeighbourState::Permanent
                | NeighbourState::Noarp
        );
        Some(match mac {
            Some(mac) if usable && !gone => Neighbour::At(ip, mac),
            _ => Neighbour::Unknown(ip),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn uplink(ip: IpAddr, prefix_len: u8, gateway: Option<IpAddr>) -> KernelUplink {
        KernelUplink {
            interface: "eth0".into(),
            index: 2,
            ip,
            prefix_len,
            mtu: 1500,
            gateway,
        }
    }

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        Ipv4Addr::new(a, b, c, d).into()
    }

    fn v6(text: &str) -> IpAddr {
        text.parse::<Ipv6Addr>().expect("an IPv6 address").into()
    }

    #[test]
    fn a_remote_in_the_subnet_is_its_own_next_hop_else_the_gateway_is() {
        let me = v4(192, 168, 77, 1);
        let gw = v4(192, 168, 77, 254);
        let u = uplink(me, 24, Some(gw));
        assert_eq!(u.next_hop(v4(192, 168, 77, 2)), Some(v4(192, 168, 77, 2)));
        assert_eq!(u.next_hop(v4(10, 0, 0, 1)), Some(gw));
        assert_eq!(uplink(me, 24, None).next_hop(v4(10, 0, 0, 1)), None);
        // A /32 has no subnet: everything goes through the gateway; a /0 is all on-link.
        assert_eq!(
            uplink(me, 32, Some(gw)).next_hop(v4(192, 168, 77, 2)),
            Some(gw)
        );
        assert_eq!(
            uplink(me, 0, None).next_hop(v4(10, 0, 0, 1)),
            Some(v4(10, 0, 0, 1))
        );
    }

    #[test]
    fn an_ipv6_uplink_reaches_its_subnet_and_link_local_on_link_the_rest_by_its_gateway() {
        let gw = v6("fe80::1");
        let u = uplink(v6("fd77::1"), 64, Some(gw));
        assert_eq!(u.next_hop(v6("fd77::2")), Some(v6("fd77::2")));
        assert_eq!(u.next_hop(v6("fe80::9")), Some(v6("fe80::9")));
        assert_eq!(u.next_hop(v6("2001:db8::1")), Some(gw));
        assert_eq!(
            uplink(v6("fd77::1"), 128, Some(gw)).next_hop(v6("fd77::2")),
            Some(gw)
        );
        assert_eq!(
            uplink(v6("fd77::1"), 64, None).next_hop(v6("2001:db8::1")),
            None
        );
        // The other family never has a next hop here, not even the gateway.
        assert_eq!(u.next_hop(v4(10, 0, 0, 1)), None);
        assert_eq!(
            uplink(v4(10, 0, 0, 1), 24, Some(v4(10, 0, 0, 254))).next_hop(v6("fd77::2")),
            None
        );
    }
}
