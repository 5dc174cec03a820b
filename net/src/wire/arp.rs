//! ARP packets for IPv4 over Ethernet ([`Arp`], RFC 826).

use super::{head, head_mut, Mac, WireError, ETHERTYPE_IP4};

/// The length of an IPv4-over-Ethernet ARP packet.
pub const LEN: usize = 28;
/// Operation: request.
pub const REQUEST: u16 = 1;
/// Operation: reply.
pub const REPLY: u16 = 2;

/// Hardware type Ethernet, protocol type IPv4, their address lengths 6 and 4: the format
/// fields of the only ARP packets Quiver reads.
const FORMAT: [u8; 6] = [0, 1, 0x08, 0x00, 6, 4];
const _: () = assert!(u16::from_be_bytes([FORMAT[2], FORMAT[3]]) == ETHERTYPE_IP4);

/// A view of an IPv4-over-Ethernet ARP packet: 28 bytes whose format fields say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arp<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Arp<T> {
    /// A view of `buffer`, which must hold an ARP packet for IPv4 over Ethernet (`Unsupported`
    /// for any other hardware or protocol).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let Some(p) = buffer.as_ref().first_chunk::<LEN>() else {
            return Err(WireError::Truncated);
        };
        if p[..6] != FORMAT {
            return Err(WireError::Unsupported);
        }
        Ok(Arp { buffer })
    }

    #[inline(always)]
    fn packet(&self) -> &[u8; LEN] {
        head(self.buffer.as_ref())
    }

    /// The operation ([`REQUEST`], [`REPLY`]).
    #[inline]
    pub fn op(&self) -> u16 {
        let p = self.packet();
        u16::from_be_bytes([p[6], p[7]])
    }

    /// The sender's MAC address.
    #[inline]
    pub fn sender_mac(&self) -> Mac {
        let p = self.packet();
        [p[8], p[9], p[10], p[11], p[12], p[13]]
    }

    /// The sender's IPv4 address.
    #[inline]
    pub fn sender_ip(&self) -> u32 {
        let p = self.packet();
        u32::from_be_bytes([p[14], p[15], p[16], p[17]])
    }

    /// The target's MAC address (zero in a request).
    #[inline]
    pub fn target_mac(&self) -> Mac {
        let p = self.packet();
        [p[18], p[19], p[20], p[21], p[22], p[23]]
    }

    /// The target's IPv4 address.
    #[inline]
    pub fn target_ip(&self) -> u32 {
        let p = self.packet();
        u32::from_be_bytes([p[24], p[25], p[26], p[27]])
    }

    /// The buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Arp<T> {
    /// A view of `buffer`, which must hold 28 bytes, made an IPv4-over-Ethernet ARP packet:
    /// its format fields are written, the others left for the setters.
    pub fn init(mut buffer: T) -> Result<Self, WireError> {
        let Some(p) = head_mut::<LEN>(buffer.as_mut()) else {
            return Err(WireError::Truncated);
        };
        p[..6].copy_from_slice(&FORMAT);
        Ok(Arp { buffer })
    }

    #[inline(always)]
    fn packet_mut(&mut self) -> Option<&mut [u8; LEN]> {
        head_mut(self.buffer.as_mut())
    }

    /// Sets the operation.
    pub fn set_op(&mut self, op: u16) {
        if let Some(p) = self.packet_mut() {
            p[6..8].copy_from_slice(&op.to_be_bytes());
        }
    }

    /// Sets the sender's MAC address.
    pub fn set_sender_mac(&mut self, mac: &Mac) {
        if let Some(p) = self.packet_mut() {
            p[8..14].copy_from_slice(mac);
        }
    }

    /// Sets the sender's IPv4 address.
    pub fn set_sender_ip(&mut self, ip: u32) {
        if let Some(p) = self.packet_mut() {
            p[14..18].copy_from_slice(&ip.to_be_bytes());
        }
    }

    /// Sets the target's MAC address.
    pub fn set_target_mac(&mut self, mac: &Mac) {
        if let Some(p) = self.packet_mut() {
            p[18..24].copy_from_slice(mac);
        }
    }

    /// Sets the target's IPv4 address.
    pub fn set_target_ip(&mut self, ip: u32) {
        if let Some(p) = self.packet_mut() {
            p[24..28].copy_from_slice(&ip.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request from 10.0.0.1 (02:00:00:00:00:01) for 10.0.0.2.
    const REQUEST_PACKET: [u8; LEN] = [
        0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
    ];

    #[test]
    fn fields_of_a_known_request() {
        let arp = Arp::new_checked(&REQUEST_PACKET[..]).unwrap();
        assert_eq!(arp.op(), REQUEST);
        assert_eq!(arp.sender_mac(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(arp.sender_ip(), 0x0a00_0001);
        assert_eq!(arp.target_mac(), [0; 6]);
        assert_eq!(arp.target_ip(), 0x0a00_0002);
    }

    #[test]
    fn short_or_foreign_packets_are_refused() {
        for len in 0..LEN {
            assert_eq!(
                Arp::new_checked(&REQUEST_PACKET[..len]),
                Err(WireError::Truncated)
            );
        }
        for i in 0..6 {
            let mut p = REQUEST_PACKET;
            p[i] ^= 0x40;
            assert_eq!(
                Arp::new_checked(&p),
                Err(WireError::Unsupported),
                "byte {i}"
            );
        }
        assert_eq!(Arp::init(&mut [0u8; LEN - 1]), Err(WireError::Truncated));
    }

    #[test]
    fn a_packet_written_reads_back() {
        let mut b = [0xeeu8; LEN + 2];
        let mut arp = Arp::init(&mut b[..]).unwrap();
        arp.set_op(REQUEST);
        arp.set_sender_mac(&[2, 0, 0, 0, 0, 1]);
        arp.set_sender_ip(0x0a00_0001);
        arp.set_target_mac(&[0; 6]);
        arp.set_target_ip(0x0a00_0002);
        assert_eq!(b[..LEN], REQUEST_PACKET);
        assert_eq!(b[LEN..], [0xee; 2]);
        let mut arp = Arp::new_checked(&mut b).unwrap();
        arp.set_op(REPLY);
        assert_eq!(arp.op(), REPLY);
    }
}
