//! `ip4-rewrite`: TTL decrement with an incremental checksum update (RFC 1624), the MTU check,
//! and the adjacency's L2 header written into the headroom.

use dataplane::{Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::{names, LOCALLY_ORIGINATED};
use dataplane::buffer::BufferMeta;

use crate::state::{Adjacency, AdjacencyKind, ForwardingState};
use crate::wire::{self, be16, ip4};

const OUTPUT: Next = Next::declared(0);

const TTL_EXPIRED: u16 = 0;
const MTU_EXCEEDED: u16 = 1;
const FRAGMENTATION_NEEDED: u16 = 2;
const NO_HEADROOM: u16 = 3;
const BAD_ADJACENCY: u16 = 4;

/// The `ip4-rewrite` node.
pub struct Ip4Rewrite {
    nexts: [Next; FRAME_SIZE],
}

impl Ip4Rewrite {
    /// A new node.
    pub fn new() -> Self {
        Ip4Rewrite {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl Default for Ip4Rewrite {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for Ip4Rewrite {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP4_REWRITE)
            .nexts(&[names::INTERFACE_OUTPUT])
            .errors(&[
                ("ttl-expired", "TTL would reach zero while forwarding"),
                (
                    "mtu-exceeded",
                    "longer than the outgoing MTU (fragmentation not supported)",
                ),
                (
                    "fragmentation-needed",
                    "longer than the outgoing MTU with Don't Fragment set",
                ),
                ("no-headroom", "no headroom for the L2 header"),
                ("bad-adjacency", "the adjacency is not a rewrite (a bug)"),
            ])
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let state = cx.state();
        let base = cx.error_id(0);
        // Packets of a frame mostly share an adjacency: resolve it once per run.
        let (mut last, mut adj): (u32, Option<&Adjacency>) = (u32::MAX, None);
        let bis = frame.as_slice();
        for (i, &bi) in bis.iter().enumerate() {
            if let Some(&ahead) = bis.get(i + 4) {
                cx.buffers.prefetch_buffer(ahead);
            }
            let (meta, d) = cx.buffers.meta_and_data_mut(bi);
            if meta.adjacency != last {
                last = meta.adjacency;
                adj = state
                    .adjacencies
                    .get(last as usize)
                    .filter(|a| a.kind == AdjacencyKind::Rewrite);
            }
            match rewrite(adj, meta, d) {
                Ok(a) => {
                    let len = a.header_len as u16;
                    match cx.buffers.prepend(bi, len) {
                        Some(h) => {
                            // Fixed-size copies inline; the common case is plain Ethernet.
                            if h.len() == 14 {
                                h.copy_from_slice(&a.header[..14]);
                            } else {
                                h.copy_from_slice(&a.header[..h.len()]);
                            }
                            let m = cx.buffers.meta_mut(bi);
                            m.l2_offset = m.data_offset();
                            self.nexts[i] = OUTPUT;
                        }
                        None => {
                            cx.buffers.meta_mut(bi).error = base + NO_HEADROOM;
                            self.nexts[i] = Next::DROP;
                        }
                    }
                }
                Err(code) => {
                    meta.error = base + code;
                    self.nexts[i] = Next::DROP;
                }
            }
        }
        cx.enqueue_to_nexts(&self.nexts[..bis.len()], bis);
        bis.len()
    }
}

/// Checks TTL and MTU and decrements the TTL of one packet (IPv4 header at `d[0]`).
#[inline(always)]
fn rewrite<'a>(
    adj: Option<&'a Adjacency>,
    meta: &mut BufferMeta,
    d: &mut [u8],
) -> Result<&'a Adjacency, u16> {
    let adj = adj.ok_or(BAD_ADJACENCY)?;
    if d.len() < wire::IP4_HEADER {
        return Err(BAD_ADJACENCY);
    }
    let total = be16(d, ip4::TOTAL_LEN);
    if total > adj.mtu {
        return Err(if be16(d, ip4::FRAG) & ip4::DF != 0 {
            FRAGMENTATION_NEEDED
        } else {
            MTU_EXCEEDED
        });
    }
    if meta.flags & LOCALLY_ORIGINATED == 0 {
        let ttl = d[ip4::TTL];
        if ttl <= 1 {
            return Err(TTL_EXPIRED);
        }
        let old = be16(d, ip4::TTL);
        d[ip4::TTL] = ttl - 1;
        let sum = wire::checksum_update(be16(d, ip4::CHECKSUM), old, be16(d, ip4::TTL));
        wire::put16(d, ip4::CHECKSUM, sum);
    }
    meta.tx_interface = adj.tx;
    Ok(adj)
}
