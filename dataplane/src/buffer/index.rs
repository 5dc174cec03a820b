//! [`BufferIndex`]: the name of one buffer of a [`BufferPool`](super::BufferPool).

crate::index_type! {
    /// One buffer of the pool, by its index (like VPP's `u32 bi`): what frames, rings and
    /// worker caches hold, and what every [`WorkerBuffers`](super::WorkerBuffers) accessor
    /// takes.
    ///
    /// A `u32` at run time, so frames of them cost what frames of `u32` did; the type keeps a
    /// buffer index from being passed where an interface, a ring slot or a length is meant.
    /// Only the pool makes valid indices; a driver converts at its ring's edge
    /// ([`BufferIndex::new`], [`BufferIndex::get`]) where a device names buffers by number.
    /// [`BufferIndex::NONE`] ends a chain.
    BufferIndex
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
        assert!(BufferIndex::NONE.is_none() && !b.is_none());
    }
}
