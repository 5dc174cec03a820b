//! The rings an AF_XDP socket shares with the kernel: single-producer, single-consumer rings of
//! descriptors in memory mapped from the socket, each with a producer index, a consumer index and
//! a flags word (`XDP_RING_NEED_WAKEUP`).
//!
//! Quiver produces on the fill and transmit rings and consumes the receive and completion rings.
//! Indices run freely and wrap at 2^32; a slot is `index & mask`. The producer publishes slots
//! with a release store of its index after writing them; the consumer reads the index with an
//! acquire load before reading slots, and hands slots back with a release store of its own index.

use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::port::PortError;

/// One ring's mapping and its three control words.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut u8,
}

// SAFETY: the mapping is plain shared memory; the ring that owns it is used by one thread at a
// time (its queue's worker), and the kernel is the only other party.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `size` slots of `T` of the ring at page offset `pgoff` of `fd`, laid out as
    /// `offsets` says.
    fn new<T>(
        fd: BorrowedFd<'_>,
        offsets: &libc::xdp_ring_offset,
        size: u32,
        pgoff: libc::off_t,
    ) -> Result<Mapping, PortError> {
        let len = offsets.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: a new shared mapping of the socket's ring; the kernel checks offset and
        // length against the ring it made for `pgoff`.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(PortError::Sys {
                what: "mapping an AF_XDP ring".into(),
                source: nix::Error::last(),
            });
        }
        let base = base.cast::<u8>();
        // SAFETY: the kernel's offsets lie inside the ring's mapping of `len` bytes.
        let at = |off: u64| unsafe { base.add(off as usize) };
        Ok(Mapping {
            base: NonNull::new(base).expect("mmap does not return null on success"),
            len,
            producer: at(offsets.producer).cast(),
            consumer: at(offsets.consumer).cast(),
            flags: at(offsets.flags).cast(),
            descs: at(offsets.desc),
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: an aligned u32 inside the live mapping, written by both sides atomically.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    fn flags(&self) -> u32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.flags }.load(Ordering::Relaxed)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; nothing borrows it past its owner.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// A ring Quiver writes to (fill, transmit).
pub(super) struct Producer<T> {
    map: Mapping,
    mask: u32,
    size: u32,
    /// Our next slot (the producer index not yet published while `pending > 0`).
    head: u32,
    /// The consumer index last read.
    consumer: u32,
    _slot: PhantomData<T>,
}

impl<T: Copy> Producer<T> {
    /// The ring at `pgoff` of `fd` with `size` slots (a power of two).
    pub(super) fn map(
        fd: BorrowedFd<'_>,
        offsets: &libc::xdp_ring_offset,
        size: u32,
        pgoff: libc::off_t,
    ) -> Result<Self, PortError> {
        let map = Mapping::new::<T>(fd, offsets, size, pgoff)?;
        let head = map.producer().load(Ordering::Relaxed);
        let consumer = map.consumer().load(Ordering::Acquire);
        Ok(Producer {
            map,
            mask: size - 1,
            size,
            head,
            consumer,
            _slot: PhantomData,
        })
    }

    /// Slots free to write now (up to `want`: the consumer index is re-read only when the
    /// cached one does not leave that many).
    pub(super) fn free(&mut self, want: u32) -> u32 {
        let free = self.size - self.head.wrapping_sub(self.consumer);
        if free >= want {
            return free;
        }
        self.consumer = self.map.consumer().load(Ordering::Acquire);
        self.size - self.head.wrapping_sub(self.consumer)
    }

    /// Writes `value` into the next slot, which [`Producer::free`] said is free; it is not
    /// visible to the kernel before [`Producer::publish`].
    pub(super) fn push(&mut self, value: T) {
        let slot = (self.head & self.mask) as usize;
        // SAFETY: `slot < size`, inside the descriptor array of the mapping; the slot is free
        // (the caller checked with `free`), so the kernel does not read it now.
        unsafe { self.map.descs.cast::<T>().add(slot).write(value) };
        self.head = self.head.wrapping_add(1);
    }

    /// Makes every slot pushed so far visible to the kernel.
    pub(super) fn publish(&mut self) {
        self.map.producer().store(self.head, Ordering::Release);
    }

    /// Whether the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`) to look at this ring.
    pub(super) fn needs_wakeup(&self) -> bool {
        self.map.flags() & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

/// A ring Quiver reads from (receive, completion).
pub(super) struct Consumer<T> {
    map: Mapping,
    mask: u32,
    /// Our next slot to read (the consumer index not yet handed back).
    tail: u32,
    _slot: PhantomData<T>,
}

impl<T: Copy> Consumer<T> {
    /// The ring at `pgoff` of `fd` with `size` slots (a power of two).
    pub(super) fn map(
        fd: BorrowedFd<'_>,
        offsets: &libc::xdp_ring_offset,
        size: u32,
        pgoff: libc::off_t,
    ) -> Result<Self, PortError> {
        let map = Mapping::new::<T>(fd, offsets, size, pgoff)?;
        let tail = map.consumer().load(Ordering::Relaxed);
        Ok(Consumer {
            map,
            mask: size - 1,
            tail,
            _slot: PhantomData,
        })
    }

    /// How many slots are ready to read, at most `max`.
    pub(super) fn ready(&self, max: u32) -> u32 {
        let produced = self.map.producer().load(Ordering::Acquire);
        produced.wrapping_sub(self.tail).min(max)
    }

    /// The `i`-th ready slot (`i` below what [`Consumer::ready`] returned).
    pub(super) fn get(&self, i: u32) -> T {
        let slot = (self.tail.wrapping_add(i) & self.mask) as usize;
        // SAFETY: `slot < size`, inside the descriptor array; the kernel published it (the
        // acquire load in `ready`) and does not write it again before we release it.
        unsafe { self.map.descs.cast::<T>().add(slot).read() }
    }

    /// Hands the first `n` ready slots back to the kernel.
    pub(super) fn release(&mut self, n: u32) {
        self.tail = self.tail.wrapping_add(n);
        self.map.consumer().store(self.tail, Ordering::Release);
    }
}
