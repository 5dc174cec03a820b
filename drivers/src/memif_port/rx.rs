//! [`MemifRx`]: a worker's receive queue of a memif port. Frames go to Quiver buffers (see
//! `into_buffers`), or, while the port is cut through to another memif port and the input node
//! allows it, straight into that port's ring (see `cut_through`).

use dataplane::BufferIndex;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dataplane::{RxBurst, RxQueue, WorkerBuffers};
use memif::queue::HeldFrames;

use super::counters::bump;
use super::cut_through::{Burst, CutThrough};
use super::held::HeldSource;
use super::into_buffers::{attach_held, FastRx, IntoBuffers, ETH_HEADER};
use super::worker::WorkerSlots;

/// A worker's receive queue of a memif port: every ring of the connection given to this worker
/// (ring `i` goes to worker `i % workers`; usually one, none when the peer gave fewer rings
/// than there are workers), polled in turn.
pub(super) struct MemifRx {
    slots: Arc<WorkerSlots>,
    seen: u64,
    lanes: Vec<RxLane>,
    /// The lane a burst starts with, so that no ring waits behind a busy one.
    next: usize,
    ip_header: Option<[u8; ETH_HEADER]>,
    allocated: [BufferIndex; 256],
    /// The frames a burst's fast path held ([`memif::RxQueue::receive_held`]).
    held_rx: [memif::HeldRx; 256],
    /// Held frames of earlier connections still in flight: forgotten by the worker's buffers
    /// once all are released.
    retiring: Vec<Arc<HeldFrames>>,
    /// Where frames go instead of the graph, when the input node allows it.
    cut_through: Option<CutThrough>,
}

/// One ring of the connection, as this worker receives from it.
struct RxLane {
    queue: memif::RxQueue,
    /// Its held frames and their source id in the worker's buffers (ETHERNET mode: IP mode
    /// adds a header, so it copies).
    source: Option<(u32, Arc<HeldFrames>)>,
}

impl MemifRx {
    /// The receive queue of `slots`' worker; `ip_header`: the Ethernet header an IP-mode port
    /// puts in front of each packet.
    pub(super) fn new(slots: Arc<WorkerSlots>, ip_header: Option<[u8; ETH_HEADER]>) -> MemifRx {
        slots.rx_open.store(true, Ordering::Release);
        MemifRx {
            slots,
            seen: 0,
            lanes: Vec::new(),
            next: 0,
            ip_header,
            allocated: [BufferIndex::NONE; 256],
            held_rx: [memif::HeldRx::default(); 256],
            retiring: Vec::new(),
            cut_through: None,
        }
    }

    /// Takes a new connection's rings (none when the link went down) from the control thread:
    /// the old connection's held frames retire, the new rings hold frames when the port is in
    /// ETHERNET mode.
    fn switch(&mut self, buffers: &mut WorkerBuffers, queues: Vec<memif::RxQueue>) {
        for old in self.lanes.drain(..) {
            if let Some((_, held)) = old.source {
                self.retiring.push(held);
            }
        }
        for mut queue in queues {
            let source = self.ip_header.is_none().then(|| {
                let held = queue.enable_holding();
                let id = buffers.register_external(Arc::new(HeldSource(held.clone())));
                (id, held)
            });
            self.lanes.push(RxLane { queue, source });
        }
        self.next = 0;
    }

    /// Picks up what the control side left (new rings, a cut-through), and lets go of the
    /// memory of old connections whose frames are all released.
    #[inline]
    fn refresh(&mut self, buffers: &mut WorkerBuffers) {
        if let Some(change) = self.slots.rx.take_if_changed(&mut self.seen) {
            if let Some(q) = change.queues {
                self.switch(buffers, q);
            }
            if let Some(c) = change.cut_through {
                self.cut_through = Some(c);
            }
        }
        if !self.retiring.is_empty() {
            let before = self.retiring.len();
            self.retiring.retain(|h| !h.is_retired());
            if self.retiring.len() < before {
                buffers.prune_external();
            }
        }
    }

    /// One burst of the cut-through over every ring, if there is one: `(frames forwarded,
    /// whether frames it cannot take wait)`; `None` when the frames are for the graph this
    /// time.
    #[inline]
    fn cut_through_burst(&mut self, max: usize) -> Option<(usize, bool)> {
        let c = self.cut_through.as_mut()?;
        let (mut packets, mut more) = (0, false);
        for lane in &mut self.lanes {
            let Some((_, held)) = lane.source.as_ref() else {
                continue;
            };
            match c.forward(
                &mut lane.queue,
                held,
                &self.slots.rx_counters,
                max - packets,
            ) {
                Burst::Forwarded {
                    packets: n,
                    more: m,
                } => {
                    packets += n;
                    more |= m;
                }
                Burst::NotNow => return None,
                Burst::Over => {
                    self.cut_through = None;
                    return None;
                }
            }
            if packets == max {
                // The rest waits in the rings for the next burst.
                break;
            }
        }
        Some((packets, more))
    }

    /// Receives into Quiver buffers from every ring in turn (what the control side left
    /// already picked up).
    #[inline]
    fn receive_now(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        let lanes = self.lanes.len();
        let n = if lanes == 1 {
            self.receive_lane(0, buffers, out)
        } else {
            let mut n = 0;
            for k in 0..lanes {
                if n == out.len() {
                    break;
                }
                n += self.receive_lane((self.next + k) % lanes, buffers, &mut out[n..]);
            }
            self.next = (self.next + 1) % lanes.max(1);
            n
        };
        let held: u64 = self
            .lanes
            .iter()
            .filter_map(|l| l.source.as_ref())
            .map(|(_, h)| h.in_flight())
            .sum();
        self.slots.rx_counters.held.store(held, Ordering::Relaxed);
        n
    }

    /// Receives from ring `lane` into `out`.
    #[inline]
    fn receive_lane(
        &mut self,
        lane: usize,
        buffers: &mut WorkerBuffers,
        out: &mut [BufferIndex],
    ) -> usize {
        let Some(RxLane { queue: q, source }) = self.lanes.get_mut(lane) else {
            return 0;
        };
        let c = &self.slots.rx_counters;
        let want = q.ready().min(out.len()).min(self.allocated.len());
        if want == 0 {
            // Slots of frames released since the last burst go back to the peer.
            q.give_back();
            return 0;
        }
        let got = buffers.alloc_up_to(&mut self.allocated[..want]);
        // The common case first: frames held where they are, attached to buffers in one pass.
        let fast = match source {
            Some((id, held)) => {
                let k = q.receive_held(&mut self.held_rx[..got], u32::from(buffers.data_size()));
                attach_held(buffers, *id, held, &self.allocated[..k], &self.held_rx[..k])
            }
            None => FastRx::default(),
        };
        let k = fast.frames;
        let mut sink = IntoBuffers {
            buffers,
            bufs: &self.allocated[k..got],
            filled: 0,
            held: 0,
            bytes: 0,
            header: self.ip_header,
            source: source.as_ref().map(|(id, _)| *id),
            no_buffer: false,
        };
        // The rest (chained or long frames, or IP mode) the general way.
        let n = if k < got && q.ready() > 0 {
            k + q.receive_holding(got - k, &mut sink)
        } else {
            k
        };
        let (bytes, held, no_buffer) = (
            sink.bytes + fast.bytes,
            sink.held + fast.held,
            sink.no_buffer,
        );
        out[..n].copy_from_slice(&self.allocated[..n]);
        buffers.free(&self.allocated[n..got]);
        bump(&c.packets, n as u64);
        bump(&c.bytes, bytes);
        bump(&c.zero_copy, held);
        bump(&c.copied, n as u64 - held);
        if no_buffer || (got < want && n == got) {
            bump(&c.no_buffer, 1);
        }
        n
    }
}

impl Drop for MemifRx {
    fn drop(&mut self) {
        self.slots.rx_open.store(false, Ordering::Release);
    }
}

impl RxQueue for MemifRx {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        self.refresh(buffers);
        self.receive_now(buffers, out)
    }

    /// While cut through ([`super::MemifPort::cut_through`]), frames go straight into the
    /// other port's ring first; what that cannot take (a chained frame), or everything while
    /// the other port is down, is received as usual.
    fn receive_or_bypass(
        &mut self,
        buffers: &mut WorkerBuffers,
        out: &mut [BufferIndex],
    ) -> RxBurst {
        self.refresh(buffers);
        let mut bypassed = 0;
        if let Some((packets, more)) = self.cut_through_burst(out.len()) {
            if !more {
                return RxBurst {
                    received: 0,
                    bypassed: packets,
                };
            }
            bypassed = packets;
        }
        RxBurst {
            received: self.receive_now(buffers, out),
            bypassed,
        }
    }
}
