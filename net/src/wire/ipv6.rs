//! IPv6 headers ([`Ipv6`]).

/// The IPv6 header's length (extension headers are payload).
pub const HEADER_LEN: usize = 40;

/// An IPv6 address as it lies in a header.
pub type Ip6Addr = [u8; 16];

header_view! {
    /// A view of an IPv6 header and what follows it. The buffer holds the 40-byte header; the
    /// version and payload length are fields for the caller to check.
    Ipv6, HEADER_LEN, "40-byte header"
}

impl<T: AsRef<[u8]>> Ipv6<T> {
    /// The version (6 for IPv6).
    #[inline(always)]
    pub fn version(&self) -> u8 {
        self.header()[0] >> 4
    }

    /// The payload length: what follows the header (extension headers included).
    #[inline(always)]
    pub fn payload_len(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[4], h[5]])
    }

    /// The length the packet claims: the header's 40 bytes and the payload length.
    #[inline(always)]
    pub fn total_len(&self) -> u32 {
        HEADER_LEN as u32 + u32::from(self.payload_len())
    }

    /// The next header (the payload's protocol, or the first extension header).
    #[inline(always)]
    pub fn next_header(&self) -> u8 {
        self.header()[6]
    }

    /// The hop limit.
    #[inline(always)]
    pub fn hop_limit(&self) -> u8 {
        self.header()[7]
    }

    /// The source address.
    #[inline(always)]
    pub fn src(&self) -> Ip6Addr {
        let h = self.header();
        std::array::from_fn(|k| h[8 + k])
    }

    /// The destination address.
    #[inline(always)]
    pub fn dst(&self) -> Ip6Addr {
        let h = self.header();
        std::array::from_fn(|k| h[24 + k])
    }
}

impl<T: AsRef<[u8]>> Ipv6<T> {
    /// The flow label (20 bits).
    #[inline(always)]
    pub fn flow_label(&self) -> u32 {
        let h = self.header();
        u32::from_be_bytes([0, h[1] & 0x0f, h[2], h[3]])
    }

    /// The ones'-complement sum of the pseudo-header an upper-layer checksum covers (RFC 8200
    /// 8.1) for `upper_len` bytes of protocol `next`, not folded.
    #[inline]
    pub fn pseudo_header_sum(&self, next: u8, upper_len: u32) -> u64 {
        let h = self.header();
        super::checksum::ones_sum(&h[8..40]) + u64::from(upper_len) + u64::from(next)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6<T> {
    /// Sets the hop limit.
    #[inline(always)]
    pub fn set_hop_limit(&mut self, hops: u8) {
        if let Some(h) = self.header_mut() {
            h[7] = hops;
        }
    }

    /// Writes version 6, traffic class 0 and flow label 0.
    #[inline]
    pub fn reset_header(&mut self) {
        if let Some(h) = self.header_mut() {
            h[..4].copy_from_slice(&[0x60, 0, 0, 0]);
        }
    }

    /// Sets the flow label (its low 20 bits), keeping the version and traffic class.
    #[inline(always)]
    pub fn set_flow_label(&mut self, label: u32) {
        if let Some(h) = self.header_mut() {
            let [_, a, b, c] = label.to_be_bytes();
            h[1] = (h[1] & 0xf0) | (a & 0x0f);
            h[2] = b;
            h[3] = c;
        }
    }

    /// Sets the payload length.
    #[inline(always)]
    pub fn set_payload_len(&mut self, len: u16) {
        if let Some(h) = self.header_mut() {
            h[4..6].copy_from_slice(&len.to_be_bytes());
        }
    }

    /// Sets the next header.
    #[inline(always)]
    pub fn set_next_header(&mut self, next: u8) {
        if let Some(h) = self.header_mut() {
            h[6] = next;
        }
    }

    /// Sets the source address.
    #[inline(always)]
    pub fn set_src(&mut self, a: &Ip6Addr) {
        if let Some(h) = self.header_mut() {
            h[8..24].copy_from_slice(a);
        }
    }

    /// Sets the destination address.
    #[inline(always)]
    pub fn set_dst(&mut self, a: &Ip6Addr) {
        if let Some(h) = self.header_mut() {
            h[24..40].copy_from_slice(a);
        }
    }
}

/// Next header: hop-by-hop options (must come first).
pub const HOP_BY_HOP: u8 = 0;
/// Next header: a routing header.
pub const ROUTING: u8 = 43;
/// Next header: a fragment header.
pub const FRAGMENT: u8 = 44;
/// Next header: destination options.
pub const DEST_OPTIONS: u8 = 60;
/// Next header: authentication header (its length counts 4-byte units).
pub const AUTH: u8 = 51;
/// Next header: nothing follows.
pub const NO_NEXT: u8 = 59;

/// Whether `next` names an extension header [`walk`] steps over (RFC 8200 4, and those of
/// RFC 7045's list with the common format).
#[inline(always)]
pub fn is_extension(next: u8) -> bool {
    matches!(
        next,
        HOP_BY_HOP | ROUTING | FRAGMENT | DEST_OPTIONS | AUTH | 135 | 139 | 140
    )
}

/// Where the upper layer of a packet is, after its extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upper {
    /// The upper layer's protocol (or [`NO_NEXT`]).
    pub protocol: u8,
    /// Its offset from the start of the IPv6 payload.
    pub offset: usize,
    /// The packet is a fragment other than the first: what follows is not the upper layer's
    /// header.
    pub later_fragment: bool,
    /// How many extension headers were stepped over.
    pub extensions: usize,
}

/// Why [`walk`] gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ExtensionError {
    /// An extension header runs past the bytes at hand.
    #[error("an extension header runs past the packet")]
    Truncated,
    /// More extension headers than the bound, or hop-by-hop options after the first.
    #[error("more extension headers than the bound, or hop-by-hop options out of place")]
    PastBound,
}

/// Steps over the extension headers at the start of `payload` (an IPv6 packet's payload; the
/// fixed header said `next`), at most `bound` of them, all within `payload`: where the upper
/// layer is. Hop-by-hop options anywhere but first are refused (RFC 8200 4.1).
pub fn walk(payload: &[u8], mut next: u8, bound: usize) -> Result<Upper, ExtensionError> {
    let mut at = 0usize;
    let mut extensions = 0;
    let mut later_fragment = false;
    while is_extension(next) {
        if extensions == bound || (next == HOP_BY_HOP && extensions > 0) {
            return Err(ExtensionError::PastBound);
        }
        let h = payload.get(at..at + 8).ok_or(ExtensionError::Truncated)?;
        let len = match next {
            FRAGMENT => {
                let offset = u16::from_be_bytes([h[2], h[3]]) >> 3;
                later_fragment |= offset != 0;
                8
            }
            AUTH => (usize::from(h[1]) + 2) * 4,
            _ => (usize::from(h[1]) + 1) * 8,
        };
        if at + len > payload.len() {
            return Err(ExtensionError::Truncated);
        }
        next = h[0];
        at += len;
        extensions += 1;
        if later_fragment {
            break;
        }
    }
    Ok(Upper {
        protocol: next,
        offset: at,
        later_fragment,
        extensions,
    })
}

/// Whether `a` is link-local unicast (fe80::/10) or multicast (ff00::/8): an address whose
/// traffic stays on its link.
#[inline]
pub fn is_link_scope(a: &Ip6Addr) -> bool {
    a[0] == 0xff || (a[0] == 0xfe && a[1] & 0xc0 == 0x80)
}

/// Whether `a` is multicast (ff00::/8).
#[inline(always)]
pub fn is_multicast(a: &Ip6Addr) -> bool {
    a[0] == 0xff
}

/// Whether `a` is link-local unicast (fe80::/10).
#[inline(always)]
pub fn is_link_local(a: &Ip6Addr) -> bool {
    a[0] == 0xfe && a[1] & 0xc0 == 0x80
}

/// Whether `a` is the unspecified address (::).
#[inline(always)]
pub fn is_unspecified(a: &Ip6Addr) -> bool {
    *a == [0; 16]
}

/// The all-nodes multicast address, ff02::1.
pub const ALL_NODES: Ip6Addr = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// The solicited-node multicast address of `a` (RFC 4291 2.7.1): ff02::1:ff00:0/104 with
/// `a`'s low 24 bits.
#[inline]
pub fn solicited_node(a: &Ip6Addr) -> Ip6Addr {
    let mut m = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
    m[13..].copy_from_slice(&a[13..]);
    m
}

/// Whether `a` is a solicited-node multicast address.
#[inline]
pub fn is_solicited_node(a: &Ip6Addr) -> bool {
    a[..13] == [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff]
}

/// The Ethernet address IPv6 multicast `a` is sent to (RFC 2464 7): 33:33 and its low 32
/// bits.
#[inline]
pub fn multicast_mac(a: &Ip6Addr) -> crate::Mac {
    [0x33, 0x33, a[12], a[13], a[14], a[15]]
}

/// The link-local address of an interface with MAC `mac` (RFC 4291 appendix A: fe80::/64 and
/// the modified EUI-64 interface identifier).
pub fn link_local(mac: &crate::Mac) -> Ip6Addr {
    let mut a = [0u8; 16];
    a[..2].copy_from_slice(&[0xfe, 0x80]);
    a[8] = mac[0] ^ 0x02;
    a[9] = mac[1];
    a[10] = mac[2];
    a[11] = 0xff;
    a[12] = 0xfe;
    a[13] = mac[3];
    a[14] = mac[4];
    a[15] = mac[5];
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireError;

    fn a(s: &str) -> Ip6Addr {
        s.parse::<std::net::Ipv6Addr>().unwrap().octets()
    }

    #[test]
    fn extension_headers_are_walked_within_their_bound() {
        // Hop-by-hop (8 bytes) → destination options (16) → UDP.
        let mut p = vec![DEST_OPTIONS, 0, 0, 0, 0, 0, 0, 0];
        p.extend_from_slice(&[17, 1]);
        p.extend_from_slice(&[0; 14]);
        p.extend_from_slice(&[0; 8]);
        let up = walk(&p, HOP_BY_HOP, 8).unwrap();
        assert_eq!((up.protocol, up.offset, up.extensions), (17, 24, 2));
        assert!(!up.later_fragment);
        assert_eq!(walk(&p, 17, 8).unwrap().offset, 0, "no extension header");
        assert_eq!(walk(&p, HOP_BY_HOP, 1), Err(ExtensionError::PastBound));
        assert_eq!(
            walk(&p[..20], HOP_BY_HOP, 8),
            Err(ExtensionError::Truncated)
        );
        assert_eq!(walk(&p[..4], HOP_BY_HOP, 8), Err(ExtensionError::Truncated));
        // Hop-by-hop after another header is refused.
        let mut late = vec![HOP_BY_HOP, 0, 0, 0, 0, 0, 0, 0];
        late.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(walk(&late, DEST_OPTIONS, 8), Err(ExtensionError::PastBound));
        // A fragment other than the first: no upper header follows it.
        let frag = [17, 0, 0, 8 << 3, 0, 0, 0, 1];
        let up = walk(&frag, FRAGMENT, 8).unwrap();
        assert!(up.later_fragment && up.protocol == 17 && up.offset == 8);
        let first = [17, 0, 0, 1, 0, 0, 0, 1];
        assert!(!walk(&first, FRAGMENT, 8).unwrap().later_fragment);
        // A chain as long as the bound allows, and one longer.
        let chain: Vec<u8> = (0..9)
            .flat_map(|k| [if k < 8 { DEST_OPTIONS } else { 17 }, 0, 0, 0, 0, 0, 0, 0])
            .collect();
        assert_eq!(walk(&chain, DEST_OPTIONS, 9).unwrap().extensions, 9);
        assert_eq!(
            walk(&chain, DEST_OPTIONS, 8),
            Err(ExtensionError::PastBound)
        );
    }

    #[test]
    fn the_addresses_neighbour_discovery_derives() {
        // RFC 4291: solicited-node multicast keeps the low 24 bits.
        assert_eq!(
            solicited_node(&a("2001:db8::1:2345:6789")),
            a("ff02::1:ff45:6789")
        );
        assert!(is_solicited_node(&a("ff02::1:ff45:6789")));
        assert!(!is_solicited_node(&a("ff02::1")));
        // RFC 2464: 33:33 and the low 32 bits.
        assert_eq!(
            multicast_mac(&a("ff02::1:ff45:6789")),
            [0x33, 0x33, 0xff, 0x45, 0x67, 0x89]
        );
        // Modified EUI-64, as Linux makes it for 02:00:00:00:00:01 and 52:54:00:12:34:56.
        assert_eq!(link_local(&[2, 0, 0, 0, 0, 1]), a("fe80::ff:fe00:1"));
        assert_eq!(
            link_local(&[0x52, 0x54, 0, 0x12, 0x34, 0x56]),
            a("fe80::5054:ff:fe12:3456")
        );
        assert!(is_link_local(&a("fe80::1")) && !is_link_local(&a("fec0::1")));
        assert!(is_multicast(&ALL_NODES) && is_unspecified(&a("::")));
    }

    fn packet() -> [u8; 44] {
        let mut p = [0u8; 44];
        p[0] = 0x60;
        p[5] = 4; // payload length
        p[6] = 17;
        p[7] = 64;
        p[8..10].copy_from_slice(&[0x20, 0x01]);
        p[23] = 1;
        p[24..26].copy_from_slice(&[0xfe, 0x80]);
        p[39] = 2;
        p[40..].copy_from_slice(&[1, 2, 3, 4]);
        p
    }

    #[test]
    fn fields_of_a_known_header() {
        let p = packet();
        let ip = Ipv6::new_checked(&p[..]).unwrap();
        assert_eq!(ip.version(), 6);
        assert_eq!((ip.payload_len(), ip.total_len()), (4, 44));
        assert_eq!((ip.next_header(), ip.hop_limit()), (17, 64));
        let mut src = [0; 16];
        src[..2].copy_from_slice(&[0x20, 0x01]);
        src[15] = 1;
        assert_eq!(ip.src(), src);
        assert!(!is_link_scope(&ip.src()));
        assert!(is_link_scope(&ip.dst()));
        assert_eq!(ip.dst()[15], 2);
        assert_eq!(ip.payload(), &[1, 2, 3, 4]);
    }

    #[test]
    fn short_buffers_are_refused() {
        let p = packet();
        for len in 0..HEADER_LEN {
            assert_eq!(Ipv6::new_checked(&p[..len]), Err(WireError::Truncated));
        }
    }

    #[test]
    fn fields_written_read_back() {
        let mut p = packet();
        let mut ip = Ipv6::new_checked(&mut p[..]).unwrap();
        ip.set_hop_limit(63);
        ip.payload_mut().fill(9);
        assert_eq!(ip.hop_limit(), 63);
        assert_eq!(p[40..], [9; 4]);
    }

    #[test]
    fn link_scope() {
        let a = |b0, b1| {
            let mut a = [0u8; 16];
            a[0] = b0;
            a[1] = b1;
            a
        };
        assert!(is_link_scope(&a(0xff, 0x02)));
        assert!(is_link_scope(&a(0xfe, 0x80)));
        assert!(is_link_scope(&a(0xfe, 0xbf)));
        assert!(
            !is_link_scope(&a(0xfe, 0xc0)),
            "site-local is not link-local"
        );
        assert!(!is_link_scope(&a(0x20, 0x01)));
    }
}
