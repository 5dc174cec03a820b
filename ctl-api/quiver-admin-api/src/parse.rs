//! The text forms of addresses in admin requests and replies: `a.b.c.d`, `a.b.c.d/len`,
//! `aa:bb:cc:dd:ee:ff`. A bad one is [`AdminError::InvalidArgument`].

use std::net::Ipv4Addr;

use crate::backend::{AdminError, AdminResult};

/// Parses `a.b.c.d`.
pub fn parse_ip(what: &str, s: &str) -> AdminResult<Ipv4Addr> {
    s.trim()
        .parse()
        .map_err(|_| AdminError::InvalidArgument(format!("{what} `{s}` is not an IPv4 address")))
}

/// Parses `a.b.c.d/len` (a bare address is a /32).
pub fn parse_prefix(s: &str) -> AdminResult<(Ipv4Addr, u8)> {
    let bad = || AdminError::InvalidArgument(format!("prefix `{s}` is not a.b.c.d/len (0-32)"));
    let (ip, len) = match s.trim().split_once('/') {
        Some((ip, len)) => (ip, len.parse::<u8>().map_err(|_| bad())?),
        None => (s.trim(), 32),
    };
    if len > 32 {
        return Err(bad());
    }
    Ok((ip.parse().map_err(|_| bad())?, len))
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
            (Ipv4Addr::new(10, 1, 0, 0), 16)
        );
        assert_eq!(
            parse_prefix("10.1.2.3").unwrap(),
            (Ipv4Addr::new(10, 1, 2, 3), 32)
        );
        for bad in ["10.1.0.0/33", "10.1.0/16", "x/8", "10.0.0.0/", ""] {
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
