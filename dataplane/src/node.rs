//! The node trait: what every graph node declares ([`NodeSpec`], in `spec.rs`) and implements.

use crate::buffer::WorkerBuffers;
use crate::frame::Frame;
use crate::graph::Context;

pub use crate::spec::{ErrorSpec, Next, NodeKind, NodeSpec};

/// A graph node.
///
/// `S` is the configuration snapshot the graph's nodes read (tables, cross-connects, ports): the
/// worker hands the current one to every call, and it never changes during a call.
///
/// A node's hot path must not allocate, lock, or panic on any packet content; every packet it is
/// given must leave through an arc or be freed, and every drop must be counted under an error.
///
/// Every node is [`Any`](std::any::Any): a worker command that changes a node between loop
/// passes (a port attached to `port-input`, a transmit queue to `interface-output`) finds it by
/// name and type with [`crate::Graph::node_mut`].
pub trait Node<S>: Send + std::any::Any {
    /// The node's name, arcs and errors.
    fn spec(&self) -> NodeSpec;

    /// Processes a frame.
    ///
    /// For an internal node `frame` holds the pending packets and the return value is ignored
    /// (the dispatcher counts `frame.len()`). For an input node `frame` is empty and the node
    /// returns how many packets it produced. The node may leave `frame` in any state: the
    /// dispatcher clears it afterwards (the buffers in it must have been enqueued or freed).
    fn process(&mut self, cx: &mut Context<'_, S>, frame: &mut Frame) -> usize;

    /// Gives back every buffer the node still holds (packets waiting for ARP, a partly sent
    /// burst …). Called once when the worker stops.
    fn release(&mut self, buffers: &mut WorkerBuffers) {
        let _ = buffers;
    }
}
