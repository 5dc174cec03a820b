//! NSM's recvfd on Quiver's server side (see [`crate::grpcfd`] for the transport): the
//! `inode://<dev>/<ino>` URLs in a Request's mechanism parameters become
//! `file:///proc/self/fd/<n>` of an fd the client passed on its connection, before the
//! Request is looked at; the answer carries the client's URLs back.
//!
//! An fd a connection uses moves from the transport connection's table into this one, under
//! the NSM connection's id: it stays open (and its `/proc/self/fd/<n>` path the same, across
//! refreshes) while the connection lives, and is closed once it is gone (Close, a failed
//! Request, expiry). Fds passed and never used close with their transport connection.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio_stream::StreamExt;
use tonic::Status;

use super::connect::Core;
use crate::grpcfd::{InodeKey, ReceivedFds};
use crate::proto::connection::{Connection, ConnectionEventType, MonitorScopeSelector};
use crate::proto::networkservice::NetworkServiceRequest;

/// The URL scheme resolved.
const INODE: &str = "inode://";

/// The passed fds NSM connections use: connection id → (file identity → fd).
#[derive(Clone, Default)]
pub struct HeldFds(Arc<Mutex<HashMap<String, HashMap<InodeKey, OwnedFd>>>>);

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
    fn map(&self) -> MutexGuard<'_, HashMap<String, HashMap<InodeKey, OwnedFd>>> {
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
            let fd = match (mine.get(key), fresh) {
                (Some(fd), _) => fd,
                (None, Some(fd)) => mine.entry(*key).or_insert(fd),
                (None, None) => {
                    return Err(Status::invalid_argument(format!(
                        "no file descriptor was passed for {url}"
                    )))
                }
            };
            let path = format!("file:///proc/self/fd/{}", fd.as_raw_fd());
            tracing::debug!(id, %key, path, "resolved a passed file descriptor");
            paths.insert(url.clone(), path);
        }
        let rewrite = |m: &mut crate::proto::connection::Mechanism| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::connection::Mechanism;

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
