//! NSM's recvfd on Quiver's server side (see [`grpc_unix`] for the transport): the
//! `inode://<dev>/<ino>` URLs in a Request's mechanism parameters become
//! `file:///proc/self/fd/<n>` of an fd the client passed on its connection, before the
//! Request is looked at; the answer carries the client's URLs back.
//!
//! An fd a connection uses moves from the transport connection's table into this one, under
//! the NSM connection's id: it stays open (and its `/proc/self/fd/<n>` path the same, across
//! refreshes) while the connection lives, and is closed once it is gone (Close, a failed
//! Request, expiry). Fds passed and never used close with their transport connection.
//!
//! Quiver's client side is the mirror image ([`HeldFds::resolve_answer`]): the endpoint's
//! answer names files by `inode://` and passes their fds on Quiver's channel to it; Core reads
//! the answer's mechanism with them resolved, holds them (a table of its own, by connection)
//! while the connection lives, and keeps the endpoint's own URLs for refresh and Close. An
//! endpoint socket the registry passes by fd is [`passed_socket_url`]'s.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Instant;

use tokio_stream::StreamExt;
use tonic::Status;

use super::connect::Core;
use grpc_unix::{FdSender, InodeKey, ReceivedFds, ReceivedFdsRef};
use nsm_proto::connection::{Connection, ConnectionEventType, Mechanism, MonitorScopeSelector};
use nsm_proto::networkservice::NetworkServiceRequest;

/// The URL scheme resolved.
const INODE: &str = "inode://";

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
        let rewrite = |m: &mut nsm_proto::connection::Mechanism| {
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

    /// Closes the fds of `id` if Quiver no longer holds that connection (waits for a Request,
    /// Close or expiry of it in progress to finish first).
    pub async fn release_if_gone(&self, core: &Core, id: &str) {
        if !self.map().contains_key(id) || core.holds(id).await {
            return;
        }
        if let Some(fds) = self.map().remove(id) {
            tracing::debug!(
                id,
                fds = fds.len(),
                "closed the passed fds of a closed connection"
            );
        }
    }

    /// [`Self::release_if_gone`] for every connection holding fds.
    pub async fn sweep(&self, core: &Core) {
        let ids: Vec<String> = self.map().keys().cloned().collect();
        for id in ids {
            self.release_if_gone(core, &id).await;
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

    /// Sweeps after every connection the monitor sees deleted (expiries included), until
    /// `core` goes. Call within a tokio runtime.
    pub fn watch(&self, core: Weak<Core>) {
        let held = self.clone();
        tokio::spawn(async move {
            loop {
                let Some(mut events) = core
                    .upgrade()
                    .map(|c| c.monitor.subscribe(MonitorScopeSelector::default()))
                else {
                    return;
                };
                while let Some(Ok(ev)) = events.next().await {
                    if ev.r#type != ConnectionEventType::Delete as i32 || held.is_empty() {
                        continue;
                    }
                    let Some(core) = core.upgrade() else { return };
                    held.sweep(&core).await;
                }
                // Cut off (fell behind): subscribe again, and catch up.
                let Some(c) = core.upgrade() else { return };
                held.sweep(&c).await;
            }
        });
    }
}

/// Quiver as a client on a unix socket: every `file:///path` parameter of `req`'s mechanism
/// preferences (Quiver's own offers) goes as the file's `inode://<dev>/<ino>`, its fd queued
/// on `fds` to go with the call, as NSM's sendfd does. The connection's mechanism (the
/// endpoint's own answer, sent back on refresh) is left alone. A file that cannot be opened
/// is `Internal`.
pub fn pass_offered_files(fds: &FdSender, req: &mut NetworkServiceRequest) -> Result<(), Status> {
    for m in &mut req.mechanism_preferences {
        fds.rewrite_file_urls(&mut m.parameters).map_err(|e| {
            Status::internal(format!("cannot pass a file of Quiver's offer by fd: {e}"))
        })?;
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use nsm_proto::connection::Mechanism;

    fn request(id: &str, url: &str) -> NetworkServiceRequest {
        NetworkServiceRequest {
            connection: Some(Connection {
                id: id.into(),
                ..Default::default()
            }),
            mechanism_preferences: vec![Mechanism {
                cls: "LOCAL".into(),
                r#type: "KERNEL".into(),
                parameters: HashMap::from([
                    ("inodeURL".to_string(), url.to_string()),
                    ("name".to_string(), "nsm0".to_string()),
                ]),
            }],
        }
    }

    fn passed() -> (ReceivedFds, InodeKey) {
        let fd: OwnedFd = std::fs::File::open("/proc/self/ns/net").unwrap().into();
        let key = InodeKey::of(&fd).unwrap();
        let r = ReceivedFds::default();
        r.insert(vec![fd]);
        (r, key)
    }

    #[test]
    fn a_passed_fd_resolves_to_its_proc_path_and_back() {
        let (received, key) = passed();
        let held = HeldFds::default();
        let mut req = request("c1", &key.to_string());
        let resolved = held.resolve(Some(&received), &mut req).unwrap();
        let path = req.mechanism_preferences[0].parameters["inodeURL"].clone();
        assert!(path.starts_with("file:///proc/self/fd/"), "{path}");
        let on_disk = std::fs::File::open(path.strip_prefix("file://").unwrap()).unwrap();
        assert_eq!(InodeKey::of(&on_disk).unwrap(), key);
        assert!(received.is_empty(), "moved to the connection");
        assert_eq!(held.len(), 1);

        // A refresh without sending it again finds the same fd, the same path.
        let mut again = request("c1", &key.to_string());
        held.resolve(None, &mut again).unwrap();
        assert_eq!(again.mechanism_preferences[0].parameters["inodeURL"], path);

        let mut answer = Connection {
            mechanism: Some(req.mechanism_preferences[0].clone()),
            ..Default::default()
        };
        resolved.restore(&mut answer);
        assert_eq!(
            answer.mechanism.unwrap().parameters["inodeURL"],
            key.to_string()
        );
    }

    #[test]
    fn unknown_or_malformed_inode_urls_are_invalid_and_change_nothing() {
        let (received, key) = passed();
        let held = HeldFds::default();
        let other = InodeKey {
            dev: key.dev,
            ino: key.ino + 1,
        };
        for url in [other.to_string(), "inode://x/1".to_string()] {
            let mut req = request("c1", &url);
            let before = req.clone();
            let e = held.resolve(Some(&received), &mut req).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{url}");
            assert_eq!(req, before);
        }
        // Another connection's fd is not this one's.
        let mut req = request("c1", &key.to_string());
        held.resolve(Some(&received), &mut req).unwrap();
        let mut req = request("c2", &key.to_string());
        let e = held.resolve(None, &mut req).unwrap_err();
        assert!(e
            .message()
            .contains("no file descriptor was passed for inode://"));
        assert_eq!(received.len(), 0);
        assert_eq!(held.len(), 1);
    }

    fn answer(params: &[(&str, &str)]) -> Mechanism {
        Mechanism {
            cls: "LOCAL".into(),
            r#type: "KERNEL".into(),
            parameters: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// How many of our fds refer to `key`.
    fn open_fds_of(key: InodeKey) -> usize {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
            .filter(|m| m.dev() == key.dev && m.ino() == key.ino)
            .count()
    }

    /// A file of its own (other tests run beside: count only ours), passed on `r`.
    fn passed_file(dir: &tempfile::TempDir, r: &ReceivedFds) -> InodeKey {
        let path = dir.path().join(format!("f{}", r.len()));
        std::fs::write(&path, b"").unwrap();
        let fd: OwnedFd = std::fs::File::open(&path).unwrap().into();
        let key = InodeKey::of(&fd).unwrap();
        r.insert(vec![fd]);
        key
    }

    #[test]
    fn an_answer_is_read_with_the_fds_passed_with_it_and_kept_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let channel = ReceivedFds::default();
        let key = passed_file(&dir, &channel);
        let held = HeldFds::default();
        let written = answer(&[("inodeURL", &key.to_string()), ("name", "nse0")]);
        let (read, resolved) = held.resolve_answer("c1", &channel, Some(&written)).unwrap();
        let read = read.unwrap();
        let path = read.parameters["inodeURL"].clone();
        assert!(path.starts_with("file:///proc/self/fd/"), "{path}");
        assert_eq!(read.parameters["name"], "nse0");
        let on_disk = std::fs::File::open(path.strip_prefix("file://").unwrap()).unwrap();
        assert_eq!(InodeKey::of(&on_disk).unwrap(), key);
        drop(on_disk);
        assert_eq!(written.parameters["inodeURL"], key.to_string(), "untouched");
        assert!(channel.is_empty(), "moved to the connection");
        held.keep_only("c1", &resolved);
        assert_eq!(open_fds_of(key), 1);

        // A refresh: the same fd, the same path; a copy passed again is closed.
        passed_file_again(&channel, &path);
        let (again, resolved) = held.resolve_answer("c1", &channel, Some(&written)).unwrap();
        assert_eq!(again.unwrap().parameters["inodeURL"], path);
        assert!(channel.is_empty());
        held.keep_only("c1", &resolved);
        assert_eq!(open_fds_of(key), 1);

        // Another connection naming the same file, its copy gone with the first's answer:
        // a duplicate of the one held from the same channel; not from another channel.
        let other = ReceivedFds::default();
        let e = held
            .resolve_answer("c3", &other, Some(&written))
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        let (shared, _) = held.resolve_answer("c2", &channel, Some(&written)).unwrap();
        assert_ne!(shared.unwrap().parameters["inodeURL"], path);
        assert_eq!(open_fds_of(key), 2);

        held.release("c1");
        held.release("c2");
        assert!(held.is_empty());
        assert_eq!(open_fds_of(key), 0, "closed with the connections");
    }

    /// Passes the file behind `path` (a `file:///proc/self/fd/<n>`) on `r` again.
    fn passed_file_again(r: &ReceivedFds, path: &str) {
        let fd: OwnedFd = std::fs::File::open(path.strip_prefix("file://").unwrap())
            .unwrap()
            .into();
        r.insert(vec![fd]);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn an_answer_naming_a_file_not_passed_is_refused_and_holds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let channel = ReceivedFds::default();
        let key = passed_file(&dir, &channel);
        let held = HeldFds::default();
        let other = InodeKey {
            dev: key.dev,
            ino: key.ino ^ 0x5a5a,
        };
        let e = held
            .resolve_answer(
                "c1",
                &channel,
                Some(&answer(&[
                    ("inodeURL", &key.to_string()),
                    ("socketfile", &other.to_string()),
                ])),
            )
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        assert!(
            e.message().contains(&format!(
                "the endpoint answered socketfile = {other} but passed no file descriptor"
            )),
            "{e:?}"
        );
        let e = held
            .resolve_answer(
                "c1",
                &channel,
                Some(&answer(&[("inodeURL", "inode://1/x")])),
            )
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        assert!(e.message().contains("inodeURL"), "{e:?}");
        assert!(held.is_empty());
        assert_eq!(channel.keys(), vec![key], "nothing taken");
        // No inode:// URL: read as it is.
        let plain = answer(&[("inodeURL", "file:///proc/self/ns/net")]);
        let (read, _) = held.resolve_answer("c1", &channel, Some(&plain)).unwrap();
        assert_eq!(read.unwrap(), plain);
        assert!(held.is_empty());
    }

    #[test]
    fn quivers_own_file_urls_go_by_fd_and_the_endpoints_are_left_alone() {
        let fds = FdSender::default();
        let mut req = request("c1", "file:///proc/self/ns/net");
        let endpoints = answer(&[("inodeURL", "file:///proc/self/ns/net")]);
        req.connection.as_mut().unwrap().mechanism = Some(endpoints.clone());
        pass_offered_files(&fds, &mut req).unwrap();
        let want = InodeKey::of(std::fs::File::open("/proc/self/ns/net").unwrap()).unwrap();
        assert_eq!(
            req.mechanism_preferences[0].parameters["inodeURL"],
            want.to_string()
        );
        assert_eq!(fds.pending(), 1);
        assert_eq!(req.connection.unwrap().mechanism.unwrap(), endpoints);
        let mut missing = request("c1", "file:///nonexistent/quiver-ns");
        let e = pass_offered_files(&fds, &mut missing).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal);
    }

    #[test]
    fn a_socket_the_registry_passes_is_dialed_by_its_fd_while_its_file_exists() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("nse.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        // As nsmgr passes it: an O_PATH fd of the socket file.
        let fd = nix::fcntl::open(
            &sock,
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap();
        let key = InodeKey::of(&fd).unwrap();
        let received = ReceivedFds::default();
        received.insert(vec![fd]);
        assert_eq!(
            passed_socket_url("unix:///x.sock", &received).unwrap(),
            "unix:///x.sock"
        );
        let url = passed_socket_url(&key.to_string(), &received).unwrap();
        let path = url.strip_prefix("unix://").unwrap();
        assert!(path.starts_with("/proc/self/fd/"), "{url}");
        std::os::unix::net::UnixStream::connect(path).expect("dials the passed socket");
        assert!(received.is_empty());
        assert_eq!(
            passed_socket_url(&key.to_string(), &received).unwrap(),
            url,
            "held: the same url again without a new fd"
        );
        let gone = InodeKey {
            dev: key.dev,
            ino: key.ino ^ 0x5a5a,
        };
        let e = passed_socket_url(&gone.to_string(), &received).unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        assert!(e.message().contains("passed no file descriptor"), "{e:?}");
        // Its file removed: closed at the next lookup.
        std::fs::remove_file(&sock).unwrap();
        assert_eq!(open_fds_of(key), 1);
        let _ = passed_socket_url(&gone.to_string(), &received);
        assert_eq!(open_fds_of(key), 0);
    }

    #[test]
    fn file_urls_pass_through() {
        let held = HeldFds::default();
        let mut req = request("c1", "file:///proc/self/ns/net");
        let before = req.clone();
        held.resolve(None, &mut req).unwrap();
        assert_eq!(req, before);
        assert!(held.is_empty());
    }
}
