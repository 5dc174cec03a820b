//! The soak's host side: named network namespaces, work done from inside one, `ip` read back,
//! waiting with a deadline.

use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::super::procs::{run, IP};

/// A named network namespace (`/var/run/netns/<name>`, `lo` up), deleted on drop unless it
/// is gone already.
pub struct Netns {
    /// Its name.
    pub name: String,
    deleted: bool,
}

impl Netns {
    /// Makes `name` (a stale one of that name is deleted first).
    pub fn new(name: &str) -> Result<Netns, String> {
        if PathBuf::from(format!("/var/run/netns/{name}")).exists() {
            let _ = run(&[IP, "netns", "del", name]);
        }
        run(&[IP, "netns", "add", name])?;
        run(&[IP, "-n", name, "link", "set", "lo", "up"])?;
        Ok(Netns {
            name: name.into(),
            deleted: false,
        })
    }

    /// Its path.
    pub fn path(&self) -> String {
        format!("/var/run/netns/{}", self.name)
    }

    /// NSM's `file://` URL of it.
    pub fn url(&self) -> String {
        format!("file://{}", self.path())
    }

    /// `ip netns del`: the name goes at once, the namespace when nothing holds it any more.
    pub fn delete(&mut self) -> Result<(), String> {
        self.deleted = true;
        run(&[IP, "netns", "del", &self.name]).map(|_| ())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if !self.deleted {
            let _ = run(&[IP, "netns", "del", &self.name]);
        }
    }
}

/// Moves the calling thread into the namespace at `path` (only this thread moves).
pub fn enter(path: &str) -> Result<(), String> {
    let f = File::open(path).map_err(|e| format!("{path}: {e}"))?;
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("setns {path}: {e}"))
}

/// Runs `f` on a thread of its own inside the namespace at `path`; its result.
pub fn in_netns<T: Send>(path: &str, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    std::thread::scope(|s| {
        s.spawn(|| enter(path).map(|()| f()))
            .join()
            .map_err(|_| "a thread inside a namespace panicked".to_string())?
    })
}

/// Waits until `done` holds, asking every `every`, for at most `within`; whether it held.
pub fn wait_for(within: Duration, every: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// A scratch directory, removed on drop unless kept.
pub struct TempDir {
    /// Its path.
    pub path: PathBuf,
    /// Leave it (and the logs in it) when dropped.
    pub keep: bool,
}

impl TempDir {
    /// Makes `<tmp>/<name>` (afresh).
    pub fn new(name: &str) -> Result<TempDir, String> {
        let p = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(TempDir {
            path: p,
            keep: false,
        })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// A small xorshift generator: the churn's choices, reproducible from a seed.
pub struct Rng(u64);

impl Rng {
    /// Seeded with `seed` (0 is taken as 1).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next number below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Removes what soak runs whose runner is gone (killed before it could clean up) left: their
/// Quiver processes (found by their config in the run's directory; SIGKILL by pid), their
/// namespaces (`qs<pid>-…`) and their directories (`quiver-soak-<pid>`). Runs still going are
/// left alone. Returns what it removed.
pub fn reap_stale_runs() -> Vec<String> {
    let dead = |pid: u32| !PathBuf::from(format!("/proc/{pid}")).exists();
    let mut removed = Vec::new();
    let mut pids = std::collections::BTreeSet::new();
    let names = run(&[super::super::procs::IP, "netns", "list"]).unwrap_or_default();
    for name in names.lines().filter_map(|l| l.split_whitespace().next()) {
        let pid = name
            .strip_prefix("qs")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid.filter(|&p| dead(p)) {
            pids.insert(pid);
        }
    }
    if let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name
                .strip_prefix("quiver-soak-")
                .and_then(|p| p.parse::<u32>().ok())
                .filter(|&p| dead(p))
            {
                pids.insert(pid);
            }
        }
    }
    for pid in pids {
        let config = format!("/quiver-soak-{pid}/quiver.toml");
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&config) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGKILL,
                );
                removed.push(format!("quiver process {p}"));
            }
        }
        for name in names.lines().filter_map(|l| l.split_whitespace().next()) {
            if name.starts_with(&format!("qs{pid}-")) {
                let _ = run(&[super::super::procs::IP, "netns", "del", name]);
                removed.push(format!("namespace {name}"));
            }
        }
        let dir = std::env::temp_dir().join(format!("quiver-soak-{pid}"));
        if dir.exists() && !dir.join("quiver.log").exists() {
            let _ = std::fs::remove_dir_all(&dir);
            removed.push(format!("directory {}", dir.display()));
        }
    }
    removed
}
