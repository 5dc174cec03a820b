//! The small interface between drivers and the graph: a receive queue, a transmit queue, and the
//! input node that polls a receive queue. Drivers (DPDK, AF_PACKET, memif, TAP) implement the two
//! traits; nodes never see sockets or devices.

use crate::BufferIndex;
use std::os::fd::RawFd;

use crate::buffer::WorkerBuffers;
use crate::frame::Frame;
use crate::graph::Context;
use crate::node::{Next, Node, NodeSpec};

mod mode;
mod sleep;

pub use mode::{RxMode, RxModeCell};
use sleep::Sleepers;
pub use sleep::CHECK_INTERVAL_US;

/// One receive queue of a port, owned by one worker.
pub trait RxQueue: Send {
    /// Receives up to `out.len()` packets into buffers allocated from `buffers`, writes their
    /// indices to `out`, and returns how many. Each packet's `rx_interface` may be left unset:
    /// the input node stamps it.
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize;

    /// [`RxQueue::receive`], except that the queue may first hand frames on by a way of its
    /// own that bypasses the graph (a driver's shortcut, say a cut-through between two of its
    /// ports), at most `out.len()` of them. The input node calls this instead of `receive`
    /// only while nothing needs to see every packet (no trace of the input node, no capture),
    /// so such a shortcut steps aside for those on its own. The default bypasses nothing.
    #[inline]
    fn receive_or_bypass(
        &mut self,
        buffers: &mut WorkerBuffers,
        out: &mut [BufferIndex],
    ) -> RxBurst {
        RxBurst {
            received: self.receive(buffers, out),
            bypassed: 0,
        }
    }

    /// A descriptor that becomes readable when the queue has frames to receive, if it has one
    /// (a socket, a TAP queue): an input node may stop polling the queue after it has been
    /// idle for [`SLEEP_AFTER`] polls and wait on this instead, until it has traffic again.
    /// The default has none: the queue is always polled.
    fn wake_fd(&self) -> Option<RawFd> {
        None
    }

    /// Told by the input node how it serves the queue from now on: [`RxMode::Interrupt`] when
    /// the queue goes to sleep on its [`RxQueue::wake_fd`], [`RxMode::Polling`] when it is
    /// attached and when it is polled again. Called on the worker's thread, only when the mode
    /// changes (never per poll). A driver publishes it for the control side, say in an
    /// [`RxModeCell`] its port reads for `show interfaces`; the default ignores it.
    fn set_mode(&mut self, mode: RxMode) {
        let _ = mode;
    }
}

/// Empty polls in a row after which a queue with a [`RxQueue::wake_fd`] stops being polled.
pub const SLEEP_AFTER: u32 = 10_000;

/// What one [`RxQueue::receive_or_bypass`] burst did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RxBurst {
    /// Packets received into buffers, their indices written to `out`, for the graph.
    pub received: usize,
    /// Frames the queue handed on itself, bypassing the graph (its driver counts them).
    pub bypassed: usize,
}

/// One transmit queue of a port, owned by one worker.
pub trait TxQueue: Send {
    /// Takes the first `n` of `packets` (returning `n`): it now owns them and frees them once
    /// sent. The caller keeps and frees the rest (a full ring).
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize;

    /// Whether [`TxQueue::transmit`] copies external-payload buffers from their source itself
    /// (see [`crate::buffer::ExternalSource`]); when false (the default) the caller
    /// materialises them first ([`WorkerBuffers::materialise`]).
    fn copies_external(&self) -> bool {
        false
    }

    /// Whether [`TxQueue::transmit`] hands checksum and segmentation work left on a packet
    /// ([`crate::offload`]) to its device, which finishes it. When false (the default) the
    /// caller does that work in software first.
    fn accepts_offload(&self) -> bool {
        false
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

impl<S, Q: RxQueue + 'static> Node<S> for PortInput<Q> {
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
/// While this node is not traced and no capture is on, it lets each queue bypass the graph
/// ([`RxQueue::receive_or_bypass`]): frames a driver hands on itself count as this node's
/// packets; the rest go to the graph as usual. While it is traced or a capture is on, the graph
/// sees every packet.
///
/// A queue with a [`RxQueue::wake_fd`] that stays empty for [`SLEEP_AFTER`] polls in a row goes
/// to sleep: it leaves the poll list and its descriptor joins the node's epoll set, asked at
/// most every [`CHECK_INTERVAL_US`] µs; when it is readable the queue is polled again. Idle
/// ports then cost a pass nothing but that one check. Each such queue is told its mode as it
/// changes ([`RxQueue::set_mode`]), so that its driver can show it.
pub struct PortsInput {
    name: String,
    next: String,
    queues: Vec<Attached>,
    /// Queues not polled until their descriptor is readable.
    asleep: Vec<Attached>,
    sleepers: Sleepers,
    capture: crate::capture::CaptureTap,
}

/// A receive queue polled by [`PortsInput`].
struct Attached {
    interface: u32,
    queue: Box<dyn RxQueue>,
    /// Its wake descriptor, if it has one.
    fd: Option<RawFd>,
    /// Empty polls in a row.
    empty: u32,
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
            asleep: Vec::with_capacity(Self::RESERVED),
            sleepers: Sleepers::new(),
            capture: crate::capture::CaptureTap::new(0),
        }
    }

    /// The packet captures of received packets this node serves (see [`crate::capture`]).
    pub fn capture_mut(&mut self) -> &mut crate::capture::CaptureTap {
        &mut self.capture
    }

    /// Starts polling `queue` for interface `interface`; returns `false` (and drops `queue`)
    /// when that interface already has a queue here.
    pub fn attach(&mut self, interface: u32, mut queue: Box<dyn RxQueue>) -> bool {
        if self.interfaces().any(|i| i == interface) {
            return false;
        }
        let fd = queue.wake_fd();
        if fd.is_some() {
            queue.set_mode(RxMode::Polling);
        }
        self.queues.push(Attached {
            interface,
            queue,
            fd,
            empty: 0,
        });
        true
    }

    /// Stops polling interface `interface`'s queue and hands it back (to be dropped on this
    /// worker's thread).
    pub fn detach(&mut self, interface: u32) -> Option<Box<dyn RxQueue>> {
        if let Some(k) = self.queues.iter().position(|a| a.interface == interface) {
            return Some(self.queues.remove(k).queue);
        }
        let k = self.asleep.iter().position(|a| a.interface == interface)?;
        let mut a = self.asleep.swap_remove(k);
        if let Some(fd) = a.fd {
            self.sleepers.remove(fd);
        }
        a.queue.set_mode(RxMode::Polling);
        Some(a.queue)
    }

    /// The interfaces whose queues are attached: those polled, in polling order, then those
    /// asleep.
    pub fn interfaces(&self) -> impl Iterator<Item = u32> + '_ {
        self.queues.iter().chain(&self.asleep).map(|a| a.interface)
    }

    /// The interfaces whose queues are asleep (idle, waited on rather than polled).
    pub fn asleep(&self) -> impl Iterator<Item = u32> + '_ {
        self.asleep.iter().map(|a| a.interface)
    }

    /// Polls again the sleeping queues whose descriptors are readable; returns how many.
    #[cold]
    fn wake_ready(&mut self) -> u64 {
        let mut ready = [0u32; 32];
        let n = self.sleepers.ready(&mut ready);
        let mut woken = 0;
        for &interface in &ready[..n] {
            if let Some(k) = self.asleep.iter().position(|a| a.interface == interface) {
                let mut a = self.asleep.swap_remove(k);
                if let Some(fd) = a.fd {
                    self.sleepers.remove(fd);
                }
                a.empty = 0;
                a.queue.set_mode(RxMode::Polling);
                self.queues.push(a);
                woken += 1;
            }
        }
        woken
    }

    /// Puts to sleep the polled queues idle for [`SLEEP_AFTER`] polls that can be woken;
    /// returns how many.
    #[cold]
    fn sleep_idle(&mut self) -> u64 {
        let (mut k, mut slept) = (0, 0);
        while k < self.queues.len() {
            let a = &self.queues[k];
            match a.fd {
                Some(fd) if a.empty >= SLEEP_AFTER && self.sleepers.add(fd, a.interface) => {
                    let mut a = self.queues.remove(k);
                    a.queue.set_mode(RxMode::Interrupt);
                    self.asleep.push(a);
                    slept += 1;
                }
                _ => k += 1,
            }
        }
        slept
    }
}

impl<S> Node<S> for PortsInput {
    fn spec(&self) -> NodeSpec {
        NodeSpec::input(&self.name).nexts(&[&self.next]).errors(&[
            (
                "capture-dropped",
                "received packets a capture missed (its writer fell behind)",
            ),
            (
                "queue-slept",
                "idle receive queues put to sleep, waited on instead of polled (not an error)",
            ),
            (
                "queue-woken",
                "sleeping receive queues woken by their descriptor (not an error)",
            ),
        ])
    }

    fn process(&mut self, cx: &mut Context<'_, S>, frame: &mut Frame) -> usize {
        if !self.asleep.is_empty() && self.sleepers.due() {
            let woken = self.wake_ready();
            if woken > 0 {
                cx.count_error(2, woken);
            }
        }
        let mut produced = 0;
        let mut drowsy = false;
        // A trace or a capture sees every packet: nothing bypasses the graph meanwhile.
        let bypass = self.capture.is_empty() && !cx.traces_input();
        for a in &mut self.queues {
            let n = if bypass {
                let burst = a.queue.receive_or_bypass(cx.buffers, frame.spare_mut());
                produced += burst.bypassed;
                if burst.bypassed > 0 {
                    a.empty = 0;
                }
                burst.received
            } else {
                a.queue.receive(cx.buffers, frame.spare_mut())
            };
            if n == 0 {
                a.empty = a.empty.saturating_add(1);
                drowsy |= a.empty == SLEEP_AFTER && a.fd.is_some();
                continue;
            }
            a.empty = 0;
            frame.set_len(n);
            for &bi in frame.as_slice() {
                cx.buffers.meta_mut(bi).rx_interface = a.interface;
            }
            if !self.capture.is_empty() {
                let missed = self.capture.rx(a.interface, cx.buffers, frame.as_slice());
                if missed > 0 {
                    cx.count_error(0, missed);
                }
            }
            cx.trace_input(frame.as_slice());
            // Leaves `frame` empty: swapped for a spare one, or copied and cleared.
            cx.enqueue_frame(Next::declared(0), frame);
            produced += n;
        }
        if drowsy {
            let slept = self.sleep_idle();
            if slept > 0 {
                cx.count_error(1, slept);
            }
        }
        produced
    }
}

impl<Q: RxQueue + ?Sized> RxQueue for Box<Q> {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        (**self).receive(buffers, out)
    }

    fn receive_or_bypass(
        &mut self,
        buffers: &mut WorkerBuffers,
        out: &mut [BufferIndex],
    ) -> RxBurst {
        (**self).receive_or_bypass(buffers, out)
    }

    fn wake_fd(&self) -> Option<RawFd> {
        (**self).wake_fd()
    }

    fn set_mode(&mut self, mode: RxMode) {
        (**self).set_mode(mode)
    }
}

impl<Q: TxQueue + ?Sized> TxQueue for Box<Q> {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        (**self).transmit(buffers, packets)
    }

    fn copies_external(&self) -> bool {
        (**self).copies_external()
    }

    fn accepts_offload(&self) -> bool {
        (**self).accepts_offload()
    }
}
