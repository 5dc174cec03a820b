//! A peer as the control side keeps it: identity, endpoint, the handshake in flight, up to three
//! sessions (the one in use, the one before it, and a responder's one not yet confirmed), cookie
//! state, timers and counters.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::allowed_ips::AllowedIps;
use crate::cookie::CookieJar;
use crate::handshake::{InitiatorState, PeerIdentity, Tai64N};
use crate::replay::ReplayWindow;
use crate::timers::{PeerTimers, REJECT_AFTER_TIME};
use crate::transport::{SendCounter, TransportKeys};

/// One session: its keys, sending counter and replay window.
#[derive(Debug)]
pub struct Session {
    /// The keys (plain data; a worker may hold a copy).
    pub keys: TransportKeys,
    /// The next sending counter, shared by `Arc` with the graph's copy of the session: the
    /// keepalives this side sends and the workers' messages draw from one counter, so no nonce
    /// is used twice.
    pub counter: Arc<SendCounter>,
    /// The receiving replay window.
    pub window: ReplayWindow,
    /// Messages received and authenticated with it (keepalives included).
    pub received: u64,
}

impl Session {
    pub(crate) fn new(keys: TransportKeys) -> Self {
        Self {
            keys,
            counter: Arc::new(SendCounter::new()),
            window: ReplayWindow::new(),
            received: 0,
        }
    }

    /// Whether it is too old for anything at `now`.
    pub fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.keys.created) >= REJECT_AFTER_TIME
    }
}

/// Counters of one peer.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PeerStats {
    /// Initiations sent.
    pub initiations_sent: u64,
    /// Handshakes completed, either role.
    pub handshakes: u64,
    /// Handshakes completed while a session already existed.
    pub rekeys: u64,
    /// Transport messages refused as replayed or too old.
    pub replays: u64,
    /// Inner bytes received (decrypted, before trimming the padding).
    pub rx_bytes: u64,
    /// Inner bytes sent.
    pub tx_bytes: u64,
}

/// A configured peer.
#[derive(Debug)]
pub struct Peer {
    /// Its static identity.
    pub identity: PeerIdentity,
    /// Where its messages go: configured, then the source of its last authenticated message.
    pub endpoint: Option<SocketAddr>,
    /// The inner source addresses accepted from it and the destinations sent to it.
    pub allowed_ips: AllowedIps,
    /// Its timers.
    pub timers: PeerTimers,
    /// Its counters.
    pub stats: PeerStats,
    pub(crate) cookies: CookieJar,
    pub(crate) handshake: Option<InitiatorState>,
    pub(crate) last_timestamp: Option<Tai64N>,
    pub(crate) last_initiation_consumed: Option<Instant>,
    pub(crate) current: Option<Session>,
    pub(crate) previous: Option<Session>,
    pub(crate) next: Option<Session>,
    pub(crate) rekey_wanted: bool,
}

impl Peer {
    pub(crate) fn new(identity: PeerIdentity, endpoint: Option<SocketAddr>) -> Self {
        Self {
            identity,
            endpoint,
            allowed_ips: AllowedIps::new(),
            timers: PeerTimers::new(),
            stats: PeerStats::default(),
            cookies: CookieJar::new(),
            handshake: None,
            last_timestamp: None,
            last_initiation_consumed: None,
            current: None,
            previous: None,
            next: None,
            rekey_wanted: false,
        }
    }

    /// The session data is sent with, if any.
    pub fn current(&self) -> Option<&Session> {
        self.current.as_ref()
    }

    /// The session before it (still accepted until it expires).
    pub fn previous(&self) -> Option<&Session> {
        self.previous.as_ref()
    }

    /// A session this side answered a handshake for and has not yet received data on.
    pub fn next(&self) -> Option<&Session> {
        self.next.as_ref()
    }

    /// The sessions' local indices (for removing them from an index table).
    pub(crate) fn local_indices(&self) -> impl Iterator<Item = u32> + '_ {
        [&self.current, &self.previous, &self.next]
            .into_iter()
            .flatten()
            .map(|s| s.keys.local_index)
            .chain(self.handshake.as_ref().map(|h| h.local_index))
    }
}
