//! Packet buffers: a pre-allocated pool named by [`BufferIndex`], per-buffer metadata, and the
//! per-worker handle through which nodes allocate, free and read buffers.
//!
//! Layout of one buffer (its *stride*, a multiple of 64 bytes):
//! `[driver prefix][metadata: 64 B][headroom ≥ 128 B][data: 2048 B by default]`.

mod external;
mod index;
mod meta;
mod pool;
mod view;
mod worker;

pub use crate::memory::{HugepagePolicy, MemoryError};
pub use external::ExternalSource;
pub use index::BufferIndex;
pub use meta::{flags, BufferMeta, INVALID_INDEX};
pub use pool::{
    BufferLocator, BufferPool, BufferPoolConfig, PoolError, PoolExhausted, MIN_HEADROOM,
};
pub use view::BufferView;
pub use worker::WorkerBuffers;
