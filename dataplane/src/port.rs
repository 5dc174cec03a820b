//! The small interface between drivers and the graph: a receive queue, a transmit queue, and the
//! input node that polls a receive queue. Drivers (DPDK, AF_PACKET, memif, TAP) implement the two
//! traits; nodes never see sockets or devices.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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

    /// Pairs this queue with `tx`, another port's transmit queue on the same worker, for
    /// [`RxQueue::forward`]: true when the driver can move frames between the two without
    /// Quiver buffers (two memif queues can), false (the default, nothing changed) otherwise.
    /// Replaces an earlier pairing.
    fn pair(&mut self, tx: &mut dyn TxQueue) -> bool {
        let _ = tx;
        false
    }

    /// Undoes [`RxQueue::pair`].
    fn unpair(&mut self) {}

    /// When paired: sends up to `max` of the frames that arrived straight to the paired
    /// transmit queue, bypassing the graph, and tells what it did. `None` when not paired or
    /// when the pair cannot forward now (the other side is down or gone): the caller then
    /// receives as usual, and the graph handles the frames.
    fn forward(&mut self, buffers: &mut WorkerBuffers, max: usize) -> Option<CutThrough> {
        let _ = (buffers, max);
        None
    }
}

/// What one [`RxQueue::forward`] burst did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CutThrough {
    /// Frames received and handed to the paired transmit queue.
    pub packets: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Whether frames the cut-through cannot take wait at the head of the queue: the caller
    /// receives them as usual.
    pub more: bool,
}

/// One transmit queue of a port, owned by one worker.
pub trait TxQueue: Send {
    /// Takes the first `n` of `packets` (returning `n`): it now owns them and frees them once
    /// sent. The caller keeps and frees the rest (a full ring).
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[u32]) -> usize;

    /// Whether [`TxQueue::transmit`] copies external-payload buffers from their source itself
    /// (see [`crate::buffer::ExternalSource`]); when false (the default) the caller
    /// materialises them first ([`WorkerBuffers::materialise`]).
    fn copies_external(&self) -> bool {
        false
    }

    /// The queue as `Any`, so that a driver's [`RxQueue::pair`] can recognise a queue of its
    /// own kind. `None` (the default): it pairs with nothing.
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
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

/// The name of the worker's one [`PortsInput`] node.
pub const PORT_INPUT: &str = "port-input";

/// Polls every receive queue attached to this worker (VPP's way: one input node per worker,
/// a list of queues), each burst stamped with its port's interface index and sent to the next
/// node. Queues are attached and detached at run time, between loop passes, by worker commands
/// (see [`crate::Dataplane::command`]); per-port receive counters are the ports' own.
///
/// A queue may also be cut through to another port's transmit queue
/// ([`PortsInput::cut_through`]): what it receives then goes straight there, bypassing the
/// graph (counted as this node's packets and by the caller's counter), except while this node
/// is traced or a capture is on, when the graph sees every packet as usual.
pub struct PortsInput {
    name: String,
    next: String,
    queues: Vec<Attached>,
    capture: crate::capture::CaptureTap,
}

/// A receive queue polled by [`PortsInput`].
struct Attached {
    interface: u32,
    queue: Box<dyn RxQueue>,
    cut_through: Option<CutThroughTo>,
}

/// Where an attached queue's frames go when they bypass the graph.
struct CutThroughTo {
    /// The interface whose transmit queue the receive queue is paired with.
    to: u32,
    /// Told (packets, bytes) of each burst.
    count: Box<dyn FnMut(u64, u64) + Send>,
    /// Cleared by the control side to end the cut-through: seen at the next burst, as a new
    /// configuration snapshot is (no command, no wait).
    on: Arc<AtomicBool>,
}

impl PortsInput {
    /// Room reserved for attached queues, so attaching rarely allocates.
    const RESERVED: usize = 64;

    /// An input node called `name` with no queue yet, leading to `next`.
    pub fn new(name: &str, next: &str) -> Self {
        PortsInput {
            name: name.into(),
            next: next.into(),
            queues: Vec::with_capacity(Self::RESERVED),
            capture: crate::capture::CaptureTap::new(0),
        }
    }

    /// The packet captures of received packets this node serves (see [`crate::capture`]).
    pub fn capture_mut(&mut self) -> &mut crate::capture::CaptureTap {
        &mut self.capture
    }

    /// Starts polling `queue` for interface `interface`; returns `false` (and drops `queue`)
    /// when that interface already has a queue here.
    pub fn attach(&mut self, interface: u32, queue: Box<dyn RxQueue>) -> bool {
        if self.queues.iter().any(|a| a.interface == interface) {
            return false;
        }
        self.queues.push(Attached {
            interface,
            queue,
            cut_through: None,
        });
        true
    }

    /// Stops polling interface `interface`'s queue and hands it back (to be dropped on this
    /// worker's thread), its cut-through ended.
    pub fn detach(&mut self, interface: u32) -> Option<Box<dyn RxQueue>> {
        let k = self.queues.iter().position(|a| a.interface == interface)?;
        let mut a = self.queues.remove(k);
        a.end_cut_through();
        Some(a.queue)
    }

    /// The interfaces whose queues are polled, in polling order.
    pub fn interfaces(&self) -> impl Iterator<Item = u32> + '_ {
        self.queues.iter().map(|a| a.interface)
    }

    /// Sends what interface `from` receives straight to `tx`, interface `to`'s transmit queue
    /// on this worker, without Quiver buffers or the graph, when the two drivers can
    /// ([`RxQueue::pair`]), for as long as `on` stays set (clearing it ends the cut-through
    /// from the next burst, without a worker command); `count` is told the packets and bytes
    /// of each burst. Returns whether the cut-through is on; when false nothing changed (an
    /// earlier cut-through of `from` stays). End it before `to`'s transmit queue goes away
    /// ([`PortsInput::end_cut_throughs_to`]).
    pub fn cut_through(
        &mut self,
        from: u32,
        to: u32,
        tx: &mut dyn TxQueue,
        count: Box<dyn FnMut(u64, u64) + Send>,
        on: Arc<AtomicBool>,
    ) -> bool {
        let Some(a) = self.queues.iter_mut().find(|a| a.interface == from) else {
            return false;
        };
        if !a.queue.pair(tx) {
            return false;
        }
        a.cut_through = Some(CutThroughTo { to, count, on });
        true
    }

    /// Ends every cut-through to interface `to` (its transmit queue is about to go).
    pub fn end_cut_throughs_to(&mut self, to: u32) {
        for a in &mut self.queues {
            if a.cut_through.as_ref().is_some_and(|c| c.to == to) {
                a.end_cut_through();
            }
        }
    }
}

impl Attached {
    /// Its frames go through the graph again.
    fn end_cut_through(&mut self) {
        self.cut_through = None;
        self.queue.unpair();
    }
}

impl<S> Node<S> for PortsInput {
    fn spec(&self) -> NodeSpec {
        NodeSpec::input(&self.name).nexts(&[&self.next]).errors(&[(
            "capture-dropped",
            "received packets a capture missed (its writer fell behind)",
        )])
    }

    fn process(&mut self, cx: &mut Context<'_, S>, frame: &mut Frame) -> usize {
        let mut produced = 0;
        // A trace or a capture sees every packet: nothing bypasses the graph meanwhile.
        let bypass = self.capture.is_empty() && !cx.traces_input();
        for a in &mut self.queues {
            if a.cut_through
                .as_ref()
                .is_some_and(|c| !c.on.load(Ordering::Acquire))
            {
                // Ended by the control side.
                a.end_cut_through();
            }
            let Attached {
                interface,
                queue,
                cut_through,
            } = a;
            if let Some(c) = cut_through.as_mut().filter(|_| bypass) {
                if let Some(f) = queue.forward(cx.buffers, crate::FRAME_SIZE) {
                    if f.packets > 0 {
                        (c.count)(f.packets as u64, f.bytes);
                        produced += f.packets;
                    }
                    if !f.more {
                        continue;
                    }
                }
            }
            let n = queue.receive(cx.buffers, frame.spare_mut());
            if n == 0 {
                continue;
            }
            frame.set_len(n);
            for &bi in frame.as_slice() {
                cx.buffers.meta_mut(bi).rx_interface = *interface;
            }
            if !self.capture.is_empty() {
                let missed = self.capture.rx(*interface, cx.buffers, frame.as_slice());
                if missed > 0 {
                    cx.count_error(0, missed);
                }
            }
            cx.trace_input(frame.as_slice());
            // Leaves `frame` empty: swapped for a spare one, or copied and cleared.
            cx.enqueue_frame(Next::declared(0), frame);
            produced += n;
        }
        produced
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

impl<Q: RxQueue + ?Sized> RxQueue for Box<Q> {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [u32]) -> usize {
        (**self).receive(buffers, out)
    }

    fn pair(&mut self, tx: &mut dyn TxQueue) -> bool {
        (**self).pair(tx)
    }

    fn unpair(&mut self) {
        (**self).unpair()
    }

    fn forward(&mut self, buffers: &mut WorkerBuffers, max: usize) -> Option<CutThrough> {
        (**self).forward(buffers, max)
    }
}

impl<Q: TxQueue + ?Sized> TxQueue for Box<Q> {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[u32]) -> usize {
        (**self).transmit(buffers, packets)
    }

    fn copies_external(&self) -> bool {
        (**self).copies_external()
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        (**self).as_any_mut()
    }
}
