//! A stable connection's traffic: numbered frames, what the sender and receiver share, and the
//! check that every frame arrives once, in order and intact.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Bytes per frame.
pub const FRAME: usize = 64;
/// The frames' EtherType (IEEE local experimental).
pub const ETHERTYPE: u16 = 0x88b5;
/// Marks our frames after the sequence number.
const MAGIC: u32 = 0x5155_4956;

/// Frame `seq`: broadcast, our EtherType, the number, the mark, then bytes that depend on it.
pub fn frame(seq: u64) -> [u8; FRAME] {
    let mut f = [0u8; FRAME];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0x50, 0xa4, 1]);
    f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    f[14..22].copy_from_slice(&seq.to_le_bytes());
    f[22..26].copy_from_slice(&MAGIC.to_le_bytes());
    for (i, b) in f[26..].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    f
}

/// What a flow's sender, receiver and driver share.
#[derive(Default)]
pub struct Flow {
    /// Which connection (for the report).
    pub name: &'static str,
    /// Frames per second.
    pub rate: u64,
    /// Ends the peers' thread.
    pub stop: AtomicBool,
    /// The sender sends while set.
    pub sending: AtomicBool,
    /// Both ends' links are up (the peers' view).
    pub up: AtomicBool,
    /// Frames numbered and handed over (the next number).
    pub sent: AtomicU64,
    /// Frames received (ours or not).
    pub received: AtomicU64,
    /// Distinct numbers received intact.
    pub unique: AtomicU64,
    /// Frames received again.
    pub duplicated: AtomicU64,
    /// Frames received after a later one.
    pub reordered: AtomicU64,
    /// Frames of ours whose bytes were not what was sent.
    pub corrupted: AtomicU64,
    /// Frames that were not ours.
    pub foreign: AtomicU64,
    /// Frames given up as lost to a kill of Quiver (in flight when it died).
    pub excused: AtomicU64,
    /// Sends that failed (the interface gone with Quiver).
    pub send_errors: AtomicU64,
    /// Asks the receiver to give up what is missing so far (see [`Flow::excuse`]).
    pub excuse_asked: AtomicU64,
    /// Frames below this number are never excused: sent a second or more before Quiver was
    /// killed, they should have arrived.
    pub excuse_from: AtomicU64,
    /// Excuses done.
    pub excuse_done: AtomicU64,
    /// Asks the kernel peers to open their sockets again (a new interface).
    pub reopen: AtomicU64,
}

impl Flow {
    /// A flow of `rate` frames per second called `name`.
    pub fn new(name: &'static str, rate: u64) -> Flow {
        Flow {
            name,
            rate,
            ..Flow::default()
        }
    }

    /// Frames sent that have not arrived (nor been excused).
    pub fn missing(&self) -> u64 {
        self.sent.load(Ordering::Relaxed).saturating_sub(
            self.unique.load(Ordering::Relaxed) + self.excused.load(Ordering::Relaxed),
        )
    }

    /// Stops sending and waits (at most `within`) until everything sent arrived; whether it
    /// did.
    pub fn pause_and_drain(&self, within: Duration) -> bool {
        self.sending.store(false, Ordering::SeqCst);
        super::host::wait_for(within, Duration::from_millis(10), || self.missing() == 0)
    }

    /// Waits until nothing arrived for 300 ms (at most 3 s), then has the receiver count what
    /// is still missing, from [`Flow::mark_kill`]'s mark on, as lost to Quiver's kill: those
    /// frames died with it. Call with the sender paused.
    pub fn excuse(&self) {
        let mut last = (u64::MAX, Instant::now());
        super::host::wait_for(Duration::from_secs(3), Duration::from_millis(20), || {
            let r = self.received.load(Ordering::Relaxed);
            if r != last.0 {
                last = (r, Instant::now());
            }
            last.1.elapsed() >= Duration::from_millis(300)
        });
        let asked = self.excuse_asked.fetch_add(1, Ordering::SeqCst) + 1;
        super::host::wait_for(Duration::from_secs(5), Duration::from_millis(5), || {
            self.excuse_done.load(Ordering::SeqCst) >= asked || self.stop.load(Ordering::Relaxed)
        });
    }

    /// Quiver is about to be killed (or was just found dead): frames sent from a second's
    /// worth before now on may be excused (see [`Flow::excuse`]).
    pub fn mark_kill(&self) {
        let sent = self.sent.load(Ordering::SeqCst);
        self.excuse_from
            .store(sent.saturating_sub(self.rate), Ordering::SeqCst);
    }

    /// Lost: sent, never arrived, not excused.
    pub fn lost(&self) -> u64 {
        self.missing()
    }

    /// The figures as JSON.
    pub fn report(&self) -> Value {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        json!({
            "rate_per_s": self.rate,
            "sent": l(&self.sent),
            "received": l(&self.received),
            "unique": l(&self.unique),
            "lost": self.lost(),
            "duplicated": l(&self.duplicated),
            "reordered": l(&self.reordered),
            "corrupted": l(&self.corrupted),
            "foreign": l(&self.foreign),
            "lost_at_quiver_kill": l(&self.excused),
            "send_errors": l(&self.send_errors),
        })
    }
}

/// The receiver's check: which numbers arrived.
#[derive(Default)]
pub struct Checker {
    seen: Vec<u64>,
    highest: Option<u64>,
    excused_at: u64,
}

impl Checker {
    /// Checks one received frame.
    pub fn check(&mut self, flow: &Flow, f: &[u8]) {
        flow.received.fetch_add(1, Ordering::Relaxed);
        if f.len() < FRAME
            || f[12..14] != ETHERTYPE.to_be_bytes()
            || f[22..26] != MAGIC.to_le_bytes()
        {
            flow.foreign.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let seq = u64::from_le_bytes(f[14..22].try_into().expect("8 bytes"));
        if f[..FRAME] != frame(seq) || seq >= flow.sent.load(Ordering::Acquire) {
            flow.corrupted.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.mark(seq) {
            flow.duplicated.fetch_add(1, Ordering::Relaxed);
            return;
        }
        flow.unique.fetch_add(1, Ordering::Relaxed);
        if self.highest.is_some_and(|h| seq < h) {
            flow.reordered.fetch_add(1, Ordering::Relaxed);
        }
        self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
    }

    /// Marks `seq` seen; whether it was already.
    fn mark(&mut self, seq: u64) -> bool {
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if self.seen.len() <= word {
            self.seen.resize(word + 1, 0);
        }
        let was = self.seen[word] & bit != 0;
        self.seen[word] |= bit;
        was
    }

    /// Does what [`Flow::excuse`] asked, if it asked: every number below `sent` not seen is
    /// marked seen and counted as excused.
    pub fn serve_excuse(&mut self, flow: &Flow) {
        let asked = flow.excuse_asked.load(Ordering::SeqCst);
        if flow.excuse_done.load(Ordering::SeqCst) >= asked {
            return;
        }
        let sent = flow.sent.load(Ordering::SeqCst);
        let mut n = 0;
        let from = self.excused_at.max(flow.excuse_from.load(Ordering::SeqCst));
        for seq in from..sent {
            if !self.mark(seq) {
                n += 1;
            }
        }
        self.excused_at = sent;
        flow.excused.fetch_add(n, Ordering::SeqCst);
        flow.excuse_done.store(asked, Ordering::SeqCst);
    }
}

/// Paces a sender at a flow's rate from when it (re)starts sending.
#[derive(Default)]
pub struct Pacer {
    since: Option<(Instant, u64)>,
}

impl Pacer {
    /// How many frames are due now (at most `max`), with `next` the next number to send;
    /// 0 while the flow is not sending.
    pub fn due(&mut self, flow: &Flow, next: u64, max: u64) -> u64 {
        if !flow.sending.load(Ordering::Relaxed) {
            self.since = None;
            return 0;
        }
        let (t0, first) = *self.since.get_or_insert((Instant::now(), next));
        let due = first + (t0.elapsed().as_secs_f64() * flow.rate as f64) as u64;
        due.saturating_sub(next).min(max)
    }
}
