//! memif: shared-memory packet interfaces that interoperate with DPDK's `net_memif` PMD and
//! libmemif (protocol version 2.0, copy mode).
//!
//! - [`Master`] listens on one control socket and serves many interfaces by id.
//! - [`Slave`] connects to a master, owns the shared memory and reconnects when the master
//!   returns.
//! - Both hand out an [`Interface`] with [`Interface::rx_burst`] / [`Interface::tx_burst`], link
//!   state, counters and the receive eventfds for interrupt mode.
//!
//! The wire contract is `shared/specs/memif.md`. Everything the peer can write (ring indices,
//! descriptors, packet bytes) is read through atomics, volatile reads into private copies, or
//! bounds-checked copies; bad descriptors are counted and dropped, protocol errors disconnect only
//! the interface concerned. The control side is non-blocking: call `poll()` from an event loop.

#![deny(unsafe_op_in_unsafe_fn)]

mod counters;
mod handshake;
pub mod interface;
pub mod master;
pub mod msg;
pub mod queue;
mod refusal;
pub mod region;
pub mod ring;
pub mod slave;
pub mod socket;

pub use counters::Counters;
pub use interface::{DetachedQueues, Interface, InterfaceConfig, LinkState, Negotiated};
pub use master::{Master, MasterConfig};
pub use msg::Mode;
pub use queue::{Forwarded, HeldRx, PeerFrame, RxQueue, RxSink, TxQueue, TxReport, TxSource};
pub use refusal::{Refusal, RefusalKind, Refusals};
pub use ring::{Role, MAX_FRAME};
pub use slave::Slave;
pub use socket::SocketAddress;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed.
    #[error("system error: {0}")]
    Sys(#[from] nix::Error),
    /// The peer broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Invalid local configuration.
    #[error("configuration error: {0}")]
    Config(String),
}
