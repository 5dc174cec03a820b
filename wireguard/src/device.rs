//! A WireGuard endpoint with its peers, driven entirely by its caller: datagrams in
//! ([`Device::receive`]), packets out ([`Device::send`]), and time ([`Device::poll`]). It owns no
//! socket, thread or clock; every method takes `now`. Messages are written into the caller's
//! buffers; the per-packet calls do not allocate (the index table grows only on handshakes).
//!
//! This is the control side's state machine and the reference the graph nodes are tested against;
//! a worker's data path needs only [`crate::transport`] and the sessions' keys.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant, SystemTime};

use rand_core::{CryptoRngCore, OsRng};

use crate::allowed_ips::{inner_destination, inner_source};
use crate::cookie::{mac1_valid, CookieChecker, CookieError};
use crate::handshake::{
    consume_initiation, consume_response, create_initiation, create_response, HandshakeError,
    LocalIdentity, PeerIdentity, Tai64N,
};
use crate::keys::{PresharedKey, PrivateKey, PublicKey};
use crate::peer::{Peer, Session};
use crate::replay::ReplayError;
use crate::timers::{
    TimerAction, REKEY_AFTER_MESSAGES, REKEY_AFTER_TIME, REKEY_ON_RECEIVE_AGE,
    REKEY_TIMEOUT_JITTER_MAX,
};
use crate::transport::{self, inner_packet_len, TransportError};
use crate::wire::{
    message_type, CookieReply, Initiation, Response, WireError, COOKIE_REPLY_LEN, INITIATION_LEN,
    INITIATION_MAC1, RESPONSE_LEN, RESPONSE_MAC1, TRANSPORT_MIN_LEN, TYPE_COOKIE_REPLY,
    TYPE_INITIATION, TYPE_RESPONSE,
};

/// Initiations from one peer closer together than this are dropped (a flood).
pub const MIN_INITIATION_INTERVAL: Duration = Duration::from_millis(20);

/// A peer of a [`Device`], by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerId(pub usize);

/// Why a datagram or packet was refused: each a counter, never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// Not a well-formed message (truncated, oversized, unknown type).
    #[error(transparent)]
    Wire(#[from] WireError),
    /// mac1 is wrong: not for us.
    #[error("bad mac1")]
    BadMac1,
    /// No session or handshake of ours has this index.
    #[error("unknown receiver index {0:#x}")]
    UnknownReceiverIndex(u32),
    /// The handshake's cryptography refused it.
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// An initiation whose timestamp is not newer than the peer's last.
    #[error("replayed initiation")]
    ReplayedInitiation,
    /// An initiation too soon after the peer's last.
    #[error("initiation flood")]
    InitiationFlood,
    /// A cookie reply was refused.
    #[error(transparent)]
    Cookie(#[from] CookieError),
    /// A transport message was refused.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The session is older than REJECT_AFTER_TIME.
    #[error("session expired")]
    SessionExpired,
    /// A decrypted packet is neither IPv4 nor IPv6, or its length does not fit.
    #[error("decrypted packet is not IP")]
    NotIp,
    /// A decrypted packet's source is not in its peer's allowed IPs.
    #[error("source {0} not in the peer's allowed IPs")]
    SourceNotAllowed(std::net::IpAddr),
    /// No session to send with: a handshake has to complete first.
    #[error("no session with the peer")]
    NoSession,
    /// The caller's buffer cannot hold the message.
    #[error("buffer too small")]
    BufferTooSmall,
}

/// What a received datagram asks of the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// Send `reply[..len]` to `to` (a handshake response, the keepalive that confirms a
    /// session, or a cookie reply).
    Reply {
        /// The peer it concerns, if known (a cookie reply is sent before any peer is known).
        peer: Option<PeerId>,
        /// Where to send it: the datagram's source.
        to: SocketAddr,
        /// Its length in `reply`.
        len: usize,
    },
    /// An inner packet, decrypted in place: `buf[range]`, trimmed to its IP length.
    Data {
        /// From this peer.
        peer: PeerId,
        /// Where it is in the datagram's buffer.
        range: Range<usize>,
    },
    /// A keepalive or cookie: nothing to do.
    Nothing,
}

/// A WireGuard endpoint.
pub struct Device {
    local: LocalIdentity,
    checker: CookieChecker,
    peers: Vec<Peer>,
    indices: HashMap<u32, usize>,
    rng: Box<dyn CryptoRngCore + Send>,
    under_load: bool,
    /// The wall-clock time of one monotonic instant: an initiation's TAI64N timestamp is derived
    /// from its `now` through it, so no method reads a clock.
    wall_clock: (Instant, SystemTime),
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("public_key", &self.local.public_key())
            .field("peers", &self.peers.len())
            .finish_non_exhaustive()
    }
}

impl Device {
    /// A device with `private` as its static key, drawing randomness from the OS.
    pub fn new(private: PrivateKey) -> Self {
        Self::with_rng(private, Box::new(OsRng))
    }

    /// A device with its own source of randomness (deterministic tests).
    pub fn with_rng(private: PrivateKey, rng: Box<dyn CryptoRngCore + Send>) -> Self {
        let local = LocalIdentity::new(private);
        Self {
            checker: CookieChecker::new(local.cookie_key),
            local,
            peers: Vec::new(),
            indices: HashMap::new(),
            rng,
            under_load: false,
            wall_clock: (Instant::now(), SystemTime::now()),
        }
    }

    /// Our public key.
    pub fn public_key(&self) -> PublicKey {
        self.local.public_key()
    }

    /// Adds a peer.
    pub fn add_peer(
        &mut self,
        public: PublicKey,
        psk: PresharedKey,
        endpoint: Option<SocketAddr>,
    ) -> PeerId {
        let identity = PeerIdentity::new(&self.local, public, psk);
        self.peers.push(Peer::new(identity, endpoint));
        PeerId(self.peers.len() - 1)
    }

    /// The peer an inner packet to `dst` goes to: the one whose allowed IPs hold it most
    /// specifically.
    pub fn peer_for(&self, dst: std::net::IpAddr) -> Option<PeerId> {
        let best = self
            .peers
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((p.allowed_ips.longest_match(dst)?, i)))
            .max_by_key(|(len, _)| *len)?;
        Some(PeerId(best.1))
    }

    /// The peer of the inner packet `packet` (by its destination), if any.
    pub fn peer_for_packet(&self, packet: &[u8]) -> Option<PeerId> {
        self.peer_for(inner_destination(packet)?)
    }

    /// A peer.
    pub fn peer(&self, id: PeerId) -> &Peer {
        &self.peers[id.0]
    }

    /// A peer, to change (endpoint, persistent keepalive).
    pub fn peer_mut(&mut self, id: PeerId) -> &mut Peer {
        &mut self.peers[id.0]
    }

    /// Whether the caller considers itself under load: handshake messages then need a valid mac2
    /// and are otherwise answered with a cookie reply.
    pub fn set_under_load(&mut self, under_load: bool) {
        self.under_load = under_load;
    }

    /// Sets which wall-clock time `at` is (TAI64N timestamps of initiations are derived from
    /// `now` through it); `Device::new` takes the clocks' readings at construction.
    pub fn set_wall_clock(&mut self, at: Instant, wall: SystemTime) {
        self.wall_clock = (at, wall);
    }

    fn timestamp(&self, now: Instant) -> Tai64N {
        let (at, wall) = self.wall_clock;
        let wall = match now.checked_duration_since(at) {
            Some(d) => wall + d,
            None => wall
                .checked_sub(at.duration_since(now))
                .unwrap_or(std::time::UNIX_EPOCH),
        };
        Tai64N::from_system_time(wall)
    }

    fn new_index(&mut self, peer: usize) -> u32 {
        loop {
            let i = self.rng.next_u32();
            if let std::collections::hash_map::Entry::Vacant(e) = self.indices.entry(i) {
                e.insert(peer);
                return i;
            }
        }
    }

    fn forget(&mut self, index: u32) {
        self.indices.remove(&index);
    }

    fn drop_session(&mut self, s: Option<Session>) {
        if let Some(s) = s {
            self.forget(s.keys.local_index);
        }
    }

    /// Writes a handshake initiation to peer `id` into `out` (at least 148 bytes) now, whatever the
    /// timers say (a forced rekey), and returns its length; send it to the peer's endpoint.
    pub fn initiate(
        &mut self,
        id: PeerId,
        now: Instant,
        out: &mut [u8],
    ) -> Result<usize, DeviceError> {
        self.write_initiation(id, now, false, out)
    }

    fn write_initiation(
        &mut self,
        id: PeerId,
        now: Instant,
        retry: bool,
        out: &mut [u8],
    ) -> Result<usize, DeviceError> {
        let out = out
            .get_mut(..INITIATION_LEN)
            .ok_or(DeviceError::BufferTooSmall)?;
        if let Some(old) = self.peers[id.0].handshake.take() {
            self.forget(old.local_index);
        }
        let index = self.new_index(id.0);
        let mut msg = Initiation::new_init(&mut out[..])?;
        let peer = &self.peers[id.0];
        let state = create_initiation(
            &self.local,
            &peer.identity,
            index,
            self.timestamp(now),
            &mut *self.rng,
            &mut msg,
        );
        let state = match state {
            Ok(s) => s,
            Err(e) => {
                self.forget(index);
                return Err(e.into());
            }
        };
        let jitter_ms = self.rng.next_u32() % (REKEY_TIMEOUT_JITTER_MAX.as_millis() as u32 + 1);
        let peer = &mut self.peers[id.0];
        let mac1_key = peer.identity.mac1_key;
        peer.cookies
            .write_macs(now, &mac1_key, out, INITIATION_MAC1);
        peer.handshake = Some(state);
        peer.rekey_wanted = false;
        peer.stats.initiations_sent += 1;
        peer.timers
            .initiation_sent(now, retry, Duration::from_millis(u64::from(jitter_ms)));
        Ok(INITIATION_LEN)
    }

    /// Handles one datagram from `src`, in place in `buf`. A reply, if any, is written into
    /// `reply` (at least 92 bytes).
    pub fn receive(
        &mut self,
        now: Instant,
        src: SocketAddr,
        buf: &mut [u8],
        reply: &mut [u8],
    ) -> Result<Received, DeviceError> {
        if reply.len() < RESPONSE_LEN {
            return Err(DeviceError::BufferTooSmall);
        }
        match message_type(buf)? {
            TYPE_INITIATION => self.receive_initiation(now, src, buf, reply),
            TYPE_RESPONSE => self.receive_response(now, src, buf, reply),
            TYPE_COOKIE_REPLY => {
                let msg = CookieReply::new_checked(&*buf)?;
                let peer = *self
                    .indices
                    .get(&msg.receiver())
                    .ok_or(DeviceError::UnknownReceiverIndex(msg.receiver()))?;
                let p = &mut self.peers[peer];
                let key = p.identity.cookie_key;
                p.cookies.consume_reply(now, &key, &msg)?;
                Ok(Received::Nothing)
            }
            _ => self.receive_transport(now, src, buf),
        }
    }

    /// Under load, a handshake message needs a valid mac2; otherwise writes a cookie reply.
    fn cookie_gate(
        &mut self,
        now: Instant,
        src: SocketAddr,
        msg: &[u8],
        mac1_at: usize,
        sender: u32,
        reply: &mut [u8],
    ) -> Option<Received> {
        if !self.under_load
            || self
                .checker
                .mac2_valid(now, &mut *self.rng, src, msg, mac1_at)
        {
            return None;
        }
        let mac1: [u8; 16] = msg[mac1_at..mac1_at + 16].try_into().expect("16 bytes");
        let out: &mut [u8; COOKIE_REPLY_LEN] = (&mut reply[..COOKIE_REPLY_LEN])
            .try_into()
            .expect("64 bytes");
        self.checker
            .write_reply(now, &mut *self.rng, src, sender, &mac1, out);
        Some(Received::Reply {
            peer: None,
            to: src,
            len: COOKIE_REPLY_LEN,
        })
    }

    fn receive_initiation(
        &mut self,
        now: Instant,
        src: SocketAddr,
        buf: &[u8],
        reply: &mut [u8],
    ) -> Result<Received, DeviceError> {
        let msg = Initiation::new_checked(buf)?;
        if !mac1_valid(&self.local.mac1_key, buf, INITIATION_MAC1) {
            return Err(DeviceError::BadMac1);
        }
        if let Some(r) = self.cookie_gate(now, src, buf, INITIATION_MAC1, msg.sender(), reply) {
            return Ok(r);
        }
        let mut found = None;
        let peers = &self.peers;
        let (init, _) = consume_initiation(&self.local, &msg, |k| {
            let i = peers.iter().position(|p| p.identity.public_key() == *k)?;
            found = Some(i);
            Some(&peers[i].identity)
        })?;
        let id = found.expect("lookup succeeded");
        let peer = &mut self.peers[id];
        if peer.last_timestamp.is_some_and(|t| init.timestamp <= t) {
            return Err(DeviceError::ReplayedInitiation);
        }
        if peer
            .last_initiation_consumed
            .is_some_and(|t| now.saturating_duration_since(t) < MIN_INITIATION_INTERVAL)
        {
            return Err(DeviceError::InitiationFlood);
        }
        let index = self.new_index(id);
        let out = &mut reply[..RESPONSE_LEN];
        let mut msg = Response::new_init(&mut out[..])?;
        let peer = &mut self.peers[id];
        let keys =
            match create_response(&peer.identity, &init, index, now, &mut *self.rng, &mut msg) {
                Ok(k) => k,
                Err(e) => {
                    self.forget(index);
                    return Err(e.into());
                }
            };
        let peer = &mut self.peers[id];
        peer.last_timestamp = Some(init.timestamp);
        peer.last_initiation_consumed = Some(now);
        let mac1_key = peer.identity.mac1_key;
        peer.cookies.write_macs(now, &mac1_key, out, RESPONSE_MAC1);
        peer.endpoint = Some(src);
        peer.timers.session_derived(now);
        peer.timers.authenticated_packet_received(now);
        let old = peer.next.replace(Session::new(keys));
        self.drop_session(old);
        Ok(Received::Reply {
            peer: Some(PeerId(id)),
            to: src,
            len: RESPONSE_LEN,
        })
    }

    fn receive_response(
        &mut self,
        now: Instant,
        src: SocketAddr,
        buf: &[u8],
        reply: &mut [u8],
    ) -> Result<Received, DeviceError> {
        let msg = Response::new_checked(buf)?;
        let receiver = msg.receiver();
        let id = *self
            .indices
            .get(&receiver)
            .ok_or(DeviceError::UnknownReceiverIndex(receiver))?;
        if self.peers[id].handshake.as_ref().map(|h| h.local_index) != Some(receiver) {
            return Err(DeviceError::UnknownReceiverIndex(receiver));
        }
        if !mac1_valid(&self.local.mac1_key, buf, RESPONSE_MAC1) {
            return Err(DeviceError::BadMac1);
        }
        if let Some(r) = self.cookie_gate(now, src, buf, RESPONSE_MAC1, msg.sender(), reply) {
            return Ok(r);
        }
        let peer = &mut self.peers[id];
        let state = peer.handshake.as_ref().expect("checked above");
        let keys = consume_response(&self.local, &peer.identity, state, &msg, now)?;
        peer.handshake = None;
        peer.endpoint = Some(src);
        peer.stats.handshakes += 1;
        if peer.current.is_some() {
            peer.stats.rekeys += 1;
        }
        peer.timers.handshake_complete(now);
        peer.timers.authenticated_packet_received(now);
        // The unconfirmed session (if any) or the current one becomes the previous.
        let demoted = match peer.next.take() {
            Some(n) => {
                let cur = peer.current.take();
                self.drop_session(cur);
                Some(n)
            }
            None => self.peers[id].current.take(),
        };
        let peer = &mut self.peers[id];
        let old_previous = std::mem::replace(&mut peer.previous, demoted);
        peer.current = Some(Session::new(keys));
        self.drop_session(old_previous);
        // Confirm the session to the responder at once.
        let len = self.keepalive(PeerId(id), now, reply)?;
        Ok(Received::Reply {
            peer: Some(PeerId(id)),
            to: src,
            len,
        })
    }

    fn receive_transport(
        &mut self,
        now: Instant,
        src: SocketAddr,
        buf: &mut [u8],
    ) -> Result<Received, DeviceError> {
        let (receiver, _) = transport::peek(buf)?;
        let id = *self
            .indices
            .get(&receiver)
            .ok_or(DeviceError::UnknownReceiverIndex(receiver))?;
        let peer = &mut self.peers[id];
        let is = |s: &Option<Session>| s.as_ref().is_some_and(|s| s.keys.local_index == receiver);
        let (slot, is_next) = if is(&peer.current) {
            (&mut peer.current, false)
        } else if is(&peer.previous) {
            (&mut peer.previous, false)
        } else if is(&peer.next) {
            (&mut peer.next, true)
        } else {
            return Err(DeviceError::UnknownReceiverIndex(receiver));
        };
        let session = slot.as_mut().expect("matched above");
        if session.expired(now) {
            return Err(DeviceError::SessionExpired);
        }
        let opened = transport::open_checked(&session.keys, &mut session.window, buf);
        let (_, range) = match opened {
            Ok(o) => o,
            Err(TransportError::Replay(
                e @ (ReplayError::Duplicate(_) | ReplayError::TooOld(_)),
            )) => {
                peer.stats.replays += 1;
                return Err(TransportError::Replay(e).into());
            }
            Err(e) => return Err(e.into()),
        };
        session.received += 1;
        let initiator_age = session
            .keys
            .initiator
            .then(|| now.saturating_duration_since(session.keys.created));
        if is_next {
            // The initiator used the session we answered: it is confirmed.
            let confirmed = peer.next.take();
            let old_previous = std::mem::replace(&mut peer.previous, peer.current.take());
            peer.current = confirmed;
            peer.stats.handshakes += 1;
            if peer.previous.is_some() {
                peer.stats.rekeys += 1;
            }
            peer.timers.handshake_complete(now);
            self.drop_session(old_previous);
        }
        let peer = &mut self.peers[id];
        peer.endpoint = Some(src);
        peer.stats.rx_bytes += range.len() as u64;
        if initiator_age.is_some_and(|a| a >= REKEY_ON_RECEIVE_AGE) && !is_next {
            peer.rekey_wanted = true;
        }
        if range.is_empty() {
            peer.timers.authenticated_packet_received(now);
            return Ok(Received::Nothing);
        }
        peer.timers.data_received(now);
        let len = inner_packet_len(&buf[range.clone()]).ok_or(DeviceError::NotIp)?;
        let source = inner_source(&buf[range.clone()]).ok_or(DeviceError::NotIp)?;
        if self.peers[id].allowed_ips.longest_match(source).is_none() {
            return Err(DeviceError::SourceNotAllowed(source));
        }
        Ok(Received::Data {
            peer: PeerId(id),
            range: range.start..range.start + len,
        })
    }

    /// Encrypts the inner packet at `buf[16..16 + len]` in place for peer `id` and returns the
    /// transport message's length (send `buf[..n]` to the peer's endpoint). `buf` must hold
    /// `transport::sealed_len(len)` bytes.
    pub fn send(
        &mut self,
        id: PeerId,
        now: Instant,
        buf: &mut [u8],
        len: usize,
    ) -> Result<usize, DeviceError> {
        let n = self.seal(id, now, buf, len)?;
        let peer = &mut self.peers[id.0];
        if len == 0 {
            peer.timers.keepalive_sent(now);
        } else {
            peer.timers.data_sent(now);
            peer.stats.tx_bytes += len as u64;
        }
        Ok(n)
    }

    fn seal(
        &mut self,
        id: PeerId,
        now: Instant,
        buf: &mut [u8],
        len: usize,
    ) -> Result<usize, DeviceError> {
        let peer = &mut self.peers[id.0];
        let session = peer.current.as_ref().ok_or(DeviceError::NoSession)?;
        if session.expired(now) {
            peer.rekey_wanted = true;
            return Err(DeviceError::SessionExpired);
        }
        let counter = session
            .counter
            .next()
            .ok_or(TransportError::CounterExhausted)?;
        let n = transport::seal(&session.keys, counter, buf, len)?;
        let aged = session.keys.initiator
            && now.saturating_duration_since(session.keys.created) >= REKEY_AFTER_TIME;
        if counter >= REKEY_AFTER_MESSAGES || aged {
            peer.rekey_wanted = true;
        }
        Ok(n)
    }

    /// Writes a keepalive for peer `id` into `out` (32 bytes) and returns its length.
    pub fn keepalive(
        &mut self,
        id: PeerId,
        now: Instant,
        out: &mut [u8],
    ) -> Result<usize, DeviceError> {
        self.send(id, now, out, 0)
    }

    /// What the timers want sent at `now`: an initiation or keepalive written into `out` (at
    /// least 148 bytes), for the peer named, to its endpoint. Call until `None`.
    pub fn poll(&mut self, now: Instant, out: &mut [u8]) -> Option<(PeerId, usize)> {
        for i in 0..self.peers.len() {
            let id = PeerId(i);
            let peer = &mut self.peers[i];
            if peer.rekey_wanted
                && !peer.timers.handshake_pending()
                && peer.timers.may_initiate(now)
            {
                if let Ok(n) = self.write_initiation(id, now, false, out) {
                    return Some((id, n));
                }
            }
            while let Some(action) = self.peers[i].timers.poll(now) {
                match action {
                    TimerAction::SendInitiation { retry } => {
                        if let Ok(n) = self.write_initiation(id, now, retry, out) {
                            return Some((id, n));
                        }
                    }
                    TimerAction::SendKeepalive => {
                        if let Ok(n) = self.keepalive(id, now, out) {
                            return Some((id, n));
                        }
                    }
                    TimerAction::GiveUp => {
                        if let Some(h) = self.peers[i].handshake.take() {
                            self.forget(h.local_index);
                        }
                    }
                    TimerAction::ZeroKeys => {
                        let indices: Vec<u32> = self.peers[i].local_indices().collect();
                        for x in indices {
                            self.forget(x);
                        }
                        let p = &mut self.peers[i];
                        (p.current, p.previous, p.next, p.handshake) = (None, None, None, None);
                    }
                }
            }
        }
        None
    }

    /// The earliest `now` at which [`poll`](Self::poll) may have something to send.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.peers
            .iter()
            .filter_map(|p| p.timers.next_deadline())
            .min()
    }

    /// The smallest `reply` buffer [`receive`](Self::receive) accepts, and the smallest `out` of
    /// [`poll`](Self::poll) and [`initiate`](Self::initiate).
    pub const MIN_REPLY: usize = RESPONSE_LEN;
    /// The smallest buffer an initiation fits.
    pub const MIN_OUT: usize = INITIATION_LEN;
    /// Shortest transport message.
    pub const KEEPALIVE_LEN: usize = TRANSPORT_MIN_LEN;
}

#[cfg(test)]
mod tests;
