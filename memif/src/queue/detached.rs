//! Queues detached from their [`Interface`](crate::Interface), to be polled by other threads
//! (one worker of a forwarder, say): [`RxQueue`], [`TxQueue`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::counters::{Counters, SharedCounters};
use crate::ring::Role;

use super::frame::{HoldSink, RxSink, TxSource};
use super::held::{reclaim, HeldFrames, HeldRx, HoldState};
use super::receive::{receive_held, receive_holding, rx_ready, CopyingSink, RxScratch};
use super::shared::{Queue, Shared};
use super::transmit::transmit;

/// Most frames one [`RxQueue::forward_to`] burst moves.
pub const MAX_FORWARD_BURST: usize = 256;

/// lives; once the connection goes down it receives nothing.
#[derive(Debug)]
pub struct RxQueue {
    pub(super) shared: Arc<Shared>,
    pub(super) q: Queue,
    pub(super) role: Role,
    pub(super) scratch: RxScratch,
    pub(super) counters: Arc<SharedCounters>,
    pub(super) hold: Option<HoldState>,
    /// Room for one [`RxQueue::forward_to`] burst (allocated with the hold).
    pub(super) burst: Vec<HeldRx>,
}

impl Drop for RxQueue {
    fn drop(&mut self) {
        if let Some(h) = &self.hold {
            h.frames.queue_gone.store(true, Ordering::Release);
            h.frames.retire_if_done();
        }
    }
}

/// A transmit queue detached from its [`Interface`](crate::Interface); see [`RxQueue`].
#[derive(Debug)]
pub struct TxQueue {
    pub(super) shared: Arc<Shared>,
    pub(super) q: Queue,
    pub(super) role: Role,
    pub(super) counters: Arc<SharedCounters>,
}

impl RxQueue {
    pub(crate) fn new(
        shared: Arc<Shared>,
        q: Queue,
        role: Role,
        counters: Arc<SharedCounters>,
    ) -> RxQueue {
        RxQueue {
            shared,
            q,
            role,
            scratch: RxScratch::new(),
            counters,
            hold: None,
            burst: Vec::new(),
        }
    }

    /// Lets [`RxQueue::receive_holding`] keep frames in the peer's memory; returns the
    /// [`HeldFrames`] that names them (the same one on every call).
    pub fn enable_holding(&mut self) -> Arc<HeldFrames> {
        if let Some(h) = &self.hold {
            return h.frames.clone();
        }
        let size = self.shared.ring(&self.q).map_or(0, |r| r.size());
        let frames = Arc::new(HeldFrames::new(self.shared.clone(), size));
        self.hold = Some(HoldState {
            frames: frames.clone(),
            released: self.q.idx,
        });
        self.burst = vec![HeldRx::default(); MAX_FORWARD_BURST];
        frames
    }

    /// Gives back to the peer the slots of held frames released since the last burst (the
    /// bursts do it too).
    pub fn give_back(&mut self) {
        if let Some(h) = self.hold.as_mut() {
            if self.shared.is_live() {
                reclaim(&self.shared, &mut self.q, self.role, h);
            }
        }
    }

    /// Like [`RxQueue::receive`], but `sink` may keep one-descriptor frames in the peer's
    /// memory (after [`RxQueue::enable_holding`]; before, every frame is offered without a
    /// hold). Also gives back to the peer the slots of frames released since the last call,
    /// so call it regularly even when [`RxQueue::ready`] says 0.
    pub fn receive_holding(&mut self, max: usize, sink: &mut impl HoldSink) -> usize {
        if !self.shared.is_live() {
            return 0;
        }
        let mut delta = Counters::default();
        let n = receive_holding(
            &self.shared,
            &mut self.q,
            self.role,
            &mut self.scratch,
            &mut delta,
            max,
            sink,
            self.hold.as_mut(),
        );
        self.counters.add(&delta);
        n
    }

    /// The fast path of [`RxQueue::receive_holding`] for a receiver that keeps every frame it
    /// can: holds up to `out.len()` one-descriptor frames of at most `max_len` bytes in the
    /// peer's memory and describes them in `out`; returns how many. It stops before a frame
    /// it cannot hold (chained, or longer), which [`RxQueue::receive_holding`] then takes;
    /// bad descriptors are counted and skipped. 0 before [`RxQueue::enable_holding`]. Also
    /// gives back the slots of frames released since the last call.
    pub fn receive_held(&mut self, out: &mut [HeldRx], max_len: u32) -> usize {
        let Some(h) = self.hold.as_mut() else {
            return 0;
        };
        if !self.shared.is_live() {
            return 0;
        }
        let mut delta = Counters::default();
        let n = receive_held(
            &self.shared,
            &mut self.q,
            self.role,
            &mut delta,
            out,
            max_len,
            h,
        );
        self.counters.add(&delta);
        n
    }

    /// Whether the connection this queue belongs to is still up.
    pub fn is_live(&self) -> bool {
        self.shared.is_live()
    }

    /// How many descriptors the peer has published and not yet received (an upper bound on the
    /// frames the next burst delivers; 0 once the connection is down).
    pub fn ready(&self) -> usize {
        if !self.shared.is_live() {
            return 0;
        }
        usize::from(rx_ready(&self.shared, &self.q, self.role))
    }

    /// Receives up to `max` frames into `sink`; returns how many it took. Bad descriptors are
    /// dropped and counted on the interface.
    pub fn receive(&mut self, max: usize, sink: &mut impl RxSink) -> usize {
        self.receive_holding(max, &mut CopyingSink(sink))
    }
}

impl TxQueue {
    pub(crate) fn new(
        shared: Arc<Shared>,
        q: Queue,
        role: Role,
        counters: Arc<SharedCounters>,
    ) -> TxQueue {
        TxQueue {
            shared,
            q,
            role,
            counters,
        }
    }

    /// Whether the connection this queue belongs to is still up.
    pub fn is_live(&self) -> bool {
        self.shared.is_live()
    }

    /// Sends frames from `src` until the ring is full; returns how many frames it took (sent,
    /// or dropped and counted); the caller keeps the rest. Takes nothing once the connection is
    /// down.
    pub fn transmit(&mut self, src: &(impl TxSource + ?Sized)) -> usize {
        self.transmit_report(src).taken
    }

    /// [`TxQueue::transmit`], telling what the burst did.
    pub fn transmit_report(&mut self, src: &(impl TxSource + ?Sized)) -> TxReport {
        if !self.shared.is_live() {
            return TxReport::default();
        }
        let mut delta = Counters::default();
        let mut held_copies = 0;
        let taken = transmit(
            &self.shared,
            &mut self.q,
            self.role,
            &mut delta,
            src,
            &mut held_copies,
        );
        self.counters.add(&delta);
        TxReport {
            taken,
            sent: delta.tx_packets,
            bytes: delta.tx_bytes,
            held_copies,
        }
    }
}

/// What one [`TxQueue::transmit_report`] burst did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TxReport {
    /// Frames taken (sent, or dropped and counted); the caller keeps the rest.
    pub taken: usize,
    /// Frames sent.
    pub sent: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Frames copied straight from another peer's memory (see [`TxSource::held`]).
    pub held_copies: u64,
}
