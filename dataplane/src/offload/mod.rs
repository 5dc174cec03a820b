//! Checksum and segmentation work a kernel left undone: a frame received with a virtio-net
//! header (`PACKET_VNET_HDR`) may carry a TCP/UDP checksum still to be filled in
//! (`NEEDS_CSUM`, the kernel's `CHECKSUM_PARTIAL`) and may be a GSO super-frame (up to 64 KiB)
//! to be cut into segments of `gso_size` payload bytes.
//!
//! The work is kept as [`Offload`] in the buffer's metadata (8 bytes, valid while
//! [`crate::buffer::flags::OFFLOAD`] is set), so a frame without it costs one flag test. An
//! egress that offloads (an AF_PACKET port with virtio-net headers) writes it back as the
//! header and the kernel finishes the job; before any other egress, or a node that reads L4,
//! it is done here in software: [`complete_checksum`] for a plain frame, [`segment`] for a
//! super-frame.
//!
//! Offsets are from the packet's first byte, which is its Ethernet header.

mod checksum;
mod infer;
mod segment;
#[cfg(test)]
mod tests;
pub(crate) mod work;

pub use checksum::{complete_checksum, ones_sum};
pub use infer::infer_partial_checksum;
pub use segment::segment;
pub use work::{virtio, BadOffload, Gso, Offload, VIRTIO_NET_HDR_LEN};

use crate::buffer::{flags, BufferMeta, WorkerBuffers};
use crate::BufferIndex;

impl BufferMeta {
    /// The work left on this packet, if any.
    #[inline(always)]
    pub fn offload(&self) -> Option<&Offload> {
        (self.flags & flags::OFFLOAD != 0).then_some(&self.offload)
    }

    /// Leaves `o` to be done on this packet.
    #[inline]
    pub fn set_offload(&mut self, o: Offload) {
        self.offload = o;
        self.flags |= flags::OFFLOAD;
    }

    /// Forgets the work left (done, or handed on).
    #[inline]
    pub fn clear_offload(&mut self) {
        self.flags &= !flags::OFFLOAD;
        self.offload = Offload::default();
    }
}

/// What [`resolve`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    /// Nothing was left to do: the packet is `out[0]`.
    Untouched,
    /// Its checksum was filled in: the packet is `out[0]`.
    ChecksumCompleted,
    /// It was cut into `out[..n]` (the original freed).
    Segmented(usize),
}

/// Does in software the work left on packet `bi`, writing what is to be sent on into `out`.
/// On error `bi` is left as it was, still the caller's (to drop).
pub fn resolve(
    buffers: &mut WorkerBuffers,
    bi: BufferIndex,
    out: &mut [BufferIndex],
) -> Result<Resolved, BadOffload> {
    let Some(&o) = buffers.meta(bi).offload() else {
        *out.first_mut().ok_or(BadOffload::TooManySegments)? = bi;
        return Ok(Resolved::Untouched);
    };
    if o.gso != Gso::None {
        let n = segment(buffers, bi, out)?;
        buffers.free(&[bi]);
        return Ok(Resolved::Segmented(n));
    }
    let slot = out.first_mut().ok_or(BadOffload::TooManySegments)?;
    complete_checksum(buffers, bi)?;
    *slot = bi;
    Ok(Resolved::ChecksumCompleted)
}
