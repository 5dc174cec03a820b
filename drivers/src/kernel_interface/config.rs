//! What to create ([`KernelInterfaceConfig`], as the strings NSM sends) and its checks: names
//! the way the kernel checks them, IPv4 and IPv6 addresses parsed, policies checked, all of it
//! into a `Plan` before anything is made.

use std::net::IpAddr;

use super::policy::PlannedPolicy;
pub use super::policy::PolicyConfig;
use super::route::{invalid_address, masked, parse_ip, plan_route, PlannedRoute};
pub use super::route::{parse_cidr, RouteConfig};

use super::error::{KernelInterfaceError, Result};

/// Longest interface name Linux accepts (`IFNAMSIZ` - 1).
pub const MAX_NAME_LEN: usize = 15;

/// What Quiver's interfaces carry as their alias, before the connection id.
pub const ALIAS_PREFIX: &str = "quiver:";

/// Longest connection id that fits in an alias (`IFALIASZ` is 256 with its NUL).
pub const MAX_CONNECTION_ID_LEN: usize = 255 - ALIAS_PREFIX.len();

/// A static (permanent) neighbour in the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NeighborConfig {
    /// Its IPv4 or IPv6 address.
    pub ip: String,
    /// Its MAC address, "aa:bb:cc:dd:ee:ff".
    pub mac: String,
}

/// What to create: NSM's KERNEL mechanism parameters and the connection's IP context, as the
/// strings NSM sends.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KernelInterfaceConfig {
    /// The owning connection (tags both ends; names Quiver's end).
    pub connection_id: String,
    /// The interface's name inside the namespace (1 to 15 bytes).
    pub name: String,
    /// MTU of both ends; 0 leaves the kernel's default (1500).
    pub mtu: u32,
    /// Addresses of the namespace end, "a.b.c.d/len" or "x::y/len" (IPv6 ones are added
    /// without duplicate address detection, usable at once).
    pub addresses: Vec<String>,
    /// Routes in the namespace, through this interface (a next hop is marked on-link, so it
    /// need not be in a subnet of the interface's).
    pub routes: Vec<RouteConfig>,
    /// The other side's addresses ("a.b.c.d/len" or "x::y/len"; NSM's `dst_ip_addrs` for the
    /// client's interface, `src_ip_addrs` for the endpoint's): each one that none of
    /// [`addresses`](Self::addresses)' prefixes holds gets a route to its prefix through the
    /// interface, so that this side can answer every address of the other (as sdk-kernel's
    /// `routes` does). They go in before [`routes`](Self::routes), which win on the same
    /// prefix.
    pub peer_addresses: Vec<String>,
    /// Static neighbours on this interface.
    pub neighbors: Vec<NeighborConfig>,
    /// Policy routes: each an `ip rule` with a routing table of its own holding its routes.
    pub policies: Vec<PolicyConfig>,
    /// The alias of the namespace's end (NSM's tools look for `client-<id>` / `server-<id>`);
    /// empty: Quiver's ownership tag, as Quiver's end always carries.
    pub alias: String,
}

/// Checks `name` the way the kernel does (`dev_valid_name`): 1 to 15 bytes, not `.` or `..`,
/// no `/`, `:`, NUL or whitespace.
pub fn validate_name(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(KernelInterfaceError::InvalidName {
            name: name.into(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 15 bytes");
    }
    if name == "." || name == ".." {
        return bad("`.` and `..` are not interface names");
    }
    if name
        .bytes()
        .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace())
    {
        return bad("contains '/', ':', NUL or whitespace");
    }
    Ok(())
}

pub(super) fn validate_connection_id(id: &str) -> Result<()> {
    let bad = |reason| {
        Err(KernelInterfaceError::InvalidConnectionId {
            id: id.into(),
            reason,
        })
    };
    if id.is_empty() {
        return bad("empty");
    }
    if id.len() > MAX_CONNECTION_ID_LEN {
        return bad("too long for an interface alias");
    }
    if id.bytes().any(|b| b.is_ascii_control()) {
        return bad("contains control characters");
    }
    Ok(())
}

/// The name of Quiver's end of a connection's veth: `qvk` and the first 12 hex digits of the
/// id's 64-bit FNV-1a hash (15 bytes). The same id always gives the same name.
pub fn host_name_for(connection_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in connection_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("qvk{:012x}", h >> 16)
}

/// "aa:bb:cc:dd:ee:ff" → bytes ([`net::mac::parse`]'s one rule, as everywhere in Quiver).
pub fn parse_mac(value: &str) -> Result<[u8; 6]> {
    net::mac::parse(value)
        .map_err(|_| invalid_address(value, "not a MAC address (aa:bb:cc:dd:ee:ff)"))
}

/// A config with every string parsed: what `create` applies.
pub(super) struct Plan {
    pub(super) addresses: Vec<(IpAddr, u8)>,
    /// The routes to the other side's prefixes (see [`peer_routes`]), made first.
    pub(super) peer_routes: Vec<PlannedRoute>,
    pub(super) routes: Vec<PlannedRoute>,
    pub(super) neighbors: Vec<(IpAddr, [u8; 6])>,
    pub(super) policies: Vec<PlannedPolicy>,
}

impl Plan {
    /// Whether anything of the plan is IPv6 (the interface then needs IPv6 on).
    pub(super) fn has_ipv6(&self) -> bool {
        self.addresses.iter().any(|a| a.0.is_ipv6())
            || self.peer_routes.iter().any(|r| r.0.is_ipv6())
            || self.routes.iter().any(|r| r.0.is_ipv6())
            || self.neighbors.iter().any(|n| n.0.is_ipv6())
            || self.policies.iter().any(|p| p.is_ipv6())
    }

    pub(super) fn new(config: &KernelInterfaceConfig) -> Result<Plan> {
        validate_connection_id(&config.connection_id)?;
        validate_name(&config.name)?;
        if config.alias.len() > 255 || config.alias.bytes().any(|b| b.is_ascii_control()) {
            return Err(KernelInterfaceError::InvalidName {
                name: config.alias.clone(),
                reason: "an alias is at most 255 bytes without control characters",
            });
        }
        if config.mtu != 0 && !(68..=65535).contains(&config.mtu) {
            return Err(KernelInterfaceError::InvalidMtu(config.mtu));
        }
        let addresses: Vec<(IpAddr, u8)> = config
            .addresses
            .iter()
            .map(|a| parse_cidr(a))
            .collect::<Result<_>>()?;
        let peers: Vec<(IpAddr, u8)> = config
            .peer_addresses
            .iter()
            .map(|a| parse_cidr(a))
            .collect::<Result<_>>()?;
        let routes = config
            .routes
            .iter()
            .map(plan_route)
            .collect::<Result<_>>()?;
        let neighbors = config
            .neighbors
            .iter()
            .map(|n| Ok((parse_ip(&n.ip)?, parse_mac(&n.mac)?)))
            .collect::<Result<_>>()?;
        let policies = super::policy::plan(&config.policies)?;
        Ok(Plan {
            peer_routes: peer_routes(&addresses, &peers),
            addresses,
            routes,
            neighbors,
            policies,
        })
    }
}

/// The routes to the other side's addresses `peers` (prefixes, host bits set) from a side
/// whose own addresses are `own`: for each peer address that no prefix of `own` holds, a route
/// to the peer's prefix, straight out of the interface (no next hop), each prefix once. What
/// NSM's IP context asks of sdk-kernel's `routes` element (the api's
/// `IPContext.GetDstIPRoutes` / `GetSrcIPRoutes`: the client's side is routed to the
/// endpoint's addresses, the endpoint's side to the client's). A peer address inside one of
/// `own`'s prefixes is reached by that prefix's own route.
pub(super) fn peer_routes(own: &[(IpAddr, u8)], peers: &[(IpAddr, u8)]) -> Vec<PlannedRoute> {
    let holds = |&(net, len): &(IpAddr, u8), ip: IpAddr| {
        net.is_ipv4() == ip.is_ipv4() && masked(net, len) == masked(ip, len)
    };
    let mut routes: Vec<PlannedRoute> = Vec::new();
    for &(ip, len) in peers {
        let route = (masked(ip, len), len, None);
        if !own.iter().any(|o| holds(o, ip)) && !routes.contains(&route) {
            routes.push(route);
        }
    }
    routes
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
