//! The Internet checksum over a packet's chain of buffers, and filling in a partial one.

use super::BadOffload;
use crate::buffer::WorkerBuffers;
use crate::BufferIndex;

/// A running one's-complement sum of bytes taken as big-endian 16-bit words, fed piece by
/// piece (pieces may have odd lengths).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Summer {
    acc: u64,
    /// The next byte is the low byte of a word.
    odd: bool,
}

impl Summer {
    /// Adds `data`, which follows what was added so far.
    pub(crate) fn add(&mut self, data: &[u8]) {
        let mut s = ones_sum(data);
        if self.odd {
            // Every byte of `data` sits in the other half of its word.
            s = fold(s).swap_bytes() as u64;
        }
        self.acc += s;
        self.odd ^= data.len() % 2 == 1;
    }

    /// The sum so far, not folded.
    pub(crate) fn acc(&self) -> u64 {
        self.acc
    }

    /// The sum folded to 16 bits (not inverted).
    pub(crate) fn folded(&self) -> u16 {
        fold(self.acc)
    }
}

/// The one's-complement sum of `data` as big-endian 16-bit words (a trailing odd byte padded
/// with zero), not folded.
pub fn ones_sum(data: &[u8]) -> u64 {
    let mut acc = 0u64;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        // 2^16 ≡ 1 modulo 0xffff, so 32-bit words sum to the same folded value.
        acc += u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    let rest = words.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        acc += u16::from_be_bytes([p[0], p[1]]) as u64;
    }
    if let [last] = pairs.remainder() {
        acc += (*last as u64) << 8;
    }
    acc
}

/// Folds a sum to 16 bits.
pub(crate) fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Sums packet `bi`'s bytes from `start` to its end, across its chain.
pub(crate) fn sum_from(buffers: &WorkerBuffers, bi: BufferIndex, start: usize) -> Summer {
    let mut s = Summer::default();
    let mut skip = start;
    for b in buffers.chain(bi) {
        let d = buffers.data(b);
        if skip >= d.len() {
            skip -= d.len();
            continue;
        }
        s.add(&d[skip..]);
        skip = 0;
    }
    s
}

/// Fills in packet `bi`'s partial checksum (`NEEDS_CSUM`: the field holds the pseudo-header's
/// sum; the checksum covers `csum_start` to the end) and forgets the work left. The field
/// must lie in the first buffer. A packet with no work left is left as it is; a super-frame is
/// refused (see [`super::segment`]).
pub fn complete_checksum(buffers: &mut WorkerBuffers, bi: BufferIndex) -> Result<(), BadOffload> {
    let Some(&o) = buffers.meta(bi).offload() else {
        return Ok(());
    };
    if o.gso != super::Gso::None {
        return Err(BadOffload::Segmentation);
    }
    if o.needs_csum() {
        let at = o.csum_start as usize + o.csum_offset as usize;
        let total = buffers.meta(bi).total_length() as usize;
        if at + 2 > buffers.data(bi).len() || o.csum_start as usize > total {
            return Err(BadOffload::Checksum);
        }
        let sum = !sum_from(buffers, bi, o.csum_start as usize).folded();
        // As the kernel does: a computed zero is sent as 0xffff (UDP's "no checksum" is 0).
        let sum = if sum == 0 { 0xffff } else { sum };
        buffers.data_mut(bi)[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    }
    buffers.meta_mut(bi).clear_offload();
    Ok(())
}
