//! [`BufferIndex`]: the name of one buffer of a [`BufferPool`](super::BufferPool).

use std::fmt;

/// One buffer of the pool, by its index (like VPP's `u32 bi`): what frames, rings and
/// worker caches hold, and what every [`WorkerBuffers`](super::WorkerBuffers) accessor takes.
///
/// A `u32` at run time (`repr(transparent)`, accessors `#[inline(always)]`), so frames of them
/// cost what frames of `u32` did; the type keeps a buffer index from being passed where an
/// interface, a ring slot or a length is meant. Only the pool makes valid indices; a driver
/// converts at its ring's edge ([`BufferIndex::new`], [`BufferIndex::get`]) where the wire or a
/// device names buffers by number.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BufferIndex(u32);

impl BufferIndex {
    /// No buffer: `u32::MAX`, as the end of a chain in [`BufferMeta`](super::BufferMeta).
    pub const NONE: BufferIndex = BufferIndex(u32::MAX);

    /// Buffer number `i` (whether the pool has it is for the pool to check).
    #[inline(always)]
    pub const fn new(i: u32) -> BufferIndex {
        BufferIndex(i)
    }

    /// The index as a `u32`, for a ring descriptor or a log line.
    #[inline(always)]
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The index as a `usize`, for address arithmetic.
    #[inline(always)]
    pub const fn as_usize(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for BufferIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{}", self.0)
    }
}

impl fmt::Display for BufferIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_index_is_its_u32() {
        assert_eq!(std::mem::size_of::<BufferIndex>(), 4);
        assert_eq!(std::mem::align_of::<BufferIndex>(), 4);
        let b = BufferIndex::new(9);
        assert_eq!((b.get(), b.as_usize(), b.to_string()), (9, 9, "9".into()));
        assert_eq!(format!("{b:?}"), "b9");
        assert_ne!(b, BufferIndex::NONE);
    }
}
