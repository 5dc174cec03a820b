//! Keys as plain data: 32 bytes each, written as `wg` writes them (standard base64, 44
//! characters). A private key derives its public key; a preshared key is optional (zero when
//! absent, as the protocol says).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand_core::CryptoRngCore;
use zeroize::Zeroize;

/// A key is not 32 bytes of base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a WireGuard key (32 bytes in base64)")]
pub struct KeyParseError;

fn decode(s: &str) -> Result<[u8; 32], KeyParseError> {
    let mut out = [0u8; 33];
    // 44 characters of base64 decode to 32 bytes; a 33-byte buffer catches longer input.
    match STANDARD.decode_slice(s.trim().as_bytes(), &mut out) {
        Ok(32) => Ok(out[..32].try_into().expect("32 bytes")),
        _ => Err(KeyParseError),
    }
}

/// A Curve25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(pub [u8; 32]);

impl PublicKey {
    /// The key in base64.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// Parses a base64 key.
    pub fn from_base64(s: &str) -> Result<Self, KeyParseError> {
        decode(s).map(Self)
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

/// A Curve25519 private key. Its bytes are wiped on drop and never printed.
#[derive(Clone)]
pub struct PrivateKey(x25519_dalek::StaticSecret);

impl PrivateKey {
    /// A new random key.
    pub fn generate(rng: &mut (impl CryptoRngCore + ?Sized)) -> Self {
        let mut b = [0u8; 32];
        rng.fill_bytes(&mut b);
        let k = Self::from_bytes(b);
        b.zeroize();
        k
    }

    /// A new random key from the operating system's generator (`getrandom`).
    pub fn random() -> Self {
        Self::generate(&mut rand_core::OsRng)
    }

    /// The key with these bytes (clamped when used, as X25519 does).
    pub fn from_bytes(b: [u8; 32]) -> Self {
        Self(x25519_dalek::StaticSecret::from(b))
    }

    /// Parses a base64 key as `wg genkey` writes it.
    pub fn from_base64(s: &str) -> Result<Self, KeyParseError> {
        decode(s).map(Self::from_bytes)
    }

    /// The key in base64 (for handing to `wg`).
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0.to_bytes())
    }

    /// Its public key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(x25519_dalek::PublicKey::from(&self.0).to_bytes())
    }

    /// X25519 with `peer`.
    pub(crate) fn dh(&self, peer: &PublicKey) -> [u8; 32] {
        self.0
            .diffie_hellman(&x25519_dalek::PublicKey::from(peer.0))
            .to_bytes()
    }
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrivateKey({:?})", self.public_key())
    }
}

/// A preshared key (all zeros when the peer has none).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PresharedKey(pub [u8; 32]);

impl PresharedKey {
    /// Parses a base64 key as `wg genpsk` writes it.
    pub fn from_base64(s: &str) -> Result<Self, KeyParseError> {
        decode(s).map(Self)
    }

    /// The key in base64.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }
}

impl Drop for PresharedKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl std::fmt::Debug for PresharedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PresharedKey(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip_and_rejects() {
        let k = PrivateKey::generate(&mut rand_core::OsRng);
        let s = k.to_base64();
        assert_eq!(s.len(), 44);
        let k2 = PrivateKey::from_base64(&s).unwrap();
        assert_eq!(k.public_key(), k2.public_key());
        let p = k.public_key();
        assert_eq!(PublicKey::from_base64(&p.to_base64()).unwrap(), p);
        assert!(PublicKey::from_base64("AAAA").is_err());
        assert!(PublicKey::from_base64(&format!("{s}AAAA")).is_err());
        assert!(PublicKey::from_base64("not base64 at all, not base64 at all, ......").is_err());
    }

    #[test]
    fn rfc7748_public_key() {
        // RFC 7748 §6.1: Alice's private key and public key.
        let private = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
        let public = hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
        assert_eq!(PrivateKey::from_bytes(private).public_key().0, public);
    }

    pub(crate) fn hex(s: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }
}
