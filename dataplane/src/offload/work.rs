//! The work a kernel left on a frame, as kept in its metadata ([`Offload`]), and its virtio-net
//! header form. Plain values: doing the work is [`super`]'s.

/// Bytes of `struct virtio_net_hdr` (without `num_buffers`).
pub const VIRTIO_NET_HDR_LEN: usize = 10;

/// The virtio-net header's constants (linux/virtio_net.h).
pub mod virtio {
    /// `flags`: the checksum from `csum_start` to the end is still to be filled in.
    pub const F_NEEDS_CSUM: u8 = 1;
    /// `flags`: the checksum was verified.
    pub const F_DATA_VALID: u8 = 2;
    /// `gso_type`: not a GSO frame.
    pub const GSO_NONE: u8 = 0;
    /// `gso_type`: TCP over IPv4.
    pub const GSO_TCPV4: u8 = 1;
    /// `gso_type`: UDP fragmentation offload (IPv4 fragments; not accepted).
    pub const GSO_UDP: u8 = 3;
    /// `gso_type`: TCP over IPv6.
    pub const GSO_TCPV6: u8 = 4;
    /// `gso_type`: UDP segmentation (one datagram per segment).
    pub const GSO_UDP_L4: u8 = 5;
    /// `gso_type` bit: the TCP sender uses ECN (CWR on the first segment only).
    pub const GSO_ECN: u8 = 0x80;
}

/// What kind of super-frame a packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Gso {
    /// Not a super-frame.
    #[default]
    None = 0,
    /// TCP over IPv4.
    Tcp4 = 1,
    /// TCP over IPv6.
    Tcp6 = 2,
    /// UDP (segmentation: each segment its own datagram) over IPv4 or IPv6.
    Udp = 3,
}

/// Work left on a packet (see [`crate::offload`]): 8 bytes of
/// [`BufferMeta`](crate::buffer::BufferMeta).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Offload {
    /// Where checksumming starts (the L4 header), when [`Offload::NEEDS_CSUM`] is set.
    pub csum_start: u16,
    /// Where the checksum goes, from `csum_start`.
    pub csum_offset: u16,
    /// Payload bytes per segment of a super-frame.
    pub gso_size: u16,
    /// The kind of super-frame.
    pub gso: Gso,
    /// [`Offload::NEEDS_CSUM`], [`Offload::ECN`].
    pub bits: u8,
}

const _: () = assert!(std::mem::size_of::<Offload>() == 8);

/// A virtio-net header that does not fit its frame (or asks for what is not supported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadOffload {
    /// A `gso_type` other than TCPv4, TCPv6 and UDP_L4.
    UnknownGso,
    /// `csum_start` / `csum_offset` point outside the frame, or not where the L4 header's
    /// checksum is.
    Checksum,
    /// `gso_size` zero, `hdr_len` beyond the frame, or headers that disagree with the frame
    /// (not IPv4/IPv6 + TCP/UDP as the type says, lengths that do not add up).
    Segmentation,
    /// More segments than the caller has room for.
    TooManySegments,
    /// The pool ran out of buffers.
    NoBuffer,
}

impl Offload {
    /// The checksum is still to be filled in.
    pub const NEEDS_CSUM: u8 = 1;
    /// TCP ECN: CWR stays on the first segment only.
    pub const ECN: u8 = 2;

    /// Whether the checksum is still to be filled in.
    #[inline]
    pub fn needs_csum(&self) -> bool {
        self.bits & Self::NEEDS_CSUM != 0
    }

    /// Reads a virtio-net header (little-endian fields) for a frame of `frame_len` bytes:
    /// `Ok(None)` when nothing is left to do, the work otherwise, or why the header does not
    /// fit the frame. Only bounds are checked here; [`segment`](super::segment) checks the headers
    /// themselves.
    #[inline]
    pub fn from_virtio(
        h: &[u8; VIRTIO_NET_HDR_LEN],
        frame_len: usize,
    ) -> Result<Option<Offload>, BadOffload> {
        let needs = h[0] & virtio::F_NEEDS_CSUM != 0;
        if !needs && h[1] == virtio::GSO_NONE {
            return Ok(None);
        }
        Self::decode(h, frame_len, needs).map(Some)
    }

    #[inline(never)]
    fn decode(
        h: &[u8; VIRTIO_NET_HDR_LEN],
        len: usize,
        needs: bool,
    ) -> Result<Offload, BadOffload> {
        let field = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        let (hdr_len, gso_size, csum_start, csum_offset) = (field(2), field(4), field(6), field(8));
        let gso = match h[1] & !virtio::GSO_ECN {
            virtio::GSO_NONE => Gso::None,
            virtio::GSO_TCPV4 => Gso::Tcp4,
            virtio::GSO_TCPV6 => Gso::Tcp6,
            virtio::GSO_UDP_L4 => Gso::Udp,
            _ => return Err(BadOffload::UnknownGso),
        };
        let mut o = Offload {
            csum_start: 0,
            csum_offset: 0,
            gso_size: 0,
            gso,
            bits: 0,
        };
        if needs {
            // At least an Ethernet and a minimal IP header before the L4 header.
            if csum_start < 34 || csum_start as usize + csum_offset as usize + 2 > len {
                return Err(BadOffload::Checksum);
            }
            o.csum_start = csum_start;
            o.csum_offset = csum_offset;
            o.bits |= Self::NEEDS_CSUM;
        }
        if gso != Gso::None {
            let want_offset = if gso == Gso::Udp { 6 } else { 16 };
            if needs && csum_offset != want_offset {
                return Err(BadOffload::Checksum);
            }
            if gso_size == 0 || hdr_len as usize > len {
                return Err(BadOffload::Segmentation);
            }
            o.gso_size = gso_size;
            if h[1] & virtio::GSO_ECN != 0 {
                o.bits |= Self::ECN;
            }
        }
        Ok(o)
    }

    /// The same work for the frame with `n` bytes inserted before its L3 header (a VLAN tag
    /// put back); `None` when the offsets would overflow.
    pub fn shifted(self, n: u16) -> Option<Offload> {
        if !self.needs_csum() {
            return Some(self);
        }
        Some(Offload {
            csum_start: self.csum_start.checked_add(n)?,
            ..self
        })
    }

    /// The virtio-net header that hands this work to the kernel with the frame whose first
    /// bytes are `head` (`hdr_len`, the headers' length, is read from the L4 header when a
    /// super-frame's is there).
    pub fn to_virtio(&self, head: &[u8]) -> [u8; VIRTIO_NET_HDR_LEN] {
        let mut h = [0u8; VIRTIO_NET_HDR_LEN];
        let start = self.csum_start as usize;
        let mut hdr_len = if self.needs_csum() {
            h[0] = virtio::F_NEEDS_CSUM;
            start + self.csum_offset as usize + 2
        } else {
            0
        };
        h[1] = match self.gso {
            Gso::None => virtio::GSO_NONE,
            Gso::Tcp4 => virtio::GSO_TCPV4,
            Gso::Tcp6 => virtio::GSO_TCPV6,
            Gso::Udp => virtio::GSO_UDP_L4,
        };
        if self.gso != Gso::None {
            if self.bits & Self::ECN != 0 {
                h[1] |= virtio::GSO_ECN;
            }
            hdr_len = match (self.gso, head.get(start + 12)) {
                (Gso::Udp, _) if self.needs_csum() => start + 8,
                (Gso::Tcp4 | Gso::Tcp6, Some(&doff)) if self.needs_csum() => {
                    start + (doff >> 4) as usize * 4
                }
                _ => hdr_len,
            };
        }
        h[2..4].copy_from_slice(&(hdr_len.min(u16::MAX as usize) as u16).to_le_bytes());
        h[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        h[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        h[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        h
    }
}
