//! The primitives WireGuard is built from, named as the protocol names them: `HASH`, `MAC`,
//! `HMAC`, `KDF1..3`, `AEAD` and `XAEAD` (whitepaper §5.4): RustCrypto's BLAKE2s and HMAC,
//! ring's ChaCha20-Poly1305 for `AEAD` (every transport packet: ring's vectorised code seals
//! 1,440 bytes in ~2.8x fewer clocks than RustCrypto's on this machine's CPUs) and RustCrypto's
//! XChaCha20-Poly1305 for `XAEAD` (cookie replies only; ring has none). Nothing here
//! allocates.

use blake2::digest::{FixedOutput, KeyInit, Mac};
use blake2::{Blake2s256, Blake2sMac, Digest};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{Key, Tag, XChaCha20Poly1305, XNonce};
use hmac::SimpleHmac;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};

/// Length of a Poly1305 tag.
pub const TAG_LEN: usize = 16;
/// Length of a `HASH` output and of every symmetric key.
pub const HASH_LEN: usize = 32;
/// Length of a `MAC` output (mac1, mac2, cookies).
pub const MAC_LEN: usize = 16;

/// `HASH(a || b || ...)`: BLAKE2s-256 of the concatenated parts.
pub fn hash(parts: &[&[u8]]) -> [u8; HASH_LEN] {
    let mut h = Blake2s256::new();
    for p in parts {
        Digest::update(&mut h, p);
    }
    h.finalize().into()
}

/// `MAC(key, input)`: keyed BLAKE2s with a 16-byte output.
pub fn mac(key: &[u8], input: &[u8]) -> [u8; MAC_LEN] {
    // A key is at most 32 bytes here (a HASH or a 16-byte cookie), which BLAKE2s accepts.
    let mut m = <Blake2sMac<blake2::digest::consts::U16> as KeyInit>::new_from_slice(key)
        .expect("BLAKE2s keys of up to 32 bytes are valid");
    Mac::update(&mut m, input);
    m.finalize_fixed().into()
}

/// `HMAC(key, a || b || ...)` with BLAKE2s-256 as the hash.
fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; HASH_LEN] {
    let mut m = <SimpleHmac<Blake2s256> as KeyInit>::new_from_slice(key)
        .expect("HMAC accepts keys of any length");
    for p in parts {
        Mac::update(&mut m, p);
    }
    m.finalize_fixed().into()
}

/// `KDF_n(key, input)` for n = 1..3: HKDF with HMAC-BLAKE2s. Returns `[τ1, τ2, τ3]`; callers use
/// the first n.
fn kdf(key: &[u8; HASH_LEN], input: &[u8], n: usize) -> [[u8; HASH_LEN]; 3] {
    let prk = hmac(key, &[input]);
    let mut out = [[0u8; HASH_LEN]; 3];
    let mut prev: Option<[u8; HASH_LEN]> = None;
    for (i, slot) in out.iter_mut().enumerate().take(n) {
        let counter = [i as u8 + 1];
        let t = match prev {
            None => hmac(&prk, &[&counter]),
            Some(p) => hmac(&prk, &[&p, &counter]),
        };
        *slot = t;
        prev = Some(t);
    }
    out
}

/// `KDF1(key, input)`.
pub fn kdf1(key: &[u8; HASH_LEN], input: &[u8]) -> [u8; HASH_LEN] {
    kdf(key, input, 1)[0]
}

/// `KDF2(key, input)`.
pub fn kdf2(key: &[u8; HASH_LEN], input: &[u8]) -> ([u8; HASH_LEN], [u8; HASH_LEN]) {
    let [a, b, _] = kdf(key, input, 2);
    (a, b)
}

/// `KDF3(key, input)`.
pub fn kdf3(
    key: &[u8; HASH_LEN],
    input: &[u8],
) -> ([u8; HASH_LEN], [u8; HASH_LEN], [u8; HASH_LEN]) {
    let [a, b, c] = kdf(key, input, 3);
    (a, b, c)
}

/// The 96-bit ChaCha20-Poly1305 nonce for a 64-bit counter: 32 zero bits, then the counter
/// little-endian.
fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

/// ChaCha20-Poly1305 with `key` (a key of the right length always makes one).
fn chacha(key: &[u8; HASH_LEN]) -> LessSafeKey {
    LessSafeKey::new(
        UnboundKey::new(&CHACHA20_POLY1305, key).expect("ChaCha20-Poly1305 takes 32-byte keys"),
    )
}

/// `AEAD(key, counter, plain, aad)` in place: encrypts `buf[..len - 16]` and writes the tag into
/// its last 16 bytes. `buf` must be at least 16 bytes (callers size it from the wire layout).
pub fn aead_seal(key: &[u8; HASH_LEN], counter: u64, buf: &mut [u8], aad: &[u8]) {
    let (text, tag) = buf.split_at_mut(buf.len() - TAG_LEN);
    let t = chacha(key)
        .seal_in_place_separate_tag(nonce(counter), Aad::from(aad), text)
        .expect("ChaCha20-Poly1305 encrypts any message shorter than 256 GiB");
    tag.copy_from_slice(t.as_ref());
}

/// The inverse of [`aead_seal`]: verifies the tag in `buf`'s last 16 bytes and decrypts the rest in
/// place. On failure `false` is returned and the text is overwritten (ring zeroes what it
/// decrypted, so nothing unauthenticated is left to use): callers drop the message.
#[must_use]
pub fn aead_open(key: &[u8; HASH_LEN], counter: u64, buf: &mut [u8], aad: &[u8]) -> bool {
    if buf.len() < TAG_LEN {
        return false;
    }
    let (text, tag) = buf.split_at_mut(buf.len() - TAG_LEN);
    let tag: [u8; TAG_LEN] = (&*tag).try_into().expect("split at TAG_LEN");
    chacha(key)
        .open_in_place_separate_tag(
            nonce(counter),
            Aad::from(aad),
            ring::aead::Tag::from(tag),
            text,
            0..,
        )
        .is_ok()
}

/// `XAEAD(key, nonce, plain, aad)` in place, as [`aead_seal`] with a 24-byte nonce.
pub fn xaead_seal(key: &[u8; HASH_LEN], nonce: &[u8; 24], buf: &mut [u8], aad: &[u8]) {
    let (text, tag) = buf.split_at_mut(buf.len() - TAG_LEN);
    let cipher = XChaCha20Poly1305::new(Key::from_slice(key));
    let t = cipher
        .encrypt_in_place_detached(XNonce::from_slice(nonce), aad, text)
        .expect("XChaCha20-Poly1305 encrypts any short message");
    tag.copy_from_slice(&t);
}

/// The inverse of [`xaead_seal`].
#[must_use]
pub fn xaead_open(key: &[u8; HASH_LEN], nonce: &[u8; 24], buf: &mut [u8], aad: &[u8]) -> bool {
    if buf.len() < TAG_LEN {
        return false;
    }
    let (text, tag) = buf.split_at_mut(buf.len() - TAG_LEN);
    let cipher = XChaCha20Poly1305::new(Key::from_slice(key));
    cipher
        .decrypt_in_place_detached(XNonce::from_slice(nonce), aad, text, Tag::from_slice(tag))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blake2s_of_abc_is_rfc7693_appendix_b() {
        // RFC 7693 Appendix B: BLAKE2s-256("abc").
        let h = hash(&[b"abc"]);
        assert_eq!(
            h[..8],
            [0x50, 0x8C, 0x5E, 0x8C, 0x32, 0x7C, 0x14, 0xE2],
            "{h:02x?}"
        );
    }

    #[test]
    fn kdf_outputs_chain() {
        let key = [7u8; 32];
        let (a, b) = kdf2(&key, b"x");
        let (c, d, e) = kdf3(&key, b"x");
        assert_eq!((a, b), (c, d));
        assert_eq!(kdf1(&key, b"x"), a);
        assert_ne!(d, e);
    }

    #[test]
    fn aead_round_trip_and_tamper() {
        let key = [1u8; 32];
        let mut buf = [0u8; 40];
        buf[..24].copy_from_slice(b"twenty-four bytes of txt");
        aead_seal(&key, 9, &mut buf, b"ad");
        let sealed = buf;
        assert!(aead_open(&key, 9, &mut buf, b"ad"));
        assert_eq!(&buf[..24], b"twenty-four bytes of txt");
        let mut bad = sealed;
        bad[3] ^= 1;
        assert!(!aead_open(&key, 9, &mut bad, b"ad"));
        let mut bad = sealed;
        assert!(!aead_open(&key, 10, &mut bad, b"ad"));
    }
}
