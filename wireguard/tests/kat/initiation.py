#!/usr/bin/env python3
"""Known-answer values for wireguard/src/handshake.rs, derived independently of the crate:
Python's hashlib (BLAKE2s), hmac, and the `cryptography` package (X25519, ChaCha20-Poly1305),
following the WireGuard whitepaper's §5.4.2 step by step. Prints the initiation as hex.

Inputs (also in the Rust test): initiator static private key = bytes 1..=32, responder static
private key = bytes 33..=64, initiator ephemeral private key = bytes 65..=96, sender index
0x11223344, timestamp = TAI64N bytes 0xA0..=0xAB, no preshared key, no cookie (mac2 zero).
"""
import hashlib
import hmac
import struct

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives import serialization


def HASH(*parts):
    return hashlib.blake2s(b"".join(parts)).digest()


def MAC(key, data):
    return hashlib.blake2s(data, key=key, digest_size=16).digest()


def HMAC(key, data):
    return hmac.new(key, data, hashlib.blake2s).digest()


def KDF(n, key, data):
    t0 = HMAC(key, data)
    out, prev = [], b""
    for i in range(1, n + 1):
        prev = HMAC(t0, prev + bytes([i]))
        out.append(prev)
    return out


def AEAD(key, counter, plain, ad):
    return ChaCha20Poly1305(key).encrypt(b"\0" * 4 + struct.pack("<Q", counter), plain, ad)


def raw_pub(priv):
    return priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def private(first):
    return X25519PrivateKey.from_private_bytes(bytes(range(first, first + 32)))


s_i, s_r, e_i = private(1), private(33), private(65)
S_i, S_r, E_i = raw_pub(s_i), raw_pub(s_r), raw_pub(e_i)

C = HASH(b"Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s")
H = HASH(C, b"WireGuard v1 zx2c4 Jason@zx2c4.com")
H = HASH(H, S_r)
C = KDF(1, C, E_i)[0]
H = HASH(H, E_i)
C, k = KDF(2, C, e_i.exchange(s_r.public_key()))
enc_static = AEAD(k, 0, S_i, H)
H = HASH(H, enc_static)
C, k = KDF(2, C, s_i.exchange(s_r.public_key()))
enc_ts = AEAD(k, 0, bytes(range(0xA0, 0xAC)), H)
H = HASH(H, enc_ts)

msg = bytes([1, 0, 0, 0]) + struct.pack("<I", 0x11223344) + E_i + enc_static + enc_ts
msg += MAC(HASH(b"mac1----", S_r), msg)
msg += b"\0" * 16
assert len(msg) == 148
print(msg.hex())
