//! Byte-level helpers both examples share: the Internet checksum, MAC addresses and big-endian
//! field access that never panics on short input.

// Shared by both examples (and their tests) through `#[path]`; each uses part of it.
#![allow(dead_code)]

/// Length of an Ethernet header without VLAN tags.
pub const ETH_HLEN: usize = 14;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// The Ethernet broadcast address.
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];
/// Shortest Ethernet frame without its FCS; shorter replies are padded with zeros.
pub const MIN_FRAME: usize = 60;

/// The Internet checksum (RFC 1071) of `data`: the ones' complement of the ones' complement sum
/// of its 16-bit big-endian words (an odd last byte is padded with zero). A region that already
/// holds a correct checksum sums to 0.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Reads a big-endian u16 at `off`, or `None` past the end.
pub fn be16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

/// Reads a big-endian u32 at `off`, or `None` past the end.
pub fn be32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Reads a big-endian u64 at `off`, or `None` past the end.
pub fn be64(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_be_bytes(a))
}

/// Reads the 6 bytes at `off` as a MAC address, or `None` past the end.
pub fn mac_at(b: &[u8], off: usize) -> Option<[u8; 6]> {
    let s = b.get(off..off.checked_add(6)?)?;
    let mut m = [0u8; 6];
    m.copy_from_slice(s);
    Some(m)
}

/// Whether a MAC address is a group (multicast or broadcast) address.
pub fn is_group_mac(mac: &[u8; 6]) -> bool {
    mac[0] & 1 == 1
}

/// Parses `aa:bb:cc:dd:ee:ff` (also with `-` separators).
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return Err(format!("`{s}` is not a MAC address (six hex bytes)"));
    }
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(parts) {
        if p.is_empty() || p.len() > 2 {
            return Err(format!("`{s}` is not a MAC address (six hex bytes)"));
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| format!("`{s}`: bad hex byte `{p}`"))?;
    }
    Ok(mac)
}

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
