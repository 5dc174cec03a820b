//! WireGuard's limits (whitepaper §6) and a peer's timers as a pure state machine: events tell it
//! what happened at `now`, [`PeerTimers::poll`] says what is due at `now`. It reads no clock and
//! starts no thread, so every timer is testable by moving `now`.

use std::time::{Duration, Instant};

/// A keypair that has sent this many messages is replaced (its peer initiates a handshake).
pub const REKEY_AFTER_MESSAGES: u64 = 1 << 60;
/// No message is sent or accepted with a counter at or past this (2^64 − 2^13 − 1).
pub const REJECT_AFTER_MESSAGES: u64 = u64::MAX - (1 << 13);
/// The initiator of a session replaces it once it is this old and it sends.
pub const REKEY_AFTER_TIME: Duration = Duration::from_secs(120);
/// A keypair this old is used for nothing.
pub const REJECT_AFTER_TIME: Duration = Duration::from_secs(180);
/// How long handshake initiations are retried before giving up.
pub const REKEY_ATTEMPT_TIME: Duration = Duration::from_secs(90);
/// How long an initiation waits for its response before the next one.
pub const REKEY_TIMEOUT: Duration = Duration::from_secs(5);
/// Upper bound of the random time added to [`REKEY_TIMEOUT`] for each retry.
pub const REKEY_TIMEOUT_JITTER_MAX: Duration = Duration::from_millis(333);
/// A peer that received data and sent nothing for this long sends a keepalive.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a received cookie is used for mac2, and how often the cookie secret changes.
pub const COOKIE_REFRESH_TIME: Duration = Duration::from_secs(120);
/// A receiving initiator rekeys once its session is this old (180 − 10 − 5 s), so that the new
/// one is ready before the old one is rejected.
pub const REKEY_ON_RECEIVE_AGE: Duration = Duration::from_secs(165);

/// What a peer's timers ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerAction {
    /// Send a handshake initiation; `retry` if it retransmits an unanswered one (report it with
    /// [`PeerTimers::initiation_sent`]).
    SendInitiation {
        /// Part of the same attempt as the last initiation.
        retry: bool,
    },
    /// Send a keepalive (an empty transport message).
    SendKeepalive,
    /// Handshakes were retried for REKEY_ATTEMPT_TIME without an answer: stop, drop what waits.
    GiveUp,
    /// Nothing happened for 3 × REJECT_AFTER_TIME: erase every key and handshake state.
    ZeroKeys,
}

/// A peer's timers (the whitepaper's §6 and what implementations do with them).
#[derive(Debug, Clone, Default)]
pub struct PeerTimers {
    retransmit_at: Option<Instant>,
    attempt_started: Option<Instant>,
    last_initiation: Option<Instant>,
    keepalive_at: Option<Instant>,
    keepalive_again: bool,
    new_handshake_at: Option<Instant>,
    zero_keys_at: Option<Instant>,
    persistent_interval: Option<Duration>,
    persistent_at: Option<Instant>,
}

fn due(at: Option<Instant>, now: Instant) -> bool {
    at.is_some_and(|t| t <= now)
}

impl PeerTimers {
    /// Timers with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the persistent keepalive interval (`None` or zero: off).
    pub fn set_persistent_keepalive(&mut self, interval: Option<Duration>, now: Instant) {
        self.persistent_interval = interval.filter(|d| !d.is_zero());
        self.persistent_at = self.persistent_interval.map(|d| now + d);
    }

    /// Whether an initiation may be sent now: at most one per REKEY_TIMEOUT, except retries.
    pub fn may_initiate(&self, now: Instant) -> bool {
        self.last_initiation
            .is_none_or(|t| now.saturating_duration_since(t) >= REKEY_TIMEOUT)
    }

    /// Whether a handshake this side started is waiting for its response.
    pub fn handshake_pending(&self) -> bool {
        self.retransmit_at.is_some()
    }

    /// An initiation was sent at `now`; `jitter` (up to 333 ms, random) spreads the retries.
    pub fn initiation_sent(&mut self, now: Instant, retry: bool, jitter: Duration) {
        if !retry || self.attempt_started.is_none() {
            self.attempt_started = Some(now);
        }
        self.last_initiation = Some(now);
        self.retransmit_at = Some(now + REKEY_TIMEOUT + jitter.min(REKEY_TIMEOUT_JITTER_MAX));
        self.authenticated_packet_sent(now);
    }

    /// A handshake completed (either role) at `now`.
    pub fn handshake_complete(&mut self, now: Instant) {
        self.retransmit_at = None;
        self.attempt_started = None;
        self.zero_keys_at = Some(now + 3 * REJECT_AFTER_TIME);
    }

    /// A new session was derived here as responder at `now`.
    pub fn session_derived(&mut self, now: Instant) {
        self.zero_keys_at = Some(now + 3 * REJECT_AFTER_TIME);
    }

    /// A data packet (not a keepalive) was sent at `now`.
    pub fn data_sent(&mut self, now: Instant) {
        if self.new_handshake_at.is_none() {
            self.new_handshake_at = Some(now + KEEPALIVE_TIMEOUT + REKEY_TIMEOUT);
        }
        self.authenticated_packet_sent(now);
    }

    /// A keepalive was sent at `now`.
    pub fn keepalive_sent(&mut self, now: Instant) {
        self.authenticated_packet_sent(now);
    }

    /// A data packet (not a keepalive) was received at `now`.
    pub fn data_received(&mut self, now: Instant) {
        if self.keepalive_at.is_none() {
            self.keepalive_at = Some(now + KEEPALIVE_TIMEOUT);
        } else {
            self.keepalive_again = true;
        }
        self.authenticated_packet_received(now);
    }

    /// Any authenticated message (data, keepalive, handshake) was received at `now`.
    pub fn authenticated_packet_received(&mut self, now: Instant) {
        self.new_handshake_at = None;
        self.traversed(now);
    }

    fn authenticated_packet_sent(&mut self, now: Instant) {
        self.keepalive_at = None;
        self.keepalive_again = false;
        self.traversed(now);
    }

    fn traversed(&mut self, now: Instant) {
        if let Some(d) = self.persistent_interval {
            self.persistent_at = Some(now + d);
        }
    }

    /// What is due at `now`, one action per call (call again until `None`).
    pub fn poll(&mut self, now: Instant) -> Option<TimerAction> {
        if due(self.zero_keys_at, now) {
            *self = Self {
                persistent_interval: self.persistent_interval,
                ..Self::default()
            };
            return Some(TimerAction::ZeroKeys);
        }
        if due(self.retransmit_at, now) {
            self.retransmit_at = None;
            let started = self.attempt_started.unwrap_or(now);
            if now.saturating_duration_since(started) >= REKEY_ATTEMPT_TIME {
                self.attempt_started = None;
                self.new_handshake_at = None;
                self.zero_keys_at.get_or_insert(now + 3 * REJECT_AFTER_TIME);
                return Some(TimerAction::GiveUp);
            }
            return Some(TimerAction::SendInitiation { retry: true });
        }
        if due(self.new_handshake_at, now) {
            self.new_handshake_at = None;
            return Some(TimerAction::SendInitiation { retry: false });
        }
        if due(self.keepalive_at, now) {
            self.keepalive_at = None;
            if std::mem::take(&mut self.keepalive_again) {
                self.keepalive_at = Some(now + KEEPALIVE_TIMEOUT);
            }
            return Some(TimerAction::SendKeepalive);
        }
        if due(self.persistent_at, now) {
            self.persistent_at = self.persistent_interval.map(|d| now + d);
            return Some(TimerAction::SendKeepalive);
        }
        None
    }

    /// The earliest time [`poll`](Self::poll) may have something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        [
            self.zero_keys_at,
            self.retransmit_at,
            self.new_handshake_at,
            self.keepalive_at,
            self.persistent_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn retries_with_jitter_then_gives_up() {
        let t0 = Instant::now();
        let mut t = PeerTimers::new();
        t.initiation_sent(t0, false, Duration::from_millis(100));
        assert!(t.handshake_pending());
        assert!(!t.may_initiate(t0 + S));
        assert_eq!(t.poll(t0 + 5 * S), None);
        let mut now = t0 + 5 * S + Duration::from_millis(100);
        let mut retries = 0;
        loop {
            match t.poll(now) {
                Some(TimerAction::SendInitiation { retry: true }) => {
                    retries += 1;
                    t.initiation_sent(now, true, Duration::from_millis(333));
                    now += REKEY_TIMEOUT + Duration::from_millis(333);
                }
                Some(TimerAction::GiveUp) => break,
                other => panic!("unexpected {other:?} at retry {retries}"),
            }
        }
        assert!((16..=18).contains(&retries), "{retries} retries");
        assert!(!t.handshake_pending());
    }

    #[test]
    fn completion_stops_retries() {
        let t0 = Instant::now();
        let mut t = PeerTimers::new();
        t.initiation_sent(t0, false, Duration::ZERO);
        t.handshake_complete(t0 + S);
        assert_eq!(t.poll(t0 + 6 * S), None);
        assert_eq!(t.next_deadline(), Some(t0 + S + 3 * REJECT_AFTER_TIME));
        assert_eq!(
            t.poll(t0 + S + 3 * REJECT_AFTER_TIME),
            Some(TimerAction::ZeroKeys)
        );
    }

    #[test]
    fn keepalive_after_receiving_unless_we_sent() {
        let t0 = Instant::now();
        let mut t = PeerTimers::new();
        t.data_received(t0);
        assert_eq!(t.poll(t0 + 9 * S), None);
        assert_eq!(t.poll(t0 + 10 * S), Some(TimerAction::SendKeepalive));
        assert_eq!(t.poll(t0 + 30 * S), None);
        t.data_received(t0 + 40 * S);
        t.data_sent(t0 + 41 * S);
        assert_eq!(t.poll(t0 + 50 * S), None);
    }

    #[test]
    fn new_handshake_when_sent_data_gets_no_answer() {
        let t0 = Instant::now();
        let mut t = PeerTimers::new();
        t.data_sent(t0);
        t.data_sent(t0 + S);
        assert_eq!(t.poll(t0 + 14 * S), None);
        assert_eq!(
            t.poll(t0 + 15 * S),
            Some(TimerAction::SendInitiation { retry: false })
        );
        t.data_sent(t0 + 20 * S);
        t.authenticated_packet_received(t0 + 21 * S);
        assert_eq!(t.poll(t0 + 40 * S), None);
    }

    #[test]
    fn persistent_keepalive() {
        let t0 = Instant::now();
        let mut t = PeerTimers::new();
        t.set_persistent_keepalive(Some(25 * S), t0);
        assert_eq!(t.poll(t0 + 24 * S), None);
        assert_eq!(t.poll(t0 + 25 * S), Some(TimerAction::SendKeepalive));
        t.keepalive_sent(t0 + 25 * S);
        assert_eq!(t.next_deadline(), Some(t0 + 50 * S));
    }
}
