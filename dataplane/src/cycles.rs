//! CPU cycle counting for the runtime counters.
//!
//! On x86-64 this is the time-stamp counter (invariant on every CPU we target), read with `rdtsc`
//! without serialisation: it is cheap (tens of cycles) and we only ever subtract two readings that
//! bracket a whole frame's work. Elsewhere a monotonic nanosecond clock stands in, and
//! [`tsc_hz`] says 1 GHz so that "cycles" read as nanoseconds.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Reads the cycle counter.
#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` has no preconditions; it is available on every x86-64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// The cycle counter's frequency in Hz, measured once per process (about 20 ms, on first use).
pub fn tsc_hz() -> u64 {
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(calibrate)
}

#[cfg(target_arch = "x86_64")]
fn calibrate() -> u64 {
    // Take the best of three short windows: a preempted window only ever reads low.
    (0..3)
        .map(|_| {
            let t0 = Instant::now();
            let c0 = now();
            while t0.elapsed() < Duration::from_millis(7) {
                std::hint::spin_loop();
            }
            let c1 = now();
            let ns = t0.elapsed().as_nanos() as u64;
            (c1 - c0) * 1_000_000_000 / ns.max(1)
        })
        .max()
        .unwrap_or(1_000_000_000)
}

#[cfg(not(target_arch = "x86_64"))]
fn calibrate() -> u64 {
    let _ = Duration::ZERO;
    1_000_000_000
}

/// Converts a cycle count to seconds at the measured frequency.
pub fn to_seconds(cycles: u64) -> f64 {
    cycles as f64 / tsc_hz() as f64
}
