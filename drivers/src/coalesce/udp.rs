//! UDP segmentation offload on transmit. A tunnel's packets (WireGuard, VXLAN; marked
//! [`flags::UDP_GSO_OK`] by the node that made them) leave in bursts of datagrams of one flow and
//! one size: each would be one skb for the kernel to carry (through a
//! veth, into the peer's stack or ring). A run of such datagrams in a burst leaves instead as one
//! UDP GSO super-frame (`VIRTIO_NET_HDR_GSO_UDP_L4`, gathered from the buffers, no copy): the
//! kernel carries one skb and segments it as late as it can — in the device, in the receiver's
//! stack, or in software just before a device that cannot. The datagrams on the wire are the
//! same bytes, each with its own IPv4 header (identification counting up) and UDP checksum.

use dataplane::buffer::flags;
use dataplane::offload::{Gso, Offload};
use dataplane::BufferIndex;
use dataplane::WorkerBuffers;
use net::wire::checksum::{fold, ones_sum};

use super::super_frame::{SuperHeaders, MAX_HEADERS, MAX_IP_LEN, MAX_RUN};

/// Ethernet, IPv4 without options, UDP: the headers of every datagram of a run.
const HEADERS: usize = 42;

/// The header bytes datagrams of one run share: Ethernet, then IPv4's version/IHL, TOS,
/// flags/fragment, TTL, protocol and addresses, then UDP's ports.
fn same_flow(a: &[u8], b: &[u8]) -> bool {
    a[..16] == b[..16] && a[20..24] == b[20..24] && a[26..30] == b[26..30] && a[34..38] == b[34..38]
}

/// The UDP payload length of packet `bi` if it can join a run: a tunnel's datagram
/// ([`flags::UDP_GSO_OK`]) in one buffer, no offload work left, Ethernet II with no tag, IPv4
/// with no options and not a fragment, UDP, and lengths that agree with each other and with the
/// frame.
fn payload_len(buffers: &WorkerBuffers, bi: BufferIndex) -> Option<usize> {
    let meta = buffers.meta(bi);
    if meta.flags & flags::UDP_GSO_OK == 0
        || meta.offload().is_some()
        || u32::from(meta.length()) != meta.total_length()
    {
        return None;
    }
    let d = buffers.data(bi);
    if d.len() <= HEADERS || d[12..14] != [0x08, 0x00] || d[14] != 0x45 || d[23] != 17 {
        return None;
    }
    // Flags may say Don't Fragment; More Fragments or an offset is a fragment.
    if u16::from_be_bytes([d[20], d[21]]) & 0x3fff != 0 {
        return None;
    }
    let ip_len = u16::from_be_bytes([d[16], d[17]]) as usize;
    let udp_len = u16::from_be_bytes([d[38], d[39]]) as usize;
    (ip_len + 14 == d.len() && udp_len + 20 == ip_len).then_some(udp_len - 8)
}

/// How many datagrams from `packets[0]` on can leave as one super-frame: 0 when the first
/// cannot be in a run. Datagrams of a run share their flow and their size, the last may be
/// shorter, and together they fit one IPv4 packet.
pub(super) fn run_len(buffers: &WorkerBuffers, packets: &[BufferIndex]) -> usize {
    let Some(size) = packets.first().and_then(|&bi| payload_len(buffers, bi)) else {
        return 0;
    };
    let first = buffers.data(packets[0]);
    let (mut n, mut total) = (1, size);
    while n < packets.len() && n < MAX_RUN {
        let bi = packets[n];
        match payload_len(buffers, bi) {
            Some(len)
                if len <= size
                    && total + len + 28 <= MAX_IP_LEN
                    && same_flow(first, buffers.data(bi)) =>
            {
                total += len;
                n += 1;
                if len < size {
                    break; // a shorter one ends the run
                }
            }
            _ => break,
        }
    }
    n
}

/// The super-frame of the run `packets` (from [`run_len`]): its virtio-net header and its
/// headers (the first datagram's, with the lengths of the whole and the UDP checksum left
/// partial, holding the pseudo-header's sum as the kernel expects), to be sent before each
/// datagram's payload.
pub(super) fn super_headers(buffers: &WorkerBuffers, packets: &[BufferIndex]) -> SuperHeaders {
    let first = buffers.data(packets[0]);
    let size = first.len() - HEADERS;
    let total: usize = packets
        .iter()
        .map(|&bi| buffers.data(bi).len() - HEADERS)
        .sum();
    let mut h = [0u8; MAX_HEADERS];
    h[..HEADERS].copy_from_slice(&first[..HEADERS]);
    let ip_len = (20 + 8 + total) as u16;
    let udp_len = (8 + total) as u16;
    h[16..18].copy_from_slice(&ip_len.to_be_bytes());
    h[24..26].copy_from_slice(&[0, 0]);
    let ip_sum = fold(ones_sum(&h[14..34]));
    h[24..26].copy_from_slice(&(!ip_sum).to_be_bytes());
    h[38..40].copy_from_slice(&udp_len.to_be_bytes());
    // Source and destination, protocol, UDP length: not complemented (a partial checksum).
    let pseudo = ones_sum(&h[26..34]) + 17 + u64::from(udp_len);
    h[40..42].copy_from_slice(&fold(pseudo).to_be_bytes());
    let offload = Offload {
        csum_start: 34,
        csum_offset: 6,
        gso_size: size as u16,
        gso: Gso::Udp,
        bits: Offload::NEEDS_CSUM,
    };
    SuperHeaders {
        vnet: offload.to_virtio(&h),
        bytes: h,
        len: HEADERS,
    }
}
