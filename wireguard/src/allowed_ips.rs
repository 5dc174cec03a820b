//! A peer's allowed IPs (whitepaper §2, cryptokey routing): a decrypted packet is accepted only
//! if its source is inside them, and a packet is sent to the peer whose allowed IPs hold its
//! destination most specifically. A short list scanned linearly: the control side's copy; the
//! graph's data path will use its own FIB.

use std::net::IpAddr;
use std::str::FromStr;

/// A prefix that is not `address/length` with a length the address family allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an IP prefix: {0}")]
pub struct PrefixError(pub String);

/// An IP prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// The address (bits past the length are ignored).
    pub addr: IpAddr,
    /// The length in bits.
    pub len: u8,
}

impl Prefix {
    /// `addr/len`, checked.
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, PrefixError> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(PrefixError(format!("{addr}/{len}")));
        }
        Ok(Self { addr, len })
    }

    /// Whether `ip` is inside.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(p), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(p) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(p), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(p) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;

    /// `10.0.0.0/24`, `fd00::/64`; a bare address is a host prefix.
    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let bad = || PrefixError(s.to_string());
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| bad())?;
        let len = match l {
            Some(l) => l.trim().parse().map_err(|_| bad())?,
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        Self::new(addr, len).map_err(|_| bad())
    }
}

/// A peer's allowed IPs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedIps(Vec<Prefix>);

impl AllowedIps {
    /// None: the peer is allowed nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a prefix.
    pub fn insert(&mut self, p: Prefix) {
        if !self.0.contains(&p) {
            self.0.push(p);
        }
    }

    /// The length of the longest prefix holding `ip`, if any does.
    pub fn longest_match(&self, ip: IpAddr) -> Option<u8> {
        self.0
            .iter()
            .filter(|p| p.contains(ip))
            .map(|p| p.len)
            .max()
    }

    /// The prefixes.
    pub fn prefixes(&self) -> &[Prefix] {
        &self.0
    }
}

/// The source address of the IPv4 or IPv6 packet at the start of `p`.
pub fn inner_source(p: &[u8]) -> Option<IpAddr> {
    match p.first()? >> 4 {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(p.get(12..16)?).ok()?)),
        6 => Some(IpAddr::from(<[u8; 16]>::try_from(p.get(8..24)?).ok()?)),
        _ => None,
    }
}

/// The destination address of the IPv4 or IPv6 packet at the start of `p`.
pub fn inner_destination(p: &[u8]) -> Option<IpAddr> {
    match p.first()? >> 4 {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(p.get(16..20)?).ok()?)),
        6 => Some(IpAddr::from(<[u8; 16]>::try_from(p.get(24..40)?).ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn prefixes_match() {
        let mut a = AllowedIps::new();
        assert_eq!(a.longest_match(ip("10.0.0.1")), None);
        a.insert("10.0.0.0/8".parse().unwrap());
        a.insert("10.1.2.0/24".parse().unwrap());
        a.insert("fd00::/64".parse().unwrap());
        a.insert("0.0.0.0/0".parse().unwrap());
        assert_eq!(a.longest_match(ip("10.1.2.3")), Some(24));
        assert_eq!(a.longest_match(ip("10.9.2.3")), Some(8));
        assert_eq!(a.longest_match(ip("192.0.2.1")), Some(0));
        assert_eq!(a.longest_match(ip("fd00::1")), Some(64));
        assert_eq!(a.longest_match(ip("fd01::1")), None);
        assert_eq!("10.0.0.1".parse::<Prefix>().unwrap().len, 32);
        assert!("10.0.0.0/33".parse::<Prefix>().is_err());
        assert!("fd00::/129".parse::<Prefix>().is_err());
        assert!("nonsense/8".parse::<Prefix>().is_err());
    }

    #[test]
    fn addresses_of_inner_packets() {
        let mut v4 = [0u8; 20];
        v4[0] = 0x45;
        v4[12..16].copy_from_slice(&[10, 0, 0, 1]);
        v4[16..20].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(inner_source(&v4), Some(ip("10.0.0.1")));
        assert_eq!(inner_destination(&v4), Some(ip("10.0.0.2")));
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        v6[8] = 0xfd;
        assert_eq!(inner_source(&v6), Some(ip("fd00::")));
        assert_eq!(inner_source(&v6[..20]), None);
        assert_eq!(inner_source(&[0x10]), None);
    }
}
