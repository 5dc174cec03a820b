//! Quiver's resident set, sampled every second by a thread of its own, and its growth.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::quiver::rss_kb;

/// One sample: seconds since the run began, which Quiver, kB.
#[derive(Clone, Copy)]
pub struct Sample {
    /// Seconds since the run began.
    pub t: f64,
    /// The Quiver process (its incarnation).
    pub incarnation: u32,
    /// Resident set, kB.
    pub kb: u64,
}

/// The sampler's state.
#[derive(Default)]
pub struct Rss {
    pid: AtomicU32,
    incarnation: AtomicU32,
    stop: AtomicBool,
    samples: Mutex<Vec<Sample>>,
}

impl Rss {
    /// Samples process `pid` (incarnation `n`) from now on; pid 0 pauses.
    pub fn set_pid(&self, pid: u32, n: u32) {
        self.incarnation.store(n, Ordering::SeqCst);
        self.pid.store(pid, Ordering::SeqCst);
    }

    /// Starts sampling every second until [`Rss::stop`].
    pub fn spawn(self: &Arc<Self>, t0: Instant) -> Result<JoinHandle<()>, String> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("soak-rss".into())
            .spawn(move || {
                let mut next = Instant::now();
                while !me.stop.load(Ordering::Relaxed) {
                    let pid = me.pid.load(Ordering::SeqCst);
                    if let Some(kb) = (pid != 0).then(|| rss_kb(pid)).flatten() {
                        me.samples
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(Sample {
                                t: t0.elapsed().as_secs_f64(),
                                incarnation: me.incarnation.load(Ordering::SeqCst),
                                kb,
                            });
                    }
                    // A sample every second (a timer, not a hand-off).
                    next += Duration::from_secs(1);
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            })
            .map_err(|e| e.to_string())
    }

    /// Ends the sampling thread (join it after).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Growth of each incarnation from after `warmup` seconds of its life to its end (the mean
    /// of 10 samples at each end), and the headline: the longest-lived incarnation's.
    pub fn growth(&self, warmup: f64) -> (Option<f64>, Value) {
        let samples = self
            .samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut per = Vec::new();
        let mut best: Option<(f64, f64)> = None;
        let max_inc = samples.iter().map(|s| s.incarnation).max().unwrap_or(0);
        for n in 0..=max_inc {
            let mine: Vec<Sample> = samples
                .iter()
                .copied()
                .filter(|s| s.incarnation == n)
                .collect();
            let Some(first) = mine.first() else { continue };
            let warm: Vec<Sample> = mine
                .iter()
                .copied()
                .filter(|s| s.t >= first.t + warmup)
                .collect();
            let life = mine.last().map_or(0.0, |l| l.t - first.t);
            let max_kb = mine.iter().map(|s| s.kb).max().unwrap_or(0);
            if warm.len() < 20 {
                per.push(
                    json!({"incarnation": n, "seconds": life.round(), "samples": mine.len(),
                    "max_kb": max_kb, "growth_pct": null, "note": "too short after warm-up"}),
                );
                continue;
            }
            let mean = |s: &[Sample]| s.iter().map(|x| x.kb as f64).sum::<f64>() / s.len() as f64;
            let (a, b) = (mean(&warm[..10]), mean(&warm[warm.len() - 10..]));
            let pct = (b - a) / a * 100.0;
            per.push(json!({
                "incarnation": n,
                "seconds": life.round(),
                "samples": mine.len(),
                "after_warmup_kb": a.round(),
                "end_kb": b.round(),
                "max_kb": max_kb,
                "growth_pct": (pct * 100.0).round() / 100.0,
            }));
            if best.is_none_or(|(l, _)| life > l) {
                best = Some((life, pct));
            }
        }
        (
            best.map(|(_, p)| (p * 100.0).round() / 100.0),
            Value::Array(per),
        )
    }
}
