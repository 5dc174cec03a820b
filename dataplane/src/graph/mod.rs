//! The node graph of one worker: building it (arc names resolved to indices), and running it
//! (input nodes polled every pass, internal nodes breadth-first while frames are pending).

mod builder;
mod context;
mod dispatch;
mod error_drop;
mod runtime;

pub use builder::{GraphBuilder, GraphError};
pub use context::Context;
pub use dispatch::Graph;
pub use error_drop::ERROR_DROP;
pub use runtime::GraphHandle;
