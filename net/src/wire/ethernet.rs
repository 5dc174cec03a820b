//! Ethernet II headers ([`Ethernet`]) and 802.1Q tags ([`Vlan`]), and [`write_header`], which
//! writes either.

use super::{head, head_mut, tail, Mac, WireError, ETHERTYPE_VLAN};

/// Ethernet header length without a VLAN tag.
pub const HEADER_LEN: usize = 14;
/// 802.1Q tag length (TCI and the inner EtherType).
pub const TAG_LEN: usize = 4;

header_view! {
    /// A view of an Ethernet II header (destination, source, EtherType) and what follows it.
    Ethernet, HEADER_LEN, "14-byte header"
}

impl<T: AsRef<[u8]>> Ethernet<T> {
    /// The destination MAC address.
    #[inline(always)]
    pub fn dst(&self) -> Mac {
        let h = self.header();
        [h[0], h[1], h[2], h[3], h[4], h[5]]
    }

    /// The source MAC address.
    #[inline(always)]
    pub fn src(&self) -> Mac {
        let h = self.header();
        [h[6], h[7], h[8], h[9], h[10], h[11]]
    }

    /// Whether the destination is a group address (multicast or broadcast): its I/G bit.
    #[inline(always)]
    pub fn is_group(&self) -> bool {
        self.header()[0] & 1 != 0
    }

    /// The EtherType (of the payload, or [`ETHERTYPE_VLAN`] before an 802.1Q tag).
    #[inline(always)]
    pub fn ethertype(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[12], h[13]])
    }

    /// The 12 address bytes as three big-endian words (for hashing).
    #[inline(always)]
    pub fn address_words(&self) -> [u32; 3] {
        let h = self.header();
        std::array::from_fn(|k| {
            u32::from_be_bytes([h[4 * k], h[4 * k + 1], h[4 * k + 2], h[4 * k + 3]])
        })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ethernet<T> {
    /// Sets the destination MAC address.
    #[inline(always)]
    pub fn set_dst(&mut self, mac: &Mac) {
        if let Some(h) = self.header_mut() {
            h[..6].copy_from_slice(mac);
        }
    }

    /// Sets the source MAC address.
    #[inline(always)]
    pub fn set_src(&mut self, mac: &Mac) {
        if let Some(h) = self.header_mut() {
            h[6..12].copy_from_slice(mac);
        }
    }

    /// Sets the EtherType.
    #[inline(always)]
    pub fn set_ethertype(&mut self, ethertype: u16) {
        if let Some(h) = self.header_mut() {
            h[12..14].copy_from_slice(&ethertype.to_be_bytes());
        }
    }

    /// Sets the EtherType of the payload: the tag's on a tagged frame, else the header's.
    #[inline]
    pub fn set_payload_ethertype(&mut self, ethertype: u16) {
        if self.ethertype() == ETHERTYPE_VLAN {
            if let Ok(mut tag) = Vlan::new_checked(self.payload_mut()) {
                tag.set_ethertype(ethertype);
            }
        } else {
            self.set_ethertype(ethertype);
        }
    }
}

/// A view of an 802.1Q tag as it follows an Ethernet header whose EtherType is
/// [`ETHERTYPE_VLAN`]: the tag control information and the payload's EtherType.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vlan<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Vlan<T> {
    /// A view of `buffer`, which must hold the 4-byte tag.
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < TAG_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Vlan { buffer })
    }

    #[inline(always)]
    fn tag(&self) -> &[u8; TAG_LEN] {
        head(self.buffer.as_ref())
    }

    /// The tag control information: priority, drop eligibility, VLAN ID.
    #[inline(always)]
    pub fn tci(&self) -> u16 {
        let t = self.tag();
        u16::from_be_bytes([t[0], t[1]])
    }

    /// The VLAN ID (the low 12 bits of the TCI).
    #[inline(always)]
    pub fn vid(&self) -> u16 {
        self.tci() & 0xfff
    }

    /// The payload's EtherType.
    #[inline(always)]
    pub fn ethertype(&self) -> u16 {
        let t = self.tag();
        u16::from_be_bytes([t[2], t[3]])
    }

    /// What follows the tag.
    #[inline(always)]
    pub fn payload(&self) -> &[u8] {
        tail(self.buffer.as_ref(), TAG_LEN)
    }

    /// The buffer.
    #[inline(always)]
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Vlan<T> {
    /// Sets the tag control information.
    #[inline(always)]
    pub fn set_tci(&mut self, tci: u16) {
        if let Some(t) = head_mut::<TAG_LEN>(self.buffer.as_mut()) {
            t[..2].copy_from_slice(&tci.to_be_bytes());
        }
    }

    /// Sets the payload's EtherType.
    #[inline(always)]
    pub fn set_ethertype(&mut self, ethertype: u16) {
        if let Some(t) = head_mut::<TAG_LEN>(self.buffer.as_mut()) {
            t[2..].copy_from_slice(&ethertype.to_be_bytes());
        }
    }
}

/// Writes an Ethernet header at the start of `buf`, tagged with `tci` when there is one, for a
/// payload of EtherType `ethertype`; returns its length (14, or 18 tagged).
pub fn write_header(
    buf: &mut [u8],
    dst: &Mac,
    src: &Mac,
    tci: Option<u16>,
    ethertype: u16,
) -> Result<usize, WireError> {
    let mut eth = Ethernet::new_checked(buf)?;
    eth.set_dst(dst);
    eth.set_src(src);
    let Some(tci) = tci else {
        eth.set_ethertype(ethertype);
        return Ok(HEADER_LEN);
    };
    let mut tag = Vlan::new_checked(eth.payload_mut())?;
    tag.set_tci(tci);
    tag.set_ethertype(ethertype);
    eth.set_ethertype(ETHERTYPE_VLAN);
    Ok(HEADER_LEN + TAG_LEN)
}

#[cfg(test)]
mod tests {
    use super::super::{ETHERTYPE_ARP, ETHERTYPE_IP4};
    use super::*;

    const FRAME: [u8; 20] = [
        0x02, 0, 0, 0, 0, 0x01, // dst
        0x02, 0, 0, 0, 0, 0x02, // src
        0x81, 0x00, // 802.1Q
        0x20, 0x64, // PCP 1, VID 100
        0x08, 0x06, // ARP
        0xaa, 0xbb,
    ];

    #[test]
    fn fields_of_a_tagged_frame() {
        let eth = Ethernet::new_checked(&FRAME[..]).unwrap();
        assert_eq!(eth.dst(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(eth.src(), [2, 0, 0, 0, 0, 2]);
        assert!(!eth.is_group());
        assert_eq!(eth.ethertype(), ETHERTYPE_VLAN);
        assert_eq!(eth.address_words(), [0x0200_0000, 0x0001_0200, 0x0000_0002]);
        let tag = Vlan::new_checked(eth.payload()).unwrap();
        assert_eq!(tag.tci(), 0x2064);
        assert_eq!(tag.vid(), 100);
        assert_eq!(tag.ethertype(), ETHERTYPE_ARP);
        assert_eq!(tag.payload(), &[0xaa, 0xbb]);
        let broadcast = [0xff; HEADER_LEN];
        assert!(Ethernet::new_checked(&broadcast).unwrap().is_group());
    }

    #[test]
    fn short_buffers_are_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Ethernet::new_checked(&FRAME[..len]),
                Err(WireError::Truncated)
            );
        }
        for len in 0..TAG_LEN {
            assert_eq!(Vlan::new_checked(&FRAME[..len]), Err(WireError::Truncated));
        }
        let eth = Ethernet::new_checked(&FRAME[..HEADER_LEN]).unwrap();
        assert!(eth.payload().is_empty());
    }

    #[test]
    fn headers_written_read_back() {
        let mut buf = [0u8; 18];
        let n = write_header(&mut buf, &[1; 6], &[2; 6], Some(0x0064), ETHERTYPE_IP4).unwrap();
        assert_eq!(n, 18);
        assert_eq!(buf[12..], [0x81, 0x00, 0x00, 0x64, 0x08, 0x00]);
        let mut eth = Ethernet::new_checked(&mut buf[..]).unwrap();
        eth.set_payload_ethertype(ETHERTYPE_ARP);
        assert_eq!(
            Vlan::new_checked(eth.payload()).unwrap().ethertype(),
            ETHERTYPE_ARP
        );
        let mut buf = [0u8; 14];
        assert_eq!(
            write_header(&mut buf, &[1; 6], &[2; 6], None, ETHERTYPE_IP4),
            Ok(14)
        );
        let mut eth = Ethernet::new_checked(&mut buf).unwrap();
        assert_eq!((eth.dst(), eth.src()), ([1; 6], [2; 6]));
        assert_eq!(eth.ethertype(), ETHERTYPE_IP4);
        eth.set_payload_ethertype(ETHERTYPE_ARP);
        assert_eq!(eth.ethertype(), ETHERTYPE_ARP);
        assert_eq!(
            write_header(&mut buf, &[1; 6], &[2; 6], Some(1), ETHERTYPE_IP4),
            Err(WireError::Truncated),
            "no room for the tag"
        );
        assert_eq!(
            write_header(&mut [0; 13], &[1; 6], &[2; 6], None, ETHERTYPE_IP4),
            Err(WireError::Truncated)
        );
    }
}
