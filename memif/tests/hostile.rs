//! Hostile peers built from a raw seqpacket socket and a memfd: every bad input is refused with a
//! reason or counted and dropped, nothing panics, and another interface on the same master socket
//! keeps passing traffic.

mod common;

// The parts, in hostile/ beside this file. A test crate's root resolves `mod` like a `mod.rs`
// (from tests/, not tests/hostile/), hence the paths.
#[path = "hostile/descriptors.rs"]
mod descriptors;
#[path = "hostile/forwarding.rs"]
mod forwarding;
#[path = "hostile/handshake.rs"]
mod handshake;
#[path = "hostile/harness.rs"]
mod harness;
#[path = "hostile/slave.rs"]
mod slave;
