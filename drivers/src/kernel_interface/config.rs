//! What to create ([`KernelInterfaceConfig`], as the strings NSM sends) and its checks: names
//! the way the kernel checks them, addresses parsed, all of it into a `Plan` before anything is
//! made.

use std::net::Ipv4Addr;

use super::error::{KernelInterfaceError, Result};

/// Longest interface name Linux accepts (`IFNAMSIZ` - 1).
pub const MAX_NAME_LEN: usize = 15;

/// What Quiver's interfaces carry as their alias, before the connection id.
pub const ALIAS_PREFIX: &str = "quiver:";

/// Longest connection id that fits in an alias (`IFALIASZ` is 256 with its NUL).
pub const MAX_CONNECTION_ID_LEN: usize = 255 - ALIAS_PREFIX.len();

/// A route in the namespace: to `prefix` ("a.b.c.d/len"), through `next_hop` ("a.b.c.d") or,
/// when `None` or empty, straight out of the interface.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteConfig {
    /// The destination, "a.b.c.d/len" (host bits are ignored, as NSM's Go side does).
    pub prefix: String,
    /// The gateway, if any.
    pub next_hop: Option<String>,
}

/// A static (permanent) neighbour in the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NeighborConfig {
    /// Its IPv4 address, "a.b.c.d".
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
    /// IPv4 addresses of the namespace end, "a.b.c.d/len".
    pub addresses: Vec<String>,
    /// Routes in the namespace, through this interface.
    pub routes: Vec<RouteConfig>,
    /// Static neighbours on this interface.
    pub neighbors: Vec<NeighborConfig>,
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

fn invalid_address(value: &str, reason: &'static str) -> KernelInterfaceError {
    KernelInterfaceError::InvalidAddress {
        value: value.into(),
        reason,
    }
}

pub(super) fn parse_ip(value: &str) -> Result<Ipv4Addr> {
    if value.contains(':') {
        return Err(invalid_address(value, "IPv6 is not supported yet"));
    }
    value
        .parse()
        .map_err(|_| invalid_address(value, "not an IPv4 address (a.b.c.d)"))
}

/// "a.b.c.d/len" → (address, len).
pub fn parse_cidr(value: &str) -> Result<(Ipv4Addr, u8)> {
    let Some((ip, len)) = value.split_once('/') else {
        return Err(invalid_address(value, "no prefix length (a.b.c.d/len)"));
    };
    let ip = parse_ip(ip).map_err(|_| {
        if ip.contains(':') {
            invalid_address(value, "IPv6 is not supported yet")
        } else {
            invalid_address(value, "not an IPv4 address (a.b.c.d/len)")
        }
    })?;
    if len.is_empty() || len.len() > 2 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid_address(value, "the prefix length is not a number"));
    }
    let len: u8 = len
        .parse()
        .map_err(|_| invalid_address(value, "the prefix length is not a number"))?;
    if len > 32 {
        return Err(invalid_address(value, "the prefix length is above 32"));
    }
    Ok((ip, len))
}

/// "aa:bb:cc:dd:ee:ff" → bytes.
pub fn parse_mac(value: &str) -> Result<[u8; 6]> {
    let bad = || invalid_address(value, "not a MAC address (aa:bb:cc:dd:ee:ff)");
    let mut mac = [0u8; 6];
    let mut parts = value.split(':');
    for byte in &mut mac {
        let p = parts.next().ok_or_else(bad)?;
        if p.len() != 2 {
            return Err(bad());
        }
        *byte = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(mac)
}

pub(super) fn masked(ip: Ipv4Addr, len: u8) -> Ipv4Addr {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Ipv4Addr::from(u32::from(ip) & mask)
}

/// A config with every string parsed: what `create` applies.
pub(super) struct Plan {
    pub(super) addresses: Vec<(Ipv4Addr, u8)>,
    pub(super) routes: Vec<(Ipv4Addr, u8, Option<Ipv4Addr>)>,
    pub(super) neighbors: Vec<(Ipv4Addr, [u8; 6])>,
}

impl Plan {
    pub(super) fn new(config: &KernelInterfaceConfig) -> Result<Plan> {
        validate_connection_id(&config.connection_id)?;
        validate_name(&config.name)?;
        if config.mtu != 0 && !(68..=65535).contains(&config.mtu) {
            return Err(KernelInterfaceError::InvalidMtu(config.mtu));
        }
        let addresses = config
            .addresses
            .iter()
            .map(|a| parse_cidr(a))
            .collect::<Result<_>>()?;
        let routes = config
            .routes
            .iter()
            .map(|r| {
                let (ip, len) = parse_cidr(&r.prefix)?;
                let via = match r.next_hop.as_deref() {
                    None | Some("") => None,
                    Some(v) => Some(parse_ip(v)?),
                };
                Ok((masked(ip, len), len, via))
            })
            .collect::<Result<_>>()?;
        let neighbors = config
            .neighbors
            .iter()
            .map(|n| Ok((parse_ip(&n.ip)?, parse_mac(&n.mac)?)))
            .collect::<Result<_>>()?;
        Ok(Plan {
            addresses,
            routes,
            neighbors,
        })
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
