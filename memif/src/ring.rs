//! The ring layout in shared memory and its accessors.
//!
//! Header: cookie u32 @0, flags u16 @4 (bit 0 = MASK_INT), head u16 @6, tail u16 @64; descriptors
//! from @128, 16 bytes each. The slave always writes `head`, the master always writes `tail`.

use std::sync::atomic::{AtomicU16, Ordering};

use crate::region::Region;

/// Largest frame reassembled from a descriptor chain.
pub const MAX_FRAME: usize = 65536;

/// Which end of the connection an interface is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Listens; maps the slave's regions; writes ring tails.
    Master,
    /// Connects; owns the shared memory; writes ring heads.
    Slave,
}

/// The ring cookie.
pub const COOKIE: u32 = 0x3E31F20;
/// Ring flag: the consumer does not want interrupts.
pub const RING_FLAG_MASK_INT: u16 = 1;
/// Descriptor flag: the packet continues in the next slot.
pub const DESC_FLAG_NEXT: u16 = 1;
/// Size of the ring header.
pub const HEADER_SIZE: u64 = 128;
/// Size of one descriptor.
pub const DESC_SIZE: u64 = 16;
/// How far ahead of the descriptor in use a burst prefetches the ring: four cache lines.
pub const DESC_PREFETCH_AHEAD: u16 = 16;
/// Largest log2 ring size accepted.
pub const MAX_LOG2_RING_SIZE: u8 = 14;

const OFF_COOKIE: u64 = 0;
const OFF_FLAGS: u64 = 4;
const OFF_HEAD: u64 = 6;
const OFF_TAIL: u64 = 64;

/// Bytes taken by a ring of `2^log2` descriptors.
pub fn ring_stride(log2: u8) -> u64 {
    HEADER_SIZE + DESC_SIZE * (1u64 << log2)
}

/// A private copy of one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Desc {
    /// Flags (bit 0 = NEXT).
    pub flags: u16,
    /// Region index.
    pub region: u16,
    /// Data length.
    pub length: u32,
    /// Offset from the region base.
    pub offset: u32,
    /// Metadata (unused).
    pub metadata: u32,
}

impl Desc {
    fn from_bytes(b: [u8; 16]) -> Desc {
        Desc {
            flags: u16::from_ne_bytes([b[0], b[1]]),
            region: u16::from_ne_bytes([b[2], b[3]]),
            length: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
            offset: u32::from_ne_bytes([b[8], b[9], b[10], b[11]]),
            metadata: u32::from_ne_bytes([b[12], b[13], b[14], b[15]]),
        }
    }

    /// A descriptor from its two native-endian 8-byte words.
    #[inline]
    fn from_words(lo: u64, hi: u64) -> Desc {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&lo.to_ne_bytes());
        b[8..].copy_from_slice(&hi.to_ne_bytes());
        Desc::from_bytes(b)
    }

    /// The descriptor's two native-endian 8-byte words.
    #[inline]
    fn to_words(self) -> (u64, u64) {
        let b = self.to_bytes();
        let (lo, hi) = b.split_at(8);
        (
            u64::from_ne_bytes(lo.try_into().unwrap_or_default()),
            u64::from_ne_bytes(hi.try_into().unwrap_or_default()),
        )
    }

    fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..2].copy_from_slice(&self.flags.to_ne_bytes());
        b[2..4].copy_from_slice(&self.region.to_ne_bytes());
        b[4..8].copy_from_slice(&self.length.to_ne_bytes());
        b[8..12].copy_from_slice(&self.offset.to_ne_bytes());
        b[12..16].copy_from_slice(&self.metadata.to_ne_bytes());
        b
    }
}

/// Where a ring lives: its offset in its region and its size. Every accessor takes the region;
/// [`Ring::new`] checks once that the whole ring fits in it.
#[derive(Debug, Clone, Copy)]
pub struct Ring {
    offset: u64,
    log2: u8,
}

/// A validated ring together with the region that holds it.
#[derive(Debug, Clone, Copy)]
pub struct RingRef<'a> {
    region: &'a Region,
    ring: Ring,
    /// Whether the whole ring lies in `region` (checked once by [`Ring::at`]): descriptor
    /// accesses then need no check of their own.
    fits: bool,
}

impl Ring {
    /// Describe a ring at `offset` of `region`; `None` if it does not fit, is misaligned, or
    /// `log2` is larger than [`MAX_LOG2_RING_SIZE`].
    pub fn new(region: &Region, offset: u64, log2: u8) -> Option<Ring> {
        if log2 > MAX_LOG2_RING_SIZE || !offset.is_multiple_of(16) {
            return None;
        }
        if !region.contains(offset, ring_stride(log2)) {
            return None;
        }
        Some(Ring { offset, log2 })
    }

    /// Number of descriptors.
    pub fn size(&self) -> u16 {
        // log2 ≤ 14, so this fits.
        (1u32 << self.log2) as u16
    }

    /// log2 of the number of descriptors.
    pub fn log2(&self) -> u8 {
        self.log2
    }

    /// Offset of the ring header in its region.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bind to the region holding the ring (must be the one passed to [`Ring::new`]).
    pub fn at<'a>(&self, region: &'a Region) -> RingRef<'a> {
        RingRef {
            region,
            ring: *self,
            fits: region.contains(self.offset, ring_stride(self.log2)),
        }
    }
}

// Every accessor below stays inside the range checked by `Ring::new`; should the region passed to
// `at` be a different (smaller) one, the region's own checks return a harmless default instead.
static DUMMY: AtomicU16 = AtomicU16::new(0);

impl RingRef<'_> {
    fn u16_at(&self, off: u64) -> &AtomicU16 {
        self.region
            .atomic_u16(self.ring.offset + off)
            .unwrap_or(&DUMMY)
    }

    /// The ring's descriptor count.
    pub fn size(&self) -> u16 {
        self.ring.size()
    }

    /// Read the cookie.
    pub fn cookie(&self) -> u32 {
        self.region
            .atomic_u32(self.ring.offset + OFF_COOKIE)
            .map(|c| c.load(Ordering::Acquire))
            .unwrap_or(0)
    }

    /// Initialise the header (slave side, before the peer sees the ring).
    pub fn init(&self) {
        if let Some(c) = self.region.atomic_u32(self.ring.offset + OFF_COOKIE) {
            c.store(COOKIE, Ordering::Relaxed);
        }
        self.flags().store(0, Ordering::Relaxed);
        self.head().store(0, Ordering::Relaxed);
        self.tail().store(0, Ordering::Release);
    }

    /// The flags word (bit 0 = MASK_INT, written by the consumer).
    pub fn flags(&self) -> &AtomicU16 {
        self.u16_at(OFF_FLAGS)
    }

    /// The head index (written only by the slave).
    pub fn head(&self) -> &AtomicU16 {
        self.u16_at(OFF_HEAD)
    }

    /// The tail index (written only by the master).
    pub fn tail(&self) -> &AtomicU16 {
        self.u16_at(OFF_TAIL)
    }

    fn desc_off(&self, idx: u16) -> u64 {
        let slot = u64::from(idx & (self.ring.size() - 1));
        self.ring.offset + HEADER_SIZE + slot * DESC_SIZE
    }

    /// Volatile copy of the descriptor for free-running index `idx`: two 8-byte loads
    /// (descriptors are 16-aligned: [`Ring::new`] checks the ring's offset).
    #[inline]
    pub fn read_desc(&self, idx: u16) -> Desc {
        let off = self.desc_off(idx);
        if self.fits {
            // SAFETY: the descriptor lies inside the ring, which lies inside the region
            // (`fits`), and is 16-aligned (`Ring::new` checks the ring's offset).
            let (lo, hi) = unsafe {
                (
                    self.region.read_u64_unchecked(off),
                    self.region.read_u64_unchecked(off + 8),
                )
            };
            return Desc::from_words(lo, hi);
        }
        Desc::default()
    }

    /// Hints the CPU to fetch the descriptor [`DESC_PREFETCH_AHEAD`] places after free-running
    /// index `idx` (its cache line holds four, last written by the peer's core), so that a
    /// burst walking the ring from `idx` does not wait for them.
    #[inline(always)]
    pub fn prefetch_desc_ahead(&self, idx: u16) {
        self.region
            .prefetch(self.desc_off(idx.wrapping_add(DESC_PREFETCH_AHEAD)));
    }

    /// Volatile write of a whole descriptor (two 8-byte stores).
    #[inline]
    pub fn write_desc(&self, idx: u16, d: Desc) {
        let (lo, hi) = d.to_words();
        self.write_words(idx, Some(lo), Some(hi));
    }

    /// Volatile write of the first half of a descriptor: flags, region and length (the
    /// master's M2S update, with `region` as the slave wrote it); one 8-byte store.
    #[inline]
    pub fn write_flags_len(&self, idx: u16, flags: u16, region: u16, length: u32) {
        let (lo, _) = Desc {
            flags,
            region,
            length,
            ..Desc::default()
        }
        .to_words();
        self.write_words(idx, Some(lo), None);
    }

    #[inline]
    fn write_words(&self, idx: u16, lo: Option<u64>, hi: Option<u64>) {
        if !self.fits {
            return;
        }
        let off = self.desc_off(idx);
        // SAFETY: as in `read_desc`: inside the region and 16-aligned; the region is our
        // writable mapping.
        unsafe {
            if let Some(lo) = lo {
                self.region.write_u64_unchecked(off, lo);
            }
            if let Some(hi) = hi {
                self.region.write_u64_unchecked(off + 8, hi);
            }
        }
    }

    /// Whether the consumer has masked interrupts.
    pub fn interrupts_masked(&self) -> bool {
        self.flags().load(Ordering::SeqCst) & RING_FLAG_MASK_INT != 0
    }

    /// Set or clear MASK_INT (done by the ring's consumer).
    pub fn set_mask_int(&self, masked: bool) {
        if masked {
            self.flags().fetch_or(RING_FLAG_MASK_INT, Ordering::SeqCst);
        } else {
            self.flags()
                .fetch_and(!RING_FLAG_MASK_INT, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let r = Region::create("ring", 4096).unwrap();
        assert!(Ring::new(&r, 0, 15).is_none());
        assert!(Ring::new(&r, 8, 4).is_none());
        assert!(Ring::new(&r, 4096 - 128, 4).is_none());
        let ring = Ring::new(&r, 256, 4).unwrap();
        let rr = ring.at(&r);
        rr.init();
        rr.head().store(0x1234, Ordering::Release);
        rr.tail().store(0x5678, Ordering::Release);
        rr.set_mask_int(true);
        rr.write_desc(
            17,
            Desc {
                flags: 1,
                region: 2,
                length: 3,
                offset: 4,
                metadata: 5,
            },
        );
        assert_eq!(r.read_bytes::<4>(256).unwrap(), COOKIE.to_ne_bytes());
        assert_eq!(r.read_bytes::<2>(260).unwrap(), 1u16.to_ne_bytes());
        assert_eq!(r.read_bytes::<2>(262).unwrap(), 0x1234u16.to_ne_bytes());
        assert_eq!(
            r.read_bytes::<2>(256 + 64).unwrap(),
            0x5678u16.to_ne_bytes()
        );
        // Index 17 on a 16-slot ring is slot 1.
        let d = r.read_bytes::<16>(256 + 128 + 16).unwrap();
        assert_eq!(&d[0..2], &1u16.to_ne_bytes());
        assert_eq!(&d[8..12], &4u32.to_ne_bytes());
        assert_eq!(rr.read_desc(1).length, 3);
        assert_eq!(ring_stride(10), 128 + 16 * 1024);
    }
}
