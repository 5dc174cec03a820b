//! IPv4 headers ([`Ipv4`]).

use super::{checksum, flow_hash, fold, head, head_mut, tail, tail_mut, WireError};
use super::{PROTO_TCP, PROTO_UDP};

/// The length of an IPv4 header without options: the fixed part every view holds.
pub const HEADER_LEN: usize = 20;
/// The Don't Fragment flag in the flags and fragment offset field.
pub const DF: u16 = 0x4000;
/// The More Fragments flag.
pub const MF: u16 = 0x2000;
/// The fragment offset's bits.
pub const OFFSET_MASK: u16 = 0x1fff;

/// A view of an IPv4 header and what follows it. The buffer holds the 20-byte fixed header;
/// the version, header length and total length are fields like the others, for the caller to
/// check (`ip4-input` does, counting each reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4<T> {
    /// A view of `buffer`, which must hold the 20-byte fixed header.
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Ipv4 { buffer })
    }

    /// The fixed header's bytes.
    #[inline(always)]
    pub fn header(&self) -> &[u8; HEADER_LEN] {
        head(self.buffer.as_ref())
    }

    /// The version (4 for IPv4).
    #[inline(always)]
    pub fn version(&self) -> u8 {
        self.header()[0] >> 4
    }

    /// The header length field (IHL), in 32-bit words.
    #[inline(always)]
    pub fn ihl(&self) -> u8 {
        self.header()[0] & 0xf
    }

    /// The header length in bytes (IHL × 4).
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }

    /// Whether the first byte is 0x45: version 4, a 20-byte header (no options).
    #[inline(always)]
    pub fn is_plain(&self) -> bool {
        self.header()[0] == 0x45
    }

    /// DSCP and ECN (the former type of service byte).
    #[inline(always)]
    pub fn dscp_ecn(&self) -> u8 {
        self.header()[1]
    }

    /// The total length: header and payload.
    #[inline(always)]
    pub fn total_len(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[2], h[3]])
    }

    /// The identification.
    #[inline(always)]
    pub fn ident(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[4], h[5]])
    }

    /// The flags and fragment offset field (see [`DF`], [`MF`], [`OFFSET_MASK`]).
    #[inline(always)]
    pub fn flags_and_offset(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[6], h[7]])
    }

    /// Whether Don't Fragment is set.
    #[inline(always)]
    pub fn dont_fragment(&self) -> bool {
        self.flags_and_offset() & DF != 0
    }

    /// Whether More Fragments is set.
    #[inline(always)]
    pub fn more_fragments(&self) -> bool {
        self.flags_and_offset() & MF != 0
    }

    /// The fragment offset, in 8-byte units.
    #[inline(always)]
    pub fn frag_offset(&self) -> u16 {
        self.flags_and_offset() & OFFSET_MASK
    }

    /// The time to live.
    #[inline(always)]
    pub fn ttl(&self) -> u8 {
        self.header()[8]
    }

    /// The payload's protocol.
    #[inline(always)]
    pub fn protocol(&self) -> u8 {
        self.header()[9]
    }

    /// The header checksum.
    #[inline(always)]
    pub fn checksum(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[10], h[11]])
    }

    /// The source address.
    #[inline(always)]
    pub fn src(&self) -> u32 {
        let h = self.header();
        u32::from_be_bytes([h[12], h[13], h[14], h[15]])
    }

    /// The destination address.
    #[inline(always)]
    pub fn dst(&self) -> u32 {
        let h = self.header();
        u32::from_be_bytes([h[16], h[17], h[18], h[19]])
    }

    /// The fixed header as five native-order 32-bit words: for checks and sums that need no
    /// byte swapping (see [`super::ip4_words_checksum_ok`]).
    #[inline(always)]
    pub fn words(&self) -> [u32; 5] {
        let h = self.header();
        std::array::from_fn(|k| {
            u32::from_ne_bytes([h[4 * k], h[4 * k + 1], h[4 * k + 2], h[4 * k + 3]])
        })
    }

    /// Whether the checksum of a header without options verifies.
    #[inline(always)]
    pub fn checksum_ok(&self) -> bool {
        super::ip4_words_checksum_ok(&self.words())
    }

    /// A hash of the addresses and protocol and, for unfragmented TCP and UDP, the ports: the
    /// first 4 bytes after a header without options (ports of 0 when the buffer ends sooner).
    /// For ECMP and VXLAN source ports.
    #[inline(always)]
    pub fn flow_hash(&self) -> u32 {
        let b = self.buffer.as_ref();
        let proto = self.protocol();
        let ports = match b.first_chunk::<{ HEADER_LEN + 4 }>() {
            Some(h)
                if self.flags_and_offset() & (OFFSET_MASK | MF) == 0
                    && (proto == PROTO_UDP || proto == PROTO_TCP) =>
            {
                u32::from_be_bytes([h[20], h[21], h[22], h[23]])
            }
            _ => 0,
        };
        flow_hash(self.src(), self.dst(), proto, ports)
    }

    /// What follows the header (options included): empty when the header length is below 20
    /// bytes or past the buffer's end.
    #[inline(always)]
    pub fn payload(&self) -> &[u8] {
        tail(self.buffer.as_ref(), self.payload_at())
    }

    /// Where the payload starts: the header length, or past any buffer when it is below 20.
    #[inline(always)]
    fn payload_at(&self) -> usize {
        match self.header_len() {
            n if n < HEADER_LEN => usize::MAX,
            n => n,
        }
    }

    /// The buffer.
    #[inline(always)]
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4<T> {
    #[inline(always)]
    fn header_mut(&mut self) -> Option<&mut [u8; HEADER_LEN]> {
        head_mut(self.buffer.as_mut())
    }

    /// Makes the fixed header that of a plain packet: version 4, 20 bytes, every other field
    /// zero.
    #[inline]
    pub fn reset_header(&mut self) {
        if let Some(h) = self.header_mut() {
            *h = [0; HEADER_LEN];
            h[0] = 0x45;
        }
    }

    /// Sets DSCP and ECN.
    #[inline(always)]
    pub fn set_dscp_ecn(&mut self, v: u8) {
        if let Some(h) = self.header_mut() {
            h[1] = v;
        }
    }

    /// Sets the total length.
    #[inline(always)]
    pub fn set_total_len(&mut self, len: u16) {
        if let Some(h) = self.header_mut() {
            h[2..4].copy_from_slice(&len.to_be_bytes());
        }
    }

    /// Sets the flags and fragment offset field.
    #[inline(always)]
    pub fn set_flags_and_offset(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            h[6..8].copy_from_slice(&v.to_be_bytes());
        }
    }

    /// Sets the time to live (the checksum is not updated).
    #[inline(always)]
    pub fn set_ttl(&mut self, ttl: u8) {
        if let Some(h) = self.header_mut() {
            h[8] = ttl;
        }
    }

    /// Sets the payload's protocol.
    #[inline(always)]
    pub fn set_protocol(&mut self, proto: u8) {
        if let Some(h) = self.header_mut() {
            h[9] = proto;
        }
    }

    /// Sets the header checksum.
    #[inline(always)]
    pub fn set_checksum(&mut self, c: u16) {
        if let Some(h) = self.header_mut() {
            h[10..12].copy_from_slice(&c.to_be_bytes());
        }
    }

    /// Sets the source address.
    #[inline(always)]
    pub fn set_src(&mut self, a: u32) {
        if let Some(h) = self.header_mut() {
            h[12..16].copy_from_slice(&a.to_be_bytes());
        }
    }

    /// Sets the destination address.
    #[inline(always)]
    pub fn set_dst(&mut self, a: u32) {
        if let Some(h) = self.header_mut() {
            h[16..20].copy_from_slice(&a.to_be_bytes());
        }
    }

    /// Computes and sets the header checksum (over the options too when the buffer holds them).
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let len = self.header_len().max(HEADER_LEN);
        let c = checksum(self.buffer.as_ref().get(..len).unwrap_or(self.header()));
        self.set_checksum(c);
    }

    /// Decrements the TTL (at least 2, for forwarding) and updates the checksum: RFC 1624
    /// eqn. 3 with m' = m - 0x0100, where ~m + m' is 0xfeff whatever m is. The sum is done on
    /// the bytes as they lie (0xfeff byte-swapped), which ones'-complement arithmetic allows,
    /// and one fold suffices for ~HC + 0xfeff.
    #[inline(always)]
    pub fn decrement_ttl(&mut self) {
        if let Some(h) = self.header_mut() {
            h[8] = h[8].wrapping_sub(1);
            let check = u16::from_ne_bytes([h[10], h[11]]);
            let sum = !check as u32 + u16::from_ne_bytes(0xfeffu16.to_be_bytes()) as u32;
            let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
            h[10..12].copy_from_slice(&sum.to_ne_bytes());
        }
    }

    /// What follows the header, to write (see [`Ipv4::payload`]).
    #[inline(always)]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let at = self.payload_at();
        tail_mut(self.buffer.as_mut(), at)
    }
}

/// The checksum of a header whose ones'-complement sum without the total length is
/// `sum_without_len` (precomputed for a template), once its total length is `total_len`.
#[inline(always)]
pub fn checksum_with_len(sum_without_len: u32, total_len: u16) -> u16 {
    fold(sum_without_len + u32::from(total_len))
}

#[cfg(test)]
mod tests {
    use super::super::{checksum_update, PROTO_ICMP};
    use super::*;

    /// A UDP header from 192.168.0.1 to 192.168.0.199 whose checksum is 0xb861, and 4 bytes of
    /// ports.
    const PACKET: [u8; 24] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7, 0x12, 0x34, 0x56, 0x78,
    ];

    #[test]
    fn fields_of_a_known_header() {
        let ip = Ipv4::new_checked(&PACKET[..]).unwrap();
        assert_eq!((ip.version(), ip.ihl(), ip.header_len()), (4, 5, 20));
        assert!(ip.is_plain());
        assert_eq!(ip.dscp_ecn(), 0);
        assert_eq!(ip.total_len(), 0x73);
        assert_eq!(ip.ident(), 0);
        assert!(ip.dont_fragment() && !ip.more_fragments());
        assert_eq!(ip.frag_offset(), 0);
        assert_eq!((ip.ttl(), ip.protocol()), (64, PROTO_UDP));
        assert_eq!(ip.checksum(), 0xb861);
        assert!(ip.checksum_ok());
        assert_eq!(ip.src(), 0xc0a8_0001);
        assert_eq!(ip.dst(), 0xc0a8_00c7);
        assert_eq!(ip.payload(), &[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(ip.header(), PACKET.first_chunk().unwrap());
        assert_eq!(
            ip.flow_hash(),
            flow_hash(0xc0a8_0001, 0xc0a8_00c7, PROTO_UDP, 0x1234_5678)
        );
        // Without the ports, or fragmented, or neither TCP nor UDP: no ports.
        let short = Ipv4::new_checked(&PACKET[..22]).unwrap();
        assert_eq!(
            short.flow_hash(),
            flow_hash(0xc0a8_0001, 0xc0a8_00c7, PROTO_UDP, 0)
        );
        let mut p = PACKET;
        p[6] = 0x20; // More Fragments
        let ip = Ipv4::new_checked(&p).unwrap();
        assert!(ip.more_fragments());
        assert_eq!(ip.flow_hash(), short.flow_hash());
        p[9] = PROTO_ICMP;
        p[6] = 0;
        let ip = Ipv4::new_checked(&p).unwrap();
        assert_eq!(
            ip.flow_hash(),
            flow_hash(0xc0a8_0001, 0xc0a8_00c7, PROTO_ICMP, 0)
        );
    }

    #[test]
    fn short_buffers_are_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(Ipv4::new_checked(&PACKET[..len]), Err(WireError::Truncated));
        }
    }

    #[test]
    fn the_payload_follows_the_header_length() {
        let mut p = PACKET;
        p[0] = 0x46; // 24 bytes: the 4 after the fixed header are options
        assert_eq!(Ipv4::new_checked(&p).unwrap().payload(), &[] as &[u8]);
        p[0] = 0x47; // past the end
        assert!(Ipv4::new_checked(&p).unwrap().payload().is_empty());
        p[0] = 0x44; // below 20 bytes
        let mut ip = Ipv4::new_checked(&mut p).unwrap();
        assert!(ip.payload().is_empty());
        assert!(ip.payload_mut().is_empty());
        p[0] = 0x45;
        assert_eq!(Ipv4::new_checked(&mut p).unwrap().payload_mut().len(), 4);
    }

    #[test]
    fn fields_written_read_back() {
        let mut b = [0xffu8; 24];
        let mut ip = Ipv4::new_checked(&mut b[..]).unwrap();
        ip.reset_header();
        assert!(ip.is_plain());
        assert_eq!((ip.total_len(), ip.ttl(), ip.src()), (0, 0, 0));
        ip.set_dscp_ecn(0xc0);
        ip.set_total_len(0x73);
        ip.set_flags_and_offset(DF);
        ip.set_ttl(64);
        ip.set_protocol(PROTO_UDP);
        ip.set_src(0xc0a8_0001);
        ip.set_dst(0xc0a8_00c7);
        ip.fill_checksum();
        assert_eq!(ip.dscp_ecn(), 0xc0);
        assert!(ip.checksum_ok());
        assert_eq!(checksum(ip.header()), 0);
        ip.set_dscp_ecn(0);
        ip.fill_checksum();
        assert_eq!(ip.checksum(), 0xb861);
        assert_eq!(ip.payload(), &[0xff; 4]);
        ip.payload_mut().fill(1);
        assert_eq!(b[20..], [1; 4]);
        // A template's sum, without the total length and checksum.
        let mut template = PACKET;
        let mut ip = Ipv4::new_checked(&mut template).unwrap();
        ip.set_total_len(0);
        ip.set_checksum(0);
        let sum = super::super::sum16(ip.header());
        assert_eq!(checksum_with_len(sum, 0x73), 0xb861);
    }

    #[test]
    fn the_checksum_covers_options() {
        let mut b = [0u8; 24];
        let mut ip = Ipv4::new_checked(&mut b[..]).unwrap();
        ip.reset_header();
        b[0] = 0x46;
        b[20] = 0x94; // router alert
        let mut ip = Ipv4::new_checked(&mut b[..]).unwrap();
        ip.fill_checksum();
        assert_eq!(checksum(&b), 0);
    }

    #[test]
    fn the_ttl_update_matches_rfc_1624_for_every_checksum() {
        let mut h = [0u8; HEADER_LEN];
        for check in 0..=u16::MAX {
            for ttl in [2u8, 64, 255] {
                let mut ip = Ipv4::new_checked(&mut h).unwrap();
                ip.set_ttl(ttl);
                ip.set_protocol(PROTO_UDP);
                ip.set_checksum(check);
                let old = u16::from_be_bytes([ttl, PROTO_UDP]);
                let want = checksum_update(check, old, old - 0x100);
                ip.decrement_ttl();
                assert_eq!(ip.ttl(), ttl - 1);
                assert_eq!(ip.checksum(), want, "checksum {check:#06x}, ttl {ttl}");
            }
        }
    }

    #[test]
    fn the_fast_check_agrees_with_the_checksum() {
        let mut h = *PACKET.first_chunk::<HEADER_LEN>().unwrap();
        let ok = |h: &[u8; HEADER_LEN]| Ipv4::new_checked(h).unwrap().checksum_ok();
        assert!(ok(&h));
        for i in 0..HEADER_LEN {
            h[i] ^= 0x10;
            assert_eq!(ok(&h), checksum(&h) == 0, "byte {i}");
            h[i] ^= 0x10;
        }
        let mut all_ones = [0xffu8; HEADER_LEN];
        all_ones[10] = 0;
        all_ones[11] = 0;
        assert_eq!(ok(&all_ones), checksum(&all_ones) == 0);
        for fill in [0u8, 0xff] {
            let h = [fill; HEADER_LEN];
            assert_eq!(ok(&h), checksum(&h) == 0, "{fill:#x}");
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..20_000 {
            let mut h = [0u8; HEADER_LEN];
            for b in h.iter_mut() {
                *b = next() as u8;
            }
            if round % 2 == 0 {
                // Half of them valid, some with a byte flipped afterwards.
                let mut ip = Ipv4::new_checked(&mut h).unwrap();
                ip.set_checksum(0);
                let c = checksum(ip.header());
                ip.set_checksum(c);
                if round % 4 == 0 {
                    h[(next() % 20) as usize] ^= 1 << (next() % 8);
                }
            }
            assert_eq!(ok(&h), checksum(&h) == 0, "{h:?}");
        }
    }
}
