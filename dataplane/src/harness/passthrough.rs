//! A node that hands every frame on unchanged.

use crate::frame::Frame;
use crate::graph::Context;
use crate::node::{Next, Node, NodeSpec};

/// Forwards whole frames to its one next node (by handing the frame over, not copying it).
pub struct PassThrough {
    name: String,
    next: String,
}

impl PassThrough {
    /// A pass-through node called `name` leading to `next`.
    pub fn new(name: &str, next: &str) -> PassThrough {
        PassThrough {
            name: name.into(),
            next: next.into(),
        }
    }
}

impl<S> Node<S> for PassThrough {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(&self.name).nexts(&[&self.next])
    }

    fn process(&mut self, cx: &mut Context<'_, S>, frame: &mut Frame) -> usize {
        let n = frame.len();
        cx.enqueue_frame(Next::declared(0), frame);
        n
    }
}
