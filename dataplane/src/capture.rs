//! Packet capture: the data path's half of `quiver ctl capture start`.
//!
//! A [`CaptureSession`] is one interface's capture: its direction(s), its snap length, its
//! packet budget, and per worker a bounded lock-free queue pair of records allocated when the
//! session is made (control side). The control side hands the session to each worker's
//! capturing nodes (`port-input` for rx, `interface-output` for tx) with a worker command,
//! which puts it in the node's [`CaptureTap`]. On the packet path a node with an empty tap
//! pays one branch per burst; with a session for the interface it takes a free record (no
//! allocation, no lock), copies up to the snap length of the packet and a TSC timestamp into
//! it, and queues it; when no record is free the packet is not captured and counted
//! (`capture-dropped`). The control side's writer drains the queues into a file and gives the
//! records back.

use crate::BufferIndex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use crate::buffer::WorkerBuffers;

/// Records per worker per session: packets a worker can capture before the writer drains.
pub const QUEUE_DEPTH: usize = 1024;

/// Largest snap length.
pub const MAX_SNAPLEN: u32 = 16384;

/// Which way a captured packet went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Received by the interface.
    Rx,
    /// Sent by the interface.
    Tx,
}

/// One captured packet.
pub struct CaptureRecord {
    /// Which way it went.
    pub direction: Direction,
    /// The TSC when it was captured.
    pub tsc: u64,
    /// The packet's length.
    pub orig_len: u32,
    /// Bytes captured (at most the snap length).
    pub len: u32,
    /// The worker whose queue it came from.
    pub worker: usize,
    /// Room for the snap length.
    pub data: Box<[u8]>,
}

struct WorkerQueues {
    free: ArrayQueue<Box<CaptureRecord>>,
    full: ArrayQueue<Box<CaptureRecord>>,
}

/// One interface's capture (see the module docs).
pub struct CaptureSession {
    interface: u32,
    rx: bool,
    tx: bool,
    snaplen: usize,
    /// 0: no limit.
    max_packets: u64,
    taken: AtomicU64,
    stopped: AtomicBool,
    dropped: AtomicU64,
    queues: Box<[WorkerQueues]>,
}

impl CaptureSession {
    /// A session capturing interface `interface` (`rx`, `tx` or both) on `workers` workers,
    /// `snaplen` bytes of each packet (1 to [`MAX_SNAPLEN`]), at most `max_packets` packets (0:
    /// no limit). Allocates every record.
    pub fn new(
        interface: u32,
        rx: bool,
        tx: bool,
        snaplen: u32,
        max_packets: u64,
        workers: usize,
    ) -> Arc<CaptureSession> {
        let snaplen = snaplen.clamp(1, MAX_SNAPLEN) as usize;
        let queues = (0..workers)
            .map(|worker| {
                let q = WorkerQueues {
                    free: ArrayQueue::new(QUEUE_DEPTH),
                    full: ArrayQueue::new(QUEUE_DEPTH),
                };
                for _ in 0..QUEUE_DEPTH {
                    let _ = q.free.push(Box::new(CaptureRecord {
                        direction: Direction::Rx,
                        tsc: 0,
                        orig_len: 0,
                        len: 0,
                        worker,
                        data: vec![0u8; snaplen].into_boxed_slice(),
                    }));
                }
                q
            })
            .collect();
        Arc::new(CaptureSession {
            interface,
            rx,
            tx,
            snaplen,
            max_packets,
            taken: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            queues,
        })
    }

    /// The interface it captures.
    pub fn interface(&self) -> u32 {
        self.interface
    }

    /// Workers stop capturing for it from now on.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// Whether it stopped (told to, or its packet budget is spent).
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Packets not captured because no record was free (the writer fell behind).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Takes every queued record of every worker, in the order each worker queued them.
    pub fn take(&self, into: &mut Vec<Box<CaptureRecord>>) {
        for q in self.queues.iter() {
            while let Some(r) = q.full.pop() {
                into.push(r);
            }
        }
    }

    /// Gives records back (to the workers they came from) once written.
    pub fn give_back(&self, records: impl IntoIterator<Item = Box<CaptureRecord>>) {
        for r in records {
            if let Some(q) = self.queues.get(r.worker) {
                let _ = q.free.push(r);
            }
        }
    }

    /// Captures `packets` (worker `worker`, going `direction`); returns how many found no
    /// free record. No allocation, no lock.
    #[inline]
    fn capture(
        &self,
        worker: usize,
        direction: Direction,
        buffers: &WorkerBuffers,
        packets: &[BufferIndex],
    ) -> u64 {
        let Some(q) = self.queues.get(worker) else {
            return 0;
        };
        let mut dropped = 0;
        for &bi in packets {
            if self.is_stopped() {
                break;
            }
            let Some(mut r) = q.free.pop() else {
                dropped += 1;
                continue;
            };
            if self.max_packets > 0
                && self.taken.fetch_add(1, Ordering::Relaxed) >= self.max_packets
            {
                self.stop();
                let _ = q.free.push(r);
                break;
            }
            let orig_len = buffers.meta(bi).total_length();
            let data = buffers.data(bi);
            let len = data.len().min(self.snaplen);
            r.data[..len].copy_from_slice(&data[..len]);
            r.len = len as u32;
            r.orig_len = orig_len;
            r.direction = direction;
            r.tsc = crate::cycles::now();
            // Never full: a worker's records number the queue's capacity.
            let _ = q.full.push(r);
        }
        if dropped > 0 {
            self.dropped.fetch_add(dropped, Ordering::Relaxed);
        }
        dropped
    }
}

/// The sessions one capturing node of one worker serves. Changed only by worker commands
/// (between loop passes, on the worker's thread).
pub struct CaptureTap {
    worker: usize,
    sessions: Vec<Arc<CaptureSession>>,
}

impl CaptureTap {
    /// Sessions a tap holds without allocating.
    pub const RESERVED: usize = 16;

    /// An empty tap for worker `worker`.
    pub fn new(worker: usize) -> CaptureTap {
        CaptureTap {
            worker,
            sessions: Vec::with_capacity(Self::RESERVED),
        }
    }

    /// Starts serving `session` (this node's worker is `worker`).
    pub fn add(&mut self, worker: usize, session: Arc<CaptureSession>) {
        self.worker = worker;
        self.sessions.push(session);
    }

    /// Stops serving `session`; returns it (the caller drops it off the packet path).
    pub fn remove(&mut self, session: &Arc<CaptureSession>) -> Option<Arc<CaptureSession>> {
        let k = self.sessions.iter().position(|s| Arc::ptr_eq(s, session))?;
        Some(self.sessions.swap_remove(k))
    }

    /// Whether no session is served (the packet path's one check).
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Captures `packets`, received on `interface`; returns how many were dropped.
    #[inline]
    pub fn rx(&self, interface: u32, buffers: &WorkerBuffers, packets: &[BufferIndex]) -> u64 {
        self.sessions
            .iter()
            .filter(|s| s.rx && s.interface == interface)
            .map(|s| s.capture(self.worker, Direction::Rx, buffers, packets))
            .sum()
    }

    /// Captures `packets`, about to be sent on `interface`; returns how many were dropped.
    #[inline]
    pub fn tx(&self, interface: u32, buffers: &WorkerBuffers, packets: &[BufferIndex]) -> u64 {
        self.sessions
            .iter()
            .filter(|s| s.tx && s.interface == interface)
            .map(|s| s.capture(self.worker, Direction::Tx, buffers, packets))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};

    #[test]
    fn records_are_bounded_counted_when_full_and_the_budget_stops_the_session() {
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers: 64,
            hugepages: HugepagePolicy::Never,
            ..BufferPoolConfig::default()
        })
        .unwrap();
        let mut wb = pool.worker_buffers();
        let mut bis = [BufferIndex::NONE; 4];
        wb.alloc(&mut bis).unwrap();
        for (i, &bi) in bis.iter().enumerate() {
            assert!(wb.set_length(bi, 100));
            wb.data_mut(bi).fill(i as u8);
        }
        let s = CaptureSession::new(7, true, false, 60, 0, 1);
        let mut tap = CaptureTap::new(0);
        tap.add(0, s.clone());
        assert_eq!(tap.tx(7, &wb, &bis), 0, "rx only");
        assert_eq!(tap.rx(8, &wb, &bis), 0, "another interface");
        let mut got = Vec::new();
        s.take(&mut got);
        assert!(got.is_empty());
        assert_eq!(tap.rx(7, &wb, &bis), 0);
        s.take(&mut got);
        assert_eq!(got.len(), 4);
        assert_eq!((got[2].len, got[2].orig_len), (60, 100));
        assert!(got[2].data.iter().all(|&b| b == 2));
        s.give_back(got.drain(..));

        // Fill every record: the rest are dropped and counted.
        for _ in 0..QUEUE_DEPTH / 4 {
            assert_eq!(tap.rx(7, &wb, &bis), 0);
        }
        assert_eq!(tap.rx(7, &wb, &bis), 4);
        assert_eq!(s.dropped(), 4);
        s.take(&mut got);
        assert_eq!(got.len(), QUEUE_DEPTH);
        s.give_back(got.drain(..));

        // A budget of 6: exactly 6 captured, then the session stops.
        let b = CaptureSession::new(7, true, true, 60, 6, 1);
        let mut tap = CaptureTap::new(0);
        tap.add(0, b.clone());
        tap.rx(7, &wb, &bis);
        tap.tx(7, &wb, &bis);
        assert!(b.is_stopped());
        b.take(&mut got);
        assert_eq!(got.len(), 6);
        assert_eq!(got[4].direction, Direction::Tx);
        assert!(tap.remove(&b).is_some());
        assert!(tap.is_empty());
        wb.free(&bis);
    }
}
