//! ICMP for IPv4 ([`Icmp4`]): the messages Quiver answers (echo) and sends (destination
//! unreachable, fragmentation needed).

use super::checksum;

/// ICMP header length: type, code, checksum and the 4 bytes whose meaning the type gives.
pub const HEADER_LEN: usize = 8;
/// Type echo reply.
pub const ECHO_REPLY: u8 = 0;
/// Type destination unreachable.
pub const DEST_UNREACHABLE: u8 = 3;
/// Type echo request.
pub const ECHO_REQUEST: u8 = 8;
/// Code of [`DEST_UNREACHABLE`]: fragmentation needed and Don't Fragment set (RFC 1191).
pub const FRAG_NEEDED: u8 = 4;

header_view! {
    /// A view of an ICMP message: its 8-byte header and the data after it. The checksum covers
    /// the whole buffer.
    Icmp4, HEADER_LEN, "8-byte header"
}

impl<T: AsRef<[u8]>> Icmp4<T> {
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

    /// The checksum.
    #[inline(always)]
    pub fn checksum(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[2], h[3]])
    }

    /// Whether the checksum over the whole message verifies.
    #[inline]
    pub fn checksum_ok(&self) -> bool {
        checksum(self.buffer.as_ref()) == 0
    }

    /// The next hop's MTU of a "fragmentation needed" message (its last 2 header bytes).
    #[inline(always)]
    pub fn next_hop_mtu(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[6], h[7]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmp4<T> {
    /// Sets the message type.
    #[inline(always)]
    pub fn set_msg_type(&mut self, t: u8) {
        if let Some(h) = self.header_mut() {
            h[0] = t;
        }
    }

    /// Sets the code.
    #[inline(always)]
    pub fn set_code(&mut self, code: u8) {
        if let Some(h) = self.header_mut() {
            h[1] = code;
        }
    }

    /// Sets the checksum.
    #[inline(always)]
    pub fn set_checksum(&mut self, c: u16) {
        if let Some(h) = self.header_mut() {
            h[2..4].copy_from_slice(&c.to_be_bytes());
        }
    }

    /// Sets the 4 bytes after the checksum (an echo's identifier and sequence number, an
    /// error's unused bytes and MTU).
    #[inline(always)]
    pub fn set_rest_of_header(&mut self, v: u32) {
        if let Some(h) = self.header_mut() {
            h[4..].copy_from_slice(&v.to_be_bytes());
        }
    }

    /// Sets the next hop's MTU of a "fragmentation needed" message.
    #[inline(always)]
    pub fn set_next_hop_mtu(&mut self, mtu: u16) {
        if let Some(h) = self.header_mut() {
            h[6..].copy_from_slice(&mtu.to_be_bytes());
        }
    }

    /// Computes and sets the checksum over the whole message.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireError;

    #[test]
    fn an_echo_request_read_and_turned_into_a_reply() {
        let mut b = [ECHO_REQUEST, 0, 0, 0, 0x12, 0x34, 0, 1, b'h', b'i'];
        let mut icmp = Icmp4::new_checked(&mut b[..]).unwrap();
        icmp.fill_checksum();
        assert!(icmp.checksum_ok());
        assert_eq!(checksum(&b), 0);
        let icmp = Icmp4::new_checked(&b[..]).unwrap();
        assert_eq!((icmp.msg_type(), icmp.code()), (ECHO_REQUEST, 0));
        assert_eq!(icmp.type_and_code(), 0x0800);
        assert_eq!(icmp.payload(), b"hi");
        let mut icmp = Icmp4::new_checked(&mut b[..]).unwrap();
        icmp.set_msg_type(ECHO_REPLY);
        assert!(!icmp.checksum_ok());
        icmp.fill_checksum();
        assert!(icmp.checksum_ok());
    }

    #[test]
    fn a_fragmentation_needed_message() {
        let mut b = [0xffu8; HEADER_LEN];
        let mut icmp = Icmp4::new_checked(&mut b).unwrap();
        icmp.set_msg_type(DEST_UNREACHABLE);
        icmp.set_code(FRAG_NEEDED);
        icmp.set_rest_of_header(0);
        icmp.set_next_hop_mtu(1400);
        icmp.fill_checksum();
        assert_eq!(icmp.next_hop_mtu(), 1400);
        assert_eq!(b[..2], [3, 4]);
        assert_eq!(b[4..], [0, 0, 0x05, 0x78]);
        assert_eq!(checksum(&b), 0);
    }

    #[test]
    fn short_buffers_are_refused() {
        let b = [0u8; HEADER_LEN];
        for len in 0..HEADER_LEN {
            assert_eq!(Icmp4::new_checked(&b[..len]), Err(WireError::Truncated));
        }
    }
}
