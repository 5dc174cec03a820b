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

/// A worker's receive queue of a memif port.
pub(super) struct MemifRx {
    slots: Arc<WorkerSlots>,
    seen: u64,
    queue: Option<memif::RxQueue>,
    ip_header: Option<[u8; ETH_HEADER]>,
    allocated: [BufferIndex; 256],
    /// The frames a burst's fast path held ([`memif::RxQueue::receive_held`]).
    held_rx: [memif::HeldRx; 256],
    /// The current connection's held frames and their source id in the worker's buffers
    /// (ETHERNET mode: IP mode adds a header, so it copies).
    source: Option<(u32, Arc<HeldFrames>)>,
    /// Held frames of earlier connections still in flight: forgotten by the worker's buffers
    /// once all are released.
    retiring: Vec<Arc<HeldFrames>>,
    /// Where frames go instead of the graph, when the input node allows it.
    cut_through: Option<CutThrough>,
}

impl MemifRx {
    /// The receive queue of `slots`' worker; `ip_header`: the Ethernet header an IP-mode port
    /// puts in front of each packet.
    pub(super) fn new(slots: Arc<WorkerSlots>, ip_header: Option<[u8; ETH_HEADER]>) -> MemifRx {
        slots.rx_open.store(true, Ordering::Release);
        MemifRx {
            slots,
            seen: 0,
            queue: None,
            ip_header,
            allocated: [BufferIndex::NONE; 256],
            held_rx: [memif::HeldRx::default(); 256],
            source: None,
            retiring: Vec::new(),
            cut_through: None,
        }
    }

    /// Takes a new queue (or none) from the control thread: the old connection's held frames
    /// retire, the new queue holds frames when the port is in ETHERNET mode.
    fn switch(&mut self, buffers: &mut WorkerBuffers, q: Option<memif::RxQueue>) {
        self.queue = q;
        if let Some((_, old)) = self.source.take() {
            self.retiring.push(old);
        }
        if let (Some(q), None) = (self.queue.as_mut(), self.ip_header) {
            let held = q.enable_holding();
            let id = buffers.register_external(Arc::new(HeldSource(held.clone())));
            self.source = Some((id, held));
        }
    }

    /// Picks up what the control side left (a new queue, a cut-through), and lets go of the
    /// memory of old connections whose frames are all released.
    #[inline]
    fn refresh(&mut self, buffers: &mut WorkerBuffers) {
        if let Some(change) = self.slots.rx.take_if_changed(&mut self.seen) {
            if let Some(q) = change.queue {
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

    /// One burst of the cut-through, if there is one: `(frames forwarded, whether frames it
    /// cannot take wait)`; `None` when the frames are for the graph this time.
    #[inline]
    fn cut_through_burst(&mut self, max: usize) -> Option<(usize, bool)> {
        let c = self.cut_through.as_mut()?;
        let q = self.queue.as_mut()?;
        let (_, held) = self.source.as_ref()?;
        match c.forward(q, held, &self.slots.rx_counters, max) {
            Burst::Forwarded { packets, more } => Some((packets, more)),
            Burst::NotNow => None,
            Burst::Over => {
                self.cut_through = None;
                None
            }
        }
    }

    /// Receives into Quiver buffers (what the control side left already picked up).
    #[inline]
    fn receive_now(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        let Some(q) = self.queue.as_mut() else {
            return 0;
        };
        let c = &self.slots.rx_counters;
        let want = q.ready().min(out.len()).min(self.allocated.len());
        if want == 0 {
            // Slots of frames released since the last burst go back to the peer.
            q.give_back();
            if let Some((_, h)) = &self.source {
                c.held.store(h.in_flight(), Ordering::Relaxed);
            }
            return 0;
        }
        let got = buffers.alloc_up_to(&mut self.allocated[..want]);
        // The common case first: frames held where they are, attached to buffers in one pass.
        let fast = match &self.source {
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
            source: self.source.as_ref().map(|(id, _)| *id),
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
        if let Some((_, h)) = &self.source {
            c.held.store(h.in_flight(), Ordering::Relaxed);
        }
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
