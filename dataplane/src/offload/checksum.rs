//! The Internet checksum over a packet's chain of buffers, and filling in a partial one.

pub use net::wire::checksum::ones_sum;
pub(crate) use net::wire::checksum::{fold, Summer};

use super::BadOffload;
use crate::buffer::WorkerBuffers;
use crate::BufferIndex;

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
