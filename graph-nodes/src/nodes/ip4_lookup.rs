//! `ip4-lookup`: longest-prefix match on the destination, then ECMP by flow hash. The whole
//! frame's destinations are looked up together so that table misses overlap.

use dataplane::buffer::flags;
use dataplane::{Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::names;
use crate::state::{AdjacencyKind, ForwardingState};
use crate::wire::{self, be16, be32, ip4};

const REWRITE: Next = Next::declared(0);
const LOCAL: Next = Next::declared(1);
const ARP: Next = Next::declared(2);

const NO_ROUTE: u16 = 0;
const BLACKHOLE: u16 = 1;
const BAD_OBJECT: u16 = 2;

/// The `ip4-lookup` node.
pub struct Ip4Lookup {
    nexts: [Next; FRAME_SIZE],
    dsts: [u32; FRAME_SIZE],
    results: [u32; FRAME_SIZE],
}

impl Ip4Lookup {
    /// A new node.
    pub fn new() -> Self {
        Ip4Lookup {
            nexts: [Next::DROP; FRAME_SIZE],
            dsts: [0; FRAME_SIZE],
            results: [0; FRAME_SIZE],
        }
    }
}

impl Default for Ip4Lookup {
    fn default() -> Self {
        Self::new()
    }
}

/// The flow hash of an IPv4 packet (ports included for unfragmented TCP and UDP).
#[inline]
pub(crate) fn ip4_flow_hash(d: &[u8]) -> u32 {
    if d.len() < wire::IP4_HEADER {
        return 0;
    }
    let proto = d[ip4::PROTO];
    let unfragmented = be16(d, ip4::FRAG) & (ip4::OFFSET_MASK | ip4::MF) == 0;
    let ports = if unfragmented
        && (proto == wire::PROTO_UDP || proto == wire::PROTO_TCP)
        && d.len() >= wire::IP4_HEADER + 4
    {
        be32(d, wire::IP4_HEADER)
    } else {
        0
    };
    wire::flow_hash(be32(d, ip4::SRC), be32(d, ip4::DST), proto, ports)
}

impl Node<ForwardingState> for Ip4Lookup {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP4_LOOKUP)
            .nexts(&[names::IP4_REWRITE, names::IP4_LOCAL, names::IP4_ARP])
            .errors(&[
                ("no-route", "no route to the destination"),
                ("blackhole", "the route drops (a blackhole)"),
                ("bad-object", "the route points at a missing object (a bug)"),
            ])
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let state = cx.state();
        let errors = [
            cx.error_id(NO_ROUTE),
            cx.error_id(BLACKHOLE),
            cx.error_id(BAD_OBJECT),
        ];
        let bis = frame.as_slice();
        let n = bis.len();
        for (i, &bi) in bis.iter().enumerate() {
            let d = cx.buffers.data(bi);
            // ip4-input guaranteed 20 bytes; be defensive for packets that skipped it.
            self.dsts[i] = if d.len() >= wire::IP4_HEADER {
                be32(d, ip4::DST)
            } else {
                0
            };
        }
        state
            .fib
            .lookup_batch(&self.dsts[..n], &mut self.results[..n]);
        for (i, &bi) in bis.iter().enumerate() {
            let verdict = (|| {
                let lb = state
                    .load_balances
                    .get(self.results[i] as usize)
                    .ok_or(NO_ROUTE)?;
                let adj_index = if lb.buckets.len() == 1 {
                    lb.buckets[0]
                } else {
                    let meta = cx.buffers.meta(bi);
                    let h = if meta.flags & flags::FLOW_HASH_VALID != 0 {
                        meta.flow_hash
                    } else {
                        ip4_flow_hash(cx.buffers.data(bi))
                    };
                    lb.buckets[h as usize % lb.buckets.len()]
                };
                let adj = state
                    .adjacencies
                    .get(adj_index as usize)
                    .ok_or(BAD_OBJECT)?;
                let next = match adj.kind {
                    AdjacencyKind::Rewrite => REWRITE,
                    AdjacencyKind::Local => LOCAL,
                    AdjacencyKind::Arp | AdjacencyKind::Glean => ARP,
                    AdjacencyKind::Drop => return Err(BLACKHOLE),
                };
                Ok((next, adj_index))
            })();
            let meta = cx.buffers.meta_mut(bi);
            match verdict {
                Ok((next, adj)) => {
                    meta.adjacency = adj;
                    self.nexts[i] = next;
                }
                Err(code) => {
                    meta.error = errors[code as usize];
                    self.nexts[i] = Next::DROP;
                }
            }
        }
        cx.enqueue_to_nexts(&self.nexts[..n], bis);
        n
    }
}
