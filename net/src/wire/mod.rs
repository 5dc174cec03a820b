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
//! | [`icmp6`] | [`Icmp6`]; [`nd`] reads and writes neighbour discovery's messages |
//! | [`udp`] | [`Udp`] |
//! | [`vxlan`] | [`Vxlan`] |

/// Declares a view of a fixed-length header and what follows it: the struct, its checked
/// constructor (the buffer must hold the header), the private `header`/`header_mut` that give
/// the header as a fixed-size array, and `payload`, `payload_mut` (the bytes after the header,
/// as far as the buffer goes: no length field is applied) and `into_inner`. The view's own
/// `impl` blocks add its fields.
macro_rules! header_view {
    ($(#[$doc:meta])* $name:ident, $len:expr, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            #[doc = concat!("A view of `buffer`, which must hold the ", $what, ".")]
            #[inline(always)]
            pub fn new_checked(buffer: T) -> Result<Self, $crate::wire::WireError> {
                if buffer.as_ref().len() < $len {
                    return Err($crate::wire::WireError::Truncated);
                }
                Ok($name { buffer })
            }

            #[inline(always)]
            fn header(&self) -> &[u8; $len] {
                $crate::wire::head(self.buffer.as_ref())
            }

            /// What follows the header, as far as the buffer goes.
            #[inline(always)]
            pub fn payload(&self) -> &[u8] {
                $crate::wire::tail(self.buffer.as_ref(), $len)
            }

            /// The buffer.
            #[inline(always)]
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            #[inline(always)]
            fn header_mut(&mut self) -> Option<&mut [u8; $len]> {
                $crate::wire::head_mut(self.buffer.as_mut())
            }

            /// What follows the header, to write.
            #[inline(always)]
            pub fn payload_mut(&mut self) -> &mut [u8] {
                $crate::wire::tail_mut(self.buffer.as_mut(), $len)
            }
        }
    };
}

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmp;
pub mod icmp6;
pub mod ipv4;
pub mod ipv6;
pub mod nd;
pub mod udp;
pub mod vxlan;

#[cfg(test)]
mod proptests;

pub use arp::{Arp, LEN as ARP_LEN};
// The header lengths under the names the nodes use.
pub use ethernet::{Ethernet, Vlan};
pub use ethernet::{HEADER_LEN as ETHERNET_HEADER, TAG_LEN as VLAN_TAG};
pub use icmp::Icmp4;
pub use icmp6::Icmp6;
pub use ipv4::Ipv4;
pub use ipv4::HEADER_LEN as IP4_HEADER;
pub use ipv6::Ipv6;
pub use udp::Udp;
pub use udp::HEADER_LEN as UDP_HEADER;
pub use vxlan::Vxlan;
pub use vxlan::HEADER_LEN as VXLAN_HEADER;

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

/// EtherType IPv4.
pub const ETHERTYPE_IP4: u16 = 0x0800;
/// EtherType ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType IPv6.
pub const ETHERTYPE_IP6: u16 = 0x86dd;
/// EtherType 802.1Q.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// The IANA VXLAN port.
pub const VXLAN_PORT: u16 = 4789;
/// IP protocol ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol UDP.
pub const PROTO_UDP: u8 = 17;
/// IP protocol TCP.
pub const PROTO_TCP: u8 = 6;

pub use crate::mac::{Mac, BROADCAST};

/// The ones'-complement sum of `d` as 16-bit big-endian words (odd length padded with zero),
/// folded to 16 bits but not inverted ([`checksum::ones_sum`]).
#[inline]
pub fn sum16(d: &[u8]) -> u32 {
    u32::from(checksum::fold(checksum::ones_sum(d)))
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

/// Whether the checksum of an IPv4 header read as words ([`Ipv4::words`]) verifies. The
/// ones'-complement sum is the same whatever the word size, and byte order only swaps the bytes
/// of the folded result, which for the all-ones result that verifies changes nothing. Folding keeps the sum's value
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

/// Formats an IPv4 address.
pub fn ip4_to_string(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

/// Formats a MAC address.
pub fn mac_to_string(m: &Mac) -> String {
    crate::mac::format(m)
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
        assert_eq!(checksum(&[0x12]), !0x1200, "an odd byte is padded");
    }

    #[test]
    fn incremental_update_matches_recomputation() {
        let mut b = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        for ttl in (1..=0x40u8).rev() {
            let mut ip = Ipv4::new_checked(&mut b).unwrap();
            let old = u16::from_be_bytes([ip.ttl(), ip.protocol()]);
            ip.set_ttl(ttl - 1);
            let new = u16::from_be_bytes([ip.ttl(), ip.protocol()]);
            let c = checksum_update(ip.checksum(), old, new);
            ip.set_checksum(c);
            assert_eq!(checksum(&b), 0, "ttl {}", ttl - 1);
        }
    }

    #[test]
    fn formats() {
        assert_eq!(ip4_to_string(0xc0a8_0001), "192.168.0.1");
        assert_eq!(
            mac_to_string(&[2, 0xfe, 0, 0, 0x0a, 0xff]),
            "02:fe:00:00:0a:ff"
        );
    }
}
