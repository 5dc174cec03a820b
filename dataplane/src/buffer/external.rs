//! External-payload buffers: a buffer whose packet bytes are still in someone else's memory
//! (a memif peer's ring buffer), so that a driver can receive without copying and another
//! driver can copy the bytes straight from there to where they leave.
//!
//! The rule that keeps this invisible to nodes: an external buffer's data area holds no packet
//! bytes, and no accessor ever hands out its bytes as they are. Every accessor that gives out
//! packet bytes or headroom ([`WorkerBuffers::data`], `data_mut`, `meta_and_data_mut`,
//! `prepend`, and the same in [`BufferView`]) first *materialises* the buffer: copies the
//! payload into the buffer's own area at the offset where a received packet starts, releases
//! the source's frame, and forgets that the buffer was external. Metadata-only accessors
//! (`meta`, `meta_mut`, `BufferMeta::advance` …) leave it external, which is what lets a frame
//! cross Ethernet input, an L2 cross-connect and interface output untouched. Freeing an
//! external buffer releases the source's frame. A transmit queue that can copy from the
//! source itself asks [`WorkerBuffers::external`]; any other is handed materialised buffers
//! (see [`WorkerBuffers::materialise`]).
//!
//! Which buffers are external, with their source and token, is recorded in a per-worker table
//! indexed by buffer, not in the metadata (nodes own it) nor in the buffer's own area (one more
//! cache line per packet for every pass that asks).
//! External buffers never leave the worker that received them (Quiver hands no buffer between
//! workers).
//!
//! [`BufferView`]: super::BufferView
//! [`WorkerBuffers::data`]: super::WorkerBuffers::data
//! [`WorkerBuffers::external`]: super::WorkerBuffers::external
//! [`WorkerBuffers::materialise`]: super::WorkerBuffers::materialise

use super::index::BufferIndex;
use std::any::Any;
use std::cell::Cell;
use std::sync::Arc;

/// Where external buffers' bytes are: implemented by a driver for the memory it receives into.
///
/// An external-payload buffer ([`super::WorkerBuffers::attach_external`]) carries a packet's
/// metadata while its bytes are still in the source's memory. No accessor hands those bytes out
/// as they are: every one that gives out packet bytes or headroom first copies the frame into
/// the buffer (*materialises* it) and releases it; freeing the buffer releases it; metadata-only
/// accessors leave it external. A transmit queue that copies from the source itself says so
/// with `TxQueue::copies_external` and finds the frame with
/// [`super::WorkerBuffers::external`].
///
/// Called only on the worker that attached the buffers, from the packet path, so every method
/// must be cheap and must not lock or allocate.
pub trait ExternalSource: Send + Sync {
    /// Copies the whole frame `token` (exactly `dst.len()` bytes) into `dst`; false when it
    /// cannot (`dst` is then zero-filled by the caller).
    fn copy_out(&self, token: u32, dst: &mut [u8]) -> bool;
    /// The holder is done with frame `token`: called exactly once per attached buffer, when it
    /// is materialised or freed.
    fn release(&self, token: u32);
    /// [`ExternalSource::release`] of each of `tokens` (the buffers of one burst being freed
    /// together); a source may do the batch's bookkeeping once.
    fn release_many(&self, tokens: &[u32]) {
        for &t in tokens {
            self.release(t);
        }
    }
    /// Whether no buffer will be attached any more and none is attached: the worker may forget
    /// the source (see [`super::WorkerBuffers::prune_external`]).
    fn is_retired(&self) -> bool;
}

/// A registered source: as the engine uses it, and as its driver registered it (for
/// [`super::WorkerBuffers::external_source_as`]). One allocation, two views of it.
struct Registered {
    source: Arc<dyn ExternalSource>,
    typed: Arc<dyn Any + Send + Sync>,
}

/// The frame an external buffer carries: the source's id, the frame's token in it, and the
/// frame's length when attached (what a materialisation copies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExternalRef {
    pub(crate) source: u32,
    pub(crate) token: u32,
    pub(crate) len: u16,
}

/// Source ids an [`ExternalRef`] can name: the packed entry keeps 16 bits for `source + 1`.
const MAX_SOURCES: u32 = u16::MAX as u32;

impl ExternalRef {
    /// The table entry for this ref (never 0, which means "not external"); `None` when the
    /// source id does not fit.
    #[inline(always)]
    fn pack(self) -> Option<u64> {
        (self.source < MAX_SOURCES).then(|| {
            (u64::from(self.source + 1) << 48) | (u64::from(self.len) << 32) | u64::from(self.token)
        })
    }

    /// The ref a non-zero table entry holds.
    #[inline(always)]
    fn unpack(entry: u64) -> Option<ExternalRef> {
        (entry != 0).then(|| ExternalRef {
            source: (entry >> 48) as u32 - 1,
            token: entry as u32,
            len: (entry >> 32) as u16,
        })
    }
}

/// One worker's external buffers.
///
/// Which buffers are external, and their frames, are kept in a table beside the buffers (one
/// `u64` per buffer of the pool), not in the buffers: nodes own the metadata, and the table of
/// a burst's buffers spans a few cache lines where a ref kept in each buffer would touch one
/// more line per packet on every pass that asks.
#[derive(Default)]
pub(crate) struct ExternalState {
    /// Registered sources by id.
    sources: Vec<Option<Registered>>,
    /// Per buffer of the pool: 0, or its [`ExternalRef`] packed. Empty until the first source
    /// registers.
    refs: Box<[Cell<u64>]>,
    /// How many entries are set.
    live: Cell<u32>,
}

impl ExternalState {
    /// Whether any buffer of this worker is external (the one check on the common path).
    #[inline(always)]
    pub(crate) fn any(&self) -> bool {
        self.live.get() != 0
    }

    /// Buffer `bi`'s frame, if it is external.
    #[inline(always)]
    pub(crate) fn get(&self, bi: BufferIndex) -> Option<ExternalRef> {
        ExternalRef::unpack(self.refs.get(bi.as_usize())?.get())
    }

    /// Whether buffer `bi` is external.
    #[inline(always)]
    pub(crate) fn is_marked(&self, bi: BufferIndex) -> bool {
        self.refs.get(bi.as_usize()).is_some_and(|e| e.get() != 0)
    }

    /// Records `bi` (not external) as carrying frame `r`; false, changing nothing, when the
    /// table is not set up or the source id does not fit.
    #[inline]
    pub(crate) fn attach(&self, bi: BufferIndex, r: ExternalRef) -> bool {
        let (Some(e), Some(packed)) = (self.refs.get(bi.as_usize()), r.pack()) else {
            return false;
        };
        if e.get() == 0 {
            self.live.set(self.live.get() + 1);
        }
        e.set(packed);
        true
    }

    /// Forgets that `bi` is external and returns its frame (`None` if it was not external).
    #[inline(always)]
    pub(crate) fn detach(&self, bi: BufferIndex) -> Option<ExternalRef> {
        let e = self.refs.get(bi.as_usize())?;
        let r = ExternalRef::unpack(e.replace(0))?;
        self.live.set(self.live.get() - 1);
        Some(r)
    }

    /// How many buffers are external.
    pub(crate) fn live(&self) -> u32 {
        self.live.get()
    }

    /// The registered source `id`.
    #[inline]
    pub(crate) fn source(&self, id: u32) -> Option<&Arc<dyn ExternalSource>> {
        self.sources.get(id as usize)?.as_ref().map(|r| &r.source)
    }

    /// The registered source `id`, if it is a `T`.
    #[inline]
    pub(crate) fn source_as<T: ExternalSource + 'static>(&self, id: u32) -> Option<&T> {
        self.sources
            .get(id as usize)?
            .as_ref()?
            .typed
            .downcast_ref()
    }

    /// Registers `source` for a pool of `buffers` buffers; returns its id. Sources that
    /// retired are forgotten first, and their ids reused.
    pub(crate) fn register<T: ExternalSource + 'static>(
        &mut self,
        source: Arc<T>,
        buffers: u32,
    ) -> u32 {
        if self.refs.is_empty() {
            self.refs = (0..buffers).map(|_| Cell::new(0)).collect();
        }
        self.prune();
        let r = Registered {
            source: source.clone(),
            typed: source,
        };
        match self.sources.iter().position(Option::is_none) {
            Some(k) => {
                self.sources[k] = Some(r);
                k as u32
            }
            None => {
                self.sources.push(Some(r));
                (self.sources.len() - 1) as u32
            }
        }
    }

    /// Forgets retired sources; returns how many registered sources are not retired.
    pub(crate) fn prune(&mut self) -> usize {
        let mut left = 0;
        for s in &mut self.sources {
            if s.as_ref().is_some_and(|x| x.source.is_retired()) {
                *s = None;
            } else if s.is_some() {
                left += 1;
            }
        }
        left
    }
}

/// Materialises external buffer `bi` whose area starts at `area`: copies its frame to
/// `area + headroom`, releases it and forgets that the buffer was external. Returns whether the
/// copy worked (if not, the bytes are zeroes: the frame's source is gone or refused); false,
/// doing nothing, when `bi` is not external.
///
/// # Safety
/// `area` must point at buffer `bi`'s area, `headroom + data size` long, with no live
/// reference into it.
#[cold]
#[inline(never)]
pub(crate) unsafe fn materialise(
    ext: &ExternalState,
    bi: BufferIndex,
    area: *mut u8,
    headroom: u16,
) -> bool {
    let Some(r) = ext.detach(bi) else {
        return false;
    };
    // SAFETY: `attach_external` accepted `len` only when it fits the data size after the
    // headroom, so the slice is within the area, which nothing references (the caller's
    // contract).
    let dst =
        unsafe { std::slice::from_raw_parts_mut(area.add(headroom as usize), usize::from(r.len)) };
    let ok = match ext.source(r.source) {
        Some(s) => {
            let ok = s.copy_out(r.token, dst);
            s.release(r.token);
            ok
        }
        None => false,
    };
    if !ok {
        dst.fill(0);
    }
    ok
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    use super::super::{BufferPool, BufferPoolConfig};
    use super::*;
    use crate::memory::HugepagePolicy;

    /// Frames in "someone else's memory", recording what was released.
    #[derive(Default)]
    struct Fake {
        frames: Vec<Vec<u8>>,
        released: Mutex<Vec<u32>>,
        gone: AtomicBool,
    }

    impl ExternalSource for Fake {
        fn copy_out(&self, token: u32, dst: &mut [u8]) -> bool {
            match self.frames.get(token as usize) {
                Some(f) if f.len() == dst.len() => {
                    dst.copy_from_slice(f);
                    true
                }
                _ => false,
            }
        }
        fn release(&self, token: u32) {
            self.released.lock().unwrap().push(token);
        }
        fn is_retired(&self) -> bool {
            self.gone.load(Ordering::Relaxed) && self.released.lock().unwrap().len() >= 5
        }
    }

    /// Another driver's kind of source.
    struct Other;

    impl ExternalSource for Other {
        fn copy_out(&self, _token: u32, _dst: &mut [u8]) -> bool {
            false
        }
        fn release(&self, _token: u32) {}
        fn is_retired(&self) -> bool {
            true
        }
    }

    #[test]
    fn external_buffers_are_copied_in_only_when_their_bytes_are_touched_and_released_once() {
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers: 64,
            hugepages: HugepagePolicy::Never,
            ..Default::default()
        })
        .unwrap();
        let mut w = pool.worker_buffers();
        let fake = Arc::new(Fake {
            frames: (0..5u8).map(|k| vec![k; 10 + k as usize]).collect(),
            ..Default::default()
        });
        let src = w.register_external(fake.clone());
        // A driver finds its own source again by type; anything else is not it.
        assert!(std::ptr::eq(
            w.external_source_as::<Fake>(src).unwrap(),
            &*fake
        ));
        assert!(w.external_source_as::<Other>(src).is_none());
        assert!(w.external_source_as::<Fake>(src + 1).is_none());
        let mut bufs = [BufferIndex::NONE; 6];
        w.alloc(&mut bufs).unwrap();
        let released = || fake.released.lock().unwrap().clone();

        // Not registered, or too long for one buffer: refused, the caller copies.
        assert!(!w.attach_external(bufs[5], src + 1, 0, 10));
        assert!(!w.attach_external(bufs[5], src, 0, w.data_size() + 1));
        assert_eq!(w.external_count(), 0);

        for (k, &bi) in bufs[..5].iter().enumerate() {
            assert!(w.attach_external(bi, src, k as u32, 10 + k as u16));
        }
        assert_eq!(w.external_count(), 5);
        // Metadata-only work leaves buffer 0 external.
        w.meta_mut(bufs[0]).rx_interface = 3;
        assert!(w.advance(bufs[0], 2));
        assert_eq!(w.meta(bufs[0]).length(), 8);
        assert_eq!(w.external(bufs[0]).map(|(_, t)| t), Some(0));
        assert_eq!(pool.materialised_count(), 0);
        // Reading it copies it in (the window as moved), releases the frame, once.
        assert_eq!(w.data(bufs[0]), &[0u8; 8][..]);
        assert_eq!(w.data(bufs[0]), &[0u8; 8][..]);
        assert!(w.external(bufs[0]).is_none());
        assert_eq!((pool.materialised_count(), released()), (1, vec![0]));
        // Freeing one releases it without a copy.
        w.free_one(bufs[1]);
        assert_eq!((pool.materialised_count(), released()), (1, vec![0, 1]));
        // A node's view copies it in before handing out bytes.
        {
            let mut v = w.view();
            assert_eq!(v.data_len(bufs[2]), 12, "the length, without a copy");
            let (_, d) = v.meta_and_data_mut(bufs[2]);
            assert_eq!(d, &[2u8; 12][..]);
            d[0] = 0xee;
        }
        assert_eq!(w.data(bufs[2])[..2], [0xee, 2]);
        // Prepending a header (a write) copies it in first.
        w.prepend(bufs[3], 2).unwrap().copy_from_slice(b"hd");
        assert_eq!(w.data(bufs[3])[..3], [b'h', b'd', 3]);
        assert_eq!(w.data(bufs[3]).len(), 15);
        // A device driver's queue asks for all of a burst.
        w.materialise(&bufs[4..5]);
        assert_eq!(w.data(bufs[4]), &[4u8; 14][..]);
        assert_eq!(pool.materialised_count(), 4);
        assert_eq!(released(), vec![0, 1, 2, 3, 4]);
        assert_eq!(w.external_count(), 0);

        // A frame the source cannot give is zeroes, and still released.
        assert!(w.attach_external(bufs[5], src, 9, 4));
        assert_eq!(w.data(bufs[5]), &[0u8; 4][..]);
        assert_eq!(released().last(), Some(&9));
        w.free(&[bufs[0], bufs[2], bufs[3], bufs[4], bufs[5]]);
        assert_eq!(pool.double_free_count(), 0);

        // A retired source is forgotten, and its id reused.
        assert_eq!(w.prune_external(), 1);
        fake.gone.store(true, Ordering::Relaxed);
        assert_eq!(w.prune_external(), 0);
        assert_eq!(Arc::strong_count(&fake), 1, "the worker let go of it");
        assert_eq!(w.register_external(Arc::new(Fake::default())), src);
        drop(w);
        assert_eq!(pool.free_count(), 64);
    }

    #[test]
    fn the_table_keeps_each_buffers_frame_exactly_and_refuses_a_source_it_cannot_name() {
        let ext = ExternalState {
            refs: (0..4).map(|_| Cell::new(0)).collect(),
            ..Default::default()
        };
        let extremes = [
            ExternalRef {
                source: 0,
                token: 0,
                len: 0,
            },
            ExternalRef {
                source: MAX_SOURCES - 1,
                token: u32::MAX,
                len: u16::MAX,
            },
            ExternalRef {
                source: 7,
                token: 0x8000_0001,
                len: 60,
            },
        ];
        for (bi, r) in extremes.iter().enumerate() {
            assert!(ext.attach(BufferIndex::new(bi as u32), *r));
        }
        assert_eq!(ext.live(), 3);
        for (bi, r) in extremes.iter().enumerate() {
            assert_eq!(ext.get(BufferIndex::new(bi as u32)), Some(*r));
        }
        // Attaching again replaces, without counting the buffer twice.
        assert!(ext.attach(
            BufferIndex::new(2),
            ExternalRef {
                source: 1,
                token: 5,
                len: 9
            }
        ));
        assert_eq!(ext.live(), 3);
        // A source id the entry cannot hold, or a buffer beyond the pool: refused, unchanged.
        assert!(!ext.attach(
            BufferIndex::new(3),
            ExternalRef {
                source: MAX_SOURCES,
                token: 1,
                len: 1
            }
        ));
        assert!(!ext.attach(BufferIndex::new(4), extremes[2]));
        assert_eq!(
            (
                ext.get(BufferIndex::new(3)),
                ext.get(BufferIndex::new(4)),
                ext.live()
            ),
            (None, None, 3)
        );
        assert_eq!(ext.detach(BufferIndex::new(1)), Some(extremes[1]));
        assert_eq!(
            (
                ext.detach(BufferIndex::new(1)),
                ext.is_marked(BufferIndex::new(1)),
                ext.live()
            ),
            (None, false, 2)
        );
    }
}
