//! WireGuard's protocol for Quiver (issue 23, first milestone): the wire format, the
//! Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s handshake, MAC1/MAC2 and cookies, transport
//! encryption in place, the replay window, the message and time limits, and the timers, as
//! pure state machines driven by their caller. See `README.md` for what exists and what is left.
//!
//! | module | what it holds |
//! |---|---|
//! | [`wire`] | checked views of the four messages |
//! | [`allowed_ips`] | a peer's allowed IPs (cryptokey routing) |
//! | [`keys`] | public, private and preshared keys; base64 as `wg` writes them |
//! | [`crypto`] | HASH, MAC, HMAC, KDF1..3, AEAD, XAEAD |
//! | [`handshake`] | both halves of the Noise IKpsk2 handshake, TAI64N |
//! | [`cookie`] | mac1, mac2, cookie replies, the rotating cookie secret |
//! | [`transport`] | session keys as plain data, the sending counter, seal/open in place |
//! | [`replay`] | the RFC 6479 replay window (8,128 messages) |
//! | [`timers`] | the protocol's constants and a peer's timers (`poll(now)`) |
//! | [`peer`], [`device`] | peers and an endpoint that ties it all together, owning no socket |
//!
//! Layering for the data path: a worker needs only a [`transport::TransportKeys`] (plain data,
//! read-only in a configuration snapshot), a [`transport::SendCounter`] (atomic) and a
//! [`replay::ReplayWindow`] per receiving session; handshakes, cookies and timers run on the
//! control side ([`device::Device`]).

pub mod allowed_ips;
pub mod cookie;
pub mod crypto;
pub mod device;
pub mod handshake;
pub mod keys;
pub mod peer;
pub mod replay;
pub mod timers;
pub mod transport;
pub mod wire;

pub use device::{Device, DeviceError, PeerId, Received};
pub use keys::{PresharedKey, PrivateKey, PublicKey};
