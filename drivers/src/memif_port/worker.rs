//! [`WorkerSlots`]: one worker's end of a memif port, shared by the port (control side), its
//! receive queue and its transmit queue on that worker.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::counters::RxCounters;
use super::cut_through::CutThrough;
use super::slots::HandOver;
use super::tx::{TxHome, TxLane};

/// One worker's end of a port.
pub(super) struct WorkerSlots {
    /// What the receive queue picks up at its next burst.
    pub(super) rx: HandOver<RxChange>,
    /// The receive queue's counters.
    pub(super) rx_counters: RxCounters,
    /// Whether the receive queue was taken and is not dropped yet.
    pub(super) rx_open: AtomicBool,
    /// Where the transmit queue lives (with its counters).
    pub(super) tx: Arc<TxHome>,
}

/// A change left for a worker's receive queue: each `None` when that part did not change.
#[derive(Default)]
pub(super) struct RxChange {
    /// A new connection's rings for this worker, or `Some(vec![])` when the link went down.
    pub(super) queues: Option<Vec<memif::RxQueue>>,
    /// A cut-through started (replacing an earlier one; one ends through its own flag).
    pub(super) cut_through: Option<CutThrough>,
}

impl WorkerSlots {
    pub(super) fn new() -> WorkerSlots {
        WorkerSlots {
            rx: HandOver::new(),
            rx_counters: RxCounters::default(),
            rx_open: AtomicBool::new(false),
            tx: Arc::new(TxHome::new()),
        }
    }

    /// The control thread's side: a new connection's rings and transmit queue for this worker,
    /// or nothing when the link is down.
    pub(super) fn hand_over(&self, rx: Vec<memif::RxQueue>, tx: Option<TxLane>) {
        self.rx.update(|c| c.queues = Some(rx));
        self.tx.hand_over(tx);
    }
}
