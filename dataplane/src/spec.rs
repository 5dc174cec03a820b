//! What a node declares: its kind, name, next arcs and errors ([`NodeSpec`]), and the arc
//! index it sends packets along ([`Next`]). Plain values the graph and the counters read;
//! the [`Node`](crate::node::Node) trait is in `node.rs`.

/// How a node is scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// Polled once every loop pass with an empty frame (drivers' receive nodes, packet sources).
    Input,
    /// Run when a frame is pending for it.
    Internal,
}

/// A next arc of a node: an index into the node's declared next-node names, shifted by one,
/// because arc 0 ([`Next::DROP`]) always leads to `error-drop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Next(pub u16);

impl Next {
    /// The arc every node has to `error-drop`. Packets sent here should carry an error id (see
    /// [`Context::drop_packet`]).
    pub const DROP: Next = Next(0);

    /// The arc to the `i`-th name in [`NodeSpec::next_nodes`] (counting from 0).
    pub const fn declared(i: u16) -> Next {
        Next(i + 1)
    }
}

/// A named error (drop reason or notable event) a node counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorSpec {
    /// Short identifier, e.g. `bad-checksum`.
    pub name: String,
    /// What it means, for people reading `show errors`.
    pub description: String,
}

impl ErrorSpec {
    /// An error with a name and a description.
    pub fn new(name: &str, description: &str) -> ErrorSpec {
        ErrorSpec {
            name: name.to_string(),
            description: description.to_string(),
        }
    }
}

/// A node's declaration, read once when the graph is built.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// Unique name within the graph, e.g. `ip4-lookup`.
    pub name: String,
    /// Input or internal.
    pub kind: NodeKind,
    /// Names of the nodes its arcs lead to: `next_nodes[i]` is arc [`Next::declared`]`(i)`.
    pub next_nodes: Vec<String>,
    /// The errors it counts: error code `i` is `errors[i]`.
    pub errors: Vec<ErrorSpec>,
}

impl NodeSpec {
    /// An internal node with no arcs and no errors yet.
    pub fn internal(name: &str) -> NodeSpec {
        NodeSpec {
            name: name.to_string(),
            kind: NodeKind::Internal,
            next_nodes: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// An input node with no arcs and no errors yet.
    pub fn input(name: &str) -> NodeSpec {
        NodeSpec {
            kind: NodeKind::Input,
            ..NodeSpec::internal(name)
        }
    }

    /// Adds next arcs, in order.
    pub fn nexts(mut self, names: &[&str]) -> NodeSpec {
        self.next_nodes.extend(names.iter().map(|n| n.to_string()));
        self
    }

    /// Adds errors, in order of their codes.
    pub fn errors(mut self, errors: &[(&str, &str)]) -> NodeSpec {
        self.errors
            .extend(errors.iter().map(|(n, d)| ErrorSpec::new(n, d)));
        self
    }
}
