//! Quiver's ports. Every driver offers the same small surface, [`Port`]: a name, a MAC address,
//! link state, counters, and one receive/transmit queue pair per worker, implementing
//! [`dataplane::RxQueue`] and [`dataplane::TxQueue`]. Graph nodes never see the drivers.
//!
//! - [`memif_port`]: memif interfaces (master or slave) through the `memif` crate;
//! - [`af_packet`]: any kernel interface through `AF_PACKET` mmap rings;
//! - [`af_xdp`]: any kernel interface through `AF_XDP` sockets and Quiver's XDP program (also
//!   as a node uplink that takes only tunnel traffic);
//! - [`tap`]: a TAP device, attaching Quiver to the host stack.
//!
//! And what NSM's mechanisms need around them: [`netns`] (work inside another pod's network
//! namespace without moving Quiver's threads) and [`kernel_interface`] (NSM's KERNEL mechanism: a
//! veth pair into a namespace, configured over netlink).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod af_packet;
pub mod af_xdp;
mod coalesce;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod kernel_interface;
pub mod memif_port;
mod netlink;
pub mod netns;
pub mod port;
pub mod tap;
pub mod uplink;

pub use port::{LinkStatus, Port, PortError, PortStats, QueuePair};
