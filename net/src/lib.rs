//! Quiver's vocabulary at the bottom, shared by every crate that reads or writes packets or
//! names network things: checked wire views and checksums ([`wire`]), MAC addresses
//! ([`mac`]). It depends on nothing of Quiver's, so the engine (`dataplane`), the drivers, the
//! nodes, the configuration and the control crates all speak it, and a header is read one way
//! everywhere.

#![forbid(unsafe_code)]

pub mod mac;
pub mod wire;

pub use mac::{Mac, MacError};
