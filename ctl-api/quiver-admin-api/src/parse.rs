//! The text forms of addresses in admin requests and replies: `a.b.c.d` or `x:y::z`,
//! `a.b.c.d/len` or `x:y::z/len`, `aa:bb:cc:dd:ee:ff`. A bad one is
//! [`AdminError::InvalidArgument`].

use std::net::{IpAddr, Ipv4Addr};

use crate::backend::{AdminError, AdminResult};

/// Parses an IPv4 address, `a.b.c.d`.
pub fn parse_ip4(what: &str, s: &str) -> AdminResult<Ipv4Addr> {
    s.trim()
        .parse()
        .map_err(|_| AdminError::InvalidArgument(format!("{what} `{s}` is not an IPv4 address")))
}

/// Parses an address of either family, `a.b.c.d` or `x:y::z`.
pub fn parse_ip(what: &str, s: &str) -> AdminResult<IpAddr> {
    s.trim().parse().map_err(|_| {
        AdminError::InvalidArgument(format!("{what} `{s}` is not an IPv4 or IPv6 address"))
    })
}

/// Parses a prefix of either family, `a.b.c.d/len` (0–32) or `x:y::z/len` (0–128); a bare
/// address is its host prefix.
pub fn parse_prefix(s: &str) -> AdminResult<(IpAddr, u8)> {
    let bad = || {
        AdminError::InvalidArgument(format!(
            "prefix `{s}` is not a.b.c.d/len (0-32) or x:y::z/len (0-128)"
        ))
    };
    let (ip, len) = match s.trim().split_once('/') {
        Some((ip, len)) => (ip, Some(len.parse::<u8>().map_err(|_| bad())?)),
        None => (s.trim(), None),
    };
    let ip: IpAddr = ip.parse().map_err(|_| bad())?;
    let most = if ip.is_ipv4() { 32 } else { 128 };
    let len = len.unwrap_or(most);
    if len > most {
        return Err(bad());
    }
    Ok((ip, len))
}

/// Parses `aa:bb:cc:dd:ee:ff` ([`net::mac::parse`]'s one rule, as everywhere in Quiver).
pub fn parse_mac(s: &str) -> AdminResult<[u8; 6]> {
    net::mac::parse(s).map_err(|e| AdminError::InvalidArgument(e.to_string()))
}

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(m: [u8; 6]) -> String {
    net::mac::format(&m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_addresses_and_macs_parse_or_are_refused_as_invalid_arguments() {
        assert_eq!(
            parse_prefix("10.1.0.0/16").unwrap(),
            (IpAddr::V4(Ipv4Addr::new(10, 1, 0, 0)), 16)
        );
        assert_eq!(
            parse_prefix("10.1.2.3").unwrap(),
            (IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), 32)
        );
        assert_eq!(
            parse_prefix("fd00:99::/48").unwrap(),
            ("fd00:99::".parse().unwrap(), 48)
        );
        assert_eq!(
            parse_prefix("fd00::1").unwrap(),
            ("fd00::1".parse().unwrap(), 128)
        );
        assert!(parse_ip("next hop", "fe80::1").unwrap().is_ipv6());
        assert!(parse_ip4("peer", "fe80::1").is_err());
        for bad in [
            "10.1.0.0/33",
            "10.1.0/16",
            "x/8",
            "10.0.0.0/",
            "",
            "fd00::/129",
            "fd00:::1/64",
        ] {
            assert!(
                matches!(parse_prefix(bad), Err(AdminError::InvalidArgument(_))),
                "{bad}"
            );
        }
        assert!(parse_ip("next hop", "10.0.0.256").is_err());
        let mac = parse_mac("02:FE:0:a:bb:cc").unwrap();
        assert_eq!(format_mac(mac), "02:fe:00:0a:bb:cc");
        for bad in ["02:fe:00:00:00", "02:fe:00:00:00:100", "02:fe:00:00:00:zz"] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
        let status = tonic::Status::from(AdminError::NotFound("no port named `x`".into()));
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert_eq!(status.message(), "no port named `x`");
    }
}
