//! One worker's receive and transmit sides of an AF_XDP socket.
//!
//! The UMEM's first half is the receive side's: every frame of it sits in the fill ring or the
//! receive ring, or is being copied out; each frame received is copied into a Quiver buffer and
//! goes straight back to the fill ring. The second half is the transmit side's: free frames on
//! a stack, filled from Quiver's buffers, put on the transmit ring, and back on the stack when
//! the completion ring returns them. No allocation, no lock; one system call per burst (only
//! when the kernel asks to be woken, which copy mode always does on transmit).

use dataplane::BufferIndex;
use std::sync::Arc;

use dataplane::offload::infer_partial_checksum;
use dataplane::{RxQueue, TxQueue, WorkerBuffers};

use super::ring::{Consumer, Producer};
use super::socket::XskSocket;
use crate::af_packet::{Counter, QueueCounters};

/// The receive side: the fill and receive rings.
pub(super) struct AfXdpRx {
    pub(super) socket: Arc<XskSocket>,
    pub(super) fill: Producer<u64>,
    pub(super) rx: Consumer<libc::xdp_desc>,
    pub(super) counters: Arc<QueueCounters>,
    /// Bytes per UMEM frame.
    pub(super) chunk: u64,
}

impl AfXdpRx {
    /// Gives the receive half of the UMEM (`frames` frames from address 0) to the kernel.
    pub(super) fn fill_all(&mut self, frames: u32) {
        let n = self.fill.free(frames).min(frames);
        for i in 0..n {
            self.fill.push(u64::from(i) * self.chunk);
        }
        self.fill.publish();
    }
}

impl RxQueue for AfXdpRx {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        let ready = self.rx.ready(out.len() as u32);
        if ready == 0 {
            if self.fill.needs_wakeup() {
                self.socket.kick_rx();
            }
            return 0;
        }
        let (mut n, mut bytes, mut consumed, mut partials) = (0usize, 0u64, 0u32, 0u64);
        while consumed < ready {
            let desc = self.rx.get(consumed);
            let Some(bi) = buffers.alloc_one() else {
                // The rest stay on the ring for the next poll.
                self.counters.bump(Counter::RxBufferStalls, 1);
                break;
            };
            consumed += 1;
            // SAFETY: the receive ring handed this frame to us; it goes back to the fill ring
            // after the copy (published below, after the loop).
            let frame = unsafe { self.socket.umem.bytes_mut(desc.addr, desc.len as usize) };
            let copied = frame.map(|f| (buffers.write_packet(bi, f), infer_partial_checksum(f)));
            // Aligned mode: the frame's base is its address rounded down to a chunk.
            self.fill.push(desc.addr - desc.addr % self.chunk);
            match copied {
                Some((Ok(()), partial)) => {
                    if let Some(o) = partial {
                        buffers.meta_mut(bi).set_offload(o);
                        partials += 1;
                    }
                    bytes += u64::from(desc.len);
                    out[n] = bi;
                    n += 1;
                }
                Some((Err(_), _)) => {
                    self.counters.bump(Counter::RxNoBuffer, 1);
                    buffers.free_one(bi);
                }
                None => {
                    self.counters.bump(Counter::RxBadSlot, 1);
                    buffers.free_one(bi);
                }
            }
        }
        self.rx.release(consumed);
        // Every frame released is pushed back: the fill ring holds the whole receive half.
        self.fill.publish();
        if self.fill.needs_wakeup() {
            self.socket.kick_rx();
        }
        if n > 0 {
            self.counters.bump(Counter::RxPackets, n as u64);
            self.counters.bump(Counter::RxBytes, bytes);
        }
        if partials > 0 {
            self.counters.bump(Counter::RxChecksumPartial, partials);
        }
        n
    }

    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.socket.as_raw_fd())
    }

    fn set_mode(&mut self, mode: dataplane::RxMode) {
        self.counters.set_rx_mode(mode);
    }
}

/// The transmit side: the transmit and completion rings, and the free frames.
pub(super) struct AfXdpTx {
    pub(super) socket: Arc<XskSocket>,
    pub(super) tx: Producer<libc::xdp_desc>,
    pub(super) completion: Consumer<u64>,
    pub(super) counters: Arc<QueueCounters>,
    /// UMEM addresses of frames free to fill.
    pub(super) free: Vec<u64>,
    /// Bytes per UMEM frame.
    pub(super) chunk: u64,
    /// A failed kick was logged already.
    pub(super) failed: bool,
    /// The last kick left frames on the transmit ring.
    pub(super) pending: bool,
}

impl AfXdpTx {
    /// Takes back the frames the kernel has sent.
    fn reclaim(&mut self) {
        let done = self.completion.ready(u32::MAX);
        for i in 0..done {
            let addr = self.completion.get(i);
            self.free.push(addr - addr % self.chunk);
        }
        self.completion.release(done);
    }

    /// Kicks the kernel until it has taken `frames` frames' worth of batches (32 per call in
    /// copy mode), or says it cannot take more now.
    fn kick(&mut self, frames: u64) {
        self.pending = true;
        for _ in 0..frames.div_ceil(KICK_BATCH) + 1 {
            match self.socket.kick_tx() {
                Ok(true) => {
                    self.pending = false;
                    return;
                }
                Ok(false) => {}
                Err(e) => {
                    self.counters.bump(Counter::TxKickErrors, 1);
                    if !std::mem::replace(&mut self.failed, true) {
                        tracing::debug!(error = %e, "AF_XDP transmit kick failed");
                    }
                    return;
                }
            }
        }
    }
}

/// Frames the kernel sends per transmit kick in copy mode (`TX_BATCH_SIZE`).
const KICK_BATCH: u64 = 32;

impl TxQueue for AfXdpTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        if self.pending {
            self.kick(0);
        }
        self.reclaim();
        let room = self.tx.free(packets.len() as u32) as usize;
        let (mut taken, mut sent, mut bytes) = (0usize, 0u64, 0u64);
        for &bi in packets {
            if taken == room {
                break;
            }
            let Some(&addr) = self.free.last() else {
                break;
            };
            let len: usize = buffers.chain(bi).map(|s| buffers.data(s).len()).sum();
            taken += 1;
            if len as u64 > self.chunk {
                self.counters.bump(Counter::TxTooLong, 1);
                continue;
            }
            // SAFETY: `addr` is a free transmit frame: ours until the completion ring returns it.
            let Some(frame) = (unsafe { self.socket.umem.bytes_mut(addr, len) }) else {
                self.counters.bump(Counter::TxErrors, 1);
                continue;
            };
            let mut at = 0;
            for s in buffers.chain(bi) {
                let d = buffers.data(s);
                frame[at..at + d.len()].copy_from_slice(d);
                at += d.len();
            }
            self.free.pop();
            self.tx.push(libc::xdp_desc {
                addr,
                len: len as u32,
                options: 0,
            });
            sent += 1;
            bytes += len as u64;
        }
        if taken < packets.len() {
            self.counters.bump(Counter::TxRingFull, 1);
        }
        if sent > 0 {
            self.tx.publish();
            if self.socket.copy || self.tx.needs_wakeup() {
                self.kick(sent);
            }
            self.counters.bump(Counter::TxPackets, sent);
            self.counters.bump(Counter::TxBytes, bytes);
        }
        buffers.free(&packets[..taken]);
        taken
    }
}
