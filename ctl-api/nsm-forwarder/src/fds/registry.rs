//! Endpoint sockets the registry passes by fd (nsmgr's grpcfd), made dialable.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use grpc_unix::{InodeKey, ReceivedFds};
use tonic::Status;

use super::held::INODE;

/// The most endpoint sockets passed by the registry that Quiver holds at once.
pub const MAX_PASSED_SOCKETS: usize = 256;

/// Endpoint sockets the registry passed by fd, by file identity, with when each was last
/// found (process-wide: the `/proc/self/fd/<n>` URLs made of them are).
fn passed_sockets() -> MutexGuard<'static, HashMap<InodeKey, (OwnedFd, Instant)>> {
    static SOCKETS: OnceLock<Mutex<HashMap<InodeKey, (OwnedFd, Instant)>>> = OnceLock::new();
    SOCKETS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// An endpoint URL from the registry, made dialable: `inode://<dev>/<ino>` (nsmgr passing
/// the endpoint's socket by fd, as it does with NSM's grpcfd) becomes
/// `unix:///proc/self/fd/<n>` of the fd passed for it on the registry connection
/// (`received`); any other URL is returned as it is. Quiver holds such a socket's fd (one per
/// socket, the same URL each time it is found, so one cached channel) while the socket file
/// exists; one whose file was removed (its endpoint is gone) is closed at the next lookup,
/// and beyond [`MAX_PASSED_SOCKETS`] the one found longest ago. An `inode://` URL no fd came
/// for is `FailedPrecondition`; a malformed one `InvalidArgument`.
pub fn passed_socket_url(url: &str, received: &ReceivedFds) -> Result<String, Status> {
    if !url.starts_with(INODE) {
        return Ok(url.to_string());
    }
    let key = InodeKey::parse(url).ok_or_else(|| {
        Status::invalid_argument(format!(
            "the registry gave the endpoint url {url:?}, which is not inode://<dev>/<ino>"
        ))
    })?;
    let mut sockets = passed_sockets();
    // Sockets whose file is gone: their endpoint is too.
    sockets.retain(|k, (fd, _)| {
        let alive = *k == key || nix::sys::stat::fstat(&*fd).is_ok_and(|st| st.st_nlink > 0);
        if !alive {
            tracing::debug!(key = %k, "closed the fd of an endpoint socket that is gone");
        }
        alive
    });
    let fresh = received.take(key);
    let fd = match (sockets.get_mut(&key), fresh) {
        (Some((fd, found)), _) => {
            *found = Instant::now();
            fd.as_raw_fd()
        }
        (None, Some(fd)) => {
            if sockets.len() >= MAX_PASSED_SOCKETS {
                if let Some(oldest) = sockets.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| *k) {
                    sockets.remove(&oldest);
                }
            }
            let raw = fd.as_raw_fd();
            sockets.insert(key, (fd, Instant::now()));
            raw
        }
        (None, None) => {
            return Err(Status::failed_precondition(format!(
                "the registry gave the endpoint url {url} but passed no file descriptor for it \
                 (grpcfd)"
            )))
        }
    };
    tracing::debug!(%key, fd, "the registry passed the endpoint's socket by fd");
    Ok(format!("unix:///proc/self/fd/{fd}"))
}
