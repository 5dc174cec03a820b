//! The values `quiver.toml` writes as strings: addresses and prefixes (IPv4, IPv6), MACs and
//! next hops, parsed into their types, and what is wrong with one that does not parse.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// What is wrong with one value of the file (the key it belongs to is named by
/// [`ConfigError::Value`](super::ConfigError::Value)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Not `a.b.c.d`.
    #[error("{0:?} is not an IPv4 address")]
    NotIpv4(String),
    /// Not `a.b.c.d` or `x:y::z`.
    #[error("{0:?} is not an IPv4 or IPv6 address")]
    NotIp(String),
    /// Not `a.b.c.d/len` or `x:y::z/len`.
    #[error("{0:?} is not a prefix (a.b.c.d/len or x:y::z/len)")]
    NotPrefix(String),
    /// A next hop of the other family than its route's prefix.
    #[error("next hop {next_hop} is not of the family of prefix {prefix}")]
    Family {
        /// The prefix, as written.
        prefix: String,
        /// The next hop.
        next_hop: IpAddr,
    },
    /// An IPv4 prefix whose length is not 0 to 32.
    #[error("{0:?}: prefix length must be 0 to 32")]
    PrefixLength(String),
    /// An IPv6 prefix whose length is not 0 to 128.
    #[error("{0:?}: prefix length must be 0 to 128")]
    PrefixLength6(String),
    /// Not `aa:bb:cc:dd:ee:ff`.
    #[error("{0:?} is not a MAC address")]
    NotMac(String),
    /// A next hop that is not `address@port`.
    #[error("{0:?} is not address@port")]
    NotVia(String),
    /// Not `IP:PORT`, where the metrics endpoint is to listen.
    #[error("metrics listen address `{0}` is not IP:PORT (for example 127.0.0.1:9464)")]
    NotListenAddress(String),
    /// Not `IPv4:PORT` or `[IPv6]:PORT`, where a WireGuard peer is.
    #[error("{0:?} is not IPv4:PORT or [IPv6]:PORT")]
    NotEndpoint(String),
    /// A port (or, where one may stand, a WireGuard tunnel) that the file does not define.
    #[error("no {what} named {name:?}")]
    Unknown {
        /// What was looked for: `port`, `port or wireguard tunnel`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A name given to two ports or tunnels.
    #[error("{0:?} names another port or tunnel too")]
    Duplicate(String),
    /// A cross-connect of a port to itself.
    #[error("{0:?} is cross-connected to itself")]
    ToItself(String),
    /// A value that is out of its range or not allowed here.
    #[error("{0}")]
    Refused(String),
}

/// Parses `a.b.c.d` (surrounding spaces allowed).
pub fn ipv4(s: &str) -> Result<Ipv4Addr, ValueError> {
    s.trim()
        .parse()
        .map_err(|_| ValueError::NotIpv4(s.to_string()))
}

/// Parses an address of either family, `a.b.c.d` or `x:y::z` (surrounding spaces allowed).
pub fn ip(s: &str) -> Result<IpAddr, ValueError> {
    s.trim()
        .parse()
        .map_err(|_| ValueError::NotIp(s.to_string()))
}

/// Parses a prefix of either family, `a.b.c.d/len` (0-32) or `x:y::z/len` (0-128).
pub fn prefix(s: &str) -> Result<(IpAddr, u8), ValueError> {
    let (addr, len) = s
        .split_once('/')
        .ok_or_else(|| ValueError::NotPrefix(s.to_string()))?;
    let addr: IpAddr = addr
        .trim()
        .parse()
        .map_err(|_| ValueError::NotPrefix(s.to_string()))?;
    let most = if addr.is_ipv4() { 32 } else { 128 };
    let len: u8 = len
        .trim()
        .parse()
        .ok()
        .filter(|&l| l <= most)
        .ok_or_else(|| match addr {
            IpAddr::V4(_) => ValueError::PrefixLength(s.to_string()),
            IpAddr::V6(_) => ValueError::PrefixLength6(s.to_string()),
        })?;
    Ok((addr, len))
}

/// Parses a WireGuard peer's allowed IPs, of either family: `a.b.c.d/len` or `x:y::z/len`, or
/// an address alone for its host prefix (/32, /128). The address is returned as written
/// (not masked).
pub fn allowed_ip(s: &str) -> Result<(IpAddr, u8), ValueError> {
    let (ip, len) = match s.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (s, None),
    };
    let ip: IpAddr = ip
        .trim()
        .parse()
        .map_err(|_| ValueError::NotPrefix(s.to_string()))?;
    let most = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => most,
        Some(l) => l
            .trim()
            .parse()
            .ok()
            .filter(|&l| l <= most)
            .ok_or_else(|| match ip {
                IpAddr::V4(_) => ValueError::PrefixLength(s.to_string()),
                IpAddr::V6(_) => ValueError::PrefixLength6(s.to_string()),
            })?,
    };
    Ok((ip, len))
}

/// Parses `aa:bb:cc:dd:ee:ff` ([`net::mac::parse`]'s one rule, as everywhere in Quiver).
pub fn mac(s: &str) -> Result<[u8; 6], ValueError> {
    net::mac::parse(s).map_err(|_| ValueError::NotMac(s.to_string()))
}

/// Parses a next hop, `address@port` (either family): the address and the port's (or
/// tunnel's) name.
pub fn via(s: &str) -> Result<(IpAddr, &str), ValueError> {
    let (addr, port) = s
        .split_once('@')
        .ok_or_else(|| ValueError::NotVia(s.to_string()))?;
    Ok((ip(addr)?, port))
}

/// Parses the address to listen on, `IP:PORT` (surrounding spaces allowed).
pub fn listen_address(s: &str) -> Result<SocketAddr, ValueError> {
    s.trim()
        .parse()
        .map_err(|_| ValueError::NotListenAddress(s.to_string()))
}

/// Parses a peer's endpoint, `IPv4:PORT` or `[IPv6]:PORT` (a scope id is refused: a
/// WireGuard endpoint is beyond the link).
pub fn endpoint(s: &str) -> Result<SocketAddr, ValueError> {
    match s.parse::<SocketAddr>() {
        Ok(SocketAddr::V6(e)) if e.scope_id() != 0 || e.flowinfo() != 0 => {
            Err(ValueError::NotEndpoint(s.to_string()))
        }
        Ok(e) => Ok(e),
        Err(_) => Err(ValueError::NotEndpoint(s.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_value_parses_and_says_what_is_wrong() {
        assert_eq!(ipv4(" 10.0.1.2"), Ok(Ipv4Addr::new(10, 0, 1, 2)));
        assert_eq!(
            ipv4("10.0.0.x").unwrap_err().to_string(),
            "\"10.0.0.x\" is not an IPv4 address"
        );
        assert_eq!(prefix("0.0.0.0/0"), Ok((Ipv4Addr::UNSPECIFIED.into(), 0)));
        assert_eq!(
            prefix("10.0.0.0/33"),
            Err(ValueError::PrefixLength("10.0.0.0/33".into()))
        );
        assert_eq!(
            prefix("10.0.0.0"),
            Err(ValueError::NotPrefix("10.0.0.0".into()))
        );
        assert_eq!(
            prefix("2001:db8::/32"),
            Ok(("2001:db8::".parse().unwrap(), 32))
        );
        assert_eq!(prefix("::/0"), Ok(("::".parse().unwrap(), 0)));
        assert_eq!(
            prefix("2001:db8::/129"),
            Err(ValueError::PrefixLength6("2001:db8::/129".into()))
        );
        assert_eq!(
            prefix("2001:db8:::/64"),
            Err(ValueError::NotPrefix("2001:db8:::/64".into()))
        );
        assert_eq!(ip(" fe80::1"), Ok("fe80::1".parse().unwrap()));
        assert_eq!(
            ip("10.0.0.x").unwrap_err().to_string(),
            "\"10.0.0.x\" is not an IPv4 or IPv6 address"
        );
        assert_eq!(
            allowed_ip("10.9.0.2"),
            Ok((IpAddr::V4(Ipv4Addr::new(10, 9, 0, 2)), 32))
        );
        assert!(allowed_ip("10.9.0/24").is_err());
        assert!(allowed_ip("10.9.0.0/33").is_err());
        assert_eq!(
            allowed_ip("fd00:9::/32"),
            Ok(("fd00:9::".parse().unwrap(), 32))
        );
        assert_eq!(allowed_ip("::/0"), Ok(("::".parse().unwrap(), 0)));
        assert_eq!(allowed_ip("fd00::1"), Ok(("fd00::1".parse().unwrap(), 128)));
        assert!(allowed_ip("fd00::/129").is_err());
        assert!(allowed_ip("fd00:::1/64").is_err());
        assert_eq!(mac("02:fe:00:00:0a:ff"), Ok([2, 0xfe, 0, 0, 0x0a, 0xff]));
        assert_eq!(mac("02:fe:00"), Err(ValueError::NotMac("02:fe:00".into())));
        assert_eq!(
            via("10.0.0.2@c"),
            Ok((Ipv4Addr::new(10, 0, 0, 2).into(), "c"))
        );
        assert_eq!(via("fe80::1@c"), Ok(("fe80::1".parse().unwrap(), "c")));
        assert_eq!(via("10.0.0.2"), Err(ValueError::NotVia("10.0.0.2".into())));
        assert!(listen_address(" 127.0.0.1:9464").is_ok());
        assert_eq!(
            listen_address("localhost").unwrap_err().to_string(),
            "metrics listen address `localhost` is not IP:PORT (for example 127.0.0.1:9464)"
        );
        assert!(endpoint("192.0.2.2:51820").is_ok());
        assert_eq!(
            endpoint("[2001:db8::2]:51820"),
            Ok("[2001:db8::2]:51820".parse().unwrap())
        );
        for bad in [
            "2001:db8::2:51820",
            "[fe80::1%2]:51820",
            "192.0.2.2",
            "[2001:db8::2]",
        ] {
            assert_eq!(
                endpoint(bad).unwrap_err().to_string(),
                format!("{bad:?} is not IPv4:PORT or [IPv6]:PORT")
            );
        }
    }
}
