//! The receive and transmit queues of one AF_PACKET socket: frames copied between the rings and
//! Quiver's buffers.

use dataplane::BufferIndex;
use std::io::IoSlice;
use std::sync::Arc;

use dataplane::offload::{BadOffload, Gso, Offload};
use dataplane::{RxQueue, TxQueue, WorkerBuffers};

use super::counters::{Counter, QueueCounters};
use super::ring::{RxFrame, RxRing, TxRing, VNET_HDR};
use super::socket::PacketSocket;

use crate::coalesce::{self, Kind, Kinds};

/// Ethernet header bytes, and what an 802.1Q tag adds.
const ETHERNET_HEADER: usize = 14;
const VLAN_TAG: usize = 4;

/// The longest frame a device with this MTU carries: its Ethernet header and up to two VLAN
/// tags on top of the MTU.
pub(crate) fn max_frame_len(mtu: u32) -> usize {
    mtu as usize + ETHERNET_HEADER + 2 * VLAN_TAG
}

/// The longest GSO super-frame: an IP packet of 64 KiB with its Ethernet header and two tags.
pub(crate) const GSO_MAX_FRAME: usize = u16::MAX as usize + ETHERNET_HEADER + 2 * VLAN_TAG;

/// The work a frame's virtio-net header leaves (none on a socket without them), with its
/// offsets moved past a VLAN tag that will be put back.
#[inline(always)]
fn frame_offload(frame: &RxFrame<'_>) -> Result<Option<Offload>, BadOffload> {
    match Offload::from_virtio(&frame.vnet, frame.bytes.len())? {
        Some(o) if frame.vlan.is_some() => o
            .shifted(VLAN_TAG as u16)
            .map(Some)
            .ok_or(BadOffload::Checksum),
        o => Ok(o),
    }
}

/// No buffer was left for a frame's tail.
struct NoBuffer;

/// Writes `parts` one after the other into `head`, chaining more buffers when one is not
/// enough. On failure `head` keeps what was written and its chain.
fn write_parts(
    buffers: &mut WorkerBuffers,
    head: BufferIndex,
    parts: &[&[u8]],
) -> Result<(), NoBuffer> {
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
fn copy_frame(
    buffers: &mut WorkerBuffers,
    bi: BufferIndex,
    frame: &RxFrame<'_>,
) -> Result<(), NoBuffer> {
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

/// Copies up to `out.len()` frames from `ring` into buffers (see [`RxQueue::receive`]), with
/// the work their virtio-net headers leave kept on them ([`dataplane::offload`]). Frames the
/// graph could not use (cut short, longer than `max_len` unless a GSO super-frame, with a
/// virtio-net header that does not fit them) are counted and skipped; when buffers run out,
/// the frames stay in the ring for the next poll.
pub(crate) fn receive_from(
    ring: &mut RxRing,
    buffers: &mut WorkerBuffers,
    out: &mut [BufferIndex],
    counters: &QueueCounters,
    max_len: usize,
) -> usize {
    // out[..n] are received packets; out[n..n + spare] buffers allocated but not yet filled.
    let (mut n, mut spare) = (0, 0);
    let (mut bytes, mut partial, mut gso, mut segments) = (0u64, 0u64, 0u64, 0u64);
    while n < out.len() && ring.poll() {
        let frame = ring.frame();
        let len = frame.bytes.len() + frame.vlan.map_or(0, |t| t.len());
        let offload = frame_offload(&frame);
        let limit = match offload {
            Ok(Some(o)) if o.gso != Gso::None => GSO_MAX_FRAME,
            _ => max_len,
        };
        if (frame.wire_len as usize) > frame.bytes.len() {
            counters.bump(Counter::RxTruncated, 1);
        } else if offload.is_err() {
            counters.bump(Counter::RxBadVnetHdr, 1);
        } else if len > limit {
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
                    if let Ok(Some(o)) = offload {
                        buffers.meta_mut(out[n]).set_offload(o);
                        if o.gso != Gso::None {
                            gso += 1;
                            segments += gso_segments(&o, &frame);
                        }
                    }
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
    if gso > 0 {
        counters.bump(Counter::RxGso, gso);
        counters.bump(Counter::RxGsoSegments, segments);
    }
    n
}

/// How many segments (datagrams, TCP segments) super-frame `frame` holds, as its work `o`
/// says: its payload after the L4 header in `gso_size` pieces. `o`'s offsets count the VLAN
/// tag the device stripped (see [`frame_offload`]); the frame's bytes do not.
fn gso_segments(o: &Offload, frame: &RxFrame<'_>) -> u64 {
    let tag = frame.vlan.map_or(0, |t| t.len());
    let start = (o.csum_start as usize).saturating_sub(tag);
    let l4_header = match o.gso {
        Gso::Udp => 8,
        _ => frame
            .bytes
            .get(start + 12)
            .map_or(20, |&doff| (doff >> 4) as usize * 4),
    };
    let payload = frame.bytes.len().saturating_sub(start + l4_header);
    payload.div_ceil(usize::from(o.gso_size.max(1))).max(1) as u64
}

/// The longest frame the kernel sends for a device of this MTU, given the frame's first
/// bytes: the MTU plus the Ethernet header, and a VLAN tag's 4 bytes when it has one.
fn device_limit(mtu: u32, head: &[u8]) -> usize {
    let tagged = head.len() >= 14 && matches!([head[12], head[13]], [0x81, 0x00] | [0x88, 0xa8]);
    mtu as usize + ETHERNET_HEADER + if tagged { VLAN_TAG } else { 0 }
}

/// Copies packet `bi`, chain and all, to the start of `slot`; returns its length, or `None`
/// when it does not fit (only a chain whose metadata understates its length can get here).
fn gather(buffers: &WorkerBuffers, bi: BufferIndex, slot: &mut [u8]) -> Option<usize> {
    let mut at = 0;
    for segment in buffers.chain(bi) {
        let d = buffers.data(segment);
        slot.get_mut(at..at + d.len())?.copy_from_slice(d);
        at += d.len();
    }
    Some(at)
}

/// What one [`transmit_into`] pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TxPass {
    /// Packets taken (and freed): queued or dropped.
    pub taken: usize,
    /// Of those, queued for the kernel.
    pub queued: usize,
    /// The pass stopped before a super-frame too long for a slot (`packets[taken]`), to be
    /// sent by [`send_big`] once the slots before it are.
    pub big: bool,
}

/// Copies packets into `ring` slots (see [`TxQueue::transmit`]), each after its virtio-net
/// header when `vnet` (the work left on it, or zeros). Every taken packet is freed here: sent
/// ones are copied, too long ones counted. Stops at a full ring, or before a super-frame no
/// slot holds.
pub(crate) fn transmit_into(
    ring: &mut TxRing,
    buffers: &mut WorkerBuffers,
    packets: &[BufferIndex],
    counters: &QueueCounters,
    mtu: u32,
    vnet: bool,
) -> TxPass {
    let (mut taken, mut queued, mut bytes, mut big) = (0, 0, 0u64, false);
    let pre = if vnet { VNET_HDR } else { 0 };
    let room = ring.capacity() - pre;
    for &bi in packets {
        let meta = buffers.meta(bi);
        let len = meta.total_length() as usize;
        let offload = meta.offload().copied().filter(|_| vnet);
        if offload.is_some_and(|o| o.gso != Gso::None) {
            // The kernel segments it to the device's size.
            if len > room {
                big = true;
                break;
            }
        } else if len > room || len > device_limit(mtu, buffers.data(bi)) {
            counters.bump(Counter::TxTooLong, 1);
            taken += 1;
            continue;
        }
        let header = offload.map(|o| o.to_virtio(buffers.data(bi)));
        let Some(slot) = ring.next_free() else {
            counters.bump(Counter::TxRingFull, 1);
            break;
        };
        taken += 1;
        let (head, body) = slot.split_at_mut(pre);
        head.copy_from_slice(&header.unwrap_or_default()[..pre]);
        match gather(buffers, bi, body) {
            Some(len) => {
                ring.send(pre + len);
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
    TxPass { taken, queued, big }
}

/// Buffers a super-frame sent by [`send_big`] may span.
const MAX_PARTS: usize = 96;

/// Sends super-frame `bi` whole, virtio-net header first, through the socket's super-frame
/// socket. `false` when the socket is busy: `bi` is still the caller's. Otherwise `bi` is
/// freed, sent or dropped (counted).
pub(crate) fn send_big(
    socket: &PacketSocket,
    buffers: &mut WorkerBuffers,
    bi: BufferIndex,
    counters: &QueueCounters,
) -> bool {
    let header = buffers
        .meta(bi)
        .offload()
        .map(|o| o.to_virtio(buffers.data(bi)))
        .unwrap_or_default();
    let result = {
        let mut parts = [IoSlice::new(&[]); MAX_PARTS];
        parts[0] = IoSlice::new(&header);
        let mut n = 1;
        for segment in buffers.chain(bi) {
            if n == MAX_PARTS {
                break;
            }
            parts[n] = IoSlice::new(buffers.data(segment));
            n += 1;
        }
        if n == MAX_PARTS {
            Err(nix::Error::EMSGSIZE)
        } else {
            socket.send_big(&parts[..n])
        }
    };
    match result {
        Err(nix::Error::EAGAIN | nix::Error::ENOBUFS) => return false,
        Ok(_) => {
            counters.bump(Counter::TxPackets, 1);
            counters.bump(Counter::TxBytes, buffers.meta(bi).total_length() as u64);
            counters.bump(Counter::TxGso, 1);
        }
        Err(nix::Error::EMSGSIZE) => counters.bump(Counter::TxTooLong, 1),
        Err(_) => counters.bump(Counter::TxErrors, 1),
    }
    buffers.free(&[bi]);
    true
}

/// One worker's receive queue of an AF_PACKET port.
pub(crate) struct AfPacketRx {
    ring: RxRing,
    max_len: usize,
    counters: Arc<QueueCounters>,
    /// Keeps the socket, and so the ring's mapping, alive; its descriptor wakes an idle queue.
    socket: Arc<PacketSocket>,
}

// SAFETY: the ring's raw pointer points into the socket's mapping, which `socket` keeps alive
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
            socket,
        }
    }
}

impl RxQueue for AfPacketRx {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        receive_from(&mut self.ring, buffers, out, &self.counters, self.max_len)
    }

    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.socket.raw_fd())
    }

    fn set_mode(&mut self, mode: dataplane::RxMode) {
        self.counters.set_rx_mode(mode);
    }
}

/// What became of a run offered as one super-frame.
enum RunSent {
    /// Sent (or dropped, counted) and freed.
    Done,
    /// The socket is busy: the packets are still the caller's.
    Busy,
    /// The kernel refused the super-frame (no such GSO here): the packets are still the
    /// caller's, to be sent one by one.
    Refused,
}

/// Sends `packets` (a run of `kind`, [`coalesce::next_run`]) as one super-frame through the
/// socket's super-frame socket, gathered from the buffers (no copy here).
fn send_run(
    socket: &PacketSocket,
    buffers: &mut WorkerBuffers,
    packets: &[BufferIndex],
    kind: Kind,
    counters: &QueueCounters,
) -> RunSent {
    let headers = coalesce::super_headers(buffers, packets, kind);
    let result = {
        let mut parts = [IoSlice::new(&[]); coalesce::MAX_RUN + 2];
        let n = coalesce::gather(buffers, packets, &headers, &mut parts);
        socket.send_big(&parts[..n])
    };
    let count = packets.len() as u64;
    match result {
        Err(nix::Error::EAGAIN | nix::Error::ENOBUFS) => return RunSent::Busy,
        Err(nix::Error::EINVAL | nix::Error::EOPNOTSUPP | nix::Error::EPROTONOSUPPORT) => {
            return RunSent::Refused
        }
        Ok(_) => {
            let bytes: u64 = packets
                .iter()
                .map(|&bi| u64::from(buffers.meta(bi).total_length()))
                .sum();
            counters.bump(Counter::TxPackets, count);
            counters.bump(Counter::TxBytes, bytes);
            counters.count_run(kind, count);
        }
        Err(nix::Error::EMSGSIZE) => counters.bump(Counter::TxTooLong, count),
        Err(_) => counters.bump(Counter::TxErrors, count),
    }
    buffers.free(packets);
    RunSent::Done
}

/// One worker's transmit queue of an AF_PACKET port.
pub(crate) struct AfPacketTx {
    ring: TxRing,
    mtu: u32,
    counters: Arc<QueueCounters>,
    /// The last kick failed: frames wait in the ring for the next one.
    kick_pending: bool,
    /// Frames carry virtio-net headers: offload work is handed to the kernel.
    vnet: bool,
    /// Runs of a tunnel's datagrams and of one connection's TCP segments leave as GSO
    /// super-frames (with `vnet`, each kind until the kernel refuses one).
    runs: Kinds,
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
            vnet: socket.vnet_hdr(),
            runs: Kinds {
                udp: socket.vnet_hdr(),
                tcp: socket.vnet_hdr(),
            },
            socket,
        }
    }
}

impl TxQueue for AfPacketTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        let mut done = 0;
        loop {
            let rest = &packets[done..];
            let run = if self.runs.any() {
                coalesce::next_run(
                    buffers,
                    rest,
                    self.runs,
                    self.mtu as usize + ETHERNET_HEADER,
                )
            } else {
                None
            };
            let plain = run.map_or(rest.len(), |r| r.start);
            let pass = transmit_into(
                &mut self.ring,
                buffers,
                &rest[..plain],
                &self.counters,
                self.mtu,
                self.vnet,
            );
            done += pass.taken;
            if pass.queued > 0 || self.kick_pending {
                // One system call per burst: the kernel sends every requested slot.
                self.kick_pending = self.socket.kick().is_err();
                if self.kick_pending {
                    self.counters.bump(Counter::TxKickErrors, 1);
                }
            }
            if pass.taken < plain {
                // A super-frame: sent after the slots before it (kicked just above).
                if !pass.big || !send_big(&self.socket, buffers, packets[done], &self.counters) {
                    return done;
                }
                done += 1;
                continue;
            }
            let Some(run) = run else {
                return done;
            };
            // A run of one flow's packets, after the slots before it.
            let packets = &packets[done..done + run.len];
            match send_run(&self.socket, buffers, packets, run.kind, &self.counters) {
                RunSent::Done => done += run.len,
                RunSent::Busy => return done,
                RunSent::Refused => {
                    tracing::info!(
                        "AF_PACKET: the kernel refused a {:?} GSO super-frame; those packets \
                         leave one by one",
                        run.kind
                    );
                    self.runs.refuse(run.kind);
                }
            }
        }
    }

    fn accepts_offload(&self) -> bool {
        self.vnet
    }
}

#[cfg(test)]
mod tests;
