//! The receiving side: every frame checked against the stream.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use memif::PeerFrame;

use crate::endpoint::{Endpoint, LinkWatch};
use crate::measure::{self, Busy};
use crate::shared::Shared;
use crate::stream::{self, FrameRing, Sink};

/// The receiving side.
pub struct RxSide {
    pub id: u32,
    pub stream: u32,
    pub templates: Option<FrameRing>,
    pub sink: Sink,
    pub burst: usize,
    pub busy: Busy,
    /// Receive-only: stop after this many distinct frames / this long.
    pub count: Option<u64>,
    pub duration: Option<Duration>,
    pub started: Option<Instant>,
    pub first: Option<Instant>,
    pub last: Option<Instant>,
    pub drain_from: Option<Instant>,
    pub drain: Duration,
    /// Publish the distinct count for the sender's window.
    pub publish: bool,
    pub link: LinkWatch,
}

impl RxSide {
    /// One pass over every receive queue; returns the frames received.
    pub fn step(&mut self, ep: &mut Endpoint, shared: &Shared) -> usize {
        let c0 = measure::cycles();
        let Some(iface) = ep.interface_mut(self.id) else {
            return 0;
        };
        let (sink, stream, t) = (&mut self.sink, self.stream, self.templates.as_ref());
        let mut n = 0;
        for q in 0..iface.rx_queues() {
            n += match t {
                // Verifying: the whole frame is copied out and compared.
                Some(_) => iface.rx_burst(q, self.burst, &mut |f: &[u8]| sink.check(f, stream, t)),
                // Sequence numbers only: copy out just the bytes up to and including the
                // sequence number (never parsed in the peer's memory), not the whole frame.
                None => iface.rx_burst_to(q, self.burst, &mut |f: &PeerFrame<'_>| {
                    let mut head = [0u8; stream::FILL_OFF];
                    let k = f.len().min(head.len());
                    if f.copy_to(0, &mut head[..k]) {
                        sink.check(&head[..k], stream, None);
                    }
                    true
                }),
            };
        }
        self.busy.add(c0, n);
        if n > 0 {
            let now = Instant::now();
            self.first.get_or_insert(now);
            self.last = Some(now);
            if self.publish {
                shared.unique.store(self.sink.seq.unique, Ordering::Release);
            }
        }
        n
    }

    /// Whether receiving is over: everything sent arrived or the drain window passed (with a
    /// sender), or the count/duration was reached (receive only).
    pub fn finished(&mut self, shared: &Shared, has_tx: bool) -> bool {
        if has_tx {
            if !shared.tx_done.load(Ordering::Acquire) {
                return false;
            }
            let sent = shared.sent.load(Ordering::Acquire);
            if self.sink.seq.unique >= sent {
                return true;
            }
            let from = *self.drain_from.get_or_insert_with(Instant::now);
            return from.elapsed() >= self.drain;
        }
        self.count.is_some_and(|c| self.sink.seq.unique >= c)
            || self
                .duration
                .zip(self.started)
                .is_some_and(|(d, t)| t.elapsed() >= d)
    }

    /// Seconds from the first to the last frame received.
    pub fn seconds(&self) -> f64 {
        match (self.first, self.last) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        }
    }
}
