//! A DPDK mempool whose objects are Quiver's buffers, so that packets move between poll-mode
//! drivers and the graph without a copy.
//!
//! # One buffer, two views
//!
//! A Quiver pool made with `prefix_size` = [`PREFIX_SIZE`] lays out each buffer's stride as
//!
//! ```text
//! offset 0     40          64                 192            256                  stride
//!        | …   | objhdr 24 | rte_mbuf 128     | BufferMeta 64 | headroom | data     |
//!                          ^ the mempool object ^ mbuf private area ^ mbuf buf_addr
//! ```
//!
//! - the `rte_mbuf` sits at the end of the prefix, and DPDK's mempool object header (which every
//!   mempool writes right in front of each object) in the 24 bytes before it;
//! - Quiver's 64-byte metadata is the mbuf's *private area* (`priv_size` = 64), exactly where
//!   DPDK expects it, so `buf_addr = mbuf + 128 + 64` is the start of Quiver's headroom and a
//!   direct mbuf's invariants hold for DPDK code that recomputes them;
//! - `buf_len` is headroom + data size, and an mbuf's `data_off` is the same number as Quiver's
//!   `data_offset` (both count from the headroom's start).
//!
//! So a received mbuf *is* a Quiver buffer: its index is `(address − region base) / stride`
//! (computed without a division by [`dataplane::buffer::BufferLocator`]), and only the lengths
//! move between the two headers, never packet bytes.
//!
//! # Who holds a free buffer
//!
//! The mempool has no storage of its own. It is made with `rte_mempool_create_empty`, given the
//! mempool ops registered here (`quiver`), and populated over Quiver's region by our own
//! `populate` callback, which initialises each mbuf header and registers each object without
//! enqueueing it: the objects' free list *is* Quiver's free stack. The ops' `dequeue` takes
//! buffers from it ([`BufferPool::take_free`], all or nothing) and `enqueue` gives them back
//! ([`BufferPool::put_free`]); DPDK calls them only when an lcore's mempool cache runs dry or
//! overflows, so the pool's mutex is taken once per burst of up to a cache's worth of buffers.
//!
//! Free buffers therefore live in four places: Quiver's free stack, Quiver's worker caches
//! (both counted by `BufferPool::free_count`), DPDK's per-lcore mempool caches, and descriptors a
//! poll-mode driver has posted for receive. The last two count as *in use* for the Quiver pool
//! ([`DpdkMempool::cached`] reports the caches). Each worker's cache is flushed back to the free
//! stack when its queues are dropped (on the worker's thread, as DPDK requires), the control
//! thread's when a port closes, every other one when the mempool is freed; posted receive
//! descriptors return when their port is closed. After the workers stop and the ports close,
//! `free_count()` is the pool's capacity again, minus packets still sitting in rings between
//! ports.
//!
//! # Freeing the mempool
//!
//! `rte_mempool_free` assumes every object is back in the pool and takes each one out of the
//! ops' store, one `dequeue` of 1 per populated object, before calling the ops' `free`
//! (`rte_mempool_free_memchunks`; it ignores the result). With our ops that would empty
//! Quiver's free stack into nowhere: every buffer would count as in use forever. So [`Drop`]
//! first flushes every lcore cache, then marks the context *closing*, and from then on `dequeue`
//! refuses (`-ENOBUFS`) without touching the pool. A dequeue refused other than by that
//! teardown, an enqueue of a buffer that was already free (a double free) and an object that is
//! not one of the pool's are logged as errors, never swallowed.
//!
//! # The mbuf invariant
//!
//! Drivers that allocate with `rte_mempool_get_bulk` directly (vector receive paths) rely on a
//! free mbuf having `refcnt` 1, `nb_segs` 1 and `next` NULL. Quiver never touches the prefix of a
//! buffer it owns, so the invariant must hold for every buffer Quiver holds too: the receive path
//! unlinks multi-segment mbufs as it turns them into Quiver chains, and the transmit path unlinks
//! again whatever the driver did not take.

use dataplane::BufferIndex;
use std::ffi::{c_int, c_uint, c_void, CString};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use dataplane::buffer::{BufferLocator, BufferPool};
use dpdk_sys as sys;

use super::eal::{DpdkError, Eal};

/// Bytes of an `rte_mbuf`.
pub const MBUF_SIZE: usize = std::mem::size_of::<sys::rte_mbuf>();
/// The mbuf private area: Quiver's `BufferMeta`.
const PRIV_SIZE: u16 = 64;
/// The `prefix_size` a [`BufferPool`] needs for DPDK: the mempool's object header (24 bytes) and
/// the `rte_mbuf` (128 bytes), rounded up to a multiple of 64.
pub const PREFIX_SIZE: u16 = 192;

const _: () = assert!(MBUF_SIZE == 128);
const _: () =
    assert!(std::mem::size_of::<sys::rte_mempool_objhdr>() + MBUF_SIZE <= PREFIX_SIZE as usize);
const _: () = assert!(std::mem::size_of::<dataplane::BufferMeta>() == PRIV_SIZE as usize);

/// The name our mempool ops are registered under.
const OPS_NAME: &str = "quiver";
/// Objects per lcore cache (DPDK's usual size).
const CACHE_SIZE: u32 = 256;
/// Indices converted at a time inside the ops callbacks (on the stack).
const OPS_CHUNK: usize = 256;

/// Converts between Quiver buffer indices and the `rte_mbuf` inside each buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MbufMap {
    locator: BufferLocator,
    /// Offset of the mbuf from the start of a buffer's stride.
    mbuf_offset: usize,
}

impl MbufMap {
    /// The mbuf of buffer `bi`.
    ///
    /// # Panics
    /// If `bi` is beyond the pool (a bug: indices come from the pool).
    #[inline(always)]
    pub(crate) fn mbuf(&self, bi: BufferIndex) -> *mut sys::rte_mbuf {
        let start = self
            .locator
            .buffer_start(bi)
            .expect("buffer index beyond the pool");
        start.wrapping_add(self.mbuf_offset).cast()
    }

    /// The buffer whose mbuf is `m`, or `None` when `m` is not one of this pool's mbufs.
    #[inline(always)]
    pub(crate) fn index(&self, m: *const sys::rte_mbuf) -> Option<BufferIndex> {
        match self.locator.index_of(m.cast()) {
            Some((bi, off)) if off == self.mbuf_offset => Some(bi),
            _ => None,
        }
    }
}

/// What the ops callbacks find through `rte_mempool::pool_config`.
struct OpsContext {
    pool: Arc<BufferPool>,
    map: MbufMap,
    headroom: u16,
    area: u16,
    iova_va: bool,
    foreign: AtomicBool,
    /// Set by `DpdkMempool::drop` just before `rte_mempool_free`: the mempool hands out nothing
    /// any more (see the module's "Freeing the mempool").
    closing: AtomicBool,
    /// Dequeues refused because the mempool was closing.
    refused_while_closing: AtomicU64,
    /// An error was logged for a double free through `enqueue` (logged once per mempool).
    double_free_logged: AtomicBool,
}

/// A DPDK mempool over a Quiver [`BufferPool`]: hand it to ports, and their receive queues fill
/// Quiver's buffers directly. One per pool; it must outlive every port using it (ports hold it).
pub struct DpdkMempool {
    mp: NonNull<sys::rte_mempool>,
    ctx: Arc<OpsContext>,
    name: String,
    extmem: bool,
}

// SAFETY: the mempool is DPDK's thread-safe object (each lcore touches only its own cache; the
// ops' shared state is behind the pool's mutex); the pointer stays valid until Drop.
unsafe impl Send for DpdkMempool {}
// SAFETY: as above; `&self` methods only read the mempool or flush the calling lcore's cache.
unsafe impl Sync for DpdkMempool {}

/// Pools that have a mempool (a buffer can belong to only one).
static POOLS_WITH_MEMPOOL: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static OPS_REGISTERED: OnceLock<Result<(), DpdkError>> = OnceLock::new();
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

fn register_ops() -> Result<(), DpdkError> {
    OPS_REGISTERED
        .get_or_init(|| {
            let mut ops = sys::rte_mempool_ops::default();
            for (d, s) in ops.name.iter_mut().zip(OPS_NAME.bytes()) {
                *d = s as _;
            }
            ops.alloc = Some(ops_alloc);
            ops.free = Some(ops_free);
            ops.enqueue = Some(ops_enqueue);
            ops.dequeue = Some(ops_dequeue);
            ops.get_count = Some(ops_get_count);
            ops.populate = Some(ops_populate);
            // SAFETY: `ops` is a fully initialised ops struct; DPDK copies it into its table.
            let rc = unsafe { sys::rte_mempool_register_ops(&ops) };
            if rc < 0 {
                return Err(DpdkError::call("rte_mempool_register_ops", rc));
            }
            Ok(())
        })
        .clone()
}

impl DpdkMempool {
    /// Makes the mempool over `pool`, whose buffers must have been laid out with
    /// `prefix_size` = [`PREFIX_SIZE`] (or more). Every buffer's mbuf header is initialised
    /// here; buffers in use meanwhile are unaffected (Quiver never touches the prefix).
    pub fn new(eal: &Eal, pool: Arc<BufferPool>) -> Result<Arc<DpdkMempool>, DpdkError> {
        let prefix = pool.prefix_size() as usize;
        if prefix < PREFIX_SIZE as usize {
            return Err(DpdkError::Config(format!(
                "the buffer pool reserves {prefix} bytes in front of each buffer; DPDK needs \
                 {PREFIX_SIZE} (BufferPoolConfig::prefix_size = drivers::dpdk::PREFIX_SIZE)"
            )));
        }
        let area = pool.headroom() as u32 + pool.data_size() as u32;
        let area = u16::try_from(area)
            .map_err(|_| DpdkError::Config("headroom + data size exceed 65535".into()))?;
        {
            let mut pools = POOLS_WITH_MEMPOOL.lock().unwrap_or_else(|p| p.into_inner());
            let key = Arc::as_ptr(&pool) as usize;
            if pools.contains(&key) {
                return Err(DpdkError::Config(
                    "this buffer pool already has a DPDK mempool".into(),
                ));
            }
            pools.push(key);
        }
        let result = Self::create(eal, pool.clone(), prefix, area);
        if result.is_err() {
            forget_pool(&pool);
        }
        result
    }

    fn create(
        eal: &Eal,
        pool: Arc<BufferPool>,
        prefix: usize,
        area: u16,
    ) -> Result<Arc<DpdkMempool>, DpdkError> {
        register_ops()?;
        let n = pool.capacity();
        // DPDK refuses a cache whose flush threshold (1.5 × size) exceeds the pool.
        let cache = CACHE_SIZE.min(n * 2 / 3);
        let name = format!("quiver{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
        let cname = CString::new(name.as_str()).expect("no NUL");
        let ctx = Arc::new(OpsContext {
            map: MbufMap {
                locator: pool.locator(),
                mbuf_offset: prefix - MBUF_SIZE,
            },
            headroom: pool.headroom(),
            area,
            iova_va: eal.iova_is_va(),
            foreign: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            refused_while_closing: AtomicU64::new(0),
            double_free_logged: AtomicBool::new(false),
            pool,
        });
        let elt_size = MBUF_SIZE as u32 + PRIV_SIZE as u32 + area as u32;
        // SAFETY: valid name; sizes checked above; the EAL is running (`eal` exists).
        let mp = unsafe {
            sys::rte_mempool_create_empty(
                cname.as_ptr(),
                n,
                elt_size,
                cache,
                std::mem::size_of::<sys::rte_pktmbuf_pool_private>() as u32,
                sys::SOCKET_ID_ANY,
                0,
            )
        };
        let mp = NonNull::new(mp)
            .ok_or_else(|| DpdkError::from_rte_errno("rte_mempool_create_empty"))?;
        let mut me = DpdkMempool {
            mp,
            ctx,
            name,
            extmem: false,
        };
        me.setup()?;
        Ok(Arc::new(me))
    }

    /// Everything after creation; on error, Drop frees what was made.
    fn setup(&mut self) -> Result<(), DpdkError> {
        let mp = self.mp.as_ptr();
        let mut private = sys::rte_pktmbuf_pool_private {
            mbuf_data_room_size: self.ctx.area,
            mbuf_priv_size: PRIV_SIZE,
            flags: 0,
        };
        // SAFETY: `mp` was created with room for this private struct, which is copied.
        unsafe {
            sys::rte_pktmbuf_pool_init(
                mp,
                (&mut private as *mut sys::rte_pktmbuf_pool_private).cast(),
            )
        };
        let ops = CString::new(OPS_NAME).expect("no NUL");
        // SAFETY: `mp` is a fresh, unpopulated mempool; the context pointer stays valid as long
        // as `self.ctx`, which outlives the mempool (freed in Drop before the Arc goes).
        let rc = unsafe {
            sys::rte_mempool_set_ops_byname(mp, ops.as_ptr(), Arc::as_ptr(&self.ctx) as *mut c_void)
        };
        if rc < 0 {
            return Err(DpdkError::call("rte_mempool_set_ops_byname", rc));
        }
        let (base, len) = self.ctx.pool.memory();
        // Register the region as external memory, so that DPDK's address lookups know it and
        // physical devices can map it for DMA (DpdkPort does, for PCI devices). Virtual devices
        // do not need it: a failure only disables PCI ports.
        let page = if self.ctx.pool.is_hugepage_backed() {
            2 << 20
        } else {
            4096
        };
        // SAFETY: base/len describe the pool's whole mapping, page aligned, which lives as long
        // as `self.ctx.pool` (unregistered in Drop).
        let rc = unsafe { sys::rte_extmem_register(base.cast(), len, ptr::null_mut(), 0, page) };
        if rc == 0 {
            self.extmem = true;
        } else {
            let e = DpdkError::from_rte_errno("rte_extmem_register");
            tracing::debug!(error = %e, "buffer region not registered with DPDK (PCI ports unavailable)");
        }
        let iova = if self.ctx.iova_va {
            base as u64
        } else {
            // SAFETY: reads a constant.
            unsafe { sys::QUIVER_BAD_IOVA }
        };
        // SAFETY: `mp` uses our ops, whose populate callback lays the objects out over exactly
        // this region (the pool's), which outlives the mempool.
        let rc = unsafe {
            sys::rte_mempool_populate_iova(mp, base.cast(), iova, len, None, ptr::null_mut())
        };
        if rc < 0 {
            return Err(DpdkError::call("rte_mempool_populate_iova", rc));
        }
        // SAFETY: `mp` is valid; populated_size is written only during populate (just done).
        let populated = unsafe { (*mp).populated_size };
        if populated != self.ctx.pool.capacity() {
            return Err(DpdkError::Config(format!(
                "mempool populated with {populated} of {} buffers",
                self.ctx.pool.capacity()
            )));
        }
        tracing::debug!(name = %self.name, buffers = populated, "DPDK mempool over Quiver's buffers");
        Ok(())
    }

    /// The raw mempool, for ethdev queue setup.
    pub(crate) fn raw(&self) -> *mut sys::rte_mempool {
        self.mp.as_ptr()
    }

    pub(crate) fn map(&self) -> MbufMap {
        self.ctx.map
    }

    /// The Quiver pool it draws from.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.ctx.pool
    }

    /// Its DPDK name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the region is registered with DPDK as external memory (needed for DMA).
    pub(crate) fn is_registered(&self) -> bool {
        self.extmem
    }

    /// Free buffers sitting in DPDK's per-lcore caches (not counted by
    /// `BufferPool::free_count`). A snapshot: lcores running traffic change it as it is read.
    pub fn cached(&self) -> usize {
        let mp = self.mp.as_ptr();
        let mut total = 0usize;
        for lcore in 0..sys::RTE_MAX_LCORE {
            // SAFETY: `mp` is valid; with a cache configured, local_cache has RTE_MAX_LCORE
            // entries. `len` is read with a volatile load because the owning lcore may be
            // changing it (the figure is advisory).
            let cache = unsafe { sys::rte_mempool_default_cache(mp, lcore) };
            if !cache.is_null() {
                // SAFETY: a valid cache of a valid mempool (just above).
                total += unsafe { ptr::read_volatile(ptr::addr_of!((*cache).len)) } as usize;
            }
        }
        total
    }

    /// Returns the calling thread's lcore cache (if it has an lcore) to Quiver's free stack.
    pub fn flush_current_lcore_cache(&self) {
        // SAFETY: rte_lcore_id reads this thread's lcore id.
        let lcore = unsafe { sys::rte_lcore_id() };
        if lcore == sys::LCORE_ID_ANY {
            return;
        }
        let mp = self.mp.as_ptr();
        // SAFETY: this thread owns lcore `lcore`'s cache; flushing it calls our enqueue.
        unsafe {
            let cache = sys::rte_mempool_default_cache(mp, lcore);
            if !cache.is_null() {
                sys::rte_mempool_cache_flush(cache, mp);
            }
        }
    }
}

impl Drop for DpdkMempool {
    fn drop(&mut self) {
        let mp = self.mp.as_ptr();
        // Nothing uses the mempool any more (ports and queues hold it): empty every lcore's
        // cache into the free stack so that the pool's counts come out exact.
        for lcore in 0..sys::RTE_MAX_LCORE {
            // SAFETY: no lcore uses this mempool now, so its caches may be flushed from here;
            // flushing calls our enqueue, which returns the buffers to Quiver's pool.
            unsafe {
                let cache = sys::rte_mempool_default_cache(mp, lcore);
                if !cache.is_null() && (*cache).len > 0 {
                    sys::rte_mempool_cache_flush(cache, mp);
                }
            }
        }
        // rte_mempool_free dequeues every populated object before releasing the mempool (it
        // expects them all back in its store): make our dequeue refuse from here on, so that
        // Quiver's free stack keeps its buffers.
        self.ctx.closing.store(true, Ordering::SeqCst);
        // SAFETY: the mempool is unused (see above); freeing it releases DPDK's headers, not
        // the region, which Quiver's pool owns.
        unsafe { sys::rte_mempool_free(mp) };
        let refused = self.ctx.refused_while_closing.load(Ordering::SeqCst);
        let populated = u64::from(self.ctx.pool.capacity());
        if refused != populated {
            // DPDK's teardown asks once per object; anything else means a dequeue we did not
            // expect (or a DPDK whose teardown changed): say so rather than guess.
            tracing::error!(
                mempool = %self.name, refused, populated,
                "unexpected dequeues while freeing the DPDK mempool"
            );
        }
        if self.extmem {
            let (base, len) = self.ctx.pool.memory();
            // SAFETY: the same region registered in `setup`; no port maps it any more.
            unsafe { sys::rte_extmem_unregister(base.cast(), len) };
        }
        forget_pool(&self.ctx.pool);
    }
}

fn forget_pool(pool: &Arc<BufferPool>) {
    let key = Arc::as_ptr(pool) as usize;
    POOLS_WITH_MEMPOOL
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|&k| k != key);
}

/// The context behind `mp`.
///
/// # Safety
/// `mp` must be a mempool made by [`DpdkMempool::create`] and not yet freed.
unsafe fn context<'a>(mp: *const sys::rte_mempool) -> &'a OpsContext {
    // SAFETY: per the contract, pool_config is the OpsContext pointer set in `setup`, kept
    // alive by the DpdkMempool until after rte_mempool_free.
    unsafe { &*((*mp).pool_config as *const OpsContext) }
}

unsafe extern "C" fn ops_alloc(_mp: *mut sys::rte_mempool) -> c_int {
    0
}

unsafe extern "C" fn ops_free(_mp: *mut sys::rte_mempool) {}

/// DPDK returns objects (a cache overflowing or flushed, a put without cache).
unsafe extern "C" fn ops_enqueue(
    mp: *mut sys::rte_mempool,
    objs: *const *mut c_void,
    n: c_uint,
) -> c_int {
    // SAFETY: DPDK calls the ops only for mempools set up with them (ours).
    let ctx = unsafe { context(mp) };
    // SAFETY: DPDK passes `n` valid object pointers.
    let objs = unsafe { std::slice::from_raw_parts(objs, n as usize) };
    let mut idx = [BufferIndex::NONE; OPS_CHUNK];
    let double_frees = ctx.pool.double_free_count();
    for chunk in objs.chunks(OPS_CHUNK) {
        let mut k = 0;
        for &o in chunk {
            match ctx.map.index(o.cast()) {
                Some(bi) => {
                    idx[k] = bi;
                    k += 1;
                }
                None => {
                    if !ctx.foreign.swap(true, Ordering::Relaxed) {
                        tracing::error!(object = ?o, "a foreign object was put into a Quiver mempool; ignored");
                    }
                }
            }
        }
        ctx.pool.put_free(&idx[..k]);
    }
    let now = ctx.pool.double_free_count();
    if now != double_frees && !ctx.double_free_logged.swap(true, Ordering::Relaxed) {
        // put_free counted and skipped them; a driver (or Quiver) gave back an mbuf twice.
        tracing::error!(
            mempool_double_frees = now - double_frees,
            pool_double_frees = now,
            "DPDK returned buffers to a Quiver mempool that were already free (double free); \
             skipped (BufferPool::double_free_count counts them)"
        );
    }
    0
}

/// DPDK wants exactly `n` objects (a cache refilling, a get without cache), or none.
unsafe extern "C" fn ops_dequeue(
    mp: *mut sys::rte_mempool,
    objs: *mut *mut c_void,
    n: c_uint,
) -> c_int {
    // SAFETY: DPDK calls the ops only for mempools set up with them (ours).
    let ctx = unsafe { context(mp) };
    if ctx.closing.load(Ordering::Acquire) {
        // rte_mempool_free taking the objects back (see the module's "Freeing the mempool"):
        // they stay where they are, on Quiver's free stack or with their owners. DPDK ignores
        // the result and never reads the object.
        let refused = ctx
            .refused_while_closing
            .fetch_add(n as u64, Ordering::Relaxed)
            + n as u64;
        if n != 1 || refused > u64::from(ctx.pool.capacity()) {
            tracing::error!(
                n,
                "a dequeue from a Quiver mempool that is being freed; refused"
            );
        }
        return -libc::ENOBUFS;
    }
    // SAFETY: DPDK passes room for `n` object pointers.
    let objs = unsafe { std::slice::from_raw_parts_mut(objs, n as usize) };
    let mut idx = [BufferIndex::NONE; OPS_CHUNK];
    let mut done = 0;
    while done < objs.len() {
        let k = (objs.len() - done).min(OPS_CHUNK);
        if ctx.pool.take_free(&mut idx[..k]).is_err() {
            // All or nothing: give back what this call took.
            for &o in &objs[..done] {
                if let Some(bi) = ctx.map.index(o.cast()) {
                    ctx.pool.put_free(&[bi]);
                }
            }
            return -libc::ENOBUFS;
        }
        for (o, &bi) in objs[done..done + k].iter_mut().zip(&idx[..k]) {
            *o = ctx.map.mbuf(bi).cast();
        }
        done += k;
    }
    0
}

/// Objects available from the backing store: Quiver's free buffers.
unsafe extern "C" fn ops_get_count(mp: *const sys::rte_mempool) -> c_uint {
    // SAFETY: DPDK calls the ops only for mempools set up with them (ours).
    let ctx = unsafe { context(mp) };
    ctx.pool.free_count() as c_uint
}

/// Lays the objects out over Quiver's region: one per buffer, at its mbuf. Each mbuf header is
/// initialised and each object registered with DPDK (`obj_cb`), but none is enqueued: they are
/// already on Quiver's free stack, or owned by whoever holds them.
unsafe extern "C" fn ops_populate(
    mp: *mut sys::rte_mempool,
    max_objs: c_uint,
    vaddr: *mut c_void,
    iova: sys::rte_iova_t,
    len: usize,
    obj_cb: sys::rte_mempool_populate_obj_cb_t,
    obj_cb_arg: *mut c_void,
) -> c_int {
    // SAFETY: DPDK calls the ops only for mempools set up with them (ours).
    let ctx = unsafe { context(mp) };
    let (base, region_len) = ctx.pool.memory();
    if vaddr.cast::<u8>() != base || len != region_len {
        return -libc::EINVAL;
    }
    let count = ctx.pool.capacity().min(max_objs);
    for bi in (0..count).map(BufferIndex::new) {
        let m = ctx.map.mbuf(bi);
        let buf = m.cast::<u8>().wrapping_add(MBUF_SIZE + PRIV_SIZE as usize);
        let buf_iova = if ctx.iova_va {
            iova + (buf as usize - base as usize) as u64
        } else {
            iova
        };
        // SAFETY: `m` is the mbuf slot inside buffer `bi`'s prefix (in the region, 64-byte
        // aligned, 128 bytes), which only DPDK code ever touches; the object header DPDK
        // writes through obj_cb lies in the prefix's 24 bytes before it.
        unsafe {
            init_mbuf(m, mp, buf, buf_iova, ctx.area, ctx.headroom);
            if let Some(cb) = obj_cb {
                let obj_iova = if ctx.iova_va {
                    iova + (m as usize - base as usize) as u64
                } else {
                    iova
                };
                cb(mp, obj_cb_arg, m.cast(), obj_iova);
            }
        }
    }
    count as c_int
}

/// What `rte_pktmbuf_init` does, except that it leaves the private area (Quiver's metadata of a
/// buffer that may be in use) alone.
///
/// # Safety
/// `m` must point to 128 writable bytes reserved for this mbuf, followed by the private area and
/// `buf_len` bytes at `buf`.
unsafe fn init_mbuf(
    m: *mut sys::rte_mbuf,
    mp: *mut sys::rte_mempool,
    buf: *mut u8,
    buf_iova: u64,
    buf_len: u16,
    headroom: u16,
) {
    // SAFETY: per the contract; all-zero is a valid rte_mbuf.
    unsafe {
        ptr::write_bytes(m, 0, 1);
        let m = &mut *m;
        m.priv_size = PRIV_SIZE;
        m.buf_addr = buf.cast();
        m.buf_iova = buf_iova;
        m.buf_len = buf_len;
        m.data_off = headroom.min(buf_len);
        m.pool = mp;
        m.nb_segs = 1;
        m.port = u16::MAX;
        m.refcnt = 1;
        m.next = ptr::null_mut();
    }
}
