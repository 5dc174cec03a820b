//! One gRPC channel per endpoint URL, shared by the Requests and Closes Quiver sends there,
//! instead of a fresh channel (a socket connect, an HTTP/2 handshake, with SPIFFE a TLS one)
//! for every call.
//!
//! - A channel is dialed with [`dial_peer`] on first use and kept while it is used; one idle
//!   for [`IDLE`] is dropped (its connection closes), so an endpoint Quiver stopped talking to
//!   holds no socket of Quiver's. A channel carrying a long-lived stream (a next hop's
//!   `MonitorConnections`, see [`Lease::hold`]) is kept while the stream lasts, so the calls
//!   to that URL share its connection.
//! - A channel dialed under one SVID is not reused once the identity rotated (the endpoint
//!   checks that the path token and the TLS client certificate have the same key): the next
//!   call dials again with the current SVID.
//! - A call that fails on a transport error drops the channel ([`Channels::forget`]); the next
//!   call dials again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use spiffe_identity::{Identity, PeerChannel, X509Identity};
use tokio::time::Instant;
use tonic::Status;

use crate::dial::dial_peer;

/// How long an unused channel is kept.
pub const IDLE: Duration = Duration::from_secs(2);

struct Cached {
    channel: PeerChannel,
    /// The SVID it was dialed with (`None`: plaintext).
    svid: Option<Arc<X509Identity>>,
    last_used: Instant,
    /// Tells this channel from a later one for the same URL.
    serial: u64,
    /// How many [`Hold`]s keep it.
    holds: Arc<AtomicUsize>,
}

type Map = Mutex<HashMap<String, Cached>>;

fn lock(m: &Map) -> MutexGuard<'_, HashMap<String, Cached>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A channel handed out by [`Channels::get`].
pub struct Lease {
    /// The channel (and the server identity it verified).
    pub channel: PeerChannel,
    /// It served calls before this one: a transport failure on it may only mean the peer
    /// closed an idle connection, and is worth one new dial.
    pub reused: bool,
    serial: u64,
    holds: Arc<AtomicUsize>,
}

impl Lease {
    /// Keeps the channel cached, used or not, until the returned [`Hold`] is dropped (for a
    /// long-lived stream on it).
    pub fn hold(&self) -> Hold {
        self.holds.fetch_add(1, Ordering::Relaxed);
        Hold(self.holds.clone())
    }
}

/// Keeps a cached channel from being dropped as idle (see [`Lease::hold`]).
pub struct Hold(Arc<AtomicUsize>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The channels to endpoints, by URL (see the module docs).
#[derive(Default)]
pub struct Channels {
    map: Arc<Map>,
    serial: AtomicU64,
}

impl Channels {
    /// A channel to `url`: the cached one if it was dialed with `identity`'s current SVID,
    /// else a new one dialed within `timeout` (and cached). Must run inside a tokio runtime.
    pub async fn get(
        &self,
        url: &str,
        timeout: Duration,
        identity: Option<&Identity>,
    ) -> Result<Lease, Status> {
        let svid = identity.map(Identity::current);
        let same_svid = |c: &Cached| match (&c.svid, &svid) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        if let Some(c) = lock(&self.map).get_mut(url).filter(|c| same_svid(c)) {
            c.last_used = Instant::now();
            return Ok(Lease {
                channel: c.channel.clone(),
                reused: true,
                serial: c.serial,
                holds: c.holds.clone(),
            });
        }
        let channel = dial_peer(url, timeout, identity).await?;
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let holds = Arc::new(AtomicUsize::new(0));
        lock(&self.map).insert(
            url.to_string(),
            Cached {
                channel: channel.clone(),
                svid,
                last_used: Instant::now(),
                serial,
                holds: holds.clone(),
            },
        );
        tokio::spawn(evict_when_idle(
            Arc::downgrade(&self.map),
            url.to_string(),
            serial,
        ));
        Ok(Lease {
            channel,
            reused: false,
            serial,
            holds,
        })
    }

    /// Drops `lease`'s channel from the cache (after a transport failure on it), unless it
    /// was replaced already.
    pub fn forget(&self, url: &str, lease: &Lease) {
        let mut map = lock(&self.map);
        if map.get(url).is_some_and(|c| c.serial == lease.serial) {
            map.remove(url);
        }
    }

    /// How many channels are cached.
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    /// No channel is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Removes the channel `serial` for `url` once it went unused for [`IDLE`] with no [`Hold`] on
/// it; ends early when it was replaced or forgotten, or the cache is gone.
async fn evict_when_idle(map: Weak<Map>, url: String, serial: u64) {
    let mut wait = IDLE;
    loop {
        tokio::time::sleep(wait).await;
        let Some(map) = map.upgrade() else { return };
        let mut map = lock(&map);
        let Some(c) = map.get(&url).filter(|c| c.serial == serial) else {
            return;
        };
        let idle = c.last_used.elapsed();
        if idle >= IDLE && c.holds.load(Ordering::Relaxed) == 0 {
            // The connection closes once the last call on it is done.
            map.remove(&url);
            return;
        }
        wait = if idle >= IDLE { IDLE } else { IDLE - idle };
    }
}

/// Whether `s` may be the channel's fault rather than the endpoint's answer: then the channel
/// is dropped (and, if it was reused, the call made once more on a new one — Request and Close
/// are idempotent in NSM).
pub fn transport_failure(s: &Status) -> bool {
    matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_channel_is_reused_then_dropped_when_idle_or_forgotten() {
        let dir = std::env::temp_dir().join(format!("quiver-channels-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        // A gRPC server (health only) that counts the connections it accepts.
        let accepted = Arc::new(AtomicU64::new(0));
        let counter = accepted.clone();
        let incoming = tokio_stream::StreamExt::map(
            tokio_stream::wrappers::UnixListenerStream::new(listener),
            move |s| {
                counter.fetch_add(1, Ordering::SeqCst);
                s
            },
        );
        let (_reporter, health) = tonic_health::server::health_reporter();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming(incoming),
        );
        let url = format!("unix://{}", path.display());
        let channels = Channels::default();
        let t = Duration::from_secs(5);
        let a = channels.get(&url, t, None).await.unwrap();
        assert!(!a.reused);
        let b = channels.get(&url, t, None).await.unwrap();
        assert!(b.reused, "the second call reuses the first channel");
        assert_eq!(channels.len(), 1);

        // A forgotten channel is dialed again; forgetting an older lease changes nothing.
        channels.forget(&url, &b);
        assert!(channels.is_empty());
        let c = channels.get(&url, t, None).await.unwrap();
        assert!(!c.reused);
        channels.forget(&url, &a);
        assert_eq!(
            channels.len(),
            1,
            "an old lease does not drop the new channel"
        );

        // Unused for IDLE: dropped.
        let deadline = std::time::Instant::now() + IDLE * 5;
        while !channels.is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "an idle channel was not dropped"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "two dials in all");

        // A held channel stays, used or not, until its hold goes. The clock is paused from
        // here: sleeping runs every timer due before, the eviction checks included, in order.
        let d = channels.get(&url, t, None).await.unwrap();
        let hold = d.hold();
        tokio::time::pause();
        tokio::time::sleep(IDLE * 3).await;
        assert_eq!(channels.len(), 1, "a held channel was dropped as idle");
        drop(hold);
        tokio::time::sleep(IDLE * 2).await;
        assert!(channels.is_empty(), "the channel outlived its hold");
        tokio::time::resume();

        // An unreachable URL is an error, and nothing is cached.
        let gone = format!("unix://{}", dir.join("nothing.sock").display());
        let e = channels.get(&gone, t, None).await.err().unwrap();
        assert_eq!(e.code(), tonic::Code::Unavailable);
        assert!(channels.is_empty());
        server.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn transport_failures_are_told_from_answers() {
        assert!(transport_failure(&Status::unavailable("x")));
        assert!(transport_failure(&Status::unknown("h2 protocol error")));
        assert!(!transport_failure(&Status::invalid_argument("x")));
        assert!(!transport_failure(&Status::deadline_exceeded("x")));
    }
}
