//! Quiver's engine: the buffer pool, packet vectors (frames), the node graph and its
//! dispatcher, pinned workers, per-node runtime counters, packet trace, and configuration
//! snapshots that workers pick up without a barrier.
//!
//! Everything above it (graph nodes, drivers, the control plane) is written against these
//! types; see `ARCHITECTURE.md` at the repository root for how they fit together.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod buffer;
pub mod capture;
pub mod counters;
pub mod cycles;
pub mod declare;
pub mod frame;
pub mod graph;
pub mod harness;
mod index_type;
pub mod memory;
pub mod node;
pub mod observer;
pub mod offload;
pub mod port;
pub mod snapshot;
pub mod spec;
pub mod trace;
pub mod worker;

pub use buffer::{
    BufferIndex, BufferMeta, BufferPool, BufferPoolConfig, HugepagePolicy, WorkerBuffers,
};
pub use counters::{NodeRuntime, RuntimeSnapshot, WorkerRuntime};
pub use frame::{Frame, FRAME_SIZE};
pub use graph::{Context, Graph, GraphBuilder, GraphError, GraphHandle, ERROR_DROP};
pub use node::{ErrorSpec, Next, Node, NodeKind, NodeSpec};
pub use observer::DataplaneObserver;
pub use port::{
    PortInput, PortsInput, RxBurst, RxMode, RxModeCell, RxQueue, TxQueue, PORT_INPUT, SLEEP_AFTER,
};
pub use snapshot::{Epochs, Published, Reader};
pub use worker::{
    keep_off_worker_cores, CommandError, Dataplane, IdlePolicy, StartError, WorkerCommand,
    WorkerConfig, WorkerControl, WorkerError, WorkerInit, COMMAND_TIMEOUT,
};
