//! UDP headers ([`Udp`]).

/// UDP header length.
pub const HEADER_LEN: usize = 8;

header_view! {
    /// A view of a UDP header and what follows it. The buffer holds the 8-byte header; the length
    /// field is for the caller to check against the bytes it has.
    Udp, HEADER_LEN, "8-byte header"
}

impl<T: AsRef<[u8]>> Udp<T> {
    /// The source port.
    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[0], h[1]])
    }

    /// The destination port.
    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[2], h[3]])
    }

    /// The length field: header and payload.
    #[inline(always)]
    pub fn len(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[4], h[5]])
    }

    /// Whether the length field is zero (never so in a valid datagram).
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The checksum (0: none).
    #[inline(always)]
    pub fn checksum(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[6], h[7]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Udp<T> {
    /// Sets the source port.
    #[inline(always)]
    pub fn set_src_port(&mut self, port: u16) {
        if let Some(h) = self.header_mut() {
            h[..2].copy_from_slice(&port.to_be_bytes());
        }
    }

    /// Sets the destination port.
    #[inline(always)]
    pub fn set_dst_port(&mut self, port: u16) {
        if let Some(h) = self.header_mut() {
            h[2..4].copy_from_slice(&port.to_be_bytes());
        }
    }

    /// Sets the length field.
    #[inline(always)]
    pub fn set_len(&mut self, len: u16) {
        if let Some(h) = self.header_mut() {
            h[4..6].copy_from_slice(&len.to_be_bytes());
        }
    }

    /// Sets the checksum (0: none).
    #[inline(always)]
    pub fn set_checksum(&mut self, c: u16) {
        if let Some(h) = self.header_mut() {
            h[6..].copy_from_slice(&c.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireError;

    const DATAGRAM: [u8; 10] = [0xc0, 0x01, 0x12, 0xb5, 0x00, 0x0a, 0xab, 0xcd, 0x01, 0x02];

    #[test]
    fn fields_of_a_known_header() {
        let udp = Udp::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!((udp.src_port(), udp.dst_port()), (0xc001, 4789));
        assert_eq!(udp.len(), 10);
        assert!(!udp.is_empty());
        assert_eq!(udp.checksum(), 0xabcd);
        assert_eq!(udp.payload(), &[1, 2]);
    }

    #[test]
    fn short_buffers_are_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Udp::new_checked(&DATAGRAM[..len]),
                Err(WireError::Truncated)
            );
        }
        assert!(Udp::new_checked(&DATAGRAM[..8])
            .unwrap()
            .payload()
            .is_empty());
    }

    #[test]
    fn fields_written_read_back() {
        let mut b = [0u8; 10];
        let mut udp = Udp::new_checked(&mut b).unwrap();
        udp.set_src_port(0xc001);
        udp.set_dst_port(4789);
        udp.set_len(10);
        udp.set_checksum(0xabcd);
        udp.payload_mut().copy_from_slice(&[1, 2]);
        assert_eq!(b, DATAGRAM);
    }
}
