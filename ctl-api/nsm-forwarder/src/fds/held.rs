//! The fds NSM connections use, held by connection ([`HeldFds`]): on Quiver's server side the
//! ones a client passed for the `inode://` URLs of its Request ([`HeldFds::resolve`]), on its
//! client side the ones an endpoint passed with its answer ([`HeldFds::resolve_answer`]).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use grpc_unix::{InodeKey, ReceivedFds, ReceivedFdsRef};
use nsm_proto::connection::{Connection, Mechanism};
use nsm_proto::networkservice::NetworkServiceRequest;
use tonic::Status;

/// The URL scheme resolved.
pub(super) const INODE: &str = "inode://";

/// The passed fds NSM connections use: connection id → (file identity → fd).
#[derive(Clone, Default)]
pub struct HeldFds(Arc<Mutex<HashMap<String, HashMap<InodeKey, Held>>>>);

/// One fd a connection holds, and the transport table it came from.
struct Held {
    fd: OwnedFd,
    from: ReceivedFdsRef,
}

/// What [`HeldFds::resolve`] changed in a Request: each path it wrote, and the client's URL
/// it stands for (to put back in the answer).
#[derive(Debug, Default)]
pub struct Resolved(Vec<(String, String)>);

impl Resolved {
    /// Puts the client's `inode://` URLs back in `conn`'s mechanism parameters.
    pub fn restore(&self, conn: &mut Connection) {
        if self.0.is_empty() {
            return;
        }
        if let Some(m) = conn.mechanism.as_mut() {
            for value in m.parameters.values_mut() {
                if let Some((_, url)) = self.0.iter().find(|(path, _)| path == value) {
                    *value = url.clone();
                }
            }
        }
    }
}

impl HeldFds {
    fn map(&self) -> MutexGuard<'_, HashMap<String, HashMap<InodeKey, Held>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rewrites every `inode://` parameter of `req`'s mechanisms (the connection's and the
    /// preferences) to the `/proc/self/fd/<n>` path of the fd passed for it: one this
    /// connection already holds (a refresh), else one `received` on the caller's transport
    /// connection (then held by this connection). A URL that is malformed or names no passed
    /// fd is `InvalidArgument`, and then nothing is changed.
    pub fn resolve(
        &self,
        received: Option<&ReceivedFds>,
        req: &mut NetworkServiceRequest,
    ) -> Result<Resolved, Status> {
        let id = req
            .connection
            .as_ref()
            .map(|c| c.id.clone())
            .unwrap_or_default();
        let params = || {
            req.connection
                .iter()
                .filter_map(|c| c.mechanism.as_ref())
                .chain(req.mechanism_preferences.iter())
                .flat_map(|m| m.parameters.values())
        };
        let mut wanted: Vec<(String, InodeKey)> = Vec::new();
        for value in params().filter(|v| v.starts_with(INODE)) {
            let key = InodeKey::parse(value).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "mechanism parameter {value:?} is not inode://<dev>/<ino>"
                ))
            })?;
            if !wanted.iter().any(|(_, k)| *k == key) {
                wanted.push((value.clone(), key));
            }
        }
        if wanted.is_empty() {
            return Ok(Resolved::default());
        }
        if id.is_empty() {
            return Err(Status::invalid_argument("connection.id is empty"));
        }
        let mut held = self.map();
        let mine = held.get(&id);
        for (url, key) in &wanted {
            let passed = mine.is_some_and(|m| m.contains_key(key))
                || received.is_some_and(|r| r.keys().contains(key));
            if !passed {
                return Err(Status::invalid_argument(format!(
                    "no file descriptor was passed for {url} (grpcfd: send it with SCM_RIGHTS \
                     on the connection of the call)"
                )));
            }
        }
        let mine = held.entry(id.clone()).or_default();
        let mut paths = HashMap::new();
        for (url, key) in &wanted {
            // A copy sent again with a refresh is the same file: the one held is kept (its
            // path stays the same), the new one closed.
            let fresh = received.and_then(|r| r.take(*key));
            let held = match (mine.get(key), fresh) {
                (Some(held), _) => held,
                (None, Some(fd)) => mine.entry(*key).or_insert(Held {
                    fd,
                    from: received.map_or_else(ReceivedFdsRef::default, ReceivedFds::downgrade),
                }),
                (None, None) => {
                    return Err(Status::invalid_argument(format!(
                        "no file descriptor was passed for {url}"
                    )))
                }
            };
            let fd = &held.fd;
            let path = format!("file:///proc/self/fd/{}", fd.as_raw_fd());
            tracing::debug!(id, %key, path, "resolved a passed file descriptor");
            paths.insert(url.clone(), path);
        }
        let rewrite = |m: &mut Mechanism| {
            for value in m.parameters.values_mut() {
                if let Some(path) = paths.get(value.as_str()) {
                    *value = path.clone();
                }
            }
        };
        if let Some(m) = req.connection.as_mut().and_then(|c| c.mechanism.as_mut()) {
            rewrite(m);
        }
        req.mechanism_preferences.iter_mut().for_each(rewrite);
        Ok(Resolved(
            paths.into_iter().map(|(url, path)| (path, url)).collect(),
        ))
    }

    /// After a successful Request of `id`: the fds it no longer names are closed.
    pub fn keep_only(&self, id: &str, resolved: &Resolved) {
        let mut held = self.map();
        if let Some(mine) = held.get_mut(id) {
            let used: HashSet<InodeKey> = resolved
                .0
                .iter()
                .filter_map(|(_, url)| InodeKey::parse(url))
                .collect();
            mine.retain(|k, _| used.contains(k));
            if mine.is_empty() {
                held.remove(id);
            }
        }
    }

    /// Quiver's client side: `answer` is the endpoint's mechanism for Quiver's connection `id`
    /// (the owner's id), `received` the fds passed on the channel it came on. Returns a copy
    /// with every `inode://` parameter rewritten to the `file:///proc/self/fd/<n>` of the fd
    /// passed for it, which `id` then holds: one it holds already (a refresh; a copy passed
    /// again is closed), else the one passed with the answer (taken from `received`), else a
    /// duplicate of one another connection holds from the same channel (two answers naming
    /// the same file at once: the channel's table keeps one fd per file). `answer` itself is
    /// left as the endpoint wrote it: that is what Quiver sends back on refresh and Close.
    ///
    /// A malformed `inode://` URL, or one no fd came for, is `FailedPrecondition` (the
    /// endpoint's fault) naming the parameter, and then nothing is held.
    pub fn resolve_answer(
        &self,
        id: &str,
        received: &ReceivedFds,
        answer: Option<&Mechanism>,
    ) -> Result<(Option<Mechanism>, Resolved), Status> {
        let Some(m) = answer else {
            return Ok((None, Resolved::default()));
        };
        let mut wanted: Vec<(String, String, InodeKey)> = Vec::new();
        let mut params: Vec<_> = m.parameters.iter().collect();
        params.sort();
        for (param, value) in params.into_iter().filter(|(_, v)| v.starts_with(INODE)) {
            let key = InodeKey::parse(value).ok_or_else(|| {
                Status::failed_precondition(format!(
                    "the endpoint answered {param} = {value:?}, which is not \
                     inode://<dev>/<ino>"
                ))
            })?;
            wanted.push((param.clone(), value.clone(), key));
        }
        if wanted.is_empty() {
            return Ok((Some(m.clone()), Resolved::default()));
        }
        let mut held = self.map();
        let shared = |held: &HashMap<String, HashMap<InodeKey, Held>>, key: &InodeKey| {
            held.values()
                .filter_map(|c| c.get(key))
                .find(|h| received.is(&h.from))
                .map(|h| h.fd.try_clone())
        };
        // Everything is checked before anything is taken.
        for (param, url, key) in &wanted {
            let passed = held.get(id).is_some_and(|c| c.contains_key(key))
                || received.keys().contains(key)
                || shared(&held, key).is_some();
            if !passed {
                return Err(Status::failed_precondition(format!(
                    "the endpoint answered {param} = {url} but passed no file descriptor for \
                     it (grpcfd: the fd goes with SCM_RIGHTS on Quiver's connection to it)"
                )));
            }
        }
        let mut paths: HashMap<String, String> = HashMap::new();
        for (param, url, key) in &wanted {
            let fresh = received.take(*key);
            let fd = if let Some(h) = held.get(id).and_then(|c| c.get(key)) {
                h.fd.as_raw_fd()
            } else {
                let fd = match fresh {
                    Some(fd) => fd,
                    None => shared(&held, key).expect("checked above").map_err(|e| {
                        Status::internal(format!("cannot duplicate the fd of {url}: {e}"))
                    })?,
                };
                let raw = fd.as_raw_fd();
                held.entry(id.to_string()).or_default().insert(
                    *key,
                    Held {
                        fd,
                        from: received.downgrade(),
                    },
                );
                raw
            };
            let path = format!("file:///proc/self/fd/{fd}");
            tracing::debug!(id, param, %key, path, "resolved an fd the endpoint passed");
            paths.insert(url.clone(), path);
        }
        let mut resolved = m.clone();
        for value in resolved.parameters.values_mut() {
            if let Some(path) = paths.get(value.as_str()) {
                *value = path.clone();
            }
        }
        Ok((
            Some(resolved),
            Resolved(paths.into_iter().map(|(url, path)| (path, url)).collect()),
        ))
    }

    /// Closes every fd `id` holds (its connection is gone).
    pub fn release(&self, id: &str) {
        if let Some(fds) = self.map().remove(id) {
            tracing::debug!(id, fds = fds.len(), "closed the passed fds of a connection");
        }
    }

    /// Whether connection `id` holds fds.
    pub fn holds(&self, id: &str) -> bool {
        self.map().contains_key(id)
    }

    /// The connections that hold fds.
    pub fn ids(&self) -> Vec<String> {
        self.map().keys().cloned().collect()
    }

    /// Closes every fd `id` holds, its connection being closed (see
    /// [`Self::release`] for one that failed or expired in Quiver's hands).
    pub fn release_closed(&self, id: &str) {
        if let Some(fds) = self.map().remove(id) {
            tracing::debug!(
                id,
                fds = fds.len(),
                "closed the passed fds of a closed connection"
            );
        }
    }

    /// How many fds connections hold.
    pub fn len(&self) -> usize {
        self.map().values().map(HashMap::len).sum()
    }

    /// True if no connection holds an fd.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
