//! [`DataplaneObserver`]: what the control side reads from the running workers (their counters
//! and packet trace) without holding the [`crate::worker::Dataplane`] itself, so that readers
//! (`show runtime`, metrics, trace) never wait for whoever owns the configuration.

use crate::counters::RuntimeSnapshot;
use crate::graph::GraphHandle;
use crate::trace::{TraceArm, TracedPacket};

/// A cheap, cloneable, thread-safe handle on every worker's counters and trace.
#[derive(Clone)]
pub struct DataplaneObserver {
    graphs: Vec<GraphHandle>,
    input_nodes: Vec<String>,
}

/// A trace was asked of a node that is not an input node.
#[derive(Debug, thiserror::Error)]
#[error("no input node named `{0}` (input nodes: {1})")]
pub struct UnknownInputNode(String, String);

impl DataplaneObserver {
    pub(crate) fn new(graphs: Vec<GraphHandle>, input_nodes: Vec<String>) -> Self {
        DataplaneObserver {
            graphs,
            input_nodes,
        }
    }

    /// Every worker's counters.
    pub fn runtime(&self) -> RuntimeSnapshot {
        RuntimeSnapshot {
            tsc_hz: crate::cycles::tsc_hz(),
            workers: self.graphs.iter().map(|g| g.runtime()).collect(),
        }
    }

    /// Zeroes every worker's counters (as later snapshots see them).
    pub fn clear_counters(&self) {
        self.graphs.iter().for_each(|g| g.clear_counters());
    }

    /// Traces the next `count` packets (in total, over all workers) that the input node `node`
    /// produces.
    pub fn trace_add(&self, node: &str, count: u32) -> Result<(), UnknownInputNode> {
        if !self.input_nodes.iter().any(|n| n == node) {
            return Err(UnknownInputNode(node.into(), self.input_nodes.join(", ")));
        }
        let arm = TraceArm::new(node, count);
        self.graphs
            .iter()
            .for_each(|g| g.trace_arm(Some(arm.clone())));
        Ok(())
    }

    /// Every traced packet so far, worker by worker.
    pub fn trace_show(&self) -> Vec<TracedPacket> {
        self.graphs.iter().flat_map(|g| g.trace_packets()).collect()
    }

    /// Forgets trace records and stops tracing.
    pub fn trace_clear(&self) {
        self.graphs.iter().for_each(|g| g.trace_clear());
    }
}
