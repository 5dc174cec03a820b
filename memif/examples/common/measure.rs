//! The traffic tool's measurements: CPU pinning, a cycle counter (the TSC on x86-64), its rate,
//! and busy cycles per packet counted the way testpmd counts them.

use std::time::Instant;

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: usize) -> Result<(), String> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|e| format!("cpu {cpu}: {e}"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| format!("pin to cpu {cpu}: {e}"))
}

/// A cheap cycle counter: the TSC on x86-64, nanoseconds elsewhere.
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions on x86-64; it only reads the time-stamp counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static T0: OnceLock<Instant> = OnceLock::new();
        T0.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Measures the cycle counter's rate against the wall clock over a whole run.
pub struct CycleClock {
    c0: u64,
    t0: Instant,
}

impl CycleClock {
    /// Starts measuring.
    pub fn start() -> CycleClock {
        CycleClock {
            c0: cycles(),
            t0: Instant::now(),
        }
    }

    /// Cycles per second since [`CycleClock::start`].
    pub fn hz(&self) -> f64 {
        let secs = self.t0.elapsed().as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        cycles().wrapping_sub(self.c0) as f64 / secs
    }
}

/// Busy cycles per packet: cycles spent in loop passes that moved packets, divided by those
/// packets (empty polls are free, as testpmd counts them).
#[derive(Debug, Default, Clone, Copy)]
pub struct Busy {
    /// Cycles of passes that moved at least one packet.
    pub cycles: u64,
    /// Packets those passes moved.
    pub packets: u64,
}

impl Busy {
    /// Adds one pass that started at cycle `c0` and moved `n` packets.
    pub fn add(&mut self, c0: u64, n: usize) {
        if n > 0 {
            self.cycles += cycles().wrapping_sub(c0);
            self.packets += n as u64;
        }
    }

    /// Cycles per packet (`None` before any packet).
    pub fn per_packet(&self) -> Option<f64> {
        (self.packets > 0).then(|| self.cycles as f64 / self.packets as f64)
    }
}
