//! The pods behind a connection, watched: when the client's or the endpoint's pod is gone, the
//! connection is closed here at once (as sdk-vpp's `nsmonitor` does for cmd-forwarder-vpp)
//! instead of at the next hop's Close or at expiry, which a dead pod never sends and which can
//! be minutes away.
//!
//! A pod is the processes in its network namespace. Quiver holds the namespace itself (an fd of
//! it), so the namespace outlives the pod; what tells the pod is gone is that no process (other
//! than Quiver) is in it any more. At the start the oldest such process is taken (a pod's first
//! process, its sandbox, lives as long as the pod); every [`POLL`] its `/proc/<pid>/ns/net` is
//! compared with the namespace, and once that process is gone (or its pid reused elsewhere) the
//! pod is. A namespace with no process at the start (one `ip netns add` made, say) is watched by
//! its name instead: once its path (a bind mount under `/run/netns`) no longer is that
//! namespace (`ip netns del`), it is gone. One known only by an fd passed to Quiver, with no
//! process in it, is not watched.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a watched process is looked at (sdk-vpp's nsmonitor: 250 ms).
pub const POLL: Duration = Duration::from_millis(250);

/// A network namespace, by the (device, inode) of its nsfs file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetnsId {
    dev: u64,
    ino: u64,
}

impl NetnsId {
    /// The namespace the file `netns` is (a `/proc/<pid>/ns/net`, a bind mount under
    /// `/run/netns`, or the `/proc/self/fd/<n>` of a passed fd).
    pub fn of(netns: &Path) -> Option<NetnsId> {
        let m = std::fs::metadata(netns).ok()?;
        Some(NetnsId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// Whether process `pid` is in this namespace now.
    fn holds(&self, pid: u32) -> bool {
        self.look(pid) == Seen::In
    }

    /// Where process `pid` is. `/proc/<pid>/ns/net` cannot be read for a moment while the
    /// process execs: that is [`Seen::Unknown`], not gone.
    fn look(&self, pid: u32) -> Seen {
        match std::fs::metadata(format!("/proc/{pid}/ns/net")) {
            Ok(m) if m.dev() == self.dev && m.ino() == self.ino => Seen::In,
            Ok(_) => Seen::Out,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Seen::Out,
            Err(_) => Seen::Unknown,
        }
    }
}

/// Where a process was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// In the namespace.
    In,
    /// Gone, or in another namespace (a pid reused).
    Out,
    /// Not readable now.
    Unknown,
}

/// A pod's namespace, followed until it is gone: by its oldest process, or by its name.
#[derive(Debug)]
pub struct Pod {
    netns: NetnsId,
    by: By,
}

/// What tells that a pod is there.
#[derive(Debug)]
enum By {
    /// Its first process.
    Process(u32),
    /// Its name: a path that is the namespace while it lives.
    Path(PathBuf),
}

impl Pod {
    /// The pod in the namespace `netns`: its oldest process other than Quiver, or, when it has
    /// none, the path itself when it names the namespace for good (not a `/proc/self` fd);
    /// `None` when there is nothing to follow (or the namespace cannot be read).
    pub fn find(netns: &Path) -> Option<Pod> {
        let id = NetnsId::of(netns)?;
        if let Some(pid) = oldest_process_in(id) {
            return Some(Pod {
                netns: id,
                by: By::Process(pid),
            });
        }
        let transient = netns.starts_with("/proc/self") || netns.starts_with("/proc/thread-self");
        (!transient).then(|| Pod {
            netns: id,
            by: By::Path(netns.to_path_buf()),
        })
    }

    /// The process followed, if the pod is followed by one.
    pub fn pid(&self) -> Option<u32> {
        match self.by {
            By::Process(pid) => Some(pid),
            By::Path(_) => None,
        }
    }

    /// Whether the pod is still there: its first process is (another process that entered
    /// the namespace — an `ip netns exec` — says nothing of the pod), or its name still is the
    /// namespace.
    pub fn alive(&self) -> bool {
        match &self.by {
            By::Process(pid) => self.netns.look(*pid) != Seen::Out,
            By::Path(path) => match std::fs::metadata(path) {
                Ok(m) => m.dev() == self.netns.dev && m.ino() == self.netns.ino,
                Err(e) => e.kind() != std::io::ErrorKind::NotFound,
            },
        }
    }
}

/// The process of `/proc` other than this one in namespace `id` that started first.
fn oldest_process_in(id: NetnsId) -> Option<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me && id.holds(pid))
        .filter_map(|pid| Some((pid, start_time(pid)?)))
        .min_by_key(|&(_, started)| started)
        .map(|(pid, _)| pid)
}

/// When process `pid` started, in clock ticks since boot.
fn start_time(pid: u32) -> Option<u64> {
    parse_start_time(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The 22nd field (starttime) of a `/proc/<pid>/stat` line.
fn parse_start_time(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let after = stat.get(stat.rfind(')')? + 1..)?;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// The namespace paths of a connection's pods worth watching: its client's and endpoint's,
/// when they are not Quiver's own.
pub fn pod_namespaces(paths: impl IntoIterator<Item = Option<PathBuf>>) -> Vec<PathBuf> {
    let own = NetnsId::of(Path::new("/proc/self/ns/net"));
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths.into_iter().flatten() {
        let id = NetnsId::of(&p);
        if id.is_some() && id != own && !out.iter().any(|q| NetnsId::of(q) == id) {
            out.push(p);
        }
    }
    out
}

/// A running watch of a connection's pods; dropping it stops the watch.
#[derive(Debug, Default)]
pub struct PodWatch(Option<tokio::task::AbortHandle>);

impl PodWatch {
    /// The watch `task` runs.
    pub fn new(task: tokio::task::AbortHandle) -> PodWatch {
        PodWatch(Some(task))
    }

    /// Lets the task run on when this is dropped (the task itself is tearing the connection
    /// down and must not be cut short).
    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// Waits until one of `pods` is gone (forever when there is none to watch).
///
/// Each look is a `stat` or two of procfs and of `/run/netns`, memory filesystems that do not
/// block: done on the task itself, not on the runtime's blocking pool. A pool handed a job
/// every 250 ms per connection never shrinks (its idle threads are woken in turn, so none
/// stays idle long enough to end): every thread a burst of Requests started was kept for as
/// long as any connection lived.
pub async fn until_one_is_gone(pods: Vec<Pod>) {
    if pods.is_empty() {
        return std::future::pending().await;
    }
    loop {
        tokio::time::sleep(POLL).await;
        if pods.iter().any(|p| !p.alive()) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_process_in_a_namespace_is_found_and_its_end_noticed() {
        // This process's own namespace: a child that sleeps is one of its processes.
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let ns = PathBuf::from(format!("/proc/{pid}/ns/net"));
        let id = NetnsId::of(&ns).unwrap();
        assert!(id.holds(pid));
        assert_eq!(NetnsId::of(Path::new("/proc/self/ns/net")), Some(id));
        let pod = Pod {
            netns: id,
            by: By::Process(pid),
        };
        assert!(pod.alive());
        // The oldest process of the namespace is older than the child.
        let oldest = oldest_process_in(id).unwrap();
        assert_ne!(oldest, pid);
        assert!(start_time(oldest) <= start_time(pid));
        child.kill().unwrap();
        child.wait().unwrap();
        // Its process gone, the pod is, though others share the namespace.
        assert!(!pod.alive());
    }

    #[test]
    fn a_namespace_without_a_process_is_followed_by_its_name() {
        // A stand-in for a bind mount under /run/netns: a file whose (dev, inode) is the id.
        let dir = std::env::temp_dir().join(format!("pod-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = dir.join("ns");
        std::fs::write(&name, b"").unwrap();
        let pod = Pod {
            netns: NetnsId::of(&name).unwrap(),
            by: By::Path(name.clone()),
        };
        assert!(pod.alive());
        assert_eq!(pod.pid(), None);
        std::fs::remove_file(&name).unwrap();
        assert!(!pod.alive(), "the name is gone");
        std::fs::remove_dir_all(&dir).unwrap();
        // Quiver's own fds name nothing for good.
        assert!(Pod::find(Path::new("/proc/self/ns/net")).is_none_or(|p| p.pid().is_some()));
    }

    /// The watch needs no thread of the blocking pool: with the pool's only thread busy, a
    /// pod that goes is still noticed.
    #[test]
    fn the_watch_does_not_wait_for_the_blocking_pool() {
        let dir = std::env::temp_dir().join(format!("pod-watch-pool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = dir.join("ns");
        std::fs::write(&name, b"").unwrap();
        let pod = Pod {
            netns: NetnsId::of(&name).unwrap(),
            by: By::Path(name.clone()),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .max_blocking_threads(1)
            .build()
            .unwrap();
        let noticed = runtime.block_on(async {
            let (release, wait) = std::sync::mpsc::channel::<()>();
            let busy = tokio::task::spawn_blocking(move || {
                let _ = wait.recv();
            });
            std::fs::remove_file(&name).unwrap();
            let noticed =
                tokio::time::timeout(Duration::from_secs(5), until_one_is_gone(vec![pod])).await;
            release.send(()).unwrap();
            busy.await.unwrap();
            noticed
        });
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(noticed.is_ok(), "the pod's end was not noticed in 5 s");
    }

    #[test]
    fn quivers_own_namespace_and_duplicates_are_not_watched() {
        let own = PathBuf::from("/proc/self/ns/net");
        assert!(pod_namespaces([Some(own.clone()), None]).is_empty());
        assert!(pod_namespaces([Some(PathBuf::from("/nonexistent"))]).is_empty());
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_confuse_the_start_time() {
        let fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        let stat = format!("4242 (a (b) c) {}", fields.join(" "));
        assert_eq!(parse_start_time(&stat), Some(22));
        assert_eq!(parse_start_time("4242 (x) S 1"), None);
        assert_eq!(parse_start_time("no parenthesis"), None);
        assert!(start_time(std::process::id()).is_some());
    }
}
