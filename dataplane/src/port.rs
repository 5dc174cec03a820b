//! The small interface between drivers and the graph: a receive queue, a transmit queue, and the
//! input node that polls a receive queue. Drivers (DPDK, AF_PACKET, memif, TAP) implement the two
//! traits; nodes never see sockets or devices.

use crate::buffer::WorkerBuffers;
use crate::frame::Frame;
use crate::graph::Context;
use crate::node::{Next, Node, NodeSpec};

/// One receive queue of a port, owned by one worker.
pub trait RxQueue: Send {
    /// Receives up to `out.len()` packets into buffers allocated from `buffers`, writes their
    /// indices to `out`, and returns how many. Each packet's `rx_interface` may be left unset:
    /// the input node stamps it.
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [u32]) -> usize;
}

/// One transmit queue of a port, owned by one worker.
pub trait TxQueue: Send {
    /// Takes the first `n` of `packets` (returning `n`): it now owns them and frees them once
    /// sent. The caller keeps and frees the rest (a full ring).
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[u32]) -> usize;
}

/// Polls one receive queue and sends what arrives to its next node (usually `ethernet-input`),
/// stamped with the port's interface index.
pub struct PortInput<Q> {
    name: String,
    next: String,
    interface: u32,
    queue: Q,
}

impl<Q: RxQueue> PortInput<Q> {
    /// An input node called `name` for `queue` of interface `interface`, leading to `next`.
    pub fn new(name: &str, next: &str, interface: u32, queue: Q) -> Self {
        PortInput {
            name: name.into(),
            next: next.into(),
            interface,
            queue,
        }
    }
}

impl<S, Q: RxQueue> Node<S> for PortInput<Q> {
    fn spec(&self) -> NodeSpec {
        NodeSpec::input(&self.name).nexts(&[&self.next])
    }

    fn process(&mut self, cx: &mut Context<'_, S>, frame: &mut Frame) -> usize {
        let n = self.queue.receive(cx.buffers, frame.spare_mut());
        if n == 0 {
            return 0;
        }
        frame.set_len(n);
        for &bi in frame.as_slice() {
            cx.buffers.meta_mut(bi).rx_interface = self.interface;
        }
        cx.trace_input(frame.as_slice());
        cx.enqueue_frame(Next::declared(0), frame);
        n
    }
}

impl<Q: RxQueue + ?Sized> RxQueue for Box<Q> {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [u32]) -> usize {
        (**self).receive(buffers, out)
    }
}

impl<Q: TxQueue + ?Sized> TxQueue for Box<Q> {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[u32]) -> usize {
        (**self).transmit(buffers, packets)
    }
}
