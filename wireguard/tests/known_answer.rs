//! A handshake initiation compared byte for byte with one derived independently of this crate
//! (`tests/kat/initiation.py`: Python's hashlib and hmac for BLAKE2s, the `cryptography` package
//! for X25519 and ChaCha20-Poly1305, following the whitepaper's §5.4.2), and consumed by the
//! responder's half.

use rand_core::{CryptoRng, RngCore};
use wireguard::cookie::write_mac1;
use wireguard::crypto::hash;
use wireguard::handshake::{
    consume_initiation, create_initiation, LocalIdentity, PeerIdentity, Tai64N, LABEL_MAC1,
};
use wireguard::wire::{Initiation, INITIATION_LEN, INITIATION_MAC1};
use wireguard::{PresharedKey, PrivateKey};

const EXPECTED: &str = "010000004433221164b101b1d0be5a8704bd078f9895001fc03e8e9f9522f188dd128d98\
46d48466158a0e4ca242d151ca97ab90159a98b67e616625e68b4065d357376b6598e644ad7d678c0295d22de4cb43d5\
135581edd695c959bd027dbf8990523878e3ce7f8c67d519d93dae9208c7bca52aed4eb2c438f19567555efb461ac7ee\
00000000000000000000000000000000";

/// Hands out fixed bytes: the initiator's ephemeral private key.
struct Fixed([u8; 32]);

impl RngCore for Fixed {
    fn next_u32(&mut self) -> u32 {
        unreachable!("only fill_bytes is used")
    }
    fn next_u64(&mut self) -> u64 {
        unreachable!("only fill_bytes is used")
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        dest.copy_from_slice(&self.0[..dest.len()]);
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl CryptoRng for Fixed {}

fn bytes_from(first: u8) -> [u8; 32] {
    std::array::from_fn(|i| first + i as u8)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn initiation_matches_an_independent_derivation() {
    let initiator = LocalIdentity::new(PrivateKey::from_bytes(bytes_from(1)));
    let responder_key = PrivateKey::from_bytes(bytes_from(33));
    let responder = LocalIdentity::new(responder_key.clone());
    let peer = PeerIdentity::new(&initiator, responder.public_key(), PresharedKey::default());
    let timestamp = Tai64N(std::array::from_fn(|i| 0xA0 + i as u8));

    let mut out = [0u8; INITIATION_LEN];
    let mut msg = Initiation::new_init(&mut out[..]).unwrap();
    create_initiation(
        &initiator,
        &peer,
        0x1122_3344,
        timestamp,
        &mut Fixed(bytes_from(65)),
        &mut msg,
    )
    .unwrap();
    let mac1_key = hash(&[LABEL_MAC1, &responder.public_key().0]);
    write_mac1(&mac1_key, &mut out, INITIATION_MAC1);
    assert_eq!(out.to_vec(), unhex(EXPECTED));

    // The responder's half recovers who sent it and when.
    let back = PeerIdentity::new(&responder, initiator.public_key(), PresharedKey::default());
    let msg = Initiation::new_checked(&out[..]).unwrap();
    let (consumed, _) = consume_initiation(&responder, &msg, |k| {
        (*k == initiator.public_key()).then_some(&back)
    })
    .unwrap();
    assert_eq!(consumed.peer, initiator.public_key());
    assert_eq!(consumed.sender, 0x1122_3344);
    assert_eq!(consumed.timestamp, timestamp);
}
