//! `error-drop`: where dropped packets end. Counts each under the error its node set, frees it.

use crate::frame::Frame;
use crate::graph::Context;
use crate::node::{Node, NodeSpec};

/// The name of the drop node every graph has; arc [`crate::Next::DROP`] of every node leads here.
pub const ERROR_DROP: &str = "error-drop";

pub(crate) struct ErrorDrop;

impl<S> Node<S> for ErrorDrop {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(ERROR_DROP)
            .errors(&[("no-reason", "packets dropped without an error reason")])
    }

    fn process(&mut self, cx: &mut Context<'_, S>, frame: &mut Frame) -> usize {
        for &bi in frame.as_slice() {
            let error = cx.buffers.meta(bi).error;
            cx.count_error_id(error);
        }
        cx.buffers.free(frame.as_slice());
        frame.len()
    }
}
