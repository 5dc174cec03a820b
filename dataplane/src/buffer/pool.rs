//! The buffer pool: every buffer of a NUMA node, named by [`BufferIndex`] (a `u32`), in one region.

use super::index::BufferIndex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::meta::{flags, BufferMeta};
use crate::memory::{HugepagePolicy, MemoryError, Region};

/// Smallest headroom a pool accepts: enough for outer IPv4 + UDP + VXLAN + Ethernet + VLAN.
pub const MIN_HEADROOM: u16 = 128;

/// How a pool is laid out and where its memory comes from.
#[derive(Debug, Clone)]
pub struct BufferPoolConfig {
    /// Number of buffers.
    pub buffers: u32,
    /// Data bytes per buffer (after the headroom).
    pub data_size: u16,
    /// Bytes before the data for prepending headers without a copy (at least [`MIN_HEADROOM`]).
    pub headroom: u16,
    /// Bytes reserved in front of each buffer's metadata for a driver's own per-buffer header
    /// (for example a DPDK `rte_mbuf`); a multiple of 64.
    pub prefix_size: u16,
    /// Whether to use hugepages.
    pub hugepages: HugepagePolicy,
}

impl Default for BufferPoolConfig {
    fn default() -> Self {
        BufferPoolConfig {
            buffers: 32 * 1024,
            data_size: 2048,
            headroom: MIN_HEADROOM,
            prefix_size: 0,
            hugepages: HugepagePolicy::Auto,
        }
    }
}

/// Errors from creating a pool.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The layout asked for is not usable.
    #[error("bad buffer pool layout: {0}")]
    Layout(String),
    /// The memory could not be mapped.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// Not enough free buffers for an allocation; nothing was allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("buffer pool exhausted: wanted {wanted}, {available} available to this worker")]
pub struct PoolExhausted {
    /// Buffers asked for.
    pub wanted: usize,
    /// Buffers this worker could have had.
    pub available: usize,
}

/// Where, inside each buffer's stride, its parts are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub base: *mut u8,
    pub count: u32,
    pub stride: usize,
    pub meta_offset: usize,
    pub headroom: u16,
    /// Headroom plus data size: the bytes after the metadata.
    pub area: u16,
}

/// A pool of fixed-size packet buffers.
///
/// Buffers are handed out by index through per-worker [`WorkerBuffers`](super::WorkerBuffers)
/// caches, which move indices to and from the pool's global free stack in bursts. Each index has
/// exactly one owner at a time: a worker's cache, a frame, a driver ring, or the free stack. The
/// pool keeps exact counts: [`BufferPool::free_count`] is the free stack plus every cache.
pub struct BufferPool {
    region: Region,
    layout: Layout,
    free: Mutex<Vec<BufferIndex>>,
    caches: Mutex<Vec<Arc<AtomicUsize>>>,
    double_frees: AtomicU64,
    materialised: AtomicU64,
}

// SAFETY: the raw base pointer in `layout` points into `region`, which the pool owns; access to a
// buffer's bytes is governed by the one-owner-per-index rule, and the shared state is behind
// mutexes and atomics.
unsafe impl Send for BufferPool {}
// SAFETY: as above.
unsafe impl Sync for BufferPool {}

impl BufferPool {
    /// Maps the pool's memory and puts every buffer on the free stack.
    pub fn new(config: &BufferPoolConfig) -> Result<Arc<BufferPool>, PoolError> {
        if config.buffers == 0 || config.buffers == u32::MAX {
            return Err(PoolError::Layout(format!(
                "{} buffers: need 1 to {}",
                config.buffers,
                u32::MAX - 1
            )));
        }
        if config.headroom < MIN_HEADROOM {
            return Err(PoolError::Layout(format!(
                "headroom {} is below the minimum of {MIN_HEADROOM}",
                config.headroom
            )));
        }
        if !config.prefix_size.is_multiple_of(64) {
            return Err(PoolError::Layout(format!(
                "prefix size {} is not a multiple of 64",
                config.prefix_size
            )));
        }
        let area = u16::try_from(config.headroom as u32 + config.data_size as u32)
            .map_err(|_| PoolError::Layout("headroom + data size exceed 65535".into()))?;
        if config.data_size < 64 {
            return Err(PoolError::Layout(format!(
                "data size {} is below 64",
                config.data_size
            )));
        }
        let meta_offset = config.prefix_size as usize;
        let stride = (meta_offset + 64 + area as usize).div_ceil(64) * 64;
        let region = Region::map(stride * config.buffers as usize, config.hugepages)?;
        let layout = Layout {
            base: region.base().as_ptr(),
            count: config.buffers,
            stride,
            meta_offset,
            headroom: config.headroom,
            area,
        };
        for bi in (0..config.buffers).map(BufferIndex::new) {
            let mut meta = BufferMeta::new(config.headroom);
            meta.flags = flags::FREE;
            // SAFETY: `bi.get() < count`, so the metadata lies inside the region, 64-byte aligned (the
            // region is page aligned, stride and meta_offset are multiples of 64); nothing else
            // refers to the fresh mapping yet.
            unsafe { layout.meta_ptr_unchecked(bi).write(meta) };
        }
        tracing::debug!(
            buffers = config.buffers,
            stride,
            bytes = region.len(),
            hugepages = region.is_hugepage_backed(),
            "buffer pool mapped"
        );
        Ok(Arc::new(BufferPool {
            region,
            layout,
            free: Mutex::new((0..config.buffers).rev().map(BufferIndex::new).collect()),
            caches: Mutex::new(Vec::new()),
            double_frees: AtomicU64::new(0),
            materialised: AtomicU64::new(0),
        }))
    }

    /// Registers the cache gauge of a new per-worker handle (see
    /// [`BufferPool::worker_buffers`]): the count of free buffers includes what it holds.
    pub(super) fn add_cache(&self, gauge: Arc<AtomicUsize>) {
        lock(&self.caches).push(gauge);
    }

    /// Number of buffers in the pool.
    pub fn capacity(&self) -> u32 {
        self.layout.count
    }

    /// Buffers not owned by any packet: the free stack plus every worker cache.
    ///
    /// Exact when no worker is allocating or freeing at the same moment.
    pub fn free_count(&self) -> usize {
        let stack = lock(&self.free).len();
        let cached: usize = lock(&self.caches)
            .iter()
            .map(|g| g.load(Ordering::Relaxed))
            .sum();
        stack + cached
    }

    /// Buffers owned by packets, frames, rings or anything else outside the free lists.
    pub fn in_use_count(&self) -> usize {
        self.layout.count as usize - self.free_count()
    }

    /// Frees of a buffer that was already free (a bug somewhere, caught and ignored).
    pub fn double_free_count(&self) -> u64 {
        self.double_frees.load(Ordering::Relaxed)
    }

    /// External-payload buffers (see [`super::ExternalSource`]) whose bytes were copied into
    /// the buffer because something read or wrote them: each is one copy more than a driver
    /// that received without copying saved.
    pub fn materialised_count(&self) -> u64 {
        self.materialised.load(Ordering::Relaxed)
    }

    /// Whether the buffers live in hugepages.
    pub fn is_hugepage_backed(&self) -> bool {
        self.region.is_hugepage_backed()
    }

    /// Data bytes per buffer after the headroom.
    pub fn data_size(&self) -> u16 {
        self.layout.area - self.layout.headroom
    }

    /// Headroom bytes per buffer.
    pub fn headroom(&self) -> u16 {
        self.layout.headroom
    }

    /// Bytes from one buffer to the next.
    pub fn stride(&self) -> usize {
        self.layout.stride
    }

    /// The region's first byte and length, for drivers that register the memory (DMA, memif).
    pub fn memory(&self) -> (*mut u8, usize) {
        (self.region.base().as_ptr(), self.region.len())
    }

    /// Bytes reserved in front of each buffer's metadata for a driver's own header.
    pub fn prefix_size(&self) -> u16 {
        self.layout.meta_offset as u16
    }

    /// Converts between buffer indices and addresses, for drivers whose devices name buffers by
    /// address (a DPDK `rte_mbuf *`, a DMA descriptor).
    pub fn locator(&self) -> BufferLocator {
        BufferLocator::new(&self.layout)
    }

    /// Takes exactly `out.len()` buffers off the free stack, or none, for a driver that holds
    /// buffers outside any worker's cache (DPDK's mempool ops hand them to poll-mode drivers,
    /// which may run on any thread). The caller owns them: each loses [`flags::FREE`], the rest of
    /// its metadata is left as it was (whoever fills the buffer rewrites it). They count as in
    /// use until given back with [`BufferPool::put_free`] or freed through a worker.
    pub fn take_free(&self, out: &mut [BufferIndex]) -> Result<(), PoolExhausted> {
        {
            let mut free = lock(&self.free);
            if free.len() < out.len() {
                return Err(PoolExhausted {
                    wanted: out.len(),
                    available: free.len(),
                });
            }
            let from = free.len() - out.len();
            out.copy_from_slice(&free[from..]);
            free.truncate(from);
        }
        for &bi in out.iter() {
            // SAFETY: indices on the free stack are below `count`; popping them under the lock
            // made this call their only owner, so nothing else touches their metadata.
            unsafe { (*self.layout.meta_ptr_unchecked(bi)).flags = 0 };
        }
        Ok(())
    }

    /// Gives single buffers (not chains: each index is one buffer, whatever its metadata says)
    /// back to the free stack. Buffers already free are counted as double frees and skipped, as in
    /// [`WorkerBuffers::free`](super::WorkerBuffers::free).
    ///
    /// # Panics
    /// If an index is beyond the pool.
    pub fn put_free(&self, indices: &[BufferIndex]) {
        let mut free = lock(&self.free);
        for &bi in indices {
            let i = bi.get();
            assert!(i < self.layout.count, "buffer index {i} beyond the pool");
            // SAFETY: checked in bounds just above; the caller owned the buffer and hands it over,
            // and the free stack's lock, held here, orders this write before any later taker's.
            let meta = unsafe { &mut *self.layout.meta_ptr_unchecked(bi) };
            if meta.flags & flags::FREE != 0 {
                self.note_double_free();
                continue;
            }
            meta.flags = flags::FREE;
            free.push(bi);
        }
    }

    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    pub(crate) fn note_materialised(&self) {
        self.materialised.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_double_free(&self) {
        self.double_frees.fetch_add(1, Ordering::Relaxed);
    }

    /// Moves up to `want` indices from the free stack onto `cache`; returns how many moved.
    pub(crate) fn take_into(&self, cache: &mut Vec<BufferIndex>, want: usize) -> usize {
        let mut free = lock(&self.free);
        let n = want.min(free.len());
        let from = free.len() - n;
        cache.extend_from_slice(&free[from..]);
        free.truncate(from);
        n
    }

    /// Returns indices to the free stack.
    pub(crate) fn give_back(&self, indices: &[BufferIndex]) {
        lock(&self.free).extend_from_slice(indices);
    }

    pub(crate) fn forget_cache(&self, gauge: &Arc<AtomicUsize>) {
        lock(&self.caches).retain(|g| !Arc::ptr_eq(g, gauge));
    }
}

impl Layout {
    /// # Safety
    /// `bi` must be below `count`.
    #[inline(always)]
    pub unsafe fn meta_ptr_unchecked(&self, bi: BufferIndex) -> *mut BufferMeta {
        // SAFETY: the caller guarantees `bi.get() < count`, so the offset stays inside the region.
        unsafe {
            self.base
                .add(bi.as_usize() * self.stride + self.meta_offset)
                .cast()
        }
    }
}

/// Converts between buffer indices and the addresses of their strides without a division: a
/// device driver gets buffers back as addresses (DPDK's `rte_mbuf *`) and must name them by index
/// for the graph, per packet. Plain data, cheap to copy into a driver's queue; the addresses it
/// gives are valid while its pool lives.
#[derive(Debug, Clone, Copy)]
pub struct BufferLocator {
    base: usize,
    stride: usize,
    count: u32,
    /// `⌊(2^64 − 1) / (stride / 64)⌋ + 1`: with it, `n / (stride / 64)` for any 32-bit `n` is the
    /// high half of a 64 × 64-bit product (Lemire, Kaser & Kurz, "Faster remainder by direct
    /// computation", 2019). Offsets are divided in 64-byte units, which is exact because the
    /// stride is a multiple of 64 and keeps regions up to 256 GiB within 32 bits.
    reciprocal: u64,
}

impl BufferLocator {
    fn new(layout: &Layout) -> BufferLocator {
        let units = (layout.stride / 64) as u64;
        // The stride holds at least the metadata and 192 bytes of headroom and data, so `units`
        // is at least 4 and the reciprocal cannot wrap to 0.
        debug_assert!(units >= 2 && layout.stride.is_multiple_of(64));
        BufferLocator {
            base: layout.base as usize,
            stride: layout.stride,
            count: layout.count,
            reciprocal: (u64::MAX / units).wrapping_add(1),
        }
    }

    /// Bytes from one buffer to the next.
    #[inline(always)]
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// The first byte of buffer `bi`'s stride (where its driver prefix begins), or `None` when
    /// `bi` is beyond the pool.
    #[inline(always)]
    pub fn buffer_start(&self, bi: BufferIndex) -> Option<*mut u8> {
        (bi.get() < self.count).then(|| (self.base + bi.as_usize() * self.stride) as *mut u8)
    }

    /// The buffer whose stride holds `addr`, and `addr`'s offset from that stride's first byte;
    /// `None` for an address outside the pool.
    #[inline(always)]
    pub fn index_of(&self, addr: *const u8) -> Option<(BufferIndex, usize)> {
        let off = (addr as usize).wrapping_sub(self.base);
        if off >= self.count as usize * self.stride {
            return None;
        }
        let units = (off >> 6) as u64;
        let bi = if units <= u32::MAX as u64 {
            ((self.reciprocal as u128 * units as u128) >> 64) as u32
        } else {
            // Beyond 256 GiB into the region the reciprocal is not exact: divide.
            (off / self.stride) as u32
        };
        Some((BufferIndex::new(bi), off - bi as usize * self.stride))
    }
}

/// Locks a mutex that guards plain data; a panic elsewhere cannot leave that data inconsistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
