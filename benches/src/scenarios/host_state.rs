//! The host's cross-core state, measured around every sample of a two-CPU scenario.
//!
//! On the machines here the two CPUs a scenario uses are sometimes close (a cache line goes
//! from one to the other and back in about 80 ns) and sometimes far apart (310–340 ns), and
//! the state changes on its own, within a run, for minutes at a time (measured 2026-11-23).
//! Every figure that moves data between the two CPUs follows it: the same `quiver` binary
//! forwards memif-xc at about 140 busy cycles/packet in the near state and about 430 in the
//! far one, and testpmd does the same. A Quiver sample from one state beside a reference
//! sample from the other says nothing about either, so each sample carries the round trip
//! measured just before and just after it, and a comparison uses only samples of one state.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

/// A round trip below this (before and after a sample) is the near state. The two states
/// measured here are about 80 and about 320 ns apart; this sits between them with room.
pub const NEAR_BELOW_NS: f64 = 160.0;

/// Rounds a scenario runs beyond those asked for, at most, until both sides have a sample
/// taken in one state.
pub const EXTRA_ROUNDS: usize = 4;

/// Round trips per batch, and batches: the fastest batch is the one least disturbed by
/// anything else the machine ran meanwhile.
const ROUND_TRIPS: u64 = 4_000;
const BATCHES: usize = 5;

/// Where the two CPUs stood while a sample ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostState {
    /// Near before and after.
    Near,
    /// Far before and after.
    Far,
    /// Changed during the sample: comparable with nothing.
    Changed,
}

impl HostState {
    fn name(self) -> &'static str {
        match self {
            HostState::Near => "near",
            HostState::Far => "far",
            HostState::Changed => "changed",
        }
    }
}

/// A sample with the cross-core round trips measured before and after it.
pub struct Probed<T> {
    /// The sample.
    pub value: T,
    /// Nanoseconds per round trip just before and just after.
    pub round_trip_ns: (f64, f64),
}

impl<T> Probed<T> {
    /// The state the sample ran in.
    pub fn state(&self) -> HostState {
        let near = |ns: f64| ns < NEAR_BELOW_NS;
        match (near(self.round_trip_ns.0), near(self.round_trip_ns.1)) {
            (true, true) => HostState::Near,
            (false, false) => HostState::Far,
            _ => HostState::Changed,
        }
    }

    /// `sample` (a JSON object) with `round_trip_ns: [before, after]` and `host_state` added.
    pub fn annotate(&self, mut sample: Value) -> Value {
        if let Some(o) = sample.as_object_mut() {
            o.insert(
                "round_trip_ns".into(),
                json!([self.round_trip_ns.0.round(), self.round_trip_ns.1.round()]),
            );
            o.insert("host_state".into(), self.state().name().into());
        }
        sample
    }

    /// `near 80/82 ns`, for the progress lines.
    pub fn describe(&self) -> String {
        format!(
            "{} {:.0}/{:.0} ns",
            self.state().name(),
            self.round_trip_ns.0,
            self.round_trip_ns.1
        )
    }
}

/// Nanoseconds for one cache line to go from CPU `cpus.0` to `cpus.1` and back (the fastest
/// of a few batches), with a thread pinned on each.
pub fn round_trip_ns(cpus: (usize, usize)) -> Result<f64, String> {
    /// The line bounced (odd values are the asker's, even ones the answer's), and a flag
    /// either side raises when it stops early.
    #[derive(Default)]
    struct Bounce {
        line: AtomicU64,
        stopped: AtomicBool,
    }
    impl Bounce {
        /// Spins until the line holds `v`; false if the other side stopped.
        fn wait_for(&self, v: u64) -> bool {
            while self.line.load(Ordering::Acquire) != v {
                if self.stopped.load(Ordering::Acquire) {
                    return false;
                }
                std::hint::spin_loop();
            }
            true
        }
        /// Pins the calling thread to `cpu`, or says it stops.
        fn pin(&self, cpu: usize) -> Result<(), String> {
            let mut set = nix::sched::CpuSet::new();
            let pinned = set
                .set(cpu)
                .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
            pinned.map_err(|e| {
                self.stopped.store(true, Ordering::Release);
                format!("cannot pin to CPU {cpu}: {e}")
            })
        }
    }
    let b = Arc::new(Bounce::default());
    let total = ROUND_TRIPS * BATCHES as u64;
    let answer = std::thread::spawn({
        let b = b.clone();
        move || -> Result<(), String> {
            b.pin(cpus.1)?;
            for i in 0..total {
                if !b.wait_for(2 * i + 1) {
                    break;
                }
                b.line.store(2 * i + 2, Ordering::Release);
            }
            Ok(())
        }
    });
    let ask = std::thread::spawn({
        let b = b.clone();
        move || -> Result<f64, String> {
            b.pin(cpus.0)?;
            let mut best = f64::INFINITY;
            for batch in 0..BATCHES as u64 {
                let start = Instant::now();
                for i in batch * ROUND_TRIPS..(batch + 1) * ROUND_TRIPS {
                    b.line.store(2 * i + 1, Ordering::Release);
                    if !b.wait_for(2 * i + 2) {
                        return Err("the answering thread stopped".into());
                    }
                }
                best = best.min(start.elapsed().as_nanos() as f64 / ROUND_TRIPS as f64);
            }
            Ok(best)
        }
    });
    let panicked = |_| "the round-trip probe panicked".to_string();
    let asked = ask.join().map_err(panicked)?;
    let answered = answer.join().map_err(panicked)?;
    // The answer's error first: it is why the asker stopped, when it did.
    answered.and(asked)
}

/// Runs `sample` between two round-trip measurements.
pub fn probed<T>(
    cpus: (usize, usize),
    sample: impl FnOnce() -> Result<T, String>,
) -> Result<Probed<T>, String> {
    let before = round_trip_ns(cpus)?;
    let value = sample()?;
    let after = round_trip_ns(cpus)?;
    Ok(Probed {
        value,
        round_trip_ns: (before, after),
    })
}

/// The state to compare in: near when both sides have a sample taken there, else far when
/// both have one there, else none.
pub fn common_state<T, U>(ours: &[Probed<T>], theirs: &[Probed<U>]) -> Option<HostState> {
    [HostState::Near, HostState::Far]
        .into_iter()
        .find(|&s| ours.iter().any(|p| p.state() == s) && theirs.iter().any(|p| p.state() == s))
}

/// What [`alternate`] measured.
pub struct Alternated<T, U> {
    /// Our samples, in order.
    pub ours: Vec<Probed<T>>,
    /// The reference's samples, in order.
    pub theirs: Vec<Probed<U>>,
    /// The state to compare them in (`None`: no state in common).
    pub state: Option<HostState>,
}

/// Alternates `ours` and `theirs`, each between round-trip measurements, for `rounds` rounds
/// and then for up to `extra` more until both sides have a sample in one state. `report` is
/// told of each round.
pub fn alternate<T, U>(
    cpus: (usize, usize),
    rounds: usize,
    extra: usize,
    mut ours: impl FnMut() -> Result<T, String>,
    mut theirs: impl FnMut() -> Result<U, String>,
    mut report: impl FnMut(usize, &Probed<T>, &Probed<U>),
) -> Result<Alternated<T, U>, String> {
    let (mut us, mut them) = (Vec::new(), Vec::new());
    for round in 1..=rounds + extra {
        if round > rounds {
            if common_state(&us, &them).is_some() {
                break;
            }
            eprintln!(
                "  no round yet with both forwarders in one host state: one more ({} of at most {extra})",
                round - rounds
            );
        }
        let o = probed(cpus, &mut ours)?;
        let r = probed(cpus, &mut theirs)?;
        report(round, &o, &r);
        us.push(o);
        them.push(r);
    }
    let state = common_state(&us, &them);
    if state.is_none() {
        eprintln!(
            "  warning: the two sides never ran in one host state; the ratios compare different states"
        );
    }
    Ok(Alternated {
        ours: us,
        theirs: them,
        state,
    })
}

/// The samples of `v` taken in `state` (all of them when `state` is `None`).
pub fn in_state<T>(v: &[Probed<T>], state: Option<HostState>) -> Vec<&T> {
    v.iter()
        .filter(|p| state.is_none_or(|s| p.state() == s))
        .map(|p| &p.value)
        .collect()
}

/// The JSON name of a comparison state.
pub fn state_name(state: Option<HostState>) -> &'static str {
    state.map_or("none in common", HostState::name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(before: f64, after: f64) -> Probed<()> {
        Probed {
            value: (),
            round_trip_ns: (before, after),
        }
    }

    #[test]
    fn samples_are_compared_only_within_one_state_and_near_is_preferred() {
        assert_eq!(p(80.0, 90.0).state(), HostState::Near);
        assert_eq!(p(320.0, 330.0).state(), HostState::Far);
        assert_eq!(p(80.0, 330.0).state(), HostState::Changed);
        let ours = [p(320.0, 330.0), p(80.0, 85.0)];
        assert_eq!(common_state(&ours, &[p(80.0, 320.0)]), None);
        assert_eq!(
            common_state(&ours, &[p(310.0, 300.0)]),
            Some(HostState::Far)
        );
        assert_eq!(
            common_state(&ours, &[p(310.0, 300.0), p(79.0, 81.0)]),
            Some(HostState::Near)
        );
        assert_eq!(in_state(&ours, Some(HostState::Near)).len(), 1);
        assert_eq!(in_state(&ours, None).len(), 2);
    }

    #[test]
    fn a_round_trip_between_two_cpus_is_measured() {
        let cpus = super::super::memif_rate::two_cpus().expect("two CPUs");
        let ns = round_trip_ns(cpus).expect("pinned threads");
        assert!(ns > 0.0 && ns.is_finite(), "{ns}");
        // A CPU that cannot be had stops both threads with the reason, on either side.
        let missing = nix::sched::CpuSet::count() - 1;
        for pair in [(cpus.0, missing), (missing, cpus.1)] {
            let e = round_trip_ns(pair).expect_err("no such CPU");
            assert!(e.contains(&format!("CPU {missing}")), "{e}");
        }
    }
}
