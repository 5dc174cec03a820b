//! Large pre-allocated memory regions: the buffer pool, lookup tables. Hugepage-backed when the
//! machine has hugepages, ordinary pages (and one warning) when not.

use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};

/// Whether a pool's memory comes from hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HugepagePolicy {
    /// Use 2 MiB hugepages when the kernel has enough free; otherwise ordinary pages and one warning.
    #[default]
    Auto,
    /// Hugepages or nothing: starting fails when there are not enough.
    Require,
    /// Ordinary pages only.
    Never,
}

/// Errors from reserving pool memory.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// `mmap` failed.
    #[error("cannot map {bytes} bytes of {kind} memory: {source}")]
    Map {
        /// Bytes asked for.
        bytes: usize,
        /// "hugepage" or "ordinary".
        kind: &'static str,
        /// The OS error.
        source: nix::Error,
    },
    /// Zero bytes were asked for.
    #[error("a buffer pool needs at least one buffer")]
    Empty,
}

const HUGEPAGE: usize = 2 << 20;

/// An anonymous private mapping, pre-faulted, unmapped on drop.
pub struct Region {
    base: NonNull<u8>,
    len: usize,
    hugepages: bool,
}

// SAFETY: `Region` is a plain owned mapping; every access to its bytes goes through the pool's
// ownership rules (one owner per buffer index), not through `Region` itself.
unsafe impl Send for Region {}
// SAFETY: as above; `Region`'s own methods only read its immutable fields.
unsafe impl Sync for Region {}

static WARNED_NO_HUGEPAGES: AtomicBool = AtomicBool::new(false);

impl Region {
    /// Maps `len` bytes (rounded up to the page size used) according to `policy`.
    pub fn map(len: usize, policy: HugepagePolicy) -> Result<Region, MemoryError> {
        let len = NonZeroUsize::new(len).ok_or(MemoryError::Empty)?;
        if policy != HugepagePolicy::Never {
            let huge_len = len.get().div_ceil(HUGEPAGE) * HUGEPAGE;
            match Self::map_with(huge_len, MapFlags::MAP_HUGETLB) {
                Ok(base) => {
                    return Ok(Region {
                        base,
                        len: huge_len,
                        hugepages: true,
                    })
                }
                Err(source) if policy == HugepagePolicy::Require => {
                    return Err(MemoryError::Map {
                        bytes: huge_len,
                        kind: "hugepage",
                        source,
                    })
                }
                Err(source) => {
                    if !WARNED_NO_HUGEPAGES.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            bytes = huge_len,
                            error = %source,
                            "not enough hugepages; using ordinary pages \
                             (slower: more TLB misses). Reserve some with \
                             `echo 1024 > /proc/sys/vm/nr_hugepages`"
                        );
                    }
                }
            }
        }
        let base =
            Self::map_with(len.get(), MapFlags::empty()).map_err(|source| MemoryError::Map {
                bytes: len.get(),
                kind: "ordinary",
                source,
            })?;
        Ok(Region {
            base,
            len: len.get(),
            hugepages: false,
        })
    }

    fn map_with(len: usize, extra: MapFlags) -> nix::Result<NonNull<u8>> {
        let len = NonZeroUsize::new(len).expect("length checked non-zero by the caller");
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing aliases no
        // existing Rust object.
        let ptr = unsafe {
            mmap_anonymous(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_POPULATE | extra,
            )?
        };
        Ok(ptr.cast())
    }

    /// The mapping as zero-initialised atomic 64-bit words (the mapping is page aligned, so
    /// `len / 8` words fit exactly).
    pub fn as_atomic_u64(&self) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: as for `as_atomic_u32`: page aligned (so 8-byte aligned), zero-filled, owned by
        // `self`, and only accessed through atomics once viewed this way.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast(), self.len / 8) }
    }

    /// The mapping as zero-initialised atomic 32-bit words (the mapping is page aligned, so
    /// `len / 4` words fit exactly).
    pub fn as_atomic_u32(&self) -> &[std::sync::atomic::AtomicU32] {
        // SAFETY: the mapping is page aligned, readable and writable, zero-filled by the kernel
        // (a valid `AtomicU32` bit pattern), lives as long as `self`, and is only ever accessed
        // through atomics once viewed this way.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast(), self.len / 4) }
    }

    /// The mapping as zero-initialised atomic 16-bit words.
    pub fn as_atomic_u16(&self) -> &[std::sync::atomic::AtomicU16] {
        // SAFETY: as for `as_atomic_u32`: page aligned, zero-filled, owned by `self`, and only
        // accessed through atomics once viewed this way.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast(), self.len / 2) }
    }

    /// The first byte of the mapping.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: `map` refuses zero bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the mapping is backed by hugepages.
    pub fn is_hugepage_backed(&self) -> bool {
        self.hugepages
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe exactly the mapping made in `map`, and the pool that owns
        // this region is being dropped, so no buffer reference outlives it.
        if let Err(e) = unsafe { munmap(self.base.cast(), self.len) } {
            tracing::error!(error = %e, "munmap of a buffer pool failed");
        }
    }
}

/// Hints the CPU to bring the cache line holding `p` into L1. Never faults and never changes
/// memory, whatever `p` is.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it neither faults nor changes memory, for any address.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_mm_prefetch(p.cast::<i8>(), core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
