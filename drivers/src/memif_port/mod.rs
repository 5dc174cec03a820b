//! memif ports: Quiver's end of memif interfaces, master or slave, one queue pair per worker.
//!
//! The control side (sockets, handshakes, reconnects) runs on one thread, [`MemifControl`], that
//! serves every memif port: it listens on each master socket (one socket serves many interface
//! ids) and drives each slave. When a link comes up it detaches the connection's queues and hands
//! queue pair `w` to worker `w` through a hand-over slot; the worker picks it up on its next
//! poll with one atomic load (a lock is taken only when the slot changed).
//!
//! Copies: between two memif ports a frame is copied once, from one peer's buffer straight into
//! the other's. In ETHERNET mode a one-descriptor frame that fits a Quiver buffer is received
//! without a copy: the Quiver buffer is an external-payload buffer (see
//! `dataplane::buffer::ExternalSource`) naming the frame in the queue's
//! [`HeldFrames`](memif::queue::HeldFrames), and the frame's ring slot stays taken (slots go
//! back to the peer in ring order) until the buffer is freed or copied in. The peer's memory is
//! still never parsed in place: a node that reads or writes the bytes gets them copied into the
//! Quiver buffer first. A memif transmit copies an external frame from the other peer's memory
//! straight into its own peer's (`tx-peer-to-peer`); any other frame from the Quiver buffer.
//! Chained frames and IP mode (which adds a header) copy on receive (`rx-copied`).
//!
//! Cut-through: [`MemifPort::cut_through`] pairs a port's receive queue on one worker with
//! another memif port's transmit queue on the same worker; while the input node allows a bypass
//! (`dataplane::RxQueue::receive_or_bypass`: no trace, no capture) the receive queue forwards
//! straight to it ([`memif::RxQueue::forward_to`]): no Quiver buffer at all, counted as
//! `rx-cut-through`. The pairing is the driver's own: the engine only lets a queue bypass the
//! graph. The transmit queue then has two users on the worker, `interface-output` and the
//! paired receive queue; it lives in a `TxHome` each takes it from for one call.
//!
//! In IP mode the peer sends bare IP packets: a receive adds an Ethernet header (to the port's
//! MAC, ethertype from the IP version) so the graph sees what it always sees, and a transmit
//! leaves the Ethernet header out.
//!
//! Files: `config` (how a port is set up), `port` ([`MemifPort`]: queue pairs, counters, the
//! cut-through's start), `control` ([`MemifControl`]: the control thread), `worker` (one
//! worker's end of a port) with `slots` (hand-overs from the control thread) and `counters`,
//! `rx` / `into_buffers` / `held` (receive), `tx` (transmit), `cut_through`.

mod config;
mod control;
mod counters;
mod cut_through;
mod held;
mod into_buffers;
mod port;
mod rx;
mod slots;
mod tx;
mod worker;

pub use config::MemifPortConfig;
pub use control::MemifControl;
pub use port::{MemifPort, MemifStatus};
