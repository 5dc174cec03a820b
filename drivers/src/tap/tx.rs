//! The transmit side of a TAP queue: each frame one `writev` behind its virtio-net header, and
//! with offloads a burst's run of one connection's TCP segments (or a tunnel's datagrams) one
//! `writev` as a GSO super-frame ([`crate::coalesce`]): the kernel then takes one skb into the
//! receiving stack instead of dozens.

use dataplane::BufferIndex;
use std::io::IoSlice;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use dataplane::offload::{Gso, VIRTIO_NET_HDR_LEN};
use dataplane::{TxQueue, WorkerBuffers};
use nix::sys::uio::writev;

use crate::af_packet::{Counter, QueueCounters};
use crate::coalesce::{self, Kinds};

/// Buffers one transmitted frame may span (a 64 KiB super-frame in 2 KiB buffers, and room).
const MAX_SEGMENTS: usize = 48;

/// One worker's transmit side of a TAP queue.
pub(super) struct TapTx {
    pub fd: Arc<OwnedFd>,
    pub counters: Arc<QueueCounters>,
    /// Frames go behind a virtio-net header (the work left on them, or zeros).
    pub vnet: bool,
    /// Runs of one connection's TCP segments and of a tunnel's datagrams leave as super-frames
    /// (with `vnet`, each kind until the kernel refuses one).
    pub runs: Kinds,
}

impl TapTx {
    /// A queue writing to `fd`, with virtio-net headers (and runs) when `vnet`.
    pub fn new(fd: Arc<OwnedFd>, counters: Arc<QueueCounters>, vnet: bool) -> TapTx {
        TapTx {
            fd,
            counters,
            vnet,
            runs: Kinds {
                udp: vnet,
                tcp: vnet,
            },
        }
    }

    /// Writes `packets` one frame each; returns how many were taken (written or dropped,
    /// counted, and freed): fewer when the device's queue fills.
    fn write_each(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        let (mut taken, mut sent, mut bytes, mut gso) = (0, 0u64, 0u64, 0u64);
        let pre = if self.vnet { VIRTIO_NET_HDR_LEN } else { 0 };
        for &bi in packets {
            let offload = buffers.meta(bi).offload().copied().filter(|_| self.vnet);
            let header = offload
                .map(|o| o.to_virtio(buffers.data(bi)))
                .unwrap_or_default();
            let mut iov = [IoSlice::new(&[]); MAX_SEGMENTS + 1];
            iov[0] = IoSlice::new(&header[..pre]);
            let mut segments = 1;
            for segment in buffers.chain(bi) {
                if segments == MAX_SEGMENTS + 1 {
                    segments += 1;
                    break;
                }
                iov[segments] = IoSlice::new(buffers.data(segment));
                segments += 1;
            }
            if segments > MAX_SEGMENTS + 1 {
                self.counters.bump(Counter::TxTooLong, 1);
                taken += 1;
                continue;
            }
            match writev(&*self.fd, &iov[..segments]) {
                Ok(n) => {
                    sent += 1;
                    bytes += n.saturating_sub(pre) as u64;
                    gso += offload.is_some_and(|o| o.gso != Gso::None) as u64;
                }
                // The device's queue is full: the caller keeps the rest.
                Err(nix::Error::EAGAIN) => {
                    self.counters.bump(Counter::TxRingFull, 1);
                    break;
                }
                Err(nix::Error::EMSGSIZE) => self.counters.bump(Counter::TxTooLong, 1),
                Err(_) => self.counters.bump(Counter::TxErrors, 1),
            }
            taken += 1;
        }
        buffers.free(&packets[..taken]);
        if sent > 0 {
            self.counters.bump(Counter::TxPackets, sent);
            self.counters.bump(Counter::TxBytes, bytes);
        }
        if gso > 0 {
            self.counters.bump(Counter::TxGso, gso);
        }
        taken
    }

    /// Writes the run `packets` of `kind` as one super-frame. `None` when the device's queue
    /// is full (the packets are still the caller's); `Some(false)` when the kernel refused the
    /// super-frame (the packets are still the caller's, to go one by one); `Some(true)` when
    /// they were written or dropped (counted) and freed.
    fn write_run(
        &mut self,
        buffers: &mut WorkerBuffers,
        packets: &[BufferIndex],
        kind: coalesce::Kind,
    ) -> Option<bool> {
        let headers = coalesce::super_headers(buffers, packets, kind);
        let result = {
            let mut parts = [IoSlice::new(&[]); coalesce::MAX_RUN + 2];
            let n = coalesce::gather(buffers, packets, &headers, &mut parts);
            writev(&*self.fd, &parts[..n])
        };
        let count = packets.len() as u64;
        match result {
            Err(nix::Error::EAGAIN) => {
                self.counters.bump(Counter::TxRingFull, 1);
                return None;
            }
            Err(nix::Error::EINVAL | nix::Error::EOPNOTSUPP) => return Some(false),
            Ok(n) => {
                self.counters.bump(Counter::TxPackets, count);
                let bytes = n.saturating_sub(VIRTIO_NET_HDR_LEN);
                let repeated = (packets.len() - 1) * headers.len;
                self.counters
                    .bump(Counter::TxBytes, (bytes + repeated) as u64);
                self.counters.count_run(kind, count);
            }
            Err(nix::Error::EMSGSIZE) => self.counters.bump(Counter::TxTooLong, count),
            Err(_) => self.counters.bump(Counter::TxErrors, count),
        }
        buffers.free(packets);
        Some(true)
    }
}

impl TxQueue for TapTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        let mut done = 0;
        loop {
            let rest = &packets[done..];
            let run = if self.runs.any() {
                coalesce::next_run(buffers, rest, self.runs, usize::MAX)
            } else {
                None
            };
            let plain = run.map_or(rest.len(), |r| r.start);
            let taken = self.write_each(buffers, &rest[..plain]);
            done += taken;
            let Some(run) = run.filter(|_| taken == plain) else {
                return done;
            };
            match self.write_run(buffers, &packets[done..done + run.len], run.kind) {
                Some(true) => done += run.len,
                Some(false) => {
                    tracing::info!(
                        "TAP: the kernel refused a {:?} GSO super-frame; those packets leave \
                         one by one",
                        run.kind
                    );
                    self.runs.refuse(run.kind);
                }
                None => return done,
            }
        }
    }

    fn accepts_offload(&self) -> bool {
        self.vnet
    }
}
