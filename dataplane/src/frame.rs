//! Frames: vectors of up to [`FRAME_SIZE`] buffer indices, the unit nodes are called with.

use crate::buffer::BufferIndex;

/// Most packets a frame holds.
pub const FRAME_SIZE: usize = 256;

/// A vector of buffer indices.
///
/// The indices live in a separate heap block, so handing a whole frame to the next node is a swap
/// of two pointers, not a copy.
pub struct Frame {
    len: usize,
    indices: Box<[BufferIndex; FRAME_SIZE]>,
}

impl Default for Frame {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl Frame {
    /// An empty frame.
    pub fn new() -> Frame {
        Frame {
            len: 0,
            indices: Box::new([BufferIndex::NONE; FRAME_SIZE]),
        }
    }

    /// Packets in the frame.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the frame holds no packets.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the frame holds [`FRAME_SIZE`] packets.
    #[inline(always)]
    pub fn is_full(&self) -> bool {
        self.len == FRAME_SIZE
    }

    /// Room left.
    #[inline(always)]
    pub fn room(&self) -> usize {
        FRAME_SIZE - self.len
    }

    /// The buffer indices.
    #[inline(always)]
    pub fn as_slice(&self) -> &[BufferIndex] {
        &self.indices[..self.len]
    }

    /// The buffer indices, for rewriting in place.
    #[inline(always)]
    pub fn as_mut_slice(&mut self) -> &mut [BufferIndex] {
        &mut self.indices[..self.len]
    }

    /// Appends one index; `false` when the frame is full.
    #[inline(always)]
    pub fn push(&mut self, bi: BufferIndex) -> bool {
        if self.len < FRAME_SIZE {
            self.indices[self.len] = bi;
            self.len += 1;
            true
        } else {
            false
        }
    }

    /// Appends as many of `bis` as fit; returns how many.
    #[inline]
    pub fn extend_from_slice(&mut self, bis: &[BufferIndex]) -> usize {
        let n = bis.len().min(self.room());
        self.indices[self.len..self.len + n].copy_from_slice(&bis[..n]);
        self.len += n;
        n
    }

    /// The unused tail, for an input node to fill before [`Frame::set_len`].
    #[inline]
    pub fn spare_mut(&mut self) -> &mut [BufferIndex] {
        &mut self.indices[self.len..]
    }

    /// Sets the length after writing into [`Frame::spare_mut`] (clamped to [`FRAME_SIZE`]).
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(FRAME_SIZE);
    }

    /// Empties the frame (the buffers are not freed: whoever owns them must have taken them).
    #[inline(always)]
    pub fn clear(&mut self) {
        self.len = 0;
    }
}
