//! Routes and addresses as NSM sends them (strings), and their parsing: shared by the
//! interface's own routes (`config`) and the policies' tables (`policy`).

use std::net::IpAddr;

use super::error::{KernelInterfaceError, Result};

/// A route in the namespace: to `prefix` ("a.b.c.d/len" or "x::y/len"), through `next_hop`
/// (an address of the same family) or, when `None` or empty, straight out of the interface.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteConfig {
    /// The destination, "a.b.c.d/len" or "x::y/len" (host bits are ignored, as NSM's Go side
    /// does).
    pub prefix: String,
    /// The gateway, if any.
    pub next_hop: Option<String>,
}

pub(super) fn invalid_address(value: &str, reason: &'static str) -> KernelInterfaceError {
    KernelInterfaceError::InvalidAddress {
        value: value.into(),
        reason,
    }
}

pub(super) fn parse_ip(value: &str) -> Result<IpAddr> {
    value
        .parse()
        .map_err(|_| invalid_address(value, "not an IPv4 (a.b.c.d) or IPv6 address"))
}

/// "a.b.c.d/len" or "x::y/len" → (address, len).
pub fn parse_cidr(value: &str) -> Result<(IpAddr, u8)> {
    let Some((ip, len)) = value.split_once('/') else {
        return Err(invalid_address(value, "no prefix length (address/len)"));
    };
    let ip = parse_ip(ip).map_err(|_| invalid_address(value, "not an IPv4 or IPv6 prefix"))?;
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid_address(value, "the prefix length is not a number"));
    }
    let len: u8 = len
        .parse()
        .map_err(|_| invalid_address(value, "the prefix length is not a number"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(invalid_address(
            value,
            "the prefix length is above the address's bits",
        ));
    }
    Ok((ip, len))
}

/// `ip` with its host bits (those past `len`) cleared.
pub(super) fn masked(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

/// A route with every string parsed: destination, its length, the gateway.
pub(super) type PlannedRoute = (IpAddr, u8, Option<IpAddr>);

/// Parses a route; its gateway must be of the destination's family.
pub(super) fn plan_route(r: &RouteConfig) -> Result<PlannedRoute> {
    let (ip, len) = parse_cidr(&r.prefix)?;
    let via = match r.next_hop.as_deref() {
        None | Some("") => None,
        Some(v) => {
            let via = parse_ip(v)?;
            if via.is_ipv4() != ip.is_ipv4() {
                return Err(invalid_address(
                    v,
                    "the next hop is not of the route's address family",
                ));
            }
            Some(via)
        }
    };
    Ok((masked(ip, len), len, via))
}
