//! A worker's handle on the pool: burst allocation through a private cache, and buffer access.

use crate::memory::prefetch;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::external::{self, ExternalRef, ExternalSource, ExternalState};
use super::index::BufferIndex;
use super::meta::{flags, BufferMeta};
use super::pool::{BufferPool, Layout, PoolExhausted};
use super::view::BufferView;

/// Indices a cache takes from the pool beyond what an allocation needs.
const REFILL: usize = 512;
/// A cache holding more than this returns the excess down to [`SPILL_TO`].
const SPILL_ABOVE: usize = 2048;
const SPILL_TO: usize = 1024;

/// One worker's access to a [`BufferPool`].
///
/// Allocation and free are bursts against a private cache; only refills and spills touch the
/// pool's shared free stack. Accessors take buffer indices this worker owns (see the ownership
/// rule on [`BufferPool`]); an index beyond the pool is a bug and panics.
pub struct WorkerBuffers {
    layout: Layout,
    cache: Vec<BufferIndex>,
    gauge: Arc<AtomicUsize>,
    pool: Arc<BufferPool>,
    external: ExternalState,
}

// SAFETY: the raw pointer in `layout` points into the pool's region, which `pool` keeps alive;
// moving the handle to another thread moves the ownership of its cached indices with it.
unsafe impl Send for WorkerBuffers {}

impl BufferPool {
    /// A per-worker handle that allocates, frees and accesses buffers.
    pub fn worker_buffers(self: &Arc<Self>) -> WorkerBuffers {
        let gauge = Arc::new(AtomicUsize::new(0));
        self.add_cache(gauge.clone());
        WorkerBuffers::new(self.clone(), gauge)
    }
}

impl WorkerBuffers {
    pub(crate) fn new(pool: Arc<BufferPool>, gauge: Arc<AtomicUsize>) -> Self {
        WorkerBuffers {
            layout: pool.layout(),
            cache: Vec::with_capacity(SPILL_ABOVE + REFILL + crate::FRAME_SIZE),
            gauge,
            pool,
            external: ExternalState::default(),
        }
    }

    /// The pool this handle draws from.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// Headroom bytes of each buffer.
    #[inline]
    pub fn headroom(&self) -> u16 {
        self.layout.headroom
    }

    /// Bytes a single buffer can hold from its initial data offset.
    #[inline]
    pub fn data_size(&self) -> u16 {
        self.layout.area - self.layout.headroom
    }

    /// Allocates exactly `out.len()` buffers with fresh metadata, or none.
    pub fn alloc(&mut self, out: &mut [BufferIndex]) -> Result<(), PoolExhausted> {
        if self.cache.len() < out.len() {
            let want = out.len() - self.cache.len() + REFILL;
            self.pool.take_into(&mut self.cache, want);
            if self.cache.len() < out.len() {
                self.publish_gauge();
                return Err(PoolExhausted {
                    wanted: out.len(),
                    available: self.cache.len(),
                });
            }
        }
        self.pop_into(out);
        Ok(())
    }

    /// Allocates as many of `out.len()` buffers as there are; returns how many.
    pub fn alloc_up_to(&mut self, out: &mut [BufferIndex]) -> usize {
        if self.cache.len() < out.len() {
            let want = out.len() - self.cache.len() + REFILL;
            self.pool.take_into(&mut self.cache, want);
        }
        let n = out.len().min(self.cache.len());
        self.pop_into(&mut out[..n]);
        n
    }

    /// Allocates one buffer.
    pub fn alloc_one(&mut self) -> Option<BufferIndex> {
        let mut one = [BufferIndex::NONE];
        (self.alloc_up_to(&mut one) == 1).then_some(one[0])
    }

    fn pop_into(&mut self, out: &mut [BufferIndex]) {
        let from = self.cache.len() - out.len();
        out.copy_from_slice(&self.cache[from..]);
        self.cache.truncate(from);
        let fresh = BufferMeta::new(self.layout.headroom);
        for &bi in out.iter() {
            *self.meta_mut(bi) = fresh;
        }
        self.publish_gauge();
    }

    /// Frees packets: each index and every buffer chained behind it.
    ///
    /// A buffer that is already free is counted as a double free and skipped, so a bug elsewhere
    /// cannot give one buffer two owners.
    pub fn free(&mut self, packets: &[BufferIndex]) {
        if self.external.any() {
            self.release_external(packets);
        }
        let mut rest = packets;
        while !rest.is_empty() {
            let done = self.free_single_buffers(rest);
            let Some((&head, tail)) = rest[done..].split_first() else {
                break;
            };
            self.free_chain(head);
            rest = tail;
        }
        if self.cache.len() > SPILL_ABOVE {
            let keep = SPILL_TO;
            self.pool.give_back(&self.cache[keep..]);
            self.cache.truncate(keep);
        }
        self.publish_gauge();
    }

    /// Frees the leading packets of `packets` that are single buffers, not free already (the
    /// common case, which a transmit queue frees a whole burst of): room in the cache is made
    /// once, and the loop keeps the pool's geometry in registers. Returns how many it freed;
    /// it stops at the first chained or already free buffer, for [`WorkerBuffers::free_chain`]
    /// (and at an index beyond the pool, on which `free_chain` panics once the buffers freed so
    /// far are in the cache).
    #[inline]
    fn free_single_buffers(&mut self, packets: &[BufferIndex]) -> usize {
        self.cache.reserve(packets.len());
        let layout = self.layout;
        let mut n = 0;
        for (slot, &bi) in self.cache.spare_capacity_mut().iter_mut().zip(packets) {
            if bi.get() >= layout.count {
                break;
            }
            // SAFETY: `bi` is below `count` (checked just above); the metadata is in bounds,
            // aligned and, by the ownership rule, written by nobody else (as in `meta_mut`).
            let meta = unsafe { &mut *layout.meta_ptr_unchecked(bi) };
            if meta.flags & (flags::FREE | flags::NEXT_PRESENT) != 0 {
                break;
            }
            meta.flags = flags::FREE;
            slot.write(bi);
            n += 1;
        }
        // SAFETY: the first `n` slots of the spare capacity were written just above.
        unsafe { self.cache.set_len(self.cache.len() + n) };
        n
    }

    /// Frees one packet and every buffer chained behind it, counting (and stopping at) a buffer
    /// that is free already.
    fn free_chain(&mut self, head: BufferIndex) {
        let mut bi = head;
        loop {
            let meta = self.meta_mut(bi);
            if meta.flags & flags::FREE != 0 {
                self.pool.note_double_free();
                break;
            }
            let next = meta.next();
            meta.flags = flags::FREE;
            self.cache.push(bi);
            match next {
                Some(n) => bi = n,
                None => break,
            }
        }
    }

    /// Frees one packet (and its chain).
    pub fn free_one(&mut self, packet: BufferIndex) {
        self.free(&[packet]);
    }

    #[inline]
    fn publish_gauge(&self) {
        self.gauge.store(self.cache.len(), Ordering::Relaxed);
    }

    #[inline(always)]
    fn meta_ptr(&self, bi: BufferIndex) -> *mut BufferMeta {
        let i = bi.get();
        assert!(i < self.layout.count, "buffer index {i} beyond the pool");
        // SAFETY: checked just above.
        unsafe { self.layout.meta_ptr_unchecked(bi) }
    }

    /// The buffer's metadata.
    #[inline(always)]
    pub fn meta(&self, bi: BufferIndex) -> &BufferMeta {
        // SAFETY: the pointer is in bounds and aligned (see `meta_ptr`), the region lives as long
        // as `self.pool`, and by the ownership rule no one else writes a buffer this worker owns.
        unsafe { &*self.meta_ptr(bi) }
    }

    /// The buffer's metadata, for writing.
    #[inline(always)]
    pub fn meta_mut(&mut self, bi: BufferIndex) -> &mut BufferMeta {
        // SAFETY: as in `meta`; `&mut self` keeps this the only reference made through this handle.
        unsafe { &mut *self.meta_ptr(bi) }
    }

    /// The bytes after the metadata: headroom then data, `headroom + data_size` long.
    #[inline(always)]
    fn area_ptr(&self, bi: BufferIndex) -> *mut u8 {
        // SAFETY: the area directly follows the 64-byte metadata inside the same stride.
        unsafe { self.meta_ptr(bi).cast::<u8>().add(64) }
    }

    /// The data window `[data_offset, data_offset + length)`, clamped to the buffer's area so
    /// that no metadata value can reach outside it.
    #[inline(always)]
    fn window(&self, meta: &BufferMeta) -> (usize, usize) {
        let area = self.layout.area as usize;
        let off = (meta.data_offset as usize).min(area);
        let len = (meta.length as usize).min(area - off);
        (off, len)
    }

    /// The packet bytes in this buffer (not its chain).
    #[inline(always)]
    pub fn data(&self, bi: BufferIndex) -> &[u8] {
        self.materialise_if_external(bi);
        let (off, len) = self.window(self.meta(bi));
        // SAFETY: `window` keeps `off + len` within the area, which lies inside the region; the
        // buffer is owned by this worker, so nothing writes it while the slice lives.
        unsafe { std::slice::from_raw_parts(self.area_ptr(bi).add(off), len) }
    }

    /// The packet bytes in this buffer, for writing.
    #[inline(always)]
    pub fn data_mut(&mut self, bi: BufferIndex) -> &mut [u8] {
        self.materialise_if_external(bi);
        let (off, len) = self.window(self.meta(bi));
        // SAFETY: as in `data`; `&mut self` makes this the only live reference into the buffer.
        unsafe { std::slice::from_raw_parts_mut(self.area_ptr(bi).add(off), len) }
    }

    /// The packet bytes of buffer `src` to read and of buffer `dst` to write, at once (to copy
    /// from one into the other without a bounce buffer); `None` when they are the same buffer.
    #[inline]
    pub fn data_pair_mut(
        &mut self,
        src: BufferIndex,
        dst: BufferIndex,
    ) -> Option<(&[u8], &mut [u8])> {
        if src == dst {
            return None;
        }
        self.materialise_if_external(src);
        self.materialise_if_external(dst);
        let (s_off, s_len) = self.window(self.meta(src));
        let (d_off, d_len) = self.window(self.meta(dst));
        // SAFETY: each window lies inside its own buffer's area (see `data`); two distinct
        // buffers have disjoint strides, so the slices do not overlap; `&mut self` makes them the
        // only live references into either buffer.
        unsafe {
            Some((
                std::slice::from_raw_parts(self.area_ptr(src).add(s_off), s_len),
                std::slice::from_raw_parts_mut(self.area_ptr(dst).add(d_off), d_len),
            ))
        }
    }

    /// Metadata and packet bytes together, for nodes that need both at once.
    #[inline(always)]
    pub fn meta_and_data_mut(&mut self, bi: BufferIndex) -> (&mut BufferMeta, &mut [u8]) {
        self.materialise_if_external(bi);
        let (off, len) = self.window(self.meta(bi));
        let meta = self.meta_ptr(bi);
        // SAFETY: the metadata and the area are disjoint parts of the buffer; both in bounds as in
        // `meta` and `data`; `&mut self` makes these the only live references.
        unsafe {
            let data = std::slice::from_raw_parts_mut(self.area_ptr(bi).add(off), len);
            (&mut *meta, data)
        }
    }

    /// Makes room for `n` more bytes in front of the packet (into the headroom) and returns them.
    /// `None`, changing nothing, when the headroom is too small.
    #[inline]
    pub fn prepend(&mut self, bi: BufferIndex, n: u16) -> Option<&mut [u8]> {
        self.materialise_if_external(bi);
        let meta_ptr = self.meta_ptr(bi);
        // SAFETY: in bounds and owned by this worker (see `meta_mut`); the reference ends before
        // the data slice below is made.
        let meta = unsafe { &mut *meta_ptr };
        if meta.data_offset < n || meta.length as u32 + n as u32 > u16::MAX as u32 {
            return None;
        }
        meta.data_offset -= n;
        meta.length += n;
        let off = meta.data_offset as usize;
        // SAFETY: `off + n` is within the old window's start, itself within the area (the
        // window never leaves it); the area follows the metadata in the same stride.
        Some(unsafe {
            std::slice::from_raw_parts_mut(meta_ptr.cast::<u8>().add(64 + off), n as usize)
        })
    }

    /// Drops `n` bytes from the front of the packet (a header consumed). `false`, changing
    /// nothing, when the buffer holds fewer.
    #[inline]
    pub fn advance(&mut self, bi: BufferIndex, n: u16) -> bool {
        self.meta_mut(bi).advance(n)
    }

    /// Moves the front of the packet back by `n` bytes, re-exposing a header that `advance`
    /// skipped. `false`, changing nothing, when it would leave the buffer.
    #[inline]
    pub fn retreat(&mut self, bi: BufferIndex, n: u16) -> bool {
        self.prepend(bi, n).is_some()
    }

    /// Sets the bytes of packet data in this buffer. `false`, changing nothing, when the buffer
    /// cannot hold that many from its current offset.
    #[inline]
    pub fn set_length(&mut self, bi: BufferIndex, len: u16) -> bool {
        let area = self.layout.area;
        let meta = self.meta_mut(bi);
        if meta.data_offset as u32 + len as u32 > area as u32 {
            return false;
        }
        meta.length = len;
        true
    }

    /// Replaces the packet in `bi` with `bytes`, chaining more buffers when one is not enough.
    /// On exhaustion `bi` keeps whatever was written and every buffer chained so far.
    pub fn write_packet(&mut self, bi: BufferIndex, bytes: &[u8]) -> Result<(), PoolExhausted> {
        self.unchain(bi);
        let first = bytes.len().min(self.data_size() as usize);
        self.set_length(bi, first as u16);
        self.data_mut(bi).copy_from_slice(&bytes[..first]);
        let mut rest = &bytes[first..];
        while !rest.is_empty() {
            let seg = self.alloc_one().ok_or(PoolExhausted {
                wanted: 1,
                available: 0,
            })?;
            let n = rest.len().min(self.data_size() as usize);
            self.set_length(seg, n as u16);
            self.data_mut(seg).copy_from_slice(&rest[..n]);
            self.chain_append(bi, seg);
            rest = &rest[n..];
        }
        Ok(())
    }

    /// Frees every buffer chained behind `bi`, leaving it a single-buffer packet.
    pub fn unchain(&mut self, bi: BufferIndex) {
        let meta = self.meta_mut(bi);
        if let Some(next) = meta.next() {
            meta.flags &= !flags::NEXT_PRESENT;
            meta.next = BufferIndex::NONE;
            meta.chain_rest = 0;
            self.free(&[next]);
        }
    }

    /// Cuts packet `bi` to its first `len` bytes, freeing the buffers of its chain that hold
    /// none of them; `false`, changing nothing, when it holds fewer than `len`.
    pub fn truncate(&mut self, bi: BufferIndex, len: u32) -> bool {
        let total = self.meta(bi).total_length();
        if len >= total {
            return len == total;
        }
        let mut left = len;
        let mut cur = bi;
        loop {
            let here = u32::from(self.meta(cur).length);
            if left <= here {
                self.unchain(cur);
                self.meta_mut(cur).length = left as u16;
                break;
            }
            left -= here;
            match self.meta(cur).next() {
                Some(next) => cur = next,
                // `total_length` counted more than the chain holds: leave it.
                None => return false,
            }
        }
        let head = self.meta_mut(bi);
        head.chain_rest = len - u32::from(head.length);
        true
    }

    /// Appends the packet `tail` (one buffer or a chain) to the end of the packet `head`.
    /// `tail` must be a packet of its own, not a buffer already in `head`'s chain.
    pub fn chain_append(&mut self, head: BufferIndex, tail: BufferIndex) {
        debug_assert!(
            self.chain(head).all(|bi| bi != tail),
            "chaining a buffer into its own chain"
        );
        let added = self.meta(tail).total_length();
        // Only a chain's first buffer carries the length of the rest.
        self.meta_mut(tail).chain_rest = 0;
        let mut last = head;
        while let Some(n) = self.meta(last).next() {
            last = n;
        }
        let meta = self.meta_mut(last);
        meta.flags |= flags::NEXT_PRESENT;
        meta.next = tail;
        self.meta_mut(head).chain_rest += added;
    }

    /// The buffers of a packet, first to last.
    pub fn chain(&self, head: BufferIndex) -> impl Iterator<Item = BufferIndex> + '_ {
        std::iter::successors(Some(head), move |&bi| self.meta(bi).next())
    }

    /// Appends the whole packet's bytes (following its chain) to `out`.
    pub fn copy_packet(&self, head: BufferIndex, out: &mut Vec<u8>) {
        for bi in self.chain(head) {
            out.extend_from_slice(self.data(bi));
        }
    }

    /// A [`BufferView`]: these accessors with the pool's geometry held in registers, for a node's
    /// loop over a frame.
    #[inline(always)]
    pub fn view(&mut self) -> BufferView<'_> {
        BufferView::new(&self.layout, &self.external, &self.pool)
    }

    /// Registers a source of external-payload buffers (a driver's receive memory, per
    /// connection) and returns its id for [`WorkerBuffers::attach_external`]. Allocates; call
    /// it when a connection comes up, not per packet. Retired sources are forgotten first.
    pub fn register_external<T: ExternalSource + 'static>(&mut self, source: Arc<T>) -> u32 {
        self.external.register(source, self.layout.count)
    }

    /// Forgets the sources that retired (see [`ExternalSource::is_retired`]); returns how many
    /// registered sources are left.
    pub fn prune_external(&mut self) -> usize {
        self.external.prune()
    }

    /// Makes `bi` (a buffer just allocated) an external-payload buffer: its packet is the `len`
    /// bytes of frame `token` of source `source`, not copied (see [`ExternalSource`]). The
    /// window is set as for a received packet. False, changing nothing, when `len` does not fit
    /// in one buffer or `source` is not registered (or beyond the 65,534 sources a worker can
    /// name at once): copy the frame instead.
    pub fn attach_external(&mut self, bi: BufferIndex, source: u32, token: u32, len: u16) -> bool {
        if len > self.data_size() || self.external.source(source).is_none() {
            return false;
        }
        if !self.external.attach(bi, ExternalRef { source, token, len }) {
            return false;
        }
        let headroom = self.layout.headroom;
        let meta = self.meta_mut(bi);
        meta.data_offset = headroom;
        meta.length = len;
        true
    }

    /// When `bi` is an external-payload buffer: its source and frame token, for a driver that
    /// copies from the source itself. The packet's bytes are the frame's bytes from offset
    /// `data_offset - headroom` on (the window moved by metadata-only changes).
    #[inline]
    pub fn external(&self, bi: BufferIndex) -> Option<(&Arc<dyn ExternalSource>, u32)> {
        let (source, token) = self.external_ref(bi)?;
        self.external.source(source).map(|s| (s, token))
    }

    /// [`WorkerBuffers::external`] by source id: (source id, frame token), for a driver that
    /// looks the source up once per burst ([`WorkerBuffers::external_source`]).
    #[inline]
    pub fn external_ref(&self, bi: BufferIndex) -> Option<(u32, u32)> {
        if !self.external.any() {
            return None;
        }
        self.external.get(bi).map(|r| (r.source, r.token))
    }

    /// The registered external source `id` (see [`WorkerBuffers::external_ref`]).
    #[inline]
    pub fn external_source(&self, id: u32) -> Option<&Arc<dyn ExternalSource>> {
        self.external.source(id)
    }

    /// The registered external source `id` as the `T` its driver registered, or `None` when it
    /// is not a `T` (another driver's): how a driver recognises its own sources (see
    /// [`WorkerBuffers::external_ref`]).
    #[inline]
    pub fn external_source_as<T: ExternalSource + 'static>(&self, id: u32) -> Option<&T> {
        self.external.source_as(id)
    }

    /// How many of this worker's buffers are external-payload buffers.
    pub fn external_count(&self) -> u32 {
        self.external.live()
    }

    /// Copies the packets' bytes into their own buffers where they are external (for a driver
    /// that hands buffers to a device, which reads memory directly). Cheap when none is.
    #[inline]
    pub fn materialise(&mut self, packets: &[BufferIndex]) {
        if self.external.any() {
            for &bi in packets {
                self.materialise_if_external(bi);
            }
        }
    }

    /// Materialises `bi` if it is external. Takes `&self`: only the buffer's own area (which
    /// nothing references while it is external) and the worker's `Cell` bitmap change.
    #[inline(always)]
    fn materialise_if_external(&self, bi: BufferIndex) {
        if self.external.any() && self.external.is_marked(bi) {
            // SAFETY: `bi` is external, so no reference into its area was ever handed out.
            unsafe {
                external::materialise(&self.external, bi, self.area_ptr(bi), self.layout.headroom)
            };
            self.pool.note_materialised();
        }
    }

    /// Releases the external buffers among `packets` and their chains (they are being freed):
    /// consecutive frames of one source go back to it in one [`ExternalSource::release_many`].
    #[inline(never)]
    fn release_external(&mut self, packets: &[BufferIndex]) {
        const BATCH: usize = 64;
        let mut batch = [0u32; BATCH];
        let (mut batch_source, mut len) = (u32::MAX, 0);
        let flush = |source: u32, tokens: &[u32]| {
            if let Some(s) = self.external.source(source) {
                s.release_many(tokens);
            }
        };
        for &head in packets {
            let mut bi = head;
            loop {
                if bi.get() >= self.layout.count {
                    break;
                }
                if let Some(ExternalRef { source, token, .. }) = self.external.detach(bi) {
                    if source != batch_source || len == BATCH {
                        flush(batch_source, &batch[..len]);
                        (batch_source, len) = (source, 0);
                    }
                    batch[len] = token;
                    len += 1;
                }
                let meta = self.meta(bi);
                match meta.next() {
                    Some(n) if meta.flags & flags::FREE == 0 => bi = n,
                    _ => break,
                }
            }
        }
        flush(batch_source, &batch[..len]);
    }

    /// Hints the CPU to fetch a buffer's metadata.
    #[inline(always)]
    pub fn prefetch_meta(&self, bi: BufferIndex) {
        prefetch(self.meta_ptr(bi));
    }

    /// Hints the CPU to fetch a buffer's metadata and the cache line where packet data starts
    /// when it has not been moved far from the initial offset (received packets, headers
    /// stripped or prepended). Needs no load, so it never stalls, unlike
    /// [`WorkerBuffers::prefetch_data`], which reads the metadata to find the data.
    #[inline(always)]
    pub fn prefetch_buffer(&self, bi: BufferIndex) {
        let meta = self.meta_ptr(bi).cast::<u8>();
        prefetch(meta);
        // SAFETY: only an address is computed (prefetch never faults): 64 + headroom lies within
        // the stride.
        prefetch(unsafe { meta.add(64 + self.layout.headroom as usize) });
    }

    /// Hints the CPU to fetch the first cache line of a buffer's packet data.
    #[inline(always)]
    pub fn prefetch_data(&self, bi: BufferIndex) {
        let off = self.meta(bi).data_offset as usize;
        // SAFETY: only an address is computed (prefetch never faults); it stays within the stride
        // because data_offset never exceeds the area.
        prefetch(unsafe { self.area_ptr(bi).add(off.min(self.layout.area as usize)) });
    }
}

impl Drop for WorkerBuffers {
    fn drop(&mut self) {
        self.pool.give_back(&self.cache);
        self.cache.clear();
        self.publish_gauge();
        self.pool.forget_cache(&self.gauge);
    }
}
