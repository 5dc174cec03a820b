//! A node's lean access to its worker's buffers for the length of one frame.

use super::index::BufferIndex;
use std::marker::PhantomData;

use crate::memory::prefetch;

use super::external::{self, ExternalState};
use super::meta::BufferMeta;
use super::pool::{BufferPool, Layout};

/// [`WorkerBuffers`](super::WorkerBuffers)' per-packet accessors with the pool's geometry copied
/// into a small value that the compiler keeps in registers: a node that visits every packet of a
/// frame takes one (`cx.buffers.view()`) before its loop. Per packet it costs the index check, one
/// multiply, and a window check that is a single compare when the metadata is sane (the window is
/// still clamped to the buffer when it is not).
///
/// It borrows the [`WorkerBuffers`](super::WorkerBuffers) mutably, so the ownership rule that makes
/// those accessors sound holds here the same way.
pub struct BufferView<'a> {
    /// Address of buffer 0's metadata.
    meta_base: *mut u8,
    stride: usize,
    count: u32,
    /// Headroom plus data size: the bytes after the metadata.
    area: u16,
    headroom: u16,
    /// The worker's external buffers, when it has any as the view is made (none become
    /// external while it lives: only the handle it borrows attaches them).
    external: Option<(&'a ExternalState, &'a BufferPool)>,
    /// The mutable borrow of the [`WorkerBuffers`](super::WorkerBuffers) it came from
    /// ([`WorkerBuffers::view`](super::WorkerBuffers::view)).
    _buffers: PhantomData<&'a mut ()>,
}

impl<'a> BufferView<'a> {
    /// A view made from `layout`, for as long as the `WorkerBuffers` it came from is borrowed.
    #[inline(always)]
    pub(super) fn new(layout: &Layout, external: &'a ExternalState, pool: &'a BufferPool) -> Self {
        BufferView {
            meta_base: layout.base.wrapping_add(layout.meta_offset),
            stride: layout.stride,
            count: layout.count,
            area: layout.area,
            headroom: layout.headroom,
            external: external.any().then_some((external, pool)),
            _buffers: PhantomData,
        }
    }
}

impl BufferView<'_> {
    #[inline(always)]
    fn meta_ptr(&self, bi: BufferIndex) -> *mut BufferMeta {
        let i = bi.get();
        assert!(i < self.count, "buffer index {i} beyond the pool");
        // Checked just above: the metadata of buffer `bi` lies inside the pool's region.
        self.meta_base
            .wrapping_add(bi.as_usize() * self.stride)
            .cast()
    }

    /// The data window `[data_offset, data_offset + length)`, clamped to the area.
    #[inline(always)]
    fn window(&self, meta: &BufferMeta) -> (usize, usize) {
        let (off, len) = (meta.data_offset as usize, meta.length as usize);
        if off + len <= self.area as usize {
            (off, len)
        } else {
            let off = off.min(self.area as usize);
            (off, len.min(self.area as usize - off))
        }
    }

    /// Hints the CPU to fetch a buffer's metadata and the cache line where packet data starts when
    /// it has not moved far from the initial offset (see
    /// [`WorkerBuffers::prefetch_buffer`](super::WorkerBuffers::prefetch_buffer)). No check: a
    /// prefetch never faults.
    #[inline(always)]
    pub fn prefetch(&self, bi: BufferIndex) {
        let meta = self.meta_base.wrapping_add(bi.as_usize() * self.stride);
        prefetch(meta);
        prefetch(meta.wrapping_add(64 + self.headroom as usize));
    }

    /// Hints the CPU to fetch a buffer's metadata only, for a node that will not read the
    /// packet's bytes. No check: a prefetch never faults.
    #[inline(always)]
    pub fn prefetch_meta(&self, bi: BufferIndex) {
        prefetch(self.meta_base.wrapping_add(bi.as_usize() * self.stride));
    }

    /// Sets the bytes of packet data in this buffer; `false`, changing nothing, when the buffer
    /// cannot hold that many from its current offset (see
    /// [`WorkerBuffers::set_length`](super::WorkerBuffers::set_length)).
    #[inline]
    pub fn set_length(&mut self, bi: BufferIndex, len: u16) -> bool {
        let area = self.area as u32;
        let meta = self.meta_mut(bi);
        if meta.data_offset as u32 + len as u32 > area {
            return false;
        }
        meta.length = len;
        true
    }

    /// The buffer's metadata, for writing (see
    /// [`WorkerBuffers::meta_mut`](super::WorkerBuffers::meta_mut)).
    #[inline(always)]
    pub fn meta_mut(&mut self, bi: BufferIndex) -> &mut BufferMeta {
        // SAFETY: in bounds and aligned (`meta_ptr`), inside a region that outlives the borrow
        // of the `WorkerBuffers` this view holds; the buffer is owned by this worker, and
        // `&mut self` makes this the only reference made through the view.
        unsafe { &mut *self.meta_ptr(bi) }
    }

    /// Copies an external buffer's bytes into it before they are handed out (see the
    /// [`external`](super::external) module).
    #[inline(always)]
    fn materialise_if_external(&self, meta: *mut BufferMeta, bi: BufferIndex) {
        if let Some((ext, pool)) = self.external {
            if ext.any() && ext.is_marked(bi) {
                // SAFETY: `bi` is in bounds (its metadata pointer was checked) and external, so
                // nothing references its area (after the 64-byte metadata).
                unsafe { external::materialise(ext, bi, meta.cast::<u8>().add(64), self.headroom) };
                pool.note_materialised();
            }
        }
    }

    /// Bytes of packet data in this buffer (the window's length, as
    /// [`BufferView::meta_and_data_mut`] would give them), without touching the bytes: an
    /// external buffer stays external.
    #[inline(always)]
    pub fn data_len(&self, bi: BufferIndex) -> usize {
        // SAFETY: in bounds and aligned (`meta_ptr`); only read, and `&self` borrows the view.
        self.window(unsafe { &*self.meta_ptr(bi) }).1
    }

    /// Metadata and packet bytes together (see
    /// [`WorkerBuffers::meta_and_data_mut`](super::WorkerBuffers::meta_and_data_mut)).
    #[inline(always)]
    pub fn meta_and_data_mut(&mut self, bi: BufferIndex) -> (&mut BufferMeta, &mut [u8]) {
        let meta = self.meta_ptr(bi);
        self.materialise_if_external(meta, bi);
        // SAFETY: as in `meta_mut`.
        let (off, len) = self.window(unsafe { &*meta });
        // SAFETY: the metadata and the area after it are disjoint parts of the buffer; the
        // window lies inside the area; `&mut self` makes these the only live references.
        unsafe {
            let data = std::slice::from_raw_parts_mut(meta.cast::<u8>().add(64 + off), len);
            (&mut *meta, data)
        }
    }

    /// Metadata, the bytes before the packet (the free headroom) and the packet bytes: for a
    /// node that checks a packet, then writes a header in front of it and moves the window back
    /// over it with [`BufferMeta::retreat`].
    #[inline(always)]
    pub fn meta_headroom_and_data_mut(
        &mut self,
        bi: BufferIndex,
    ) -> (&mut BufferMeta, &mut [u8], &mut [u8]) {
        let meta = self.meta_ptr(bi);
        self.materialise_if_external(meta, bi);
        // SAFETY: as in `meta_mut`.
        let (off, len) = self.window(unsafe { &*meta });
        // SAFETY: `[0, off + len)` lies inside the area (the window does), disjoint from the
        // metadata; `&mut self` makes these the only live references.
        unsafe {
            let area = std::slice::from_raw_parts_mut(meta.cast::<u8>().add(64), off + len);
            let (headroom, data) = area.split_at_mut(off);
            (&mut *meta, headroom, data)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::pool::{BufferPool, BufferPoolConfig};
    use super::*;
    use crate::memory::HugepagePolicy;

    #[test]
    fn the_view_sees_what_the_handle_sees_and_clamps_bad_windows() {
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers: 4,
            hugepages: HugepagePolicy::Never,
            ..Default::default()
        })
        .unwrap();
        let mut w = pool.worker_buffers();
        let bi = w.alloc_one().unwrap();
        w.write_packet(bi, b"0123456789").unwrap();
        let headroom = w.headroom() as usize;
        {
            let mut v = w.view();
            let (meta, data) = v.meta_and_data_mut(bi);
            assert_eq!(data, b"0123456789");
            meta.rx_interface = 7;
            // A header written into the headroom, then the window moved back over it.
            let (meta, room, data) = v.meta_headroom_and_data_mut(bi);
            assert_eq!((room.len(), data.len()), (headroom, 10));
            room[headroom - 2..].copy_from_slice(b"ab");
            assert!(meta.retreat(2));
            assert!(v.set_length(bi, 5));
            v.prefetch(bi);
            v.prefetch(BufferIndex::NONE);
        }
        assert_eq!(w.data(bi), b"ab012");
        assert_eq!(w.meta(bi).rx_interface, 7);
        // Metadata from nowhere cannot reach outside the buffer.
        *w.meta_mut(bi) = BufferMeta::new(u16::MAX);
        let area = w.headroom() as usize + w.data_size() as usize;
        let mut v = w.view();
        assert!(!v.set_length(bi, 1));
        let (meta, room, data) = v.meta_headroom_and_data_mut(bi);
        assert_eq!((room.len(), data.len()), (area, 0));
        assert!(meta.retreat(u16::MAX));
        let (_, room, data) = v.meta_headroom_and_data_mut(bi);
        assert_eq!((room.len(), data.len()), (0, area), "clamped to the buffer");
        w.free_one(bi);
    }

    #[test]
    #[should_panic(expected = "beyond the pool")]
    fn an_index_beyond_the_pool_panics() {
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers: 4,
            hugepages: HugepagePolicy::Never,
            ..Default::default()
        })
        .unwrap();
        let mut w = pool.worker_buffers();
        w.view().meta_mut(BufferIndex::new(4));
    }
}
