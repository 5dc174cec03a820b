//! TCP segments coalesced on transmit, as a receiver's GRO would: a burst often holds many
//! consecutive segments of one connection (a decrypted or decapsulated flow, all MSS-sized).
//! Each would be one skb for the kernel to carry through the veth and up the receiver's stack;
//! a run of them leaves instead as one TCP GSO super-frame (`VIRTIO_NET_HDR_GSO_TCPV4`,
//! gathered from the buffers, no copy). A local receiver takes it whole, as it takes what GRO
//! made; a device that cannot take it gets it segmented by the kernel into the same segments.
//!
//! Segments join a run only when nothing is lost by it: one connection's, in sequence, of one
//! size (the last may be shorter), with the same IP and TCP header fields (options included,
//! so timestamps too), carrying only ACK (PSH ends a run), within one 64 KiB IPv4 packet.
//!
//! The super-frame's TCP checksum is complete, not left to the kernel: it is derived from the
//! segments' own checksums (each segment's payload sum is what its checksum says it is), so a
//! segment that arrived corrupted still fails the receiver's check, as it would alone.

use dataplane::offload::{Gso, Offload};
use dataplane::BufferIndex;
use dataplane::WorkerBuffers;
use net::wire::checksum::{fold, ones_sum};

use super::super_frame::{SuperHeaders, MAX_HEADERS, MAX_IP_LEN, MAX_RUN};

/// Ethernet header bytes.
const ETHERNET: usize = 14;
/// Where the TCP header starts: after Ethernet and IPv4 without options.
const TCP: usize = ETHERNET + 20;
/// TCP flags that may be set on a segment of a run: ACK always, PSH on the last.
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;

/// What a segment that may be in a run holds.
#[derive(Debug, Clone, Copy)]
struct Segment {
    /// Its headers' bytes: Ethernet, IPv4, TCP with options.
    headers: usize,
    /// Its payload's bytes (at least one).
    payload: usize,
    /// Its first sequence number.
    seq: u32,
    /// Its TCP flags.
    flags: u8,
}

#[inline(always)]
fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

/// Packet `bi` as a segment that can be in a run: in one buffer, with no offload work left,
/// Ethernet II with no tag, IPv4 with no options and not a fragment, TCP with ACK (and maybe
/// PSH) only and a payload, and lengths that agree with each other and with the frame.
#[inline]
fn segment(buffers: &WorkerBuffers, bi: BufferIndex) -> Option<Segment> {
    let meta = buffers.meta(bi);
    if meta.offload().is_some() || u32::from(meta.length()) != meta.total_length() {
        return None;
    }
    let d = buffers.data(bi);
    if d.len() < TCP + 20 || d[12..14] != [0x08, 0x00] || d[14] != 0x45 || d[23] != 6 {
        return None;
    }
    // Flags may say Don't Fragment; More Fragments or an offset is a fragment.
    if be16(d, 20) & 0x3fff != 0 || be16(d, 16) as usize + ETHERNET != d.len() {
        return None;
    }
    let headers = TCP + usize::from(d[TCP + 12] >> 4) * 4;
    let flags = d[TCP + 13];
    // The data offset's low bits are reserved (or AccECN): a run keeps them zero.
    if headers < TCP + 20 || headers >= d.len() || d[TCP + 12] & 0x0f != 0 || flags & !PSH != ACK {
        return None;
    }
    Some(Segment {
        headers,
        payload: d.len() - headers,
        seq: u32::from_be_bytes([d[TCP + 4], d[TCP + 5], d[TCP + 6], d[TCP + 7]]),
        flags,
    })
}

/// The header bytes segments of one run share: Ethernet; IPv4's version/IHL, TOS, flags,
/// TTL, protocol and addresses; TCP's ports, acknowledgement, data offset, window, urgent
/// pointer and options. (Not the IPv4 identification: segmentation numbers the segments from
/// the first's, and a receiver does not look at it with Don't Fragment set.)
#[inline]
fn same_connection(a: &[u8], b: &[u8], headers: usize) -> bool {
    a[..16] == b[..16]
        && a[20..24] == b[20..24]
        && a[26..TCP + 4] == b[26..TCP + 4]
        && a[TCP + 8..TCP + 13] == b[TCP + 8..TCP + 13]
        && a[TCP + 14..TCP + 16] == b[TCP + 14..TCP + 16]
        && a[TCP + 18..headers] == b[TCP + 18..headers]
}

/// How many segments from `packets[0]` on can leave as one super-frame: 0 when the first
/// cannot be in a run.
pub(super) fn run_len(buffers: &WorkerBuffers, packets: &[BufferIndex]) -> usize {
    let Some(first) = packets.first().and_then(|&bi| segment(buffers, bi)) else {
        return 0;
    };
    if first.flags & PSH != 0 {
        return 1;
    }
    let d0 = buffers.data(packets[0]);
    let mut n = 1;
    let mut ip_len = first.headers - ETHERNET + first.payload;
    let mut seq = first.seq.wrapping_add(first.payload as u32);
    while n < packets.len() && n < MAX_RUN {
        let bi = packets[n];
        let Some(s) = segment(buffers, bi) else {
            break;
        };
        if s.headers != first.headers
            || s.seq != seq
            || s.payload > first.payload
            || ip_len + s.payload > MAX_IP_LEN
            || !same_connection(d0, buffers.data(bi), first.headers)
        {
            break;
        }
        ip_len += s.payload;
        seq = seq.wrapping_add(s.payload as u32);
        n += 1;
        if s.payload < first.payload || s.flags & PSH != 0 {
            break; // a shorter segment or a push ends the run
        }
    }
    n
}

/// The ones'-complement sum of the IPv4 pseudo-header of a TCP segment of `tcp_len` bytes
/// from frame `d`'s addresses.
#[inline(always)]
fn pseudo_header(d: &[u8], tcp_len: usize) -> u64 {
    ones_sum(&d[26..34]) + 6 + tcp_len as u64
}

/// The super-frame of the run `packets` (from [`run_len`]): its virtio-net header and its
/// headers (the first segment's, with the length of the whole, the last segment's flags and a
/// complete TCP checksum), to be sent before each segment's payload.
pub(super) fn super_headers(buffers: &WorkerBuffers, packets: &[BufferIndex]) -> SuperHeaders {
    let first = buffers.data(packets[0]);
    let last = buffers.data(packets[packets.len() - 1]);
    let len = TCP + usize::from(first[TCP + 12] >> 4) * 4;
    let mss = first.len() - len;
    // Each payload's sum, from its segment's checksum: pseudo-header + header (checksum field
    // included) + payload sums to 0 (all ones), so the payload sums to minus the rest. A
    // payload that starts at an odd offset of the whole has its bytes swapped in 16-bit words.
    let (mut payloads, mut total, mut odd) = (0u64, 0usize, false);
    for &bi in packets {
        let d = buffers.data(bi);
        let known = pseudo_header(d, d.len() - TCP) + ones_sum(&d[TCP..len]);
        let sum = !fold(known);
        payloads += u64::from(if odd { sum.swap_bytes() } else { sum });
        let payload = d.len() - len;
        total += payload;
        odd ^= payload % 2 == 1;
    }
    let mut h = [0u8; MAX_HEADERS];
    h[..len].copy_from_slice(&first[..len]);
    let ip_len = (len - ETHERNET + total) as u16;
    h[16..18].copy_from_slice(&ip_len.to_be_bytes());
    h[24..26].copy_from_slice(&[0, 0]);
    let ip_sum = !fold(ones_sum(&h[ETHERNET..TCP]));
    h[24..26].copy_from_slice(&ip_sum.to_be_bytes());
    h[TCP + 13] = last[TCP + 13];
    h[TCP + 16..TCP + 18].copy_from_slice(&[0, 0]);
    let sum = pseudo_header(&h, len - TCP + total) + ones_sum(&h[TCP..len]) + payloads;
    h[TCP + 16..TCP + 18].copy_from_slice(&(!fold(sum)).to_be_bytes());
    let offload = Offload {
        csum_start: 0,
        csum_offset: 0,
        gso_size: mss as u16,
        gso: Gso::Tcp4,
        bits: 0,
    };
    let mut vnet = offload.to_virtio(&h);
    // The headers' length, a hint the kernel uses to size the skb's linear part.
    vnet[2..4].copy_from_slice(&(len as u16).to_le_bytes());
    SuperHeaders {
        vnet,
        bytes: h,
        len,
    }
}

#[cfg(test)]
mod tests;
