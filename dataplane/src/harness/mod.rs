//! Nodes for tests and benchmarks of every part of Quiver: a packet source, a sink that counts
//! and checks what arrives, a pass-through node, a MAC-swap node, and
//! in-memory receive and transmit queues.

mod capture;
mod macswap;
mod passthrough;
mod sink;
mod source;

pub use capture::{CaptureTx, Captured, ScriptedRx};
pub use macswap::MacSwap;
pub use passthrough::PassThrough;
pub use sink::{PacketSink, SinkReport};
pub use source::{PacketSource, SourceConfig, SourceReport};

/// Reads the little-endian `u64` sequence number at `offset`, if the packet is long enough.
#[inline]
pub fn read_sequence(data: &[u8], offset: usize) -> Option<u64> {
    let bytes = data.get(offset..offset + 8)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}
