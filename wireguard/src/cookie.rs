//! MAC1, MAC2 and cookies (whitepaper §5.3, §5.4.7). mac1 proves the sender knows the
//! receiver's public key; under load a responder answers a message without a valid mac2 with a
//! cookie reply instead of doing Diffie-Hellman, and the initiator's next message carries
//! `mac2 = MAC(cookie, …)`. A cookie is `MAC(secret, source address)` with a secret that
//! changes every two minutes.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use rand_core::CryptoRngCore;
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use crate::crypto::{mac, xaead_open, xaead_seal, HASH_LEN, MAC_LEN};
use crate::timers::COOKIE_REFRESH_TIME;
use crate::wire::{CookieReply, WireError};

/// The bytes a cookie is made over: the source address and port (18 bytes at most).
fn source_bytes(src: SocketAddr) -> ([u8; 18], usize) {
    let mut b = [0u8; 18];
    let n = match src.ip() {
        IpAddr::V4(a) => {
            b[..4].copy_from_slice(&a.octets());
            4
        }
        IpAddr::V6(a) => {
            b[..16].copy_from_slice(&a.octets());
            16
        }
    };
    b[n..n + 2].copy_from_slice(&src.port().to_be_bytes());
    (b, n + 2)
}

/// Computes mac1 over `msg[..mac1_at]` with `key` and writes it at `mac1_at`.
pub fn write_mac1(key: &[u8; HASH_LEN], msg: &mut [u8], mac1_at: usize) -> [u8; MAC_LEN] {
    let m = mac(key, &msg[..mac1_at]);
    msg[mac1_at..mac1_at + MAC_LEN].copy_from_slice(&m);
    m
}

/// Whether the mac1 at `mac1_at` in `msg` is right for `key` (constant time).
pub fn mac1_valid(key: &[u8; HASH_LEN], msg: &[u8], mac1_at: usize) -> bool {
    let m = mac(key, &msg[..mac1_at]);
    bool::from(m.ct_eq(&msg[mac1_at..mac1_at + MAC_LEN]))
}

/// The responder's side: the rotating secret, checking mac2 and making cookie replies.
pub struct CookieChecker {
    secret: [u8; 32],
    born: Option<Instant>,
    /// `HASH(LABEL_COOKIE || our public key)`.
    key: [u8; HASH_LEN],
}

impl std::fmt::Debug for CookieChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CookieChecker {{ born: {:?} }}", self.born)
    }
}

impl Drop for CookieChecker {
    fn drop(&mut self) {
        self.secret.zeroize();
    }
}

impl CookieChecker {
    /// A checker for replies sealed with `cookie_key` (`HASH(LABEL_COOKIE || our public key)`).
    pub fn new(cookie_key: [u8; HASH_LEN]) -> Self {
        Self {
            secret: [0; 32],
            born: None,
            key: cookie_key,
        }
    }

    /// The cookie of `src` at `now`, with a fresh secret if the last is two minutes old.
    fn cookie(
        &mut self,
        now: Instant,
        rng: &mut (impl CryptoRngCore + ?Sized),
        src: SocketAddr,
    ) -> [u8; 16] {
        let stale = self
            .born
            .is_none_or(|b| now.saturating_duration_since(b) >= COOKIE_REFRESH_TIME);
        if stale {
            rng.fill_bytes(&mut self.secret);
            self.born = Some(now);
        }
        let (b, n) = source_bytes(src);
        mac(&self.secret, &b[..n])
    }

    /// Whether `msg`'s mac2 (right after mac1 at `mac1_at`) is the one `src`'s current cookie
    /// makes.
    pub fn mac2_valid(
        &mut self,
        now: Instant,
        rng: &mut (impl CryptoRngCore + ?Sized),
        src: SocketAddr,
        msg: &[u8],
        mac1_at: usize,
    ) -> bool {
        let cookie = self.cookie(now, rng, src);
        let mac2_at = mac1_at + MAC_LEN;
        let m = mac(&cookie, &msg[..mac2_at]);
        bool::from(m.ct_eq(&msg[mac2_at..mac2_at + MAC_LEN]))
    }

    /// Writes the cookie reply to a message from `src` with sender index `receiver` and mac1
    /// `mac1` into `out`.
    pub fn write_reply(
        &mut self,
        now: Instant,
        rng: &mut (impl CryptoRngCore + ?Sized),
        src: SocketAddr,
        receiver: u32,
        mac1: &[u8; MAC_LEN],
        out: &mut [u8; 64],
    ) {
        let cookie = self.cookie(now, rng, src);
        let mut reply = CookieReply::new_init(&mut out[..]).expect("64 bytes is a cookie reply");
        reply.set_receiver(receiver);
        let mut nonce = [0u8; 24];
        rng.fill_bytes(&mut nonce);
        *reply.nonce_mut() = nonce;
        let sealed = reply.encrypted_cookie_mut();
        sealed[..16].copy_from_slice(&cookie);
        xaead_seal(&self.key, &nonce, sealed, mac1);
    }
}

/// Why a cookie reply was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CookieError {
    /// Not a cookie reply.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// We sent nothing it can answer.
    #[error("cookie reply to no message of ours")]
    Unexpected,
    /// The sealed cookie did not verify.
    #[error("cookie reply failed authentication")]
    Authentication,
}

/// The initiator's side, per peer: the cookie last received and the mac1 last sent.
#[derive(Debug, Default, Clone)]
pub struct CookieJar {
    cookie: Option<([u8; MAC_LEN], Instant)>,
    last_mac1: Option<[u8; MAC_LEN]>,
}

impl CookieJar {
    /// An empty jar.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes mac1 (with `mac1_key`, the peer's) and mac2 (with the cookie if one younger than
    /// two minutes is held, zeros otherwise) into `msg`, and remembers mac1 for a cookie reply.
    pub fn write_macs(
        &mut self,
        now: Instant,
        mac1_key: &[u8; HASH_LEN],
        msg: &mut [u8],
        mac1_at: usize,
    ) {
        let m1 = write_mac1(mac1_key, msg, mac1_at);
        self.last_mac1 = Some(m1);
        let mac2_at = mac1_at + MAC_LEN;
        let m2 = match self.cookie {
            Some((c, at)) if now.saturating_duration_since(at) < COOKIE_REFRESH_TIME => {
                mac(&c, &msg[..mac2_at])
            }
            _ => [0; MAC_LEN],
        };
        msg[mac2_at..mac2_at + MAC_LEN].copy_from_slice(&m2);
    }

    /// Takes the cookie from a reply sealed with `cookie_key` (the peer's), received at `now`.
    pub fn consume_reply(
        &mut self,
        now: Instant,
        cookie_key: &[u8; HASH_LEN],
        reply: &CookieReply<&[u8]>,
    ) -> Result<(), CookieError> {
        let m1 = self.last_mac1.ok_or(CookieError::Unexpected)?;
        let mut sealed = *reply.encrypted_cookie();
        if !xaead_open(cookie_key, reply.nonce(), &mut sealed, &m1) {
            return Err(CookieError::Authentication);
        }
        let mut c = [0u8; MAC_LEN];
        c.copy_from_slice(&sealed[..MAC_LEN]);
        self.cookie = Some((c, now));
        Ok(())
    }

    /// Whether a cookie younger than two minutes is held.
    pub fn has_cookie(&self, now: Instant) -> bool {
        self.cookie
            .is_some_and(|(_, at)| now.saturating_duration_since(at) < COOKIE_REFRESH_TIME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::hash;
    use crate::handshake::LABEL_COOKIE;
    use rand_core::OsRng;
    use std::time::Duration;

    const MAC1_AT: usize = 116;

    fn setup() -> (CookieChecker, [u8; 32], SocketAddr, [u8; 148]) {
        let key = hash(&[LABEL_COOKIE, &[5u8; 32]]);
        let src: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let mut msg = [0u8; 148];
        msg[0] = 1;
        (CookieChecker::new(key), key, src, msg)
    }

    #[test]
    fn a_cookie_makes_mac2_until_the_secret_rotates() {
        let (mut checker, key, src, mut msg) = setup();
        let t0 = Instant::now();
        let mut jar = CookieJar::new();
        let mac1_key = [3u8; 32];
        jar.write_macs(t0, &mac1_key, &mut msg, MAC1_AT);
        assert!(mac1_valid(&mac1_key, &msg, MAC1_AT));
        assert!(!mac1_valid(&[4u8; 32], &msg, MAC1_AT));
        assert_eq!(msg[MAC1_AT + 16..], [0u8; 16], "no cookie: mac2 is zero");
        assert!(!checker.mac2_valid(t0, &mut OsRng, src, &msg, MAC1_AT));

        let mac1: [u8; 16] = msg[MAC1_AT..MAC1_AT + 16].try_into().unwrap();
        let mut reply = [0u8; 64];
        checker.write_reply(t0, &mut OsRng, src, 42, &mac1, &mut reply);
        let view = CookieReply::new_checked(&reply[..]).unwrap();
        assert_eq!(view.receiver(), 42);
        jar.consume_reply(t0, &key, &view).unwrap();
        assert!(jar.has_cookie(t0));

        jar.write_macs(t0, &mac1_key, &mut msg, MAC1_AT);
        assert!(checker.mac2_valid(t0, &mut OsRng, src, &msg, MAC1_AT));
        let other: SocketAddr = "192.0.2.1:4001".parse().unwrap();
        assert!(!checker.mac2_valid(t0, &mut OsRng, other, &msg, MAC1_AT));
        // Two minutes later the secret is new: the old cookie no longer counts.
        let later = t0 + COOKIE_REFRESH_TIME;
        assert!(!checker.mac2_valid(later, &mut OsRng, src, &msg, MAC1_AT));
        assert!(!jar.has_cookie(later + Duration::from_millis(1)));
    }

    #[test]
    fn cookie_replies_are_checked() {
        let (mut checker, key, src, mut msg) = setup();
        let t0 = Instant::now();
        let mut jar = CookieJar::new();
        let mut reply = [0u8; 64];
        checker.write_reply(t0, &mut OsRng, src, 1, &[9; 16], &mut reply);
        let view = CookieReply::new_checked(&reply[..]).unwrap();
        assert_eq!(
            jar.consume_reply(t0, &key, &view),
            Err(CookieError::Unexpected)
        );
        // For a mac1 other than the one we sent.
        jar.write_macs(t0, &[3u8; 32], &mut msg, MAC1_AT);
        assert_eq!(
            jar.consume_reply(t0, &key, &view),
            Err(CookieError::Authentication)
        );
        assert!(!jar.has_cookie(t0));
    }
}
