//! The address values of a connection's IP context, parsed: [`IpPrefix`] (`a.b.c.d/len`,
//! `x::y/len`) and [`MacAddr`].

use std::net::IpAddr;
use std::str::FromStr;

/// An address with a prefix length, `a.b.c.d/len` or `x::y/len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpPrefix {
    /// The address (host bits kept: `10.0.0.1/24` is an interface address).
    pub addr: IpAddr,
    /// The prefix length.
    pub len: u8,
}

/// Why text is not an [`IpPrefix`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// No `/`.
    #[error("{0:?} is not an address/length")]
    NotAPrefix(String),
    /// The part before `/` is not an address.
    #[error("{0:?} is not an IP address")]
    Address(String),
    /// The part after `/` is not a length the address family has.
    #[error("{len:?} is not a prefix length (0..={max})")]
    Length {
        /// The text after `/`.
        len: String,
        /// The family's longest prefix (32 or 128).
        max: u8,
    },
}

impl FromStr for IpPrefix {
    type Err = PrefixError;

    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| PrefixError::NotAPrefix(s.to_string()))?;
        let addr: IpAddr = a.parse().map_err(|_| PrefixError::Address(a.to_string()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len: u8 = l
            .parse()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| PrefixError::Length {
                len: l.to_string(),
                max,
            })?;
        Ok(IpPrefix { addr, len })
    }
}

impl std::fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MacAddr(pub [u8; 6]);

/// Text that is not a [`MacAddr`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a MAC address")]
pub struct MacError(pub String);

impl FromStr for MacAddr {
    type Err = MacError;

    fn from_str(s: &str) -> Result<Self, MacError> {
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for b in &mut out {
            let p = parts.next().filter(|p| p.len() == 2);
            *b = p
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| MacError(s.to_string()))?;
        }
        if parts.next().is_some() {
            return Err(MacError(s.to_string()));
        }
        Ok(MacAddr(out))
    }
}

impl std::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_refuse() {
        let p: IpPrefix = "10.0.0.1/24".parse().unwrap();
        assert_eq!(p.to_string(), "10.0.0.1/24");
        assert_eq!("fd00::1/64".parse::<IpPrefix>().unwrap().len, 64);
        for bad in [
            "10.0.0.1",
            "10.0.0.1/33",
            "10.0.0/24",
            "x/1",
            "fd00::1/129",
            "/",
            "",
        ] {
            assert!(bad.parse::<IpPrefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn macs_parse_and_refuse() {
        let m: MacAddr = "02:FE:00:00:00:0a".parse().unwrap();
        assert_eq!(m.to_string(), "02:fe:00:00:00:0a");
        for bad in [
            "02:fe:00:00:00",
            "02:fe:00:00:00:0a:0b",
            "2:fe:00:00:00:0a",
            "zz:fe:00:00:00:0a",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }
}
