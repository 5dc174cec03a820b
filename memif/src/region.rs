//! Shared-memory regions: memfd-backed mappings, created locally (slave) or received from the
//! peer (master).
//!
//! The peer may write any byte of a region at any time, so this type never hands out references
//! into it: all access goes through bounds-checked copies and volatile or atomic accessors.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32};

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};

use crate::Error;

/// Largest region this crate will create or map (64 GiB): a sanity bound on peer input.
pub const MAX_REGION_SIZE: u64 = 64 << 30;

/// One mapped region.
#[derive(Debug)]
pub struct Region {
    base: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain shared memory owned by this value; it is not tied to the thread that
// created it, and every access goes through volatile/atomic operations or bounds-checked copies.
unsafe impl Send for Region {}
// SAFETY: every method takes `&self` and touches the mapping only through bounds-checked copies,
// volatile reads/writes and atomics — the same operations the peer process performs concurrently
// anyway — so sharing a `&Region` between threads adds no new kind of race.
unsafe impl Sync for Region {}

impl Region {
    /// Create a zero-filled memfd region of `size` bytes, sealed against shrinking, and map it.
    pub fn create(name: &str, size: usize) -> Result<Region, Error> {
        if size == 0 || size as u64 > MAX_REGION_SIZE {
            return Err(Error::Config(format!("bad region size {size}")));
        }
        let cname = std::ffi::CString::new(name.replace('\0', ""))
            .map_err(|_| Error::Config("bad region name".into()))?;
        let fd = memfd_create(
            cname.as_c_str(),
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )?;
        nix::unistd::ftruncate(&fd, size as libc::off_t)?;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK))?;
        Self::map(fd, size)
    }

    /// Map a region received from the peer, after checking with `fstat` that the file really
    /// holds `declared` bytes (a shorter one would raise SIGBUS on access).
    pub fn from_peer(fd: OwnedFd, declared: u64) -> Result<Region, Error> {
        if declared == 0 || declared > MAX_REGION_SIZE {
            return Err(Error::Protocol(format!("bad region size {declared}")));
        }
        let st = nix::sys::stat::fstat(&fd)?;
        if st.st_size < 0 || (st.st_size as u64) < declared {
            return Err(Error::Protocol(format!(
                "region file is {} bytes, {} declared",
                st.st_size, declared
            )));
        }
        Self::map(fd, declared as usize)
    }

    /// Like [`Region::from_peer`], but also require the file to be sealed against shrinking
    /// (`F_SEAL_SHRINK`), so the peer cannot truncate it under our mapping later (SIGBUS).
    pub fn from_peer_sealed(fd: OwnedFd, declared: u64) -> Result<Region, Error> {
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS)
            .map_err(|e| Error::Protocol(format!("region is not a sealable memfd: {e}")))?;
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(Error::Protocol(
                "region not sealed against shrinking".into(),
            ));
        }
        Self::from_peer(fd, declared)
    }

    fn map(fd: OwnedFd, size: usize) -> Result<Region, Error> {
        let len = std::num::NonZeroUsize::new(size)
            .ok_or_else(|| Error::Config("zero-sized region".into()))?;
        // SAFETY: we map a fresh shared mapping of a file we hold; no existing Rust object lives at
        // the address chosen by the kernel, and the mapping is unmapped only in Drop.
        let p = unsafe {
            mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &fd,
                0,
            )?
        };
        Ok(Region {
            base: p.cast(),
            len: size,
            fd,
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a region has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd behind the region (sent to the peer in ADD_REGION).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether `[offset, offset + len)` lies inside the region (computed in u64, no overflow).
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        offset
            .checked_add(len)
            .is_some_and(|end| end <= self.len as u64)
    }

    /// Copy `dst.len()` bytes out of the region from `offset`. Returns false (copying nothing) if
    /// the range is not inside the region.
    pub fn copy_out(&self, offset: u64, dst: &mut [u8]) -> bool {
        if !self.contains(offset, dst.len() as u64) {
            return false;
        }
        // SAFETY: the source range was just checked to lie inside our live mapping, and `dst` is a
        // private buffer that cannot overlap shared memory we mapped. The peer may write the same
        // bytes concurrently; we only copy raw bytes (no type invariants), never keep a reference.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(offset as usize),
                dst.as_mut_ptr(),
                dst.len(),
            );
        }
        true
    }

    /// Copy `src` into the region at `offset`. Returns false (copying nothing) if the range is not
    /// inside the region.
    pub fn copy_in(&self, offset: u64, src: &[u8]) -> bool {
        if !self.contains(offset, src.len() as u64) {
            return false;
        }
        // SAFETY: the destination range lies inside our live, writable mapping (checked above);
        // `src` is private memory, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.base.as_ptr().add(offset as usize),
                src.len(),
            );
        }
        true
    }

    /// Copy `len` bytes from this region at `offset` into `dst` (another region) at
    /// `dst_offset`: one copy from one peer's memory into another's, with no reference into
    /// either. Returns false (copying nothing) if either range is not inside its region.
    pub fn copy_to(&self, offset: u64, dst: &Region, dst_offset: u64, len: usize) -> bool {
        if !self.contains(offset, len as u64) || !dst.contains(dst_offset, len as u64) {
            return false;
        }
        // SAFETY: both ranges were just checked to lie inside live mappings (the destination
        // writable). They are raw bytes with no type invariants; `move_bytes` (memmove) stays
        // correct even if both regions are the same one, or map the same file.
        unsafe {
            move_bytes(
                self.base.as_ptr().add(offset as usize),
                dst.base.as_ptr().add(dst_offset as usize),
                len,
            );
        }
        true
    }

    /// Volatile read of `N` bytes at `offset` into a private copy.
    pub fn read_bytes<const N: usize>(&self, offset: u64) -> Option<[u8; N]> {
        if !self.contains(offset, N as u64) {
            return None;
        }
        // SAFETY: in bounds (checked above); `[u8; N]` has alignment 1 and no invalid values.
        Some(unsafe {
            std::ptr::read_volatile(self.base.as_ptr().add(offset as usize) as *const [u8; N])
        })
    }

    /// Volatile write of `N` bytes at `offset`. Returns false if out of bounds.
    pub fn write_bytes<const N: usize>(&self, offset: u64, v: [u8; N]) -> bool {
        if !self.contains(offset, N as u64) {
            return false;
        }
        // SAFETY: in bounds of our writable mapping (checked above); alignment 1.
        unsafe {
            std::ptr::write_volatile(self.base.as_ptr().add(offset as usize) as *mut [u8; N], v)
        };
        true
    }

    /// Hints the CPU to fetch the cache line at `offset` (a frame about to be copied). Any
    /// offset will do: a prefetch reads nothing the program sees and never faults.
    #[inline(always)]
    pub fn prefetch(&self, offset: u64) {
        let p = self
            .base
            .as_ptr()
            .wrapping_add(offset.min(self.len as u64) as usize);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint: it neither faults nor changes memory, for any address.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_mm_prefetch(p.cast::<i8>(), core::arch::x86_64::_MM_HINT_T0);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }

    /// Volatile read of the `u64` at `offset` (one load, where [`Region::read_bytes`] of 8
    /// bytes is eight), for a caller that checked the range once for many accesses.
    ///
    /// # Safety
    /// `offset` must be 8-aligned with `offset + 8 <= self.len()`.
    #[inline]
    pub unsafe fn read_u64_unchecked(&self, offset: u64) -> u64 {
        // SAFETY: in bounds and 8-aligned (the caller's contract; the mapping base is page
        // aligned); any bit pattern is a valid `u64`.
        unsafe { std::ptr::read_volatile(self.base.as_ptr().add(offset as usize).cast()) }
    }

    /// Volatile write of the `u64` at `offset`, for a caller that checked the range once.
    ///
    /// # Safety
    /// As for [`Region::read_u64_unchecked`].
    #[inline]
    pub unsafe fn write_u64_unchecked(&self, offset: u64, v: u64) {
        // SAFETY: in bounds of our writable mapping and 8-aligned (the caller's contract).
        unsafe { std::ptr::write_volatile(self.base.as_ptr().add(offset as usize).cast(), v) }
    }

    /// An atomic view of the `u16` at `offset` (must be 2-aligned and inside the region).
    pub fn atomic_u16(&self, offset: u64) -> Option<&AtomicU16> {
        if !self.contains(offset, 2) || !offset.is_multiple_of(2) {
            return None;
        }
        // SAFETY: in bounds and 2-aligned (the mapping base is page aligned); the memory lives as
        // long as `self`. Atomic access is sound even though the peer writes it concurrently, and
        // nothing in this process accesses it non-atomically.
        Some(unsafe { AtomicU16::from_ptr(self.base.as_ptr().add(offset as usize).cast()) })
    }

    /// An atomic view of the `u32` at `offset` (must be 4-aligned and inside the region).
    pub fn atomic_u32(&self, offset: u64) -> Option<&AtomicU32> {
        if !self.contains(offset, 4) || !offset.is_multiple_of(4) {
            return None;
        }
        // SAFETY: as for `atomic_u16`, with 4-byte alignment checked.
        Some(unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(offset as usize).cast()) })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe the mapping made in `map`, which nothing references any
        // more (accessors borrow `self`).
        let _ = unsafe { munmap(self.base.cast(), self.len) };
    }
}

/// 32 bytes, moved as one value.
type Chunk = [u8; 32];

/// `len` bytes from `src` to `dst`, as `memmove` does (the ranges may overlap). A frame of 32
/// to 128 bytes, the usual small packet, is read whole into registers before a byte is
/// written, inline, without the library call; others go to `std::ptr::copy`.
///
/// # Safety
///
/// `src` must be valid for reads and `dst` for writes of `len` bytes.
#[inline(always)]
unsafe fn move_bytes(src: *const u8, dst: *mut u8, len: usize) {
    let read = |at: usize| {
        // SAFETY: `at + 32 <= len` at every call below, so inside `src`'s `len` bytes;
        // unaligned reads of plain bytes.
        unsafe { std::ptr::read_unaligned(src.add(at).cast::<Chunk>()) }
    };
    let write = |at: usize, c: Chunk| {
        // SAFETY: as for `read`, inside `dst`'s `len` bytes.
        unsafe { std::ptr::write_unaligned(dst.add(at).cast::<Chunk>(), c) }
    };
    match len {
        32..=64 => {
            // The first and the last 32 bytes (overlapping when shorter than 64).
            let (a, b) = (read(0), read(len - 32));
            write(0, a);
            write(len - 32, b);
        }
        65..=128 => {
            let (a, b, c, d) = (read(0), read(32), read(len - 64), read(len - 32));
            write(0, a);
            write(32, b);
            write(len - 64, c);
            write(len - 32, d);
        }
        // SAFETY: the caller's guarantee.
        _ => unsafe { std::ptr::copy(src, dst, len) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_of_every_small_length_move_the_bytes_as_memmove_does() {
        let pattern: Vec<u8> = (0..600u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in 0..=300usize {
            // Between two regions, and within one, overlapping either way.
            let a = Region::create("a", 4096).unwrap();
            let b = Region::create("b", 4096).unwrap();
            assert!(a.copy_in(17, &pattern[..len]));
            assert!(a.copy_to(17, &b, 1001, len));
            let mut out = vec![0u8; len];
            assert!(b.copy_out(1001, &mut out));
            assert_eq!(out, pattern[..len], "between regions, {len} bytes");
            for shift in [1usize, 31, 33] {
                let r = Region::create("r", 4096).unwrap();
                assert!(r.copy_in(100, &pattern[..len + shift]));
                let mut expected = pattern[..len + shift].to_vec();
                expected.copy_within(shift..shift + len, 0);
                assert!(r.copy_to(100 + shift as u64, &r, 100, len));
                let mut got = vec![0u8; len + shift];
                assert!(r.copy_out(100, &mut got));
                assert_eq!(got, expected, "backwards overlap, {len} bytes by {shift}");
                assert!(r.copy_in(100, &pattern[..len + shift]));
                let mut expected = pattern[..len + shift].to_vec();
                expected.copy_within(0..len, shift);
                assert!(r.copy_to(100, &r, 100 + shift as u64, len));
                assert!(r.copy_out(100, &mut got));
                assert_eq!(got, expected, "forwards overlap, {len} bytes by {shift}");
            }
        }
    }

    #[test]
    fn create_copy_bounds() {
        let r = Region::create("t", 4096).unwrap();
        assert!(r.copy_in(10, b"hello"));
        let mut b = [0u8; 5];
        assert!(r.copy_out(10, &mut b));
        assert_eq!(&b, b"hello");
        assert!(!r.copy_out(4094, &mut b));
        assert!(!r.copy_out(u64::MAX - 2, &mut b));
        assert!(r.atomic_u16(4095).is_none());
        assert!(r.atomic_u16(4094).is_some());
        // Sealed against shrinking.
        assert!(nix::unistd::ftruncate(r.fd(), 100).is_err());
    }

    #[test]
    fn region_to_region_copies_are_bounds_checked() {
        let a = Region::create("a", 4096).unwrap();
        let b = Region::create("b", 4096).unwrap();
        assert!(a.copy_in(100, b"frame"));
        assert!(a.copy_to(100, &b, 4091, 5));
        let mut out = [0u8; 5];
        assert!(b.copy_out(4091, &mut out));
        assert_eq!(&out, b"frame");
        assert!(!a.copy_to(100, &b, 4092, 5), "past the destination's end");
        assert!(!a.copy_to(4092, &b, 0, 5), "past the source's end");
        assert!(!a.copy_to(u64::MAX - 1, &b, 0, 5));
    }

    #[test]
    fn unsealed_peer_region_is_refused() {
        let fd = memfd_create(c"x", MFdFlags::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&fd, 4096).unwrap();
        match Region::from_peer_sealed(fd, 4096) {
            Err(Error::Protocol(m)) => assert!(m.contains("seal"), "{m}"),
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn peer_region_shorter_than_declared_is_refused() {
        let r = Region::create("t", 4096).unwrap();
        let fd = r.fd().try_clone_to_owned().unwrap();
        assert!(matches!(
            Region::from_peer(fd, 8192),
            Err(Error::Protocol(_))
        ));
        let fd = r.fd().try_clone_to_owned().unwrap();
        let m = Region::from_peer_sealed(fd, 4096).unwrap();
        r.copy_in(0, b"x");
        let mut b = [0u8; 1];
        m.copy_out(0, &mut b);
        assert_eq!(&b, b"x");
    }
}
