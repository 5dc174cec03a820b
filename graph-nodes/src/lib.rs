//! Quiver's graph nodes and the tables they read.
//!
//! Nodes are sans-IO: they see buffers and [`ForwardingState`], never sockets or drivers, so each
//! is tested and benchmarked without a NIC. The control side changes forwarding through
//! [`Forwarding`], which publishes new snapshots and updates the FIB in place.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod acl;
mod fast_map;
pub mod fib;
pub mod fib6;
pub mod forwarding;
pub mod index;
pub mod nodes;
pub mod state;
pub mod wireguard;

/// The wire views, now in the `net` crate every layer shares (kept here under the old path).
pub use net::wire;

pub use forwarding::{FibConfig, Forwarding, ForwardingError, L3Peer, LocalState, Path, Publisher};
pub use index::{AdjIndex, IfIndex, TableId};
pub use nodes::{add_forwarding_nodes, names, ForwardingHandles};
pub use state::{ForwardingState, InterfaceMode};
