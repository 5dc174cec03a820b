//! `ip4-rewrite`: TTL decrement with an incremental checksum update (RFC 1624), the MTU check,
//! and the adjacency's L2 header written into the headroom. A packet too long for the next hop
//! with Don't Fragment set goes to `ip4-icmp-error`, which answers its source; without DF it
//! is dropped (Quiver does not fragment).

use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::arcs::Arcs;
use super::names;
use super::origin::LOCALLY_ORIGINATED;
use dataplane::buffer::BufferMeta;

use crate::state::{Adjacency, AdjacencyKind, ForwardingState};
use crate::wire::{self, Ipv4};

next_arcs! {
    OUTPUT => names::INTERFACE_OUTPUT,
    ICMP_ERROR => names::IP4_ICMP_ERROR,
}

node_errors! {
    TTL_EXPIRED => ("ttl-expired", "TTL would reach zero while forwarding"),
    MTU_EXCEEDED => ("mtu-exceeded", "longer than the outgoing MTU (fragmentation not supported)"),
    FRAGMENTATION_NEEDED => ("fragmentation-needed", "longer than the outgoing MTU with Don't Fragment set (ICMP sent back)"),
    NO_HEADROOM => ("no-headroom", "no headroom for the L2 header"),
    BAD_ADJACENCY => ("bad-adjacency", "the adjacency is not a rewrite (a bug)"),
}

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
            .nexts(NEXTS)
            .errors(ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let state = cx.state();
        let base = cx.error_id(0);
        let bis = frame.as_slice();
        let n = bis.len();
        let mut arcs = Arcs::new(&mut self.nexts[..n], OUTPUT);
        let mut buffers = cx.buffers.view();
        // No prefetching: the node before touched these buffers a frame ago, and they are
        // still in cache (measured: prefetching cost more than it saved).
        // Held in registers: the stores into packets below would otherwise make the compiler
        // reload the vector's address and length for every packet.
        let adjacencies: &[Adjacency] = &state.adjacencies;
        let mut too_big = 0;
        for (i, &bi) in bis.iter().enumerate() {
            let (meta, headroom, d) = buffers.meta_headroom_and_data_mut(bi);
            // Looked up for every packet: with traffic spread over several next hops, remembering
            // the last one costs a mispredicted branch more often than it saves a load.
            let adj = adjacencies
                .get(meta.adjacency as usize)
                .filter(|a| a.kind == AdjacencyKind::Rewrite);
            // The common case, checked before anything changes: a rewrite adjacency with a plain
            // Ethernet header (fixed-size copies, no length arithmetic), a header within the
            // MTU, a TTL to decrement (or a packet of ours), room for the L2 header. Anything
            // else (VLAN headers included) takes the general way below.
            if let (Some(a), Ok(mut ip)) = (adj, Ipv4::new_checked(&mut *d)) {
                let ours = meta.flags & LOCALLY_ORIGINATED != 0;
                let total = ip.total_len();
                if let Some(room) = headroom.last_chunk_mut::<{ wire::ETHERNET_HEADER }>() {
                    if a.header_len as usize == wire::ETHERNET_HEADER
                        && total <= a.mtu
                        && (ours || ip.ttl() > 1)
                        && meta.retreat(wire::ETHERNET_HEADER as u16)
                    {
                        if !ours {
                            ip.decrement_ttl();
                        }
                        meta.tx_interface = a.tx.get();
                        meta.l2_offset = meta.data_offset();
                        *room = *a.header.first_chunk().expect("14 of 18 bytes");
                        continue;
                    }
                }
            }
            let arc = match rewrite(adj, meta, d) {
                Ok(a) => {
                    let len = a.header_len as usize;
                    if headroom.len() >= len && meta.retreat(len as u16) {
                        write_header(a, headroom);
                        OUTPUT
                    } else {
                        meta.error = base + NO_HEADROOM;
                        Next::DROP
                    }
                }
                Err(FRAGMENTATION_NEEDED) => {
                    too_big += 1;
                    ICMP_ERROR
                }
                Err(code) => {
                    meta.error = base + code;
                    Next::DROP
                }
            };
            arcs.set(i, arc);
        }
        arcs.enqueue(cx, frame);
        if too_big > 0 {
            cx.count_error(FRAGMENTATION_NEEDED, too_big);
        }
        n
    }
}

/// Writes the adjacency's L2 header at the end of `headroom` (which holds at least its length).
#[inline(always)]
fn write_header(a: &Adjacency, headroom: &mut [u8]) {
    let at = headroom.len().saturating_sub(a.header_len as usize);
    let h = &mut headroom[at..];
    // Fixed-size copies inline; the common case is plain Ethernet.
    if let Ok(h) = <&mut [u8; 14]>::try_from(&mut *h) {
        *h = *a.header.first_chunk().expect("14 of 18 bytes");
    } else if let Some(from) = a.header.get(..h.len()) {
        h.copy_from_slice(from);
    }
}

/// Checks TTL and MTU and decrements the TTL of one packet (IPv4 header at `d[0]`); sets the
/// fields the L2 header of `adj` will need. The general way, for what the fast path declined.
#[inline(never)]
fn rewrite<'a>(
    adj: Option<&'a Adjacency>,
    meta: &mut BufferMeta,
    d: &mut [u8],
) -> Result<&'a Adjacency, u16> {
    let adj = adj.ok_or(BAD_ADJACENCY)?;
    let mut ip = Ipv4::new_checked(d).map_err(|_| BAD_ADJACENCY)?;
    if ip.total_len() > adj.mtu {
        return Err(if ip.dont_fragment() {
            FRAGMENTATION_NEEDED
        } else {
            MTU_EXCEEDED
        });
    }
    if meta.flags & LOCALLY_ORIGINATED == 0 {
        if ip.ttl() <= 1 {
            return Err(TTL_EXPIRED);
        }
        ip.decrement_ttl();
    }
    meta.tx_interface = adj.tx.get();
    // Where the L2 header starts once written (a packet without the headroom is dropped).
    meta.l2_offset = meta.data_offset().wrapping_sub(adj.header_len as u16);
    Ok(adj)
}
