//! What every super-frame is made of, whatever its kind: the limits of a run, the headers sent
//! before the packets' payloads, and the parts of the vectored write that sends it.

use dataplane::BufferIndex;
use std::io::IoSlice;

use dataplane::offload::VIRTIO_NET_HDR_LEN;
use dataplane::WorkerBuffers;

/// The most packets in one super-frame (the kernel's `UDP_MAX_SEGMENTS` is at least 64).
pub(crate) const MAX_RUN: usize = 64;
/// The longest IPv4 packet.
pub(super) const MAX_IP_LEN: usize = u16::MAX as usize;
/// The longest headers a super-frame has: Ethernet, IPv4 without options, TCP with 40 bytes of
/// options.
pub(super) const MAX_HEADERS: usize = 14 + 20 + 60;

/// A super-frame's virtio-net header and headers (the first packet's, made to describe the
/// whole), to be sent before each packet's payload.
pub(crate) struct SuperHeaders {
    pub vnet: [u8; VIRTIO_NET_HDR_LEN],
    pub bytes: [u8; MAX_HEADERS],
    pub len: usize,
}

/// The parts of the super-frame of `packets` with `headers` (from [`super_headers`](super::super_headers)) for a
/// vectored write into `parts`: the virtio-net header, the headers, then each packet's payload.
/// Returns how many parts are filled.
pub(crate) fn gather<'a>(
    buffers: &'a WorkerBuffers,
    packets: &[BufferIndex],
    headers: &'a SuperHeaders,
    parts: &mut [IoSlice<'a>; MAX_RUN + 2],
) -> usize {
    parts[0] = IoSlice::new(&headers.vnet);
    parts[1] = IoSlice::new(&headers.bytes[..headers.len]);
    for (part, &bi) in parts[2..].iter_mut().zip(packets) {
        *part = IoSlice::new(&buffers.data(bi)[headers.len..]);
    }
    2 + packets.len()
}
