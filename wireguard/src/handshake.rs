//! Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s as WireGuard uses it (whitepaper §5.4.2–§5.4.5): the
//! initiation and response messages, each side's half, and the session keys they end in. Pure
//! functions over explicit state; randomness and the timestamp come from the caller. MAC1/MAC2
//! are [`crate::cookie`]'s.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rand_core::CryptoRngCore;
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use crate::crypto::{aead_open, aead_seal, hash, kdf1, kdf2, kdf3, HASH_LEN, TAG_LEN};
use crate::keys::{PresharedKey, PrivateKey, PublicKey};
use crate::transport::TransportKeys;
use crate::wire::{Initiation, Response};

/// The Noise protocol name, the first input of the chaining key.
pub const CONSTRUCTION: &[u8] = b"Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";
/// WireGuard's identifier, mixed into the first hash.
pub const IDENTIFIER: &[u8] = b"WireGuard v1 zx2c4 Jason@zx2c4.com";
/// Label of the mac1 key.
pub const LABEL_MAC1: &[u8] = b"mac1----";
/// Label of the cookie key.
pub const LABEL_COOKIE: &[u8] = b"cookie--";

/// Why a handshake message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// An AEAD in the message did not verify (wrong keys, or a forged message).
    #[error("handshake message failed authentication")]
    Authentication,
    /// The initiator's static key is not a configured peer.
    #[error("initiation from an unknown peer")]
    UnknownPeer,
    /// A Diffie-Hellman result was zero (a low-order public key).
    #[error("low-order public key")]
    BadKey,
}

/// A TAI64N timestamp: 8 bytes of TAI seconds (2^62 + 10 + Unix seconds) and 4 of nanoseconds,
/// big-endian, so byte order is time order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tai64N(pub [u8; 12]);

impl Tai64N {
    /// The timestamp of a wall-clock time.
    pub fn from_system_time(t: SystemTime) -> Self {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let mut b = [0u8; 12];
        b[..8].copy_from_slice(&((1u64 << 62) + 10 + d.as_secs()).to_be_bytes());
        b[8..].copy_from_slice(&d.subsec_nanos().to_be_bytes());
        Self(b)
    }

    /// The timestamp of `SystemTime::now()` (an initiation's wall clock, read by the caller).
    pub fn now() -> Self {
        Self::from_system_time(SystemTime::now())
    }
}

fn chaining_key0() -> [u8; HASH_LEN] {
    hash(&[CONSTRUCTION])
}

/// `HASH(HASH(HASH(CONSTRUCTION) || IDENTIFIER) || responder's static public key)`: the first
/// hash of every handshake to that responder.
fn hash0(responder: &PublicKey) -> [u8; HASH_LEN] {
    let h = hash(&[&chaining_key0(), IDENTIFIER]);
    hash(&[&h, &responder.0])
}

fn dh(private: &PrivateKey, public: &PublicKey) -> Result<[u8; 32], HandshakeError> {
    let s = private.dh(public);
    if bool::from(s.ct_eq(&[0u8; 32])) {
        return Err(HandshakeError::BadKey);
    }
    Ok(s)
}

/// This side's static identity with what every handshake to it needs, computed once.
#[derive(Debug, Clone)]
pub struct LocalIdentity {
    private: PrivateKey,
    public: PublicKey,
    hash0: [u8; HASH_LEN],
    /// Key of mac1 of messages sent to us: `HASH(LABEL_MAC1 || our public key)`.
    pub(crate) mac1_key: [u8; HASH_LEN],
    /// Key of the cookie replies we send: `HASH(LABEL_COOKIE || our public key)`.
    pub(crate) cookie_key: [u8; HASH_LEN],
}

impl LocalIdentity {
    /// The identity of `private`.
    pub fn new(private: PrivateKey) -> Self {
        let public = private.public_key();
        Self {
            hash0: hash0(&public),
            mac1_key: hash(&[LABEL_MAC1, &public.0]),
            cookie_key: hash(&[LABEL_COOKIE, &public.0]),
            private,
            public,
        }
    }

    /// Our public key.
    pub fn public_key(&self) -> PublicKey {
        self.public
    }
}

/// A peer's static identity as seen from `local`: its key, the preshared key, and what every
/// handshake with it needs, computed once.
#[derive(Clone)]
pub struct PeerIdentity {
    public: PublicKey,
    psk: PresharedKey,
    /// `DH(our static, its static)`; `None` if its key is of low order (no handshake can succeed).
    static_static: Option<[u8; 32]>,
    hash0: [u8; HASH_LEN],
    /// Key of mac1 of messages we send it.
    pub(crate) mac1_key: [u8; HASH_LEN],
    /// Key of the cookie replies it sends us.
    pub(crate) cookie_key: [u8; HASH_LEN],
}

impl std::fmt::Debug for PeerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerIdentity({:?})", self.public)
    }
}

impl PeerIdentity {
    /// The peer with this public key (and preshared key: zeros for none), from `local`'s side.
    pub fn new(local: &LocalIdentity, public: PublicKey, psk: PresharedKey) -> Self {
        Self {
            static_static: dh(&local.private, &public).ok(),
            hash0: hash0(&public),
            mac1_key: hash(&[LABEL_MAC1, &public.0]),
            cookie_key: hash(&[LABEL_COOKIE, &public.0]),
            public,
            psk,
        }
    }

    /// Its public key.
    pub fn public_key(&self) -> PublicKey {
        self.public
    }
}

/// The initiator's state between sending an initiation and receiving its response.
#[derive(Clone)]
pub struct InitiatorState {
    ephemeral: PrivateKey,
    chaining: [u8; HASH_LEN],
    hash: [u8; HASH_LEN],
    /// The index the initiation carried as its sender (the response's receiver).
    pub local_index: u32,
}

impl Drop for InitiatorState {
    fn drop(&mut self) {
        self.chaining.zeroize();
        self.hash.zeroize();
    }
}

impl std::fmt::Debug for InitiatorState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "InitiatorState {{ local_index: {:#x} }}",
            self.local_index
        )
    }
}

/// Writes an initiation to `peer` into `msg` (all but mac1 and mac2) and returns the state that
/// its response completes.
pub fn create_initiation(
    local: &LocalIdentity,
    peer: &PeerIdentity,
    local_index: u32,
    timestamp: Tai64N,
    rng: &mut (impl CryptoRngCore + ?Sized),
    msg: &mut Initiation<&mut [u8]>,
) -> Result<InitiatorState, HandshakeError> {
    let ss = peer.static_static.ok_or(HandshakeError::BadKey)?;
    let ephemeral = PrivateKey::generate(rng);
    let e_pub = ephemeral.public_key();
    msg.set_sender(local_index);
    *msg.ephemeral_mut() = e_pub.0;
    let mut c = kdf1(&chaining_key0(), &e_pub.0);
    let mut h = hash(&[&peer.hash0, &e_pub.0]);

    let (c1, k) = kdf2(&c, &dh(&ephemeral, &peer.public)?);
    c = c1;
    let st = msg.encrypted_static_mut();
    st[..32].copy_from_slice(&local.public.0);
    aead_seal(&k, 0, st, &h);
    h = hash(&[&h, msg.encrypted_static()]);

    let (c2, k) = kdf2(&c, &ss);
    c = c2;
    let ts = msg.encrypted_timestamp_mut();
    ts[..12].copy_from_slice(&timestamp.0);
    aead_seal(&k, 0, ts, &h);
    h = hash(&[&h, msg.encrypted_timestamp()]);

    Ok(InitiatorState {
        ephemeral,
        chaining: c,
        hash: h,
        local_index,
    })
}

/// An initiation whose static key and timestamp decrypted: who sent it, when it says it was made,
/// and the state a response continues from.
#[derive(Clone)]
pub struct ConsumedInitiation {
    /// The initiator's static public key.
    pub peer: PublicKey,
    /// The initiator's index (the response's receiver).
    pub sender: u32,
    /// The initiation's timestamp (replay protection compares it with the peer's last).
    pub timestamp: Tai64N,
    ephemeral: PublicKey,
    chaining: [u8; HASH_LEN],
    hash: [u8; HASH_LEN],
}

impl std::fmt::Debug for ConsumedInitiation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ConsumedInitiation {{ peer: {:?}, sender: {:#x} }}",
            self.peer, self.sender
        )
    }
}

/// The responder's half of an initiation (mac1 already checked): decrypts the initiator's static
/// key, finds its peer with `lookup`, decrypts the timestamp.
pub fn consume_initiation<'p>(
    local: &LocalIdentity,
    msg: &Initiation<&[u8]>,
    lookup: impl FnOnce(&PublicKey) -> Option<&'p PeerIdentity>,
) -> Result<(ConsumedInitiation, &'p PeerIdentity), HandshakeError> {
    let e_i = PublicKey(*msg.ephemeral());
    let mut c = kdf1(&chaining_key0(), &e_i.0);
    let mut h = hash(&[&local.hash0, &e_i.0]);

    let (c1, k) = kdf2(&c, &dh(&local.private, &e_i)?);
    c = c1;
    let mut st = *msg.encrypted_static();
    if !aead_open(&k, 0, &mut st, &h) {
        return Err(HandshakeError::Authentication);
    }
    let peer_key = PublicKey(st[..32].try_into().expect("32 bytes"));
    h = hash(&[&h, msg.encrypted_static()]);

    let peer = lookup(&peer_key).ok_or(HandshakeError::UnknownPeer)?;
    let ss = peer.static_static.ok_or(HandshakeError::BadKey)?;
    let (c2, k) = kdf2(&c, &ss);
    c = c2;
    let mut ts = *msg.encrypted_timestamp();
    if !aead_open(&k, 0, &mut ts, &h) {
        return Err(HandshakeError::Authentication);
    }
    h = hash(&[&h, msg.encrypted_timestamp()]);
    Ok((
        ConsumedInitiation {
            peer: peer_key,
            sender: msg.sender(),
            timestamp: Tai64N(ts[..12].try_into().expect("12 bytes")),
            ephemeral: e_i,
            chaining: c,
            hash: h,
        },
        peer,
    ))
}

/// Derives the transport keys from the final chaining key: `(initiator's sending key,
/// responder's sending key)`.
fn split(c: &[u8; HASH_LEN]) -> ([u8; 32], [u8; 32]) {
    kdf2(c, &[])
}

/// The shared tail of both sides after the responder's ephemeral is known.
fn mix_response(
    mut c: [u8; HASH_LEN],
    h: [u8; HASH_LEN],
    e_r: &PublicKey,
    ee: [u8; 32],
    se: [u8; 32],
    psk: &PresharedKey,
) -> ([u8; HASH_LEN], [u8; HASH_LEN], [u8; 32]) {
    c = kdf1(&c, &e_r.0);
    let h = hash(&[&h, &e_r.0]);
    c = kdf1(&c, &ee);
    c = kdf1(&c, &se);
    let (c, t, k) = kdf3(&c, &psk.0);
    let h = hash(&[&h, &t]);
    (c, h, k)
}

/// Writes the response to `init` into `msg` (all but mac1 and mac2) and returns the responder's
/// session keys, made at `now`.
pub fn create_response(
    peer: &PeerIdentity,
    init: &ConsumedInitiation,
    local_index: u32,
    now: Instant,
    rng: &mut (impl CryptoRngCore + ?Sized),
    msg: &mut Response<&mut [u8]>,
) -> Result<TransportKeys, HandshakeError> {
    let ephemeral = PrivateKey::generate(rng);
    let e_r = ephemeral.public_key();
    msg.set_sender(local_index);
    msg.set_receiver(init.sender);
    *msg.ephemeral_mut() = e_r.0;
    let ee = dh(&ephemeral, &init.ephemeral)?;
    let se = dh(&ephemeral, &peer.public)?;
    let (c, h, k) = mix_response(init.chaining, init.hash, &e_r, ee, se, &peer.psk);
    let empty = msg.encrypted_nothing_mut();
    aead_seal(&k, 0, empty, &h);
    let (to_responder, to_initiator) = split(&c);
    Ok(TransportKeys {
        send: to_initiator,
        recv: to_responder,
        local_index,
        remote_index: init.sender,
        created: now,
        initiator: false,
    })
}

/// The initiator's half of a response (mac1 already checked; its receiver is `state`'s index):
/// returns the initiator's session keys, made at `now`.
pub fn consume_response(
    local: &LocalIdentity,
    peer: &PeerIdentity,
    state: &InitiatorState,
    msg: &Response<&[u8]>,
    now: Instant,
) -> Result<TransportKeys, HandshakeError> {
    let e_r = PublicKey(*msg.ephemeral());
    let ee = dh(&state.ephemeral, &e_r)?;
    let se = dh(&local.private, &e_r)?;
    let (c, h, k) = mix_response(state.chaining, state.hash, &e_r, ee, se, &peer.psk);
    let mut empty: [u8; TAG_LEN] = *msg.encrypted_nothing();
    if !aead_open(&k, 0, &mut empty, &h) {
        return Err(HandshakeError::Authentication);
    }
    let (to_responder, to_initiator) = split(&c);
    Ok(TransportKeys {
        send: to_responder,
        recv: to_initiator,
        local_index: state.local_index,
        remote_index: msg.sender(),
        created: now,
        initiator: true,
    })
}
