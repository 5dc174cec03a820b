//! VXLAN headers ([`Vxlan`], RFC 7348).

/// VXLAN header length.
pub const HEADER_LEN: usize = 8;
/// The I flag: the VNI is valid.
pub const FLAG_I: u8 = 0x08;

header_view! {
    /// A view of a VXLAN header (flags, VNI) and the inner frame after it.
    Vxlan, HEADER_LEN, "8-byte header"
}

impl<T: AsRef<[u8]>> Vxlan<T> {
    /// The flags byte.
    #[inline(always)]
    pub fn flags(&self) -> u8 {
        self.header()[0]
    }

    /// Whether the I flag (a valid VNI) is set.
    #[inline(always)]
    pub fn has_vni(&self) -> bool {
        self.flags() & FLAG_I != 0
    }

    /// The VXLAN network identifier (24 bits).
    #[inline(always)]
    pub fn vni(&self) -> u32 {
        let h = self.header();
        u32::from_be_bytes([h[4], h[5], h[6], h[7]]) >> 8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Vxlan<T> {
    /// Sets the flags byte (the other reserved bytes stay as they are).
    #[inline(always)]
    pub fn set_flags(&mut self, flags: u8) {
        if let Some(h) = self.header_mut() {
            h[0] = flags;
        }
    }

    /// Sets the VNI (its low 24 bits) and zeroes the reserved byte after it.
    #[inline(always)]
    pub fn set_vni(&mut self, vni: u32) {
        if let Some(h) = self.header_mut() {
            h[4..].copy_from_slice(&(vni << 8).to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireError;

    #[test]
    fn fields_written_read_back() {
        let mut b = [0u8; 10];
        let mut vx = Vxlan::new_checked(&mut b).unwrap();
        assert!(!vx.has_vni());
        vx.set_flags(FLAG_I);
        vx.set_vni(0x12_3456);
        vx.payload_mut().copy_from_slice(&[7, 8]);
        assert_eq!(b, [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0, 7, 8]);
        let vx = Vxlan::new_checked(&b[..]).unwrap();
        assert_eq!((vx.flags(), vx.vni()), (FLAG_I, 0x12_3456));
        assert!(vx.has_vni());
        assert_eq!(vx.payload(), &[7, 8]);
    }

    #[test]
    fn short_buffers_are_refused() {
        let b = [0u8; HEADER_LEN];
        for len in 0..HEADER_LEN {
            assert_eq!(Vxlan::new_checked(&b[..len]), Err(WireError::Truncated));
        }
    }
}
