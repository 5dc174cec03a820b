//! `interface-output`: hands packets to their interface's transmit queue (runs of packets for
//! one port in one call), sends tunnel interfaces' packets to be encapsulated, and counts and
//! frees what a full ring refuses. Transmit queues are attached and detached at run time by
//! worker commands ([`InterfaceOutput::attach`], [`InterfaceOutput::detach`]); packets for an
//! interface with no queue on this worker are dropped as `no-queue`. A run that carries
//! checksum or segmentation work ([`dataplane::offload`]) toward a queue that does not accept
//! it, or toward a tunnel, first goes through `offload-resolve`, which sends it back done.

use dataplane::buffer::flags;
use dataplane::capture::CaptureTap;
use dataplane::BufferIndex;
use dataplane::{
    next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, TxQueue, FRAME_SIZE,
};

use super::names;
use crate::state::{ForwardingState, IfIndex};

next_arcs! {
    ENCAP => names::VXLAN4_ENCAP,
    ENCAP6 => names::VXLAN6_ENCAP,
    ENCRYPT => names::WG4_ENCRYPT,
    ENCRYPT6 => names::WG6_ENCRYPT,
    RESOLVE => names::OFFLOAD_RESOLVE,
}

node_errors! {
    UNKNOWN_INTERFACE => ("unknown-interface", "sent to an interface that does not exist"),
    NO_QUEUE => ("no-queue", "the interface has no transmit queue on this worker (never attached, or detached)"),
    TX_FULL => ("tx-full", "the transmit ring was full"),
    CAPTURE_DROPPED => ("capture-dropped", "sent packets a capture missed (its writer fell behind)"),
}

const TO_ENCAP: u32 = u32::MAX - 1;
const TO_ENCRYPT: u32 = u32::MAX - 2;
const TO_ENCAP6: u32 = u32::MAX - 3;
const TO_ENCRYPT6: u32 = u32::MAX - 4;
const TO_DROP: u32 = u32::MAX;

/// The `interface-output` node of one worker.
pub struct InterfaceOutput {
    queues: Vec<Option<Box<dyn TxQueue>>>,
    port_of: [u32; FRAME_SIZE],
    capture: CaptureTap,
}

impl InterfaceOutput {
    /// A node transmitting through `queues`: (interface, this worker's queue for it).
    pub fn new(queues: Vec<(IfIndex, Box<dyn TxQueue>)>) -> Self {
        let mut node = InterfaceOutput {
            queues: Vec::with_capacity(Self::RESERVED),
            port_of: [0; FRAME_SIZE],
            capture: CaptureTap::new(0),
        };
        for (i, q) in queues {
            node.attach(i, q);
        }
        node
    }

    /// Room reserved in the queue table, so attaching rarely allocates.
    const RESERVED: usize = 256;

    /// Transmits interface `i`'s packets through `queue` from now on; returns the queue it
    /// replaces, if any (to be dropped by the caller).
    pub fn attach(&mut self, i: IfIndex, queue: Box<dyn TxQueue>) -> Option<Box<dyn TxQueue>> {
        let i = i.as_usize();
        if self.queues.len() <= i {
            self.queues.resize_with(i + 1, || None);
        }
        self.queues[i].replace(queue)
    }

    /// Takes interface `i`'s queue away: its packets are dropped as `no-queue` from now on.
    pub fn detach(&mut self, i: IfIndex) -> Option<Box<dyn TxQueue>> {
        self.queues.get_mut(i.as_usize())?.take()
    }

    /// The packet captures of sent packets this node serves (see [`dataplane::capture`]).
    pub fn capture_mut(&mut self) -> &mut CaptureTap {
        &mut self.capture
    }

    /// Whether interface `i` has a transmit queue here.
    pub fn has_queue(&self, i: IfIndex) -> bool {
        self.queues.get(i.as_usize()).is_some_and(Option::is_some)
    }
}

impl Node<ForwardingState> for InterfaceOutput {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::INTERFACE_OUTPUT)
            .nexts(NEXTS)
            .errors(ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let state = cx.state();
        let base = cx.error_id(0);
        let bis = frame.as_slice();
        let n = bis.len();
        // Packets of a frame usually leave by one interface: resolve it once per run.
        let (mut last_tx, mut last_port) = (u32::MAX, TO_DROP);
        let mut one_port = true;
        // Whether any packet carries offload work (one OR per packet).
        let mut offload = 0;
        let mut buffers = cx.buffers.view();
        for ((&bi, port), i) in bis.iter().zip(&mut self.port_of[..n]).zip(0..) {
            let meta = buffers.meta_mut(bi);
            offload |= meta.flags;
            let tx = meta.tx_interface;
            if tx != last_tx {
                last_tx = tx;
                let class = state.tx_class(IfIndex::new(tx));
                let p = match (class.queue(), class.tunnel()) {
                    (Some(port), _) => port.get(),
                    (None, Some(_)) => TO_ENCAP,
                    (None, None) if class.wireguard_tunnel().is_some() => TO_ENCRYPT,
                    (None, None) if class.tunnel6().is_some() => TO_ENCAP6,
                    (None, None) if class.wireguard6_tunnel().is_some() => TO_ENCRYPT6,
                    (None, None) => TO_DROP,
                };
                one_port &= i == 0 || p == last_port;
                last_port = p;
            }
            if last_port == TO_DROP {
                meta.error = base + UNKNOWN_INTERFACE;
            }
            *port = last_port;
        }
        let offload = offload & flags::OFFLOAD != 0;
        if one_port {
            self.send(cx, last_port, bis, offload);
            return n;
        }
        let mut i = 0;
        while i < n {
            let port = self.port_of[i];
            let mut j = i + 1;
            while j < n && self.port_of[j] == port {
                j += 1;
            }
            self.send(cx, port, &bis[i..j], offload);
            i = j;
        }
        n
    }
}

impl InterfaceOutput {
    /// Sends a run of packets for one port (or to be encapsulated, or dropped). `offload`:
    /// some packet of the frame may carry offload work.
    #[inline]
    fn send(
        &mut self,
        cx: &mut Context<'_, ForwardingState>,
        port: u32,
        run: &[BufferIndex],
        offload: bool,
    ) {
        let base = cx.error_id(0);
        match port {
            TO_ENCAP if offload => cx.enqueue_slice(RESOLVE, run),
            TO_ENCAP => cx.enqueue_slice(ENCAP, run),
            TO_ENCAP6 if offload => cx.enqueue_slice(RESOLVE, run),
            TO_ENCAP6 => cx.enqueue_slice(ENCAP6, run),
            TO_ENCRYPT if offload => cx.enqueue_slice(RESOLVE, run),
            TO_ENCRYPT => cx.enqueue_slice(ENCRYPT, run),
            TO_ENCRYPT6 if offload => cx.enqueue_slice(RESOLVE, run),
            TO_ENCRYPT6 => cx.enqueue_slice(ENCRYPT6, run),
            TO_DROP => cx.enqueue_slice(Next::DROP, run),
            p => match self.queues.get_mut(p as usize).and_then(Option::as_mut) {
                Some(q) if offload && !q.accepts_offload() => cx.enqueue_slice(RESOLVE, run),
                Some(q) => {
                    if !q.copies_external() {
                        // Bytes still in a memif peer's memory, copied in for a queue that
                        // reads buffers itself (a no-op when none is external).
                        cx.buffers.materialise(run);
                    }
                    if !self.capture.is_empty() {
                        let missed = self.capture.tx(p, cx.buffers, run);
                        if missed > 0 {
                            cx.count_error(CAPTURE_DROPPED, missed);
                        }
                    }
                    let sent = q.transmit(cx.buffers, run).min(run.len());
                    let refused = &run[sent..];
                    for &bi in refused {
                        cx.buffers.meta_mut(bi).error = base + TX_FULL;
                    }
                    cx.enqueue_slice(Next::DROP, refused);
                }
                None => {
                    for &bi in run {
                        cx.buffers.meta_mut(bi).error = base + NO_QUEUE;
                    }
                    cx.enqueue_slice(Next::DROP, run);
                }
            },
        }
    }
}
