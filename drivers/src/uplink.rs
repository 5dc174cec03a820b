//! The kernel's side of a node uplink: a NIC that Quiver shares with the kernel (an AF_XDP port
//! in tunnel mode, [`crate::af_xdp`]) rather than owns. The kernel keeps the NIC's address,
//! answers ARP and ping for it and carries the node's own traffic; Quiver takes only its tunnels'
//! datagrams. So Quiver learns from the kernel, never competes with it: which link holds the
//! tunnel address ([`find_uplink`]), the link's gateway, and the link's neighbours
//! ([`NeighbourWatch`]: the table, its changes as they happen, and a request that the kernel
//! resolve a next hop Quiver needs).

use std::net::{IpAddr, Ipv4Addr};
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
    /// The address asked for.
    pub ip: Ipv4Addr,
    /// The address's prefix length: the link's connected subnet.
    pub prefix_len: u8,
    /// The link's MTU.
    pub mtu: u32,
    /// The main table's default gateway through this link, if it has one.
    pub gateway: Option<Ipv4Addr>,
}

impl KernelUplink {
    /// The next hop toward `remote` through this link: `remote` itself when it is in the
    /// link's subnet, else the gateway (`None`: no way there).
    pub fn next_hop(&self, remote: Ipv4Addr) -> Option<Ipv4Addr> {
        let mask = u32::MAX
            .checked_shl(32 - u32::from(self.prefix_len))
            .unwrap_or(0);
        if u32::from(remote) & mask == u32::from(self.ip) & mask {
            Some(remote)
        } else {
            self.gateway
        }
    }
}

/// The link of the calling thread's namespace that holds `ip`, with its subnet, MTU and
/// default gateway; `None` when no link has it.
pub fn find_uplink(ip: Ipv4Addr) -> Result<Option<KernelUplink>, UplinkError> {
    let mut rtnl = Rtnl::open().map_err(failed("socket"))?;
    let mut query = AddressMessage::default();
    query.header.family = AddressFamily::Inet;
    let addresses = rtnl
        .dump(RouteNetlinkMessage::GetAddress(query))
        .map_err(failed("dump addresses"))?;
    let held = addresses.iter().find_map(|m| match m {
        RouteNetlinkMessage::NewAddress(a)
            if a.attributes
                .iter()
                .any(|x| matches!(x, AddressAttribute::Local(IpAddr::V4(v)) if *v == ip)) =>
        {
            Some((a.header.index, a.header.prefix_len))
        }
        _ => None,
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
    query.header.address_family = AddressFamily::Inet;
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
fn default_gateway(r: &RouteMessage, index: u32) -> Option<Ipv4Addr> {
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
        RouteAttribute::Gateway(RouteAddress::Inet(gw)) => Some(*gw),
        _ => None,
    })
}

/// Asks the kernel to resolve `ip` on link `index` of the calling thread's namespace (as
/// [`NeighbourWatch::resolve`], from a socket of its own).
pub fn resolve(index: u32, ip: Ipv4Addr) -> Result<(), UplinkError> {
    let mut rtnl = Rtnl::open().map_err(failed("socket"))?;
    resolve_with(&mut rtnl, index, ip)
}

fn resolve_with(rtnl: &mut Rtnl, index: u32, ip: Ipv4Addr) -> Result<(), UplinkError> {
    let mut msg = NeighbourMessage::default();
    msg.header.family = AddressFamily::Inet;
    msg.header.ifindex = index;
    // What `ip neigh replace … use` sends: with NTF_USE the state is not applied, the kernel
    // starts resolving (or confirming) the entry instead.
    msg.header.state = NeighbourState::Permanent;
    msg.header.flags = NeighbourFlags::Use;
    msg.attributes
        .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)));
    rtnl.request(
        RouteNetlinkMessage::NewNeighbour(msg),
        NLM_F_CREATE | NLM_F_REPLACE,
    )
    .map_err(failed("resolve a neighbour"))
}

/// What the kernel's neighbour table says about one IPv4 neighbour of the watched link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Neighbour {
    /// It is at this MAC (reachable, stale, being probed, or static).
    At(Ipv4Addr, [u8; 6]),
    /// It is unknown: gone from the table, failed, or still being resolved.
    Unknown(Ipv4Addr),
}

/// The neighbour table of one link, watched: the whole table ([`NeighbourWatch::table`]), its
/// changes as the kernel makes them ([`NeighbourWatch::changes`]), and requests that the kernel
/// resolve a next hop ([`NeighbourWatch::resolve`]).
pub struct NeighbourWatch {
    events: Rtnl,
    requests: Rtnl,
    index: u32,
}

impl NeighbourWatch {
    /// Watches link `index` of the calling thread's namespace; [`NeighbourWatch::changes`]
    /// waits at most `wait`. Subscribes before anything is read, so no change falls between the
    /// table and the first change.
    pub fn open(index: u32, wait: Duration) -> Result<NeighbourWatch, UplinkError> {
        let events = Rtnl::subscribe(RTMGRP_NEIGH, wait).map_err(failed("subscribe"))?;
        let requests = Rtnl::open().map_err(failed("socket"))?;
        Ok(NeighbourWatch {
            events,
            requests,
            index,
        })
    }

    /// Every IPv4 neighbour of the link the table has now.
    pub fn table(&mut self) -> Result<Vec<Neighbour>, UplinkError> {
        let mut query = NeighbourMessage::default();
        query.header.family = AddressFamily::Inet;
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
    pub fn resolve(&mut self, ip: Ipv4Addr) -> Result<(), UplinkError> {
        resolve_with(&mut self.requests, self.index, ip)
    }

    /// `m` as a neighbour of the watched link, if it is one.
    fn neighbour(&self, m: &RouteNetlinkMessage) -> Option<Neighbour> {
        let (n, gone) = match m {
            RouteNetlinkMessage::NewNeighbour(n) => (n, false),
            RouteNetlinkMessage::DelNeighbour(n) => (n, true),
            _ => return None,
        };
        if n.header.ifindex != self.index || n.header.family != AddressFamily::Inet {
            return None;
        }
        let ip = n.attributes.iter().find_map(|a| match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)) => Some(*ip),
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
    use super::*;

    fn uplink(prefix_len: u8, gateway: Option<Ipv4Addr>) -> KernelUplink {
        KernelUplink {
            interface: "eth0".into(),
            index: 2,
            ip: Ipv4Addr::new(192, 168, 77, 1),
            prefix_len,
            mtu: 1500,
            gateway,
        }
    }

    #[test]
    fn a_remote_in_the_subnet_is_its_own_next_hop_else_the_gateway_is() {
        let gw = Ipv4Addr::new(192, 168, 77, 254);
        let u = uplink(24, Some(gw));
        assert_eq!(
            u.next_hop(Ipv4Addr::new(192, 168, 77, 2)),
            Some(Ipv4Addr::new(192, 168, 77, 2))
        );
        assert_eq!(u.next_hop(Ipv4Addr::new(10, 0, 0, 1)), Some(gw));
        assert_eq!(uplink(24, None).next_hop(Ipv4Addr::new(10, 0, 0, 1)), None);
        // A /32 has no subnet: everything goes through the gateway; a /0 is all on-link.
        assert_eq!(
            uplink(32, Some(gw)).next_hop(Ipv4Addr::new(192, 168, 77, 2)),
            Some(gw)
        );
        assert_eq!(
            uplink(0, None).next_hop(Ipv4Addr::new(10, 0, 0, 1)),
            Some(Ipv4Addr::new(10, 0, 0, 1))
        );
    }
}
