//! Building a graph: collecting nodes, resolving next-arc names, laying out error counters.

use std::collections::HashMap;

use super::dispatch::Graph;
use super::error_drop::{ErrorDrop, ERROR_DROP};
use super::runtime::{GraphShared, Runtime};
use crate::node::{Node, NodeKind, NodeSpec};

/// Why a graph could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// Two nodes share a name.
    #[error("two nodes are named `{0}`")]
    DuplicateNode(String),
    /// A node names a next node that is not in the graph.
    #[error("node `{node}` has a next arc to `{next}`, which is not in the graph")]
    UnknownNext {
        /// The node declaring the arc.
        node: String,
        /// The missing name.
        next: String,
    },
    /// A node has an arc to an input node (input nodes are polled, never given frames).
    #[error("node `{node}` has a next arc to input node `{next}`")]
    ArcToInput {
        /// The node declaring the arc.
        node: String,
        /// The input node.
        next: String,
    },
    /// More arcs or error counters than the compact indices hold.
    #[error("graph too large: {0}")]
    TooLarge(String),
}

/// Collects nodes, then builds a [`Graph`].
pub struct GraphBuilder<S> {
    nodes: Vec<Box<dyn Node<S>>>,
}

impl<S: 'static> Default for GraphBuilder<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: 'static> GraphBuilder<S> {
    /// A builder holding only `error-drop`.
    pub fn new() -> GraphBuilder<S> {
        GraphBuilder {
            nodes: vec![Box::new(ErrorDrop)],
        }
    }

    /// Adds a node.
    pub fn add(&mut self, node: impl Node<S> + 'static) -> &mut Self {
        self.nodes.push(Box::new(node));
        self
    }

    /// Adds a boxed node.
    pub fn add_boxed(&mut self, node: Box<dyn Node<S>>) -> &mut Self {
        self.nodes.push(node);
        self
    }

    /// Resolves every arc by name and lays out counters.
    pub fn build(self) -> Result<Graph<S>, GraphError> {
        let specs: Vec<NodeSpec> = self.nodes.iter().map(|n| n.spec()).collect();
        let mut index = HashMap::new();
        for (i, s) in specs.iter().enumerate() {
            if index.insert(s.name.clone(), i as u32).is_some() {
                return Err(GraphError::DuplicateNode(s.name.clone()));
            }
        }
        debug_assert_eq!(specs[0].name, ERROR_DROP);

        let mut arcs = Vec::new();
        let mut arc_range = Vec::new();
        let mut error_base = Vec::new();
        let mut error_nodes = Vec::new();
        let mut error_specs = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            if s.next_nodes.len() >= u16::MAX as usize {
                return Err(GraphError::TooLarge(format!(
                    "node `{}` has too many arcs",
                    s.name
                )));
            }
            arc_range.push((arcs.len() as u32, s.next_nodes.len() as u16 + 1));
            arcs.push(0); // Next::DROP
            for next in &s.next_nodes {
                let &t = index.get(next).ok_or_else(|| GraphError::UnknownNext {
                    node: s.name.clone(),
                    next: next.clone(),
                })?;
                if specs[t as usize].kind == NodeKind::Input {
                    return Err(GraphError::ArcToInput {
                        node: s.name.clone(),
                        next: next.clone(),
                    });
                }
                arcs.push(t);
            }
            let base = u16::try_from(error_specs.len())
                .map_err(|_| GraphError::TooLarge("more than 65535 error counters".into()))?;
            error_base.push(base);
            for e in &s.errors {
                error_nodes.push(i as u32);
                error_specs.push(e.clone());
            }
        }
        if error_specs.len() > u16::MAX as usize {
            return Err(GraphError::TooLarge(
                "more than 65535 error counters".into(),
            ));
        }
        let inputs = specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.kind == NodeKind::Input)
            .map(|(i, _)| i as u32)
            .collect();
        let shared = GraphShared::new(&specs, error_nodes, error_specs);
        let rt = Runtime::new(specs.len(), arcs, arc_range, error_base, inputs);
        Ok(Graph::from_parts(self.nodes, rt, shared))
    }
}
