//! The receive and transmit queues of one AF_PACKET socket: frames copied between the rings and
//! Quiver's buffers.

use std::sync::Arc;

use dataplane::{RxQueue, TxQueue, WorkerBuffers};

use super::counters::{Counter, QueueCounters};
use super::ring::{RxFrame, RxRing, TxRing};
use super::socket::PacketSocket;

/// Ethernet header bytes, and what an 802.1Q tag adds.
const ETHERNET_HEADER: usize = 14;
const VLAN_TAG: usize = 4;

/// The longest frame a device with this MTU carries: its Ethernet header and up to two VLAN
/// tags on top of the MTU.
pub(crate) fn max_frame_len(mtu: u32) -> usize {
    mtu as usize + ETHERNET_HEADER + 2 * VLAN_TAG
}

/// No buffer was left for a frame's tail.
struct NoBuffer;

/// Writes `parts` one after the other into `head`, chaining more buffers when one is not
/// enough. On failure `head` keeps what was written and its chain.
fn write_parts(buffers: &mut WorkerBuffers, head: u32, parts: &[&[u8]]) -> Result<(), NoBuffer> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let room = buffers.data_size() as usize;
    let (mut segment, mut segment_len, mut filled, mut written) = (head, total.min(room), 0, 0);
    buffers.set_length(segment, segment_len as u16);
    for part in parts {
        let mut part = *part;
        while !part.is_empty() {
            if filled == segment_len {
                let next = buffers.alloc_one().ok_or(NoBuffer)?;
                segment_len = (total - written).min(room);
                buffers.set_length(next, segment_len as u16);
                buffers.chain_append(head, next);
                (segment, filled) = (next, 0);
            }
            let n = part.len().min(segment_len - filled);
            buffers.data_mut(segment)[filled..filled + n].copy_from_slice(&part[..n]);
            (filled, written, part) = (filled + n, written + n, &part[n..]);
        }
    }
    Ok(())
}

/// Copies one received frame into `bi`, putting back the VLAN tag the device stripped.
fn copy_frame(buffers: &mut WorkerBuffers, bi: u32, frame: &RxFrame<'_>) -> Result<(), NoBuffer> {
    let b = frame.bytes;
    match frame.vlan {
        None if b.len() <= buffers.data_size() as usize => {
            buffers.set_length(bi, b.len() as u16);
            buffers.data_mut(bi).copy_from_slice(b);
            Ok(())
        }
        None => write_parts(buffers, bi, &[b]),
        Some(tag) if b.len() >= 12 => write_parts(buffers, bi, &[&b[..12], &tag, &b[12..]]),
        // Shorter than two MAC addresses: nowhere to put a tag; leave the frame as it came.
        Some(_) => write_parts(buffers, bi, &[b]),
    }
}

/// Copies up to `out.len()` frames from `ring` into buffers (see [`RxQueue::receive`]).
/// Frames the graph could not use (cut short, longer than `max_len`) are counted and skipped;
/// when buffers run out, the frames stay in the ring for the next poll.
pub(crate) fn receive_from(
    ring: &mut RxRing,
    buffers: &mut WorkerBuffers,
    out: &mut [u32],
    counters: &QueueCounters,
    max_len: usize,
) -> usize {
    // out[..n] are received packets; out[n..n + spare] buffers allocated but not yet filled.
    let (mut n, mut spare) = (0, 0);
    let (mut bytes, mut partial) = (0u64, 0u64);
    while n < out.len() && ring.poll() {
        let frame = ring.frame();
        let len = frame.bytes.len() + frame.vlan.map_or(0, |t| t.len());
        if (frame.wire_len as usize) > frame.bytes.len() {
            counters.bump(Counter::RxTruncated, 1);
        } else if len > max_len {
            counters.bump(Counter::RxTooLong, 1);
        } else {
            if spare == 0 {
                // As many as this block still holds: no allocation left over in the common case.
                let want = (out.len() - n).min(ring.left_in_block().max(1) as usize);
                spare = buffers.alloc_up_to(&mut out[n..n + want]);
                if spare == 0 {
                    counters.bump(Counter::RxBufferStalls, 1);
                    break;
                }
            }
            match copy_frame(buffers, out[n], &frame) {
                Ok(()) => {
                    partial += frame.checksum_partial as u64;
                    bytes += len as u64;
                    n += 1;
                    spare -= 1;
                }
                Err(NoBuffer) => {
                    // The buffer at out[n] stays spare; only its chain goes.
                    buffers.unchain(out[n]);
                    counters.bump(Counter::RxNoBuffer, 1);
                }
            }
        }
        ring.advance();
    }
    if spare > 0 {
        buffers.free(&out[n..n + spare]);
    }
    let bad = ring.take_bad();
    if bad > 0 {
        counters.bump(Counter::RxBadSlot, bad);
    }
    if n > 0 {
        counters.bump(Counter::RxPackets, n as u64);
        counters.bump(Counter::RxBytes, bytes);
    }
    if partial > 0 {
        counters.bump(Counter::RxChecksumPartial, partial);
    }
    n
}

/// The longest frame the kernel sends for a device of this MTU, given the frame's first
/// bytes: the MTU plus the Ethernet header, and a VLAN tag's 4 bytes when it has one.
fn device_limit(mtu: u32, head: &[u8]) -> usize {
    let tagged = head.len() >= 14 && matches!([head[12], head[13]], [0x81, 0x00] | [0x88, 0xa8]);
    mtu as usize + ETHERNET_HEADER + if tagged { VLAN_TAG } else { 0 }
}

/// Copies packet `bi`, chain and all, to the start of `slot`; returns its length, or `None`
/// when it does not fit (only a chain whose metadata understates its length can get here).
fn gather(buffers: &WorkerBuffers, bi: u32, slot: &mut [u8]) -> Option<usize> {
    let mut at = 0;
    for segment in buffers.chain(bi) {
        let d = buffers.data(segment);
        slot.get_mut(at..at + d.len())?.copy_from_slice(d);
        at += d.len();
    }
    Some(at)
}

/// Copies packets into `ring` slots (see [`TxQueue::transmit`]); returns how many were taken
/// and how many of those were queued for the kernel. Every taken packet is freed here: sent ones
/// are copied, too long ones counted.
pub(crate) fn transmit_into(
    ring: &mut TxRing,
    buffers: &mut WorkerBuffers,
    packets: &[u32],
    counters: &QueueCounters,
    mtu: u32,
) -> (usize, usize) {
    let (mut taken, mut queued, mut bytes) = (0, 0, 0u64);
    for &bi in packets {
        let len = buffers.meta(bi).total_length() as usize;
        if len > ring.capacity() || len > device_limit(mtu, buffers.data(bi)) {
            counters.bump(Counter::TxTooLong, 1);
            taken += 1;
            continue;
        }
        let Some(slot) = ring.next_free() else {
            counters.bump(Counter::TxRingFull, 1);
            break;
        };
        taken += 1;
        match gather(buffers, bi, slot) {
            Some(len) => {
                ring.send(len);
                bytes += len as u64;
                queued += 1;
            }
            None => counters.bump(Counter::TxTooLong, 1),
        }
    }
    buffers.free(&packets[..taken]);
    if queued > 0 {
        counters.bump(Counter::TxPackets, queued as u64);
        counters.bump(Counter::TxBytes, bytes);
    }
    (taken, queued)
}

/// One worker's receive queue of an AF_PACKET port.
pub(crate) struct AfPacketRx {
    ring: RxRing,
    max_len: usize,
    counters: Arc<QueueCounters>,
    /// Keeps the socket, and so the ring's mapping, alive.
    _socket: Arc<PacketSocket>,
}

// SAFETY: the ring's raw pointer points into the socket's mapping, which `_socket` keeps alive
// wherever the queue goes; the queue is the ring's only user (one worker at a time).
unsafe impl Send for AfPacketRx {}

impl AfPacketRx {
    pub(crate) fn new(socket: Arc<PacketSocket>, max_len: usize) -> AfPacketRx {
        AfPacketRx {
            // SAFETY: the ring lives in this queue beside an `Arc` of its socket, and a socket
            // gets one queue pair (see `AfPacketPort::queue_pair`).
            ring: unsafe { socket.rx_ring() },
            max_len,
            counters: socket.counters().clone(),
            _socket: socket,
        }
    }
}

impl RxQueue for AfPacketRx {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [u32]) -> usize {
        receive_from(&mut self.ring, buffers, out, &self.counters, self.max_len)
    }
}

/// One worker's transmit queue of an AF_PACKET port.
pub(crate) struct AfPacketTx {
    ring: TxRing,
    mtu: u32,
    counters: Arc<QueueCounters>,
    /// The last kick failed: frames wait in the ring for the next one.
    kick_pending: bool,
    socket: Arc<PacketSocket>,
}

// SAFETY: as for `AfPacketRx`.
unsafe impl Send for AfPacketTx {}

impl AfPacketTx {
    pub(crate) fn new(socket: Arc<PacketSocket>, mtu: u32) -> AfPacketTx {
        AfPacketTx {
            // SAFETY: as for the receive ring in `AfPacketRx::new`.
            ring: unsafe { socket.tx_ring() },
            mtu,
            counters: socket.counters().clone(),
            kick_pending: false,
            socket,
        }
    }
}

impl TxQueue for AfPacketTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[u32]) -> usize {
        let (taken, queued) =
            transmit_into(&mut self.ring, buffers, packets, &self.counters, self.mtu);
        if queued > 0 || self.kick_pending {
            // One system call per burst: the kernel sends every requested slot.
            self.kick_pending = self.socket.kick().is_err();
            if self.kick_pending {
                self.counters.bump(Counter::TxKickErrors, 1);
            }
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::super::ring::fake::FakeKernel;
    use super::super::ring::RingLayout;
    use super::*;
    use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};

    fn pool(buffers: u32, data_size: u16) -> Arc<BufferPool> {
        BufferPool::new(&BufferPoolConfig {
            buffers,
            data_size,
            hugepages: HugepagePolicy::Never,
            ..Default::default()
        })
        .unwrap()
    }

    const RX: RingLayout = RingLayout {
        block_size: 8192,
        block_count: 4,
        frame_size: 2048,
    };

    fn packet(buffers: &WorkerBuffers, bi: u32) -> Vec<u8> {
        let mut v = Vec::new();
        buffers.copy_packet(bi, &mut v);
        v
    }

    #[test]
    fn frames_are_copied_out_long_ones_chained_tags_put_back() {
        let pool = pool(64, 256);
        let mut buffers = pool.worker_buffers();
        let mut k = FakeKernel::new(RX);
        // SAFETY: `k` outlives the ring.
        let mut ring = unsafe { RxRing::new(k.base(), RX) };
        let counters = QueueCounters::default();
        let small: Vec<u8> = (0..60).collect();
        let long: Vec<u8> = (0..700u32).map(|i| i as u8).collect();
        let tagged: Vec<u8> = (100..164).collect();
        k.deliver(&[
            (&small, 60, 0, None),
            (&long, 700, 0, None),
            (&tagged, 64, 0, Some((0x8100, 0x0005))),
        ]);
        let mut out = [0u32; 8];
        let n = receive_from(&mut ring, &mut buffers, &mut out, &counters, 1514);
        assert_eq!(n, 3);
        assert_eq!(packet(&buffers, out[0]), small);
        assert_eq!(packet(&buffers, out[1]), long);
        assert_eq!(
            buffers.chain(out[1]).count(),
            3,
            "700 bytes in 256-byte buffers"
        );
        let mut want = tagged[..12].to_vec();
        want.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        want.extend_from_slice(&tagged[12..]);
        assert_eq!(packet(&buffers, out[2]), want);
        assert_eq!(counters.get(Counter::RxPackets), 3);
        assert_eq!(counters.get(Counter::RxBytes), 60 + 700 + 68);
        buffers.free(&out[..n]);
        assert_eq!(pool.in_use_count(), 0, "no buffer left behind");
    }

    #[test]
    fn unusable_frames_are_counted_and_skipped_and_polls_resume_mid_block() {
        let pool = pool(64, 2048);
        let mut buffers = pool.worker_buffers();
        let mut k = FakeKernel::new(RX);
        // SAFETY: `k` outlives the ring.
        let mut ring = unsafe { RxRing::new(k.base(), RX) };
        let counters = QueueCounters::default();
        let frames: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 64]).collect();
        k.deliver(&[
            (&frames[0], 64, 0, None),
            (&frames[1], 9000, 0, None), // cut short by the kernel
            (&frames[2], 64, libc::TP_STATUS_CSUMNOTREADY, None),
            (&[7; 200], 200, 0, None), // over the 100-byte limit below
            (&frames[4], 64, 0, None),
            (&frames[5], 64, 0, None),
        ]);
        let mut out = [0u32; 2];
        let n = receive_from(&mut ring, &mut buffers, &mut out, &counters, 100);
        assert_eq!(n, 2);
        assert_eq!(packet(&buffers, out[0]), frames[0]);
        assert_eq!(packet(&buffers, out[1]), frames[2]);
        buffers.free(&out[..n]);
        let n = receive_from(&mut ring, &mut buffers, &mut out, &counters, 100);
        assert_eq!(n, 2);
        assert_eq!(packet(&buffers, out[0]), frames[4]);
        assert_eq!(packet(&buffers, out[1]), frames[5]);
        buffers.free(&out[..n]);
        assert_eq!(counters.get(Counter::RxTruncated), 1);
        assert_eq!(counters.get(Counter::RxTooLong), 1);
        assert_eq!(counters.get(Counter::RxChecksumPartial), 1);
        assert_eq!(counters.get(Counter::RxPackets), 4);
        assert_eq!(k.block_status(0), libc::TP_STATUS_KERNEL);
        assert_eq!(pool.in_use_count(), 0);
    }

    #[test]
    fn frames_wait_in_the_ring_while_no_buffer_is_free() {
        let pool = pool(2, 2048);
        let mut buffers = pool.worker_buffers();
        let mut k = FakeKernel::new(RX);
        // SAFETY: `k` outlives the ring.
        let mut ring = unsafe { RxRing::new(k.base(), RX) };
        let counters = QueueCounters::default();
        k.deliver(&[
            (&[1; 64], 64, 0, None),
            (&[2; 64], 64, 0, None),
            (&[3; 64], 64, 0, None),
        ]);
        let mut out = [0u32; 8];
        let n = receive_from(&mut ring, &mut buffers, &mut out, &counters, 1514);
        assert_eq!(n, 2, "two buffers in the pool");
        assert_eq!(counters.get(Counter::RxBufferStalls), 1);
        let held = out;
        buffers.free(&held[..n]);
        let n = receive_from(&mut ring, &mut buffers, &mut out, &counters, 1514);
        assert_eq!(n, 1, "the third frame was kept, not lost");
        assert_eq!(packet(&buffers, out[0]), vec![3; 64]);
        buffers.free(&out[..1]);
        assert_eq!(counters.get(Counter::RxPackets), 3);
    }

    const TX: RingLayout = RingLayout {
        block_size: 4096,
        block_count: 1,
        frame_size: 1024,
    };

    fn make(buffers: &mut WorkerBuffers, bytes: &[u8]) -> u32 {
        let bi = buffers.alloc_one().unwrap();
        buffers.write_packet(bi, bytes).unwrap();
        bi
    }

    #[test]
    fn packets_are_gathered_into_slots_and_freed_and_a_full_ring_refuses_the_rest() {
        let pool = pool(64, 256);
        let mut buffers = pool.worker_buffers();
        let mut k = FakeKernel::new(TX);
        // SAFETY: `k` outlives the ring.
        let mut ring = unsafe { TxRing::new(k.base(), TX) };
        let counters = QueueCounters::default();
        let chained: Vec<u8> = (0..600u32).map(|i| (i * 7) as u8).collect();
        let mut tagged = vec![0u8; 12];
        tagged.extend_from_slice(&[0x81, 0x00, 0, 5]);
        tagged.resize(600 + 18, 1); // MTU + Ethernet + tag: fits only because it is tagged
        let packets = [
            make(&mut buffers, &[1; 60]),
            make(&mut buffers, &chained),
            make(&mut buffers, &[2; 700]), // over MTU 600 + 14
            make(&mut buffers, &tagged),
            make(&mut buffers, &[3; 60]),
            make(&mut buffers, &[4; 60]),
        ];
        let mtu = 600;
        let (taken, queued) = transmit_into(&mut ring, &mut buffers, &packets, &counters, mtu);
        assert_eq!(
            (taken, queued),
            (5, 4),
            "4 slots; the long one taken and dropped"
        );
        let sent = k.take_sent();
        assert_eq!(sent, vec![vec![1; 60], chained, tagged, vec![3; 60]]);
        assert_eq!(counters.get(Counter::TxTooLong), 1);
        assert_eq!(counters.get(Counter::TxRingFull), 1);
        assert_eq!(counters.get(Counter::TxPackets), 4);
        assert_eq!(
            pool.in_use_count(),
            1,
            "only the refused packet is still the caller's"
        );
        k.complete();
        let (taken, _) = transmit_into(&mut ring, &mut buffers, &packets[5..], &counters, mtu);
        assert_eq!(taken, 1);
        assert_eq!(k.take_sent(), vec![vec![4; 60]]);
        assert_eq!(pool.in_use_count(), 0);
    }
}
