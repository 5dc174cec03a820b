//! File descriptors beside gRPC on a unix socket, as NSM's grpcfd passes them (see
//! `specs/nsm.md`, "How a forwarder behaves"): each fd travels with `SCM_RIGHTS` on one byte of
//! an ordinary write of the connection's own bytes (the gRPC stream, or the TLS records
//! carrying it), so TLS and plaintext connections carry them alike.
//!
//! - [`FdStream`]: a unix stream that receives the fds coming with what it reads (keyed by
//!   their file's (st_dev, st_ino) in [`ReceivedFds`]) and sends the fds queued in its
//!   [`FdSender`] with the next bytes it writes. Servers run TLS (or plain HTTP/2) over it;
//!   tonic hands handlers its [`ConnectionInfo`].
//! - [`InodeKey`]: the `inode://<dev>/<ino>` URL naming a passed file; a sender turns
//!   `file:///path` into one with [`FdSender::send_file`] or [`FdSender::rewrite_file_urls`].

mod stream;

pub use stream::{FdSender, FdStream, ReceivedFds, ReceivedFdsRef, MAX_RECEIVED_FDS};

use std::fmt;
use std::os::fd::AsFd;

use crate::spiffe::PeerIdentity;

/// A file's identity, as an `inode://<dev>/<ino>` URL says it (both decimal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InodeKey {
    /// `st_dev` of the file.
    pub dev: u64,
    /// `st_ino` of the file.
    pub ino: u64,
}

impl InodeKey {
    /// The identity of the file `fd` refers to.
    pub fn of(fd: impl AsFd) -> std::io::Result<InodeKey> {
        let st = nix::sys::stat::fstat(fd).map_err(std::io::Error::from)?;
        Ok(InodeKey {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    /// Parses `inode://<dev>/<ino>`; `None` when `url` is not one (any other scheme, or a
    /// malformed inode URL).
    pub fn parse(url: &str) -> Option<InodeKey> {
        let rest = url.strip_prefix("inode://")?;
        let (dev, ino) = rest.split_once('/')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(dev) || !digits(ino) {
            return None;
        }
        Some(InodeKey {
            dev: dev.parse().ok()?,
            ino: ino.parse().ok()?,
        })
    }
}

impl fmt::Display for InodeKey {
    /// `inode://<dev>/<ino>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "inode://{}/{}", self.dev, self.ino)
    }
}

/// What tonic puts in the extensions of every request that came over an [`FdStream`]: the fds
/// the client passed on this connection, the queue of fds to pass back to it, and the
/// client's verified identity under TLS.
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    /// The fds received on the connection so far.
    pub fds: ReceivedFds,
    /// The fds to pass back to the client: each goes with the next bytes written on the
    /// connection (queue them before answering the call that names them).
    pub sender: FdSender,
    /// The TLS peer; `None` on a plaintext connection.
    pub peer: Option<PeerIdentity>,
}

impl ConnectionInfo {
    /// The connection info of the connection `request` came on, if it came over an
    /// [`FdStream`].
    pub fn from_request<T>(request: &tonic::Request<T>) -> Option<&ConnectionInfo> {
        request.extensions().get::<ConnectionInfo>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_urls_round_trip_and_junk_is_not_one() {
        let k = InodeKey {
            dev: 4,
            ino: 4026531992,
        };
        assert_eq!(k.to_string(), "inode://4/4026531992");
        assert_eq!(InodeKey::parse("inode://4/4026531992"), Some(k));
        for bad in [
            "file:///proc/self/ns/net",
            "inode://",
            "inode://4",
            "inode://4/",
            "inode:///5",
            "inode://a/5",
            "inode://4/5/6",
            "inode://-4/5",
            "inode://99999999999999999999999/5",
        ] {
            assert_eq!(InodeKey::parse(bad), None, "{bad}");
        }
    }
}
