//! ICMP for IPv6 ([`Icmp6`], RFC 4443): the messages Quiver answers (echo, neighbour
//! solicitations) and sends (packet too big, time exceeded, neighbour solicitations and
//! advertisements). The checksum covers an IPv6 pseudo-header ([`super::Ipv6::pseudo_header_sum`]).

use super::checksum::{fold, ones_sum};

/// The header every ICMPv6 message starts with: type, code, checksum.
pub const HEADER_LEN: usize = 4;
/// Destination unreachable.
pub const DEST_UNREACHABLE: u8 = 1;
/// Packet too big (RFC 4443 3.2, RFC 8201): the next hop's MTU in the 4 bytes after the header.
pub const PACKET_TOO_BIG: u8 = 2;
/// Time exceeded; code 0: the hop limit reached zero in transit.
pub const TIME_EXCEEDED: u8 = 3;
/// Parameter problem.
pub const PARAMETER_PROBLEM: u8 = 4;
/// Echo request.
pub const ECHO_REQUEST: u8 = 128;
/// Echo reply.
pub const ECHO_REPLY: u8 = 129;
/// Router solicitation (RFC 4861).
pub const ROUTER_SOLICITATION: u8 = 133;
/// Router advertisement (RFC 4861).
pub const ROUTER_ADVERTISEMENT: u8 = 134;
/// Neighbour solicitation (RFC 4861).
pub const NEIGHBOR_SOLICITATION: u8 = 135;
/// Neighbour advertisement (RFC 4861).
pub const NEIGHBOR_ADVERTISEMENT: u8 = 136;
/// Redirect (RFC 4861).
pub const REDIRECT: u8 = 137;
/// IPv6's next-header number for ICMPv6.
pub const PROTO_ICMP6: u8 = 58;

/// Whether an ICMPv6 message of type `t` is an error message (types below 128): no error is
/// ever sent about one (RFC 4443 2.4 (e)).
#[inline(always)]
pub fn is_error(t: u8) -> bool {
    t < 128
}

header_view! {
    /// A view of an ICMPv6 message: its 4-byte header and its body. The checksum covers the
    /// whole buffer and a pseudo-header the caller sums.
    Icmp6, HEADER_LEN, "4-byte header"
}

impl<T: AsRef<[u8]>> Icmp6<T> {
    /// The message type.
    #[inline(always)]
    pub fn msg_type(&self) -> u8 {
        self.header()[0]
    }

    /// The code.
    #[inline(always)]
    pub fn code(&self) -> u8 {
        self.header()[1]
    }

    /// Type and code as the one 16-bit word they share (for checksum updates).
    #[inline(always)]
    pub fn type_and_code(&self) -> u16 {
        u16::from_be_bytes([self.msg_type(), self.code()])
    }

    /// The checksum field.
    #[inline(always)]
    pub fn checksum(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[2], h[3]])
    }

    /// Whether the checksum verifies, given the pseudo-header's sum (`Ipv6::pseudo_header_sum`
    /// for this message's length).
    #[inline]
    pub fn checksum_ok(&self, pseudo: u64) -> bool {
        fold(ones_sum(self.buffer.as_ref()) + pseudo) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmp6<T> {
    /// Sets the type.
    #[inline(always)]
    pub fn set_msg_type(&mut self, t: u8) {
        if let Some(h) = self.header_mut() {
            h[0] = t;
        }
    }

    /// Sets the code.
    #[inline(always)]
    pub fn set_code(&mut self, c: u8) {
        if let Some(h) = self.header_mut() {
            h[1] = c;
        }
    }

    /// Sets the checksum field.
    #[inline(always)]
    pub fn set_checksum(&mut self, c: u16) {
        if let Some(h) = self.header_mut() {
            h[2..4].copy_from_slice(&c.to_be_bytes());
        }
    }

    /// Computes the checksum over the whole buffer and the pseudo-header whose sum is
    /// `pseudo`, and writes it.
    #[inline]
    pub fn fill_checksum(&mut self, pseudo: u64) {
        self.set_checksum(0);
        let c = !fold(ones_sum(self.buffer.as_ref()) + pseudo);
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Ipv6;

    /// An echo request from fe80::1 to fe80::2, id 1, seq 1, "abcd", as scapy builds it
    /// (`IPv6(src="fe80::1", dst="fe80::2")/ICMPv6EchoRequest(id=1, seq=1, data=b"abcd")`).
    const ECHO: [u8; 52] = [
        0x60, 0, 0, 0, 0, 12, 58, 64, //
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, //
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, //
        0x80, 0, 0xbd, 0xeb, 0, 1, 0, 1, b'a', b'b', b'c', b'd',
    ];

    #[test]
    fn a_known_echo_request_verifies_and_its_checksum_is_recomputed_exactly() {
        let mut p = ECHO;
        let ip = Ipv6::new_checked(&p[..]).unwrap();
        let pseudo = ip.pseudo_header_sum(PROTO_ICMP6, 12);
        let icmp = Icmp6::new_checked(&p[40..]).unwrap();
        assert_eq!(icmp.msg_type(), ECHO_REQUEST);
        assert!(icmp.checksum_ok(pseudo));
        let mut icmp = Icmp6::new_checked(&mut p[40..]).unwrap();
        icmp.fill_checksum(pseudo);
        assert_eq!(p, ECHO, "the same checksum");
        p[44] ^= 1;
        let icmp = Icmp6::new_checked(&p[40..]).unwrap();
        assert!(!icmp.checksum_ok(pseudo), "a flipped bit fails");
        assert!(is_error(PACKET_TOO_BIG) && !is_error(ECHO_REQUEST));
    }
}
