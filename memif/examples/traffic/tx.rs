//! The sending side: bursts of numbered frames, paced, windowed, watched for stalls.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::endpoint::{Endpoint, LinkWatch};
use crate::measure::{self, Busy};
use crate::shared::Shared;
use crate::stream::FrameRing;
use crate::MAX_BURST;

/// A sender that makes no progress for this long gives up.
const STALL: Duration = Duration::from_secs(10);

/// Paces sending at a fixed rate from a start time.
pub struct Pacer {
    pub pps: f64,
    pub t0: Instant,
}

impl Pacer {
    /// Frames that may be sent now, `sent` having been sent.
    pub fn allowed(&self, sent: u64) -> u64 {
        let due = (self.t0.elapsed().as_secs_f64() * self.pps) as u64 + 1;
        due.saturating_sub(sent)
    }

    /// How long until the next frame is due.
    pub fn wait(&self, sent: u64) -> Duration {
        let at = Duration::from_secs_f64(sent as f64 / self.pps);
        at.saturating_sub(self.t0.elapsed())
    }
}

/// The sending side.
pub struct TxSide {
    pub id: u32,
    pub frames: FrameRing,
    pub burst: usize,
    pub window: u64,
    pub count: Option<u64>,
    pub duration: Option<Duration>,
    pub rate: Option<f64>,
    pub pacer: Option<Pacer>,
    /// Sequence number of the next frame (= frames sent).
    pub seq: u64,
    pub busy: Busy,
    pub started: Option<Instant>,
    pub ended: Option<Instant>,
    pub error: Option<String>,
    /// Progress at the last control check, for stall detection.
    pub checked: (u64, Instant),
    pub link: LinkWatch,
}

impl TxSide {
    /// Starts the clocks (duration, pacing, stall detection).
    pub fn start(&mut self) {
        let now = Instant::now();
        self.started = Some(now);
        self.checked = (0, now);
        self.pacer = self.rate.map(|pps| Pacer { pps, t0: now });
    }

    /// Whether sending is over (count or duration reached).
    pub fn finished(&self) -> bool {
        self.count.is_some_and(|c| self.seq >= c)
            || self
                .duration
                .zip(self.started)
                .is_some_and(|(d, t)| t.elapsed() >= d)
    }

    /// Frames this pass may send.
    fn budget(&self, shared: &Shared) -> usize {
        let mut n = self.burst as u64;
        if let Some(c) = self.count {
            n = n.min(c.saturating_sub(self.seq));
        }
        if self.window > 0 {
            let in_flight = self.seq - shared.unique.load(Ordering::Acquire).min(self.seq);
            n = n.min(self.window.saturating_sub(in_flight));
        }
        if let Some(p) = &self.pacer {
            n = n.min(p.allowed(self.seq));
        }
        n as usize
    }

    /// One pass: sends up to a burst; returns the frames the ring took.
    pub fn step(&mut self, ep: &mut Endpoint, shared: &Shared) -> usize {
        let n = self.budget(shared);
        if n == 0 {
            self.pace();
            return 0;
        }
        let c0 = measure::cycles();
        let Some(iface) = ep.interface_mut(self.id) else {
            return 0;
        };
        let mut refs: [&[u8]; MAX_BURST] = [&[]; MAX_BURST];
        self.frames.burst(self.seq, &mut refs[..n]);
        let taken = iface.tx_burst(0, &refs[..n]);
        self.busy.add(c0, taken);
        self.seq += taken as u64;
        taken
    }

    /// Sleeps when the pacer's next frame is more than a millisecond away (low rates would
    /// otherwise spin a core).
    fn pace(&self) {
        if let Some(p) = &self.pacer {
            let w = p.wait(self.seq);
            if w > Duration::from_millis(1) {
                std::thread::sleep(w - Duration::from_micros(500));
            }
        }
    }

    /// Gives up when nothing was sent for [`STALL`] although frames were due (not merely
    /// held back by the rate limit).
    pub fn check_stall(&mut self, shared: &Shared) {
        let now = Instant::now();
        let paced = self
            .pacer
            .as_ref()
            .is_some_and(|p| p.allowed(self.seq) == 0);
        if self.seq != self.checked.0 || paced {
            self.checked = (self.seq, now);
            return;
        }
        if now - self.checked.1 < STALL || self.error.is_some() {
            return;
        }
        let window_full = self.window > 0 && self.budget(shared) == 0;
        self.error = Some(if window_full {
            format!(
                "{} frames in flight never came back (sent {}, window {})",
                self.window, self.seq, self.window
            )
        } else {
            format!(
                "the ring took no frame for {} s (after {} frames)",
                STALL.as_secs(),
                self.seq
            )
        });
    }

    /// Ends sending and publishes the total.
    pub fn end(&mut self, shared: &Shared) {
        self.ended = Some(Instant::now());
        shared.sent.store(self.seq, Ordering::Release);
        shared.tx_done.store(true, Ordering::Release);
    }

    /// Seconds from the first to the last send.
    pub fn seconds(&self) -> f64 {
        match (self.started, self.ended) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        }
    }
}
