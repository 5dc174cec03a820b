//! Wire formats: checked, zero-copy views of the headers the nodes read and write, and the
//! constants, checksums and hashes they share.
//!
//! A view (smoltcp's `Packet<T>`) wraps a buffer `T: AsRef<[u8]>` (`AsMut<[u8]>` to write) and
//! is made only by its `new_checked`, which checks once that the buffer holds the header. Its
//! accessors then read fixed-size arrays: they cannot panic, and once inlined after the
//! constructor's check they compile to plain loads and stores, with no bounds checks. What a view
//! does not check (an IPv4 version, a header length) is a field the caller reads and judges: the
//! nodes drop such packets each with their own counter.
//!
//! | module | view |
//! |---|---|
//! | [`ethernet`] | [`Ethernet`] (Ethernet II) and [`Vlan`] (an 802.1Q tag) |
//! | [`arp`] | [`Arp`] (IPv4 over Ethernet) |
//! | [`ipv4`] | [`Ipv4`] |
//! | [`ipv6`] | [`Ipv6`] |
//! | [`icmp`] | [`Icmp4`] |
//! | [`udp`] | [`Udp`] |
//! | [`vxlan`] | [`Vxlan`] |

pub mod arp;
pub mod ethernet;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod udp;
pub mod vxlan;

#[cfg(test)]
mod proptests;

pub use arp::Arp;
pub use ethernet::{Ethernet, Vlan};
pub use icmp::Icmp4;
pub use ipv4::Ipv4;
pub use ipv6::Ipv6;
pub use udp::Udp;
pub use vxlan::Vxlan;

/// Why bytes cannot be viewed as a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than the header.
    #[error("truncated: shorter than the header")]
    Truncated,
    /// A format the view does not read (ARP for other than IPv4 over Ethernet).
    #[error("unsupported format")]
    Unsupported,
}

/// The first `N` bytes of `b`. Views call it on buffers their constructor checked, so the
/// fallback (zeros) is never taken, and the compiler, seeing the check, drops it: a field read is
/// an index into a fixed-size array, with no bounds check and no panic.
#[inline(always)]
fn head<const N: usize>(b: &[u8]) -> &[u8; N] {
    match b.first_chunk::<N>() {
        Some(h) => h,
        None => const { &[0; N] },
    }
}

/// [`head`] to write: `None` (and the write skipped) is never the case for a checked buffer.
#[inline(always)]
fn head_mut<const N: usize>(b: &mut [u8]) -> Option<&mut [u8; N]> {
    b.first_chunk_mut::<N>()
}

/// The bytes of `b` from `at` (none when `at` is past its end).
#[inline(always)]
fn tail(b: &[u8], at: usize) -> &[u8] {
    b.get(at..).unwrap_or_default()
}

/// [`tail`] to write.
#[inline(always)]
fn tail_mut(b: &mut [u8], at: usize) -> &mut [u8] {
    b.get_mut(at..).unwrap_or_default()
}

/// Ethernet header length without a VLAN tag.
pub const ETHERNET_HEADER: usize = ethernet::HEADER_LEN;
/// 802.1Q tag length.
pub const VLAN_TAG: usize = ethernet::TAG_LEN;
/// EtherType IPv4.
pub const ETHERTYPE_IP4: u16 = 0x0800;
/// EtherType ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType IPv6.
pub const ETHERTYPE_IP6: u16 = 0x86dd;
/// EtherType 802.1Q.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// IPv4 header length without options.
pub const IP4_HEADER: usize = ipv4::HEADER_LEN;
/// UDP header length.
pub const UDP_HEADER: usize = udp::HEADER_LEN;
/// VXLAN header length.
pub const VXLAN_HEADER: usize = vxlan::HEADER_LEN;
/// The IANA VXLAN port.
pub const VXLAN_PORT: u16 = 4789;
/// IP protocol ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol UDP.
pub const PROTO_UDP: u8 = 17;
/// IP protocol TCP.
pub const PROTO_TCP: u8 = 6;
/// ARP packet length for IPv4 over Ethernet.
pub const ARP_LEN: usize = arp::LEN;

/// A MAC address.
pub type Mac = [u8; 6];

/// The broadcast MAC address.
pub const BROADCAST: Mac = [0xff; 6];

/// Reads a big-endian u16 at `at`.
#[inline(always)]
pub fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

/// Reads a big-endian u32 at `at`.
#[inline(always)]
pub fn be32(d: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

/// Writes a big-endian u16 at `at`.
#[inline(always)]
pub fn put16(d: &mut [u8], at: usize, v: u16) {
    d[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian u32 at `at`.
#[inline(always)]
pub fn put32(d: &mut [u8], at: usize, v: u32) {
    d[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// The ones'-complement sum of `d` as 16-bit big-endian words (odd length padded with zero),
/// not yet folded or inverted.
#[inline]
pub fn sum16(d: &[u8]) -> u32 {
    let mut sum = 0u32;
    let mut chunks = d.chunks_exact(2);
    for w in &mut chunks {
        sum += u16::from_be_bytes([w[0], w[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        sum += (*last as u32) << 8;
    }
    sum
}

/// Folds a ones'-complement sum to 16 bits and inverts it: the Internet checksum. Two folds
/// suffice for any sum below 2^31 (every packet's: at most 32768 words of 0xffff).
#[inline(always)]
pub fn fold(sum: u32) -> u16 {
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// The Internet checksum of `d`.
#[inline]
pub fn checksum(d: &[u8]) -> u16 {
    fold(sum16(d))
}

/// Whether a 20-byte IPv4 header's checksum verifies.
#[inline(always)]
pub fn ip4_header_checksum_ok(h: &[u8]) -> bool {
    h.first_chunk::<IP4_HEADER>()
        .is_some_and(|h| ip4_words_checksum_ok(&ip4_words(h)))
}

/// An IPv4 header as five native-order 32-bit words: for checks and sums that need no byte
/// swapping.
#[inline(always)]
pub fn ip4_words(h: &[u8; IP4_HEADER]) -> [u32; 5] {
    std::array::from_fn(|k| {
        u32::from_ne_bytes([h[4 * k], h[4 * k + 1], h[4 * k + 2], h[4 * k + 3]])
    })
}

/// Whether the checksum of an IPv4 header read as words ([`Ipv4::words`]) verifies. The ones'-complement sum is
/// the same whatever the word size, and byte order only swaps the bytes of the folded result,
/// which for the all-ones result that verifies changes nothing. Folding keeps the sum's value
/// modulo 0xffff (2^16 is 1 modulo 0xffff) and gives all ones exactly for a nonzero multiple of
/// 0xffff, so the check is a remainder.
#[inline(always)]
pub fn ip4_words_checksum_ok(w: &[u32; 5]) -> bool {
    let sum: u64 = w.iter().map(|&x| x as u64).sum();
    sum != 0 && sum.is_multiple_of(0xffff)
}

/// Updates a checksum for one 16-bit field changing from `old` to `new` (RFC 1624, eqn. 3).
#[inline(always)]
pub fn checksum_update(check: u16, old: u16, new: u16) -> u16 {
    let sum = (!check as u32) + (!old as u32 & 0xffff) + new as u32;
    fold(sum)
}

/// IPv4 header fields, by offset.
pub mod ip4 {
    /// Version and IHL.
    pub const VER_IHL: usize = 0;
    /// Total length.
    pub const TOTAL_LEN: usize = 2;
    /// Flags and fragment offset.
    pub const FRAG: usize = 6;
    /// TTL.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTO: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: usize = 10;
    /// Source address.
    pub const SRC: usize = 12;
    /// Destination address.
    pub const DST: usize = 16;
    /// The Don't Fragment flag in the flags/offset word.
    pub const DF: u16 = 0x4000;
    /// The More Fragments flag.
    pub const MF: u16 = 0x2000;
    /// The fragment offset mask.
    pub const OFFSET_MASK: u16 = 0x1fff;
}

/// Formats an IPv4 address.
pub fn ip4_to_string(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

/// Formats a MAC address.
pub fn mac_to_string(m: &Mac) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// A 32-bit hash of a flow's addresses, protocol and ports (for ECMP and VXLAN source ports).
#[inline(always)]
pub fn flow_hash(src: u32, dst: u32, proto: u8, ports: u32) -> u32 {
    let mut h = (src as u64) << 32 | dst as u64;
    h ^= ((proto as u64) << 32) | ports as u64;
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 32) as u32 ^ h as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_a_known_header() {
        // RFC 1071-style example: a header whose checksum field is 0xb861.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0);
        let mut z = h;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(checksum(&z), 0xb861);
    }

    #[test]
    fn the_fast_header_check_agrees_with_the_checksum() {
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert!(ip4_header_checksum_ok(&h));
        for i in 0..20 {
            h[i] ^= 0x10;
            assert_eq!(ip4_header_checksum_ok(&h), checksum(&h) == 0, "byte {i}");
            h[i] ^= 0x10;
        }
        let mut all_ones = [0xffu8; 20];
        all_ones[10] = 0;
        all_ones[11] = 0;
        assert_eq!(ip4_header_checksum_ok(&all_ones), checksum(&all_ones) == 0);
        assert!(!ip4_header_checksum_ok(&h[..19]));
    }

    #[test]
    fn the_fast_header_check_agrees_with_the_checksum_on_random_headers() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..20_000 {
            let mut h = [0u8; 20];
            for b in h.iter_mut() {
                *b = next() as u8;
            }
            if round % 2 == 0 {
                // Half of them valid, some with a byte flipped afterwards.
                h[10] = 0;
                h[11] = 0;
                let c = checksum(&h);
                put16(&mut h, 10, c);
                if round % 4 == 0 {
                    h[(next() % 20) as usize] ^= 1 << (next() % 8);
                }
            }
            assert_eq!(ip4_header_checksum_ok(&h), checksum(&h) == 0, "{h:?}");
        }
        for fill in [0u8, 0xff] {
            let h = [fill; 20];
            assert_eq!(ip4_header_checksum_ok(&h), checksum(&h) == 0, "{fill:#x}");
        }
    }

    #[test]
    fn incremental_update_matches_recomputation() {
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        for ttl in (1..=0x40u8).rev() {
            let old = be16(&h, 8);
            h[8] = ttl - 1;
            let new = be16(&h, 8);
            let c = checksum_update(be16(&h, 10), old, new);
            put16(&mut h, 10, c);
            assert_eq!(checksum(&h), 0, "ttl {}", ttl - 1);
        }
    }
}
