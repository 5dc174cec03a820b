//! `ip4-l3xc`: the L3 cross-connect. Every IPv4 packet received on an L3 cross-connected
//! interface (already checked by `ip4-input`) leaves by that cross-connect's adjacency — the
//! peer interface toward its IPv4 next hop — whatever its destination: `ip4-rewrite` decrements
//! the TTL and writes the L2 header, or `ip4-arp` asks for the next hop's MAC first. This is
//! what NSM's IP payload needs ("everything from A goes to B's peer, and back"), VPP's `l3xc`.
//! A cross-connect whose peer has an IPv6 next hop only drops IPv4 (`no-next-hop`).

use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::arcs::Arcs;
use super::names;
use crate::state::{AdjIndex, AdjacencyKind, ForwardingState, IfIndex};

next_arcs! {
    REWRITE => names::IP4_REWRITE,
    ARP => names::IP4_ARP,
}

node_errors! {
    NO_L3XC => ("no-l3xc", "the receiving interface is no longer L3 cross-connected"),
    NO_NEXT_HOP => ("no-next-hop", "the cross-connect's peer has no IPv4 next hop"),
    NOT_READY => ("not-ready", "the cross-connect's adjacency is not a next hop (a bug)"),
}

/// The `ip4-l3xc` node.
pub struct Ip4L3xc {
    nexts: [Next; FRAME_SIZE],
}

impl Ip4L3xc {
    /// A new node.
    pub fn new() -> Self {
        Ip4L3xc {
            nexts: [REWRITE; FRAME_SIZE],
        }
    }
}

impl Default for Ip4L3xc {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for Ip4L3xc {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP4_L3XC)
            .nexts(NEXTS)
            .errors(ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let state = cx.state();
        let base = cx.error_id(0);
        let bis = frame.as_slice();
        let n = bis.len();
        let mut arcs = Arcs::new(&mut self.nexts[..n], REWRITE);
        let mut buffers = cx.buffers.view();
        // Packets of a frame usually come from one interface: resolve it once per run.
        let (mut last_rx, mut arc, mut adj, mut code) =
            (u32::MAX, Next::DROP, AdjIndex::NONE, NO_L3XC);
        for (i, &bi) in bis.iter().enumerate() {
            let meta = buffers.meta_mut(bi);
            if meta.rx_interface != last_rx {
                last_rx = meta.rx_interface;
                (arc, adj, code) = match state.l3xconnect(IfIndex::new(last_rx)) {
                    None => (Next::DROP, AdjIndex::NONE, NO_L3XC),
                    Some(x) if x.v4.is_none() => (Next::DROP, AdjIndex::NONE, NO_NEXT_HOP),
                    Some(x) => match state.adjacencies.get(x.v4.as_usize()).map(|a| a.kind) {
                        Some(AdjacencyKind::Rewrite) => (REWRITE, x.v4, 0),
                        Some(AdjacencyKind::Arp) => (ARP, x.v4, 0),
                        _ => (Next::DROP, x.v4, NOT_READY),
                    },
                };
            }
            meta.adjacency = adj.get();
            if arc == Next::DROP {
                meta.error = base + code;
            }
            arcs.set(i, arc);
        }
        arcs.enqueue(cx, frame);
        n
    }
}
