//! Who the admin service serves: the peers the socket's mode 0660 lets connect — root, the
//! socket's owner, members of its group — checked again on the credentials the kernel recorded
//! when each peer connected (`SO_PEERCRED`, and `SO_PEERGROUPS` for its supplementary groups),
//! so that a socket whose mode was widened, or a connection handed to another process, serves
//! no one else. Every call of any other peer is `PERMISSION_DENIED`, before its request is
//! decoded, and the backend never sees it.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use grpc_unix::LenientAuthority;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tonic::transport::server::Connected;
use tonic::{Request, Status};

/// A peer's credentials, as the kernel recorded them when it connected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCredentials {
    /// Its effective user id.
    pub uid: u32,
    /// Its effective group id.
    pub gid: u32,
    /// Its supplementary groups.
    pub groups: Vec<u32>,
    /// Its process id, if the kernel gave one.
    pub pid: Option<i32>,
}

impl PeerCredentials {
    /// The credentials of the peer connected on `fd` (a unix stream socket).
    pub fn of(fd: RawFd) -> io::Result<PeerCredentials> {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` is a ucred of `len` bytes, as SO_PEERCRED writes.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&raw mut cred).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PeerCredentials {
            uid: cred.uid,
            gid: cred.gid,
            groups: peer_groups(fd)?,
            pid: (cred.pid > 0).then_some(cred.pid),
        })
    }
}

/// The supplementary groups of the peer on `fd` (`SO_PEERGROUPS`, Linux 4.13).
fn peer_groups(fd: RawFd) -> io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = std::mem::size_of_val(groups.as_slice()) as libc::socklen_t;
        // SAFETY: `groups` has room for `len` bytes; the kernel writes at most that, or says
        // how much it needs (ERANGE).
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if r == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) if n > groups.len() => groups.resize(n, 0),
            _ => return Err(e),
        }
    }
}

/// Who the admin service serves: root, the socket's owner, and members of its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerPolicy {
    /// The socket's owner (the server's user).
    pub owner: u32,
    /// The socket's group.
    pub group: u32,
}

impl PeerPolicy {
    /// The path of the socket `listener` is bound to, and its policy now.
    pub fn of_listener(listener: &UnixListener) -> io::Result<(PathBuf, PeerPolicy)> {
        let addr = listener.local_addr()?;
        let path = addr.as_pathname().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "the admin socket has no path")
        })?;
        Ok((path.to_path_buf(), PeerPolicy::of_path(path)?))
    }

    /// The policy of the socket file at `path`: its owner and group as they are now (an
    /// operator's `chgrp` after the start counts, as it does for the mode).
    pub fn of_path(path: &Path) -> io::Result<PeerPolicy> {
        let meta = std::fs::metadata(path)?;
        Ok(PeerPolicy {
            owner: meta.uid(),
            group: meta.gid(),
        })
    }

    /// Whether `peer` is served.
    pub fn allows(&self, peer: &PeerCredentials) -> bool {
        peer.uid == 0
            || peer.uid == self.owner
            || peer.gid == self.group
            || peer.groups.contains(&self.group)
    }
}

/// Why the admin socket refuses a peer.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum Refusal {
    /// The peer is neither root, nor the socket's owner, nor in its group.
    #[error(
        "the admin socket serves root, uid {} and group {}: the peer (uid {}, gid {}, groups \
         {:?}, pid {}) is none of them",
        .policy.owner,
        .policy.group,
        .peer.uid,
        .peer.gid,
        .peer.groups,
        .peer.pid.map_or("?".to_string(), |p| p.to_string())
    )]
    NotAllowed {
        /// Whom the socket serves.
        policy: PeerPolicy,
        /// The peer.
        peer: PeerCredentials,
    },
    /// The peer's credentials cannot be read.
    #[error("the admin socket cannot tell who the peer is: {0}")]
    Unknown(Arc<io::Error>),
}

/// What the server knows of a connection's peer (its tonic `ConnectInfo`).
#[derive(Debug, Clone)]
pub(crate) struct PeerInfo {
    /// Whether it is served, or why not.
    verdict: Result<(), Refusal>,
}

/// An accepted connection, with its peer's verdict.
pub(crate) struct PeerStream {
    inner: LenientAuthority<UnixStream>,
    info: PeerInfo,
}

impl PeerStream {
    /// Wraps `stream`, judging its peer by `policy` (logged when refused).
    pub(crate) fn new(stream: UnixStream, policy: PeerPolicy) -> PeerStream {
        let verdict = match PeerCredentials::of(stream.as_raw_fd()) {
            Ok(c) if policy.allows(&c) => Ok(()),
            Ok(peer) => Err(Refusal::NotAllowed { policy, peer }),
            Err(e) => Err(Refusal::Unknown(Arc::new(e))),
        };
        if let Err(why) = &verdict {
            tracing::warn!("admin connection refused: {why}");
        }
        PeerStream {
            inner: LenientAuthority::new(stream),
            info: PeerInfo { verdict },
        }
    }
}

/// The interceptor of every call: a refused peer's is `PERMISSION_DENIED`.
pub(crate) fn check_peer(request: Request<()>) -> Result<Request<()>, Status> {
    match request.extensions().get::<PeerInfo>().map(|i| &i.verdict) {
        Some(Ok(())) => Ok(request),
        Some(Err(why)) => Err(Status::permission_denied(why.to_string())),
        None => Err(Status::permission_denied(
            "the admin socket cannot tell who the peer is",
        )),
    }
}

impl Connected for PeerStream {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_peer_is_told_who_is_served() {
        let refusal = Refusal::NotAllowed {
            policy: PeerPolicy {
                owner: 1000,
                group: 1001,
            },
            peer: PeerCredentials {
                uid: 1002,
                gid: 1003,
                groups: vec![4, 5],
                pid: None,
            },
        };
        assert_eq!(
            refusal.to_string(),
            "the admin socket serves root, uid 1000 and group 1001: the peer (uid 1002, gid 1003, \
             groups [4, 5], pid ?) is none of them"
        );
    }

    #[test]
    fn root_the_owner_and_the_group_are_served_no_one_else() {
        let policy = PeerPolicy {
            owner: 1000,
            group: 2000,
        };
        let peer = |uid, gid, groups: &[u32]| PeerCredentials {
            uid,
            gid,
            groups: groups.to_vec(),
            pid: None,
        };
        assert!(policy.allows(&peer(0, 0, &[])));
        assert!(policy.allows(&peer(1000, 5, &[])));
        assert!(policy.allows(&peer(7, 2000, &[])));
        assert!(policy.allows(&peer(7, 7, &[3, 2000])));
        assert!(!policy.allows(&peer(7, 7, &[3, 1000])));
        assert!(!policy.allows(&peer(65534, 65534, &[])));
    }

    #[test]
    fn a_socketpair_peer_is_this_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = PeerCredentials::of(a.as_raw_fd()).unwrap();
        // SAFETY: plain getters.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        assert_eq!((c.uid, c.gid), (uid, gid));
        assert_eq!(c.pid, Some(std::process::id() as i32));
    }
}
