//! What the churn measures with: fds and sockets of this process, waiting with a deadline,
//! quantiles, a temp dir.

use std::time::{Duration, Instant};

/// Open file descriptors of this process.
pub(crate) fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Unix sockets in this namespace whose (abstract) name starts with `prefix`.
pub(crate) fn sockets_named(prefix: &str) -> usize {
    std::fs::read_to_string("/proc/net/unix").map_or(0, |t| {
        t.lines()
            .filter(|l| {
                l.split_whitespace()
                    .nth(7)
                    .is_some_and(|p| p.starts_with(prefix))
            })
            .count()
    })
}

/// Waits until `done` holds or `secs` passed; returns whether it holds.
pub(crate) fn wait_until(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The value at quantile `q` of sorted `v`, in ms.
pub(crate) fn quantile_ms(v: &[Duration], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1e3
}

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Removes the temp dir when dropped.
pub(crate) struct TempDir(pub(crate) std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
