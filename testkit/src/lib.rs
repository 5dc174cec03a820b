//! Helpers for Quiver's system tests (dev-dependency only).
//!
//! - [`require`]: decide whether a test needing root, tools or hugepages runs; a missing
//!   prerequisite skips it with a printed reason, or fails it when `QUIVER_REQUIRE_SYSTEM_TESTS=1`
//!   ([`unavailable`] does the same for a reason found another way). A skip prints one line
//!   `SKIP <test>: <why>` ([`SKIP_MARK`]): the harness counts the test as passed, and
//!   `scripts/test`'s closing line counts these lines as skipped instead.
//! - [`wait_for`]: wait on a condition with a deadline (never a bare sleep).
//! - [`interrupt`]: stop a child process the way Ctrl-C does, killing it if it lingers.
//! - [`TestPmd`]: DPDK's `dpdk-testpmd` as a peer we did not write, always `--no-pci`.
//! - [`python_venv`]: a Python with packages from PyPI, for independent Python peers.
//! - [`wg_peers`]: wireguard-go and boringtun, the WireGuard peers we did not write, built once
//!   and cached.

mod python;
pub mod tcp;
mod testpmd;
pub mod wg_peers;

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

pub use python::{python_venv, SYSTEM_PYTHON};
pub use testpmd::{TestPmd, TESTPMD};

/// What a system test needs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Needs {
    /// Running as root.
    pub root: bool,
    /// Free 2 MiB hugepages.
    pub hugepages: u64,
    /// Executables that must exist.
    pub tools: &'static [&'static str],
}

/// Why `needs` is not met, if it is not.
pub fn missing(needs: &Needs) -> Option<String> {
    for tool in needs.tools {
        if !std::path::Path::new(tool).exists() {
            return Some(format!("{tool} not installed"));
        }
    }
    if needs.root && !nix::unistd::geteuid().is_root() {
        return Some("not running as root".into());
    }
    if needs.hugepages > 0 {
        let free = free_hugepages();
        if free < needs.hugepages {
            return Some(format!(
                "only {free} free 2 MiB hugepages, {} needed",
                needs.hugepages
            ));
        }
    }
    None
}

/// Free 2 MiB hugepages now.
pub fn free_hugepages() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// True if `test` should run. Otherwise prints why on the real stderr (the harness captures
/// `eprintln!`) and returns false — or panics when `QUIVER_REQUIRE_SYSTEM_TESTS=1`.
pub fn require(test: &str, needs: &Needs) -> bool {
    let Some(why) = missing(needs) else {
        return true;
    };
    unavailable(test, &why);
    false
}

/// What a skip's line starts with: `SKIP <test>: <why>`, which `scripts/test` counts (one per
/// skipped test: a test prints it at most once).
pub const SKIP_MARK: &str = "SKIP";

/// For a test that cannot run because of `why` (a prerequisite [`Needs`] does not describe):
/// prints `SKIP <test>: <why>` on the real stderr, for the test to return (it then counts as
/// skipped) — or panics when `QUIVER_REQUIRE_SYSTEM_TESTS=1`.
pub fn unavailable(test: &str, why: &str) {
    if std::env::var("QUIVER_REQUIRE_SYSTEM_TESTS").as_deref() == Ok("1") {
        panic!("{test}: QUIVER_REQUIRE_SYSTEM_TESTS=1 but {why}");
    }
    use std::io::Write;
    // One write of the whole line: the harness prints to the same pipe, and a write this short
    // is not interleaved with another.
    let line = format!("{SKIP_MARK} {test}: {}\n", why.replace('\n', " "));
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Calls `step` until it returns true, yielding between calls; panics after `secs` seconds.
pub fn wait_for(what: &str, secs: u64, mut step: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !step() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// Stops `child` if it still runs: SIGINT, then SIGKILL if it has not exited after `grace`.
/// Reaps it and returns how it ended.
pub fn interrupt(child: &mut Child, grace: Duration) -> std::io::Result<ExitStatus> {
    if let Ok(None) = child.try_wait() {
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + grace;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let _ = child.kill();
    }
    child.wait()
}
