//! Network namespaces: open one by path or NSM URL, and do work inside it without moving any
//! thread Quiver already runs.
//!
//! A namespace is held by an open file descriptor (so it lives as long as the [`NetNs`] does,
//! even if its pod goes). [`NetNs::run`] runs a closure on a helper thread that has `setns`'d
//! into the namespace (threads kept for that, see [`runner`]); the calling thread (a tokio
//! worker, the memif control thread, a data-plane worker) never changes namespace.
//!
//! What makes this enough: a socket belongs to the namespace it was *created* in, for life,
//! whichever thread uses it later. So a socket created by [`NetNs::run`] keeps working in that
//! namespace after the thread has ended:
//! - a netlink socket made there configures that namespace's links, addresses and routes;
//! - a unix socket bound there to an abstract name (`@name`) is reachable only from that
//!   namespace — that is how Quiver, as memif master, offers a socket *inside* a client pod
//!   ([`NetNs::listen_memif`]), and how, as slave, it reaches an endpoint's socket in the
//!   endpoint's pod ([`NetNs::connect_memif`]).
//!
//! Filesystem socket paths are looked up in the *mount* namespace, not the network namespace:
//! a path socket is where the path says, whichever network namespace binds it.

use std::ffi::OsString;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memif::socket::ControlSocket;
use memif::SocketAddress;
use nix::errno::Errno;
use nix::fcntl::{open, OFlag};
use nix::sched::CloneFlags;
use nix::sys::stat::{fstat, Mode};

pub mod runner;

/// Errors of namespace handling.
#[derive(Debug, thiserror::Error)]
pub enum NetNsError {
    /// The string is neither an absolute path nor a `file://` URL.
    #[error("{url:?} is not a network namespace path or file:// URL: {reason}")]
    InvalidUrl {
        /// What was given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An `inode://<dev>/<ino>` URL: these name a namespace by a file descriptor passed beside
    /// the gRPC call, which is not supported yet.
    #[error("{url:?}: inode:// namespace URLs are not supported yet (only file:// paths)")]
    UnsupportedUrl {
        /// What was given.
        url: String,
    },
    /// Nothing exists at the path.
    #[error("network namespace {path:?} does not exist")]
    NotFound {
        /// The path.
        path: PathBuf,
    },
    /// The path exists but is not a network namespace.
    #[error("{path:?} is not a network namespace")]
    NotANamespace {
        /// The path.
        path: PathBuf,
    },
    /// A system call failed (permission, resources …).
    #[error("{what}: {source}")]
    Sys {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: Errno,
    },
    /// A socket could not be made in the namespace.
    #[error("{what} in network namespace {path:?}: {source}")]
    Socket {
        /// What was being done.
        what: String,
        /// The namespace.
        path: PathBuf,
        /// The error.
        #[source]
        source: memif::Error,
    },
}

impl NetNsError {
    /// True when the namespace itself cannot be found or named (a bad URL, nothing at the path,
    /// not a namespace): the caller gave a namespace that does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            NetNsError::InvalidUrl { .. }
                | NetNsError::UnsupportedUrl { .. }
                | NetNsError::NotFound { .. }
                | NetNsError::NotANamespace { .. }
        )
    }
}

/// The identity of a namespace: the (device, inode) of its nsfs file. Two handles on the same
/// namespace have the same id, whatever path opened them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NetNsId {
    /// `st_dev` of the namespace file.
    pub dev: u64,
    /// `st_ino` of the namespace file (what `ip netns identify`, `lsns` and `/proc/<pid>/ns/net`
    /// show as `net:[<ino>]`).
    pub ino: u64,
}

impl fmt::Display for NetNsId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "net:[{}]", self.ino)
    }
}

/// An open network namespace (see the module docs). Cheap to clone: clones share the file
/// descriptor, which is closed when the last one goes.
#[derive(Clone)]
pub struct NetNs {
    fd: Arc<OwnedFd>,
    path: PathBuf,
    id: NetNsId,
}

impl fmt::Debug for NetNs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NetNs({:?}, {})", self.path, self.id)
    }
}

impl PartialEq for NetNs {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for NetNs {}

/// `NS_GET_NSTYPE` (linux/nsfs.h): `_IO(0xb7, 0x3)`.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// The path a namespace URL names: an absolute path as is, or a `file://` URL (empty host or
/// `localhost`, `%XX` escapes decoded). `inode://` URLs are refused with
/// [`NetNsError::UnsupportedUrl`].
pub fn parse_netns_url(url: &str) -> Result<PathBuf, NetNsError> {
    let invalid = |reason| NetNsError::InvalidUrl {
        url: url.to_string(),
        reason,
    };
    if url.starts_with("inode://") {
        return Err(NetNsError::UnsupportedUrl { url: url.into() });
    }
    let path = if let Some(rest) = url.strip_prefix("file://") {
        let path = if rest.starts_with('/') {
            rest
        } else if let Some(p) = rest.strip_prefix("localhost") {
            p
        } else {
            return Err(invalid(
                "a file:// URL must have an empty host or localhost",
            ));
        };
        if path.contains(['?', '#']) {
            return Err(invalid("a query or fragment in a file:// URL"));
        }
        percent_decode(path).ok_or_else(|| invalid("a bad %-escape"))?
    } else if url.contains("://") {
        return Err(invalid(
            "only file:// (and, later, inode://) URLs name a namespace",
        ));
    } else {
        url.as_bytes().to_vec()
    };
    if path.first() != Some(&b'/') {
        return Err(invalid("the path must be absolute"));
    }
    if path.contains(&0) {
        return Err(invalid("a NUL byte in the path"));
    }
    Ok(PathBuf::from(OsString::from_vec(path)))
}

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

impl NetNs {
    /// Opens the namespace at `url`: `/proc/<pid>/ns/net`, `/var/run/netns/<name>`, or NSM's
    /// `file:///…` form of either. Checks that it is a network namespace.
    pub fn open(url: &str) -> Result<NetNs, NetNsError> {
        let path = parse_netns_url(url)?;
        NetNs::open_path(&path)
    }

    /// Opens the namespace file at `path` (no URL parsing).
    pub fn open_path(path: &Path) -> Result<NetNs, NetNsError> {
        let fd = match open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) | Err(Errno::ENOTDIR) | Err(Errno::ESRCH) => {
                return Err(NetNsError::NotFound { path: path.into() })
            }
            Err(e) => {
                return Err(NetNsError::Sys {
                    what: format!("open {path:?}"),
                    source: e,
                })
            }
        };
        // SAFETY: NS_GET_NSTYPE takes no argument and only reads the file's namespace type;
        // the descriptor is open for the duration of the call.
        let kind = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE as _) };
        if kind < 0 {
            return match Errno::last() {
                // Not an nsfs file (a plain file, a directory, a stale mount point).
                Errno::ENOTTY | Errno::EINVAL => {
                    Err(NetNsError::NotANamespace { path: path.into() })
                }
                e => Err(NetNsError::Sys {
                    what: format!("NS_GET_NSTYPE on {path:?}"),
                    source: e,
                }),
            };
        }
        if kind != libc::CLONE_NEWNET {
            return Err(NetNsError::NotANamespace { path: path.into() });
        }
        let st = fstat(&fd).map_err(|e| NetNsError::Sys {
            what: format!("fstat {path:?}"),
            source: e,
        })?;
        Ok(NetNs {
            fd: Arc::new(fd),
            path: path.into(),
            id: NetNsId {
                dev: st.st_dev,
                ino: st.st_ino,
            },
        })
    }

    /// The namespace the calling thread is in (normally the host's, for Quiver's threads).
    pub fn current() -> Result<NetNs, NetNsError> {
        NetNs::open_path(Path::new("/proc/thread-self/ns/net"))
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its identity (equal for every handle on the same namespace).
    pub fn id(&self) -> NetNsId {
        self.id
    }

    /// Runs `f` on a thread inside this namespace and returns its result; the calling thread
    /// stays where it is. What `f` creates (sockets above all) stays in this namespace after
    /// the call. A panic in `f` is resumed on the calling thread.
    ///
    /// The thread is one of a few kept for this ([`runner`]): it enters the namespace
    /// (`setns`) for this call only, and an idle one ends after [`runner::IDLE`]. Calls made at
    /// the same time (or from inside `f`) get threads of their own; a new thread is spawned
    /// only when none is idle. Fine for control work, not for packets.
    pub fn run<T, F>(&self, f: F) -> Result<T, NetNsError>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        let entered = || {
            nix::sched::setns(self.fd.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| {
                NetNsError::Sys {
                    what: format!("setns into {:?}", self.path),
                    source: e,
                }
            })?;
            Ok(f())
        };
        runner::run(entered).map_err(|e| NetNsError::Sys {
            what: format!("spawning a thread for {:?}: {e}", self.path),
            source: e
                .raw_os_error()
                .map_or(Errno::UnknownErrno, Errno::from_raw),
        })?
    }

    /// Binds and listens on the memif control socket `addr` inside this namespace (a stale
    /// socket file at a path is replaced), for [`memif::Master::from_listener`]. An abstract
    /// name (`@name`) is then reachable from this namespace only.
    pub fn listen_memif(&self, addr: &SocketAddress) -> Result<ControlSocket, NetNsError> {
        self.run(|| ControlSocket::listen(addr))?
            .map_err(|e| self.socket_error(format!("listening on {addr}"), e))
    }

    /// Connects to the memif master at `addr` from inside this namespace (a slave's control
    /// connection; see [`memif::Slave::set_connector`]).
    pub fn connect_memif(&self, addr: &SocketAddress) -> Result<ControlSocket, NetNsError> {
        self.run(|| ControlSocket::connect(addr))?
            .map_err(|e| self.socket_error(format!("connecting to {addr}"), e))
    }

    fn socket_error(&self, what: String, source: memif::Error) -> NetNsError {
        NetNsError::Socket {
            what,
            path: self.path.clone(),
            source,
        }
    }
}

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths_name_namespace_files() {
        assert_eq!(
            parse_netns_url("file:///proc/42/ns/net").unwrap(),
            Path::new("/proc/42/ns/net")
        );
        assert_eq!(
            parse_netns_url("file://localhost/var/run/netns/a%20b").unwrap(),
            Path::new("/var/run/netns/a b")
        );
        assert_eq!(
            parse_netns_url("/var/run/netns/blue").unwrap(),
            Path::new("/var/run/netns/blue")
        );
        assert!(matches!(
            parse_netns_url("inode://4/4026531992"),
            Err(NetNsError::UnsupportedUrl { .. })
        ));
        for bad in [
            "relative/path",
            "file://host/x",
            "http://x/y",
            "file:///a%zz",
            "file:///a%00b",
            "",
        ] {
            let e = parse_netns_url(bad).unwrap_err();
            assert!(
                matches!(e, NetNsError::InvalidUrl { .. }) && e.is_not_found(),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn missing_and_non_namespace_files_are_refused() {
        let e = NetNs::open("file:///proc/self/ns/no-such-thing").unwrap_err();
        assert!(matches!(e, NetNsError::NotFound { .. }), "{e}");
        let e = NetNs::open("/proc/self/status").unwrap_err();
        assert!(matches!(e, NetNsError::NotANamespace { .. }), "{e}");
        // A namespace, but not a network one.
        let e = NetNs::open("/proc/self/ns/uts").unwrap_err();
        assert!(matches!(e, NetNsError::NotANamespace { .. }), "{e}");
    }

    #[test]
    fn run_in_our_own_namespace_returns_the_closure_result() {
        // Entering the namespace we are already in needs CAP_SYS_ADMIN too; without it the
        // error must say so rather than panic.
        let ns = NetNs::current().unwrap();
        assert_eq!(ns, NetNs::open("/proc/self/ns/net").unwrap());
        let borrowed = String::from("borrowed");
        match ns.run(|| borrowed.len()) {
            Ok(n) => assert_eq!(n, 8),
            Err(e) => assert!(
                matches!(
                    e,
                    NetNsError::Sys {
                        source: Errno::EPERM,
                        ..
                    }
                ),
                "{e}"
            ),
        }
    }
}
