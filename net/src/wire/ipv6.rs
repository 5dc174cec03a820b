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

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6<T> {
    /// Sets the hop limit.
    #[inline(always)]
    pub fn set_hop_limit(&mut self, hops: u8) {
        if let Some(h) = self.header_mut() {
            h[7] = hops;
        }
    }
}

/// Whether `a` is link-local unicast (fe80::/10) or multicast (ff00::/8): an address whose
/// traffic stays on its link.
#[inline]
pub fn is_link_scope(a: &Ip6Addr) -> bool {
    a[0] == 0xff || (a[0] == 0xfe && a[1] & 0xc0 == 0x80)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireError;

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
