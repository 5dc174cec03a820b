//! `ip6-rewrite`: the hop limit decremented (IPv6 has no header checksum), the MTU checked
//! and the adjacency's L2 header written into the headroom. A packet too long for the next hop
//! goes to `ip6-icmp-error` for a Packet Too Big (routers never fragment IPv6, RFC 8200 5), one
//! whose hop limit would reach zero for a Time Exceeded (RFC 4443 3.3). A packet from a
//! link-local source never leaves by another link than the one it came in by (RFC 4291 2.5.6);
//! it is dropped by name (no error goes back: a link-local address has no route).

use dataplane::buffer::BufferMeta;
use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::arcs::Arcs;
use super::icmp6_error::{icmp_error, ErrorKind};
use super::names;
use super::origin::LOCALLY_ORIGINATED;
use crate::state::{Adjacency, AdjacencyKind, ForwardingState};
use crate::wire::{self, ipv6, Ipv6};

next_arcs! {
    OUTPUT => names::INTERFACE_OUTPUT,
    ICMP_ERROR => names::IP6_ICMP_ERROR,
}

node_errors! {
    HOP_LIMIT => ("hop-limit-exceeded", "the hop limit would reach zero (Time Exceeded sent back)"),
    TOO_BIG => ("packet-too-big", "longer than the outgoing MTU (Packet Too Big sent back)"),
    NO_HEADROOM => ("no-headroom", "no headroom for the L2 header"),
    BAD_ADJACENCY => ("bad-adjacency", "the adjacency is not a rewrite (a bug)"),
    LINK_LOCAL_SOURCE => ("link-local-source", "from a link-local source, to leave by another link (RFC 4291 2.5.6)"),
}

/// Whether a received packet from `src` may not leave by `tx`, having come in by `rx`: a
/// link-local source stays on its link.
#[inline(always)]
fn off_its_link(src: &ipv6::Ip6Addr, rx: u32, tx: u32) -> bool {
    ipv6::is_link_local(src) && rx != tx
}

/// The `ip6-rewrite` node.
pub struct Ip6Rewrite {
    nexts: [Next; FRAME_SIZE],
}

impl Ip6Rewrite {
    /// A new node.
    pub fn new() -> Self {
        Ip6Rewrite {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl Default for Ip6Rewrite {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for Ip6Rewrite {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP6_REWRITE)
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
        let adjacencies: &[Adjacency] = &state.adjacencies;
        let (mut hop_limit, mut too_big) = (0, 0);
        for (i, &bi) in bis.iter().enumerate() {
            let (meta, headroom, d) = buffers.meta_headroom_and_data_mut(bi);
            let adj = adjacencies
                .get(meta.adjacency as usize)
                .filter(|a| a.kind == AdjacencyKind::Rewrite);
            // The common case first: a plain Ethernet header, within the MTU, a hop limit to
            // decrement (or a packet of ours), room for the header.
            if let (Some(a), Ok(mut ip)) = (adj, Ipv6::new_checked(&mut *d)) {
                let ours = meta.flags & LOCALLY_ORIGINATED != 0;
                let hops = ip.hop_limit();
                if let Some(room) = headroom.last_chunk_mut::<{ wire::ETHERNET_HEADER }>() {
                    if a.header_len as usize == wire::ETHERNET_HEADER
                        && ip.total_len() <= u32::from(a.mtu)
                        && (ours
                            || (hops > 1
                                && !off_its_link(&ip.src(), meta.rx_interface, a.tx.get())))
                        && meta.retreat(wire::ETHERNET_HEADER as u16)
                    {
                        if !ours {
                            ip.set_hop_limit(hops - 1);
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
                        let at = headroom.len() - len;
                        if let Some(h) = a.header.get(..len) {
                            headroom[at..].copy_from_slice(h);
                        }
                        OUTPUT
                    } else {
                        meta.error = base + NO_HEADROOM;
                        Next::DROP
                    }
                }
                Err(Refused::Icmp(kind, mtu)) => {
                    match kind {
                        ErrorKind::TimeExceeded => hop_limit += 1,
                        ErrorKind::PacketTooBig => too_big += 1,
                    }
                    icmp_error(meta, kind, mtu);
                    ICMP_ERROR
                }
                Err(Refused::Drop(code)) => {
                    meta.error = base + code;
                    Next::DROP
                }
            };
            arcs.set(i, arc);
        }
        arcs.enqueue(cx, frame);
        if hop_limit > 0 {
            cx.count_error(HOP_LIMIT, hop_limit);
        }
        if too_big > 0 {
            cx.count_error(TOO_BIG, too_big);
        }
        n
    }
}

/// Why the general way does not send a packet on.
enum Refused {
    /// An ICMPv6 error goes back to its source.
    Icmp(ErrorKind, u16),
    /// Dropped, with this error.
    Drop(u16),
}

/// Checks hop limit and MTU and decrements the hop limit of one packet (IPv6 header at
/// `d[0]`); sets the fields the L2 header of `adj` will need. The general way, for what the
/// fast path declined.
#[inline(never)]
fn rewrite<'a>(
    adj: Option<&'a Adjacency>,
    meta: &mut BufferMeta,
    d: &mut [u8],
) -> Result<&'a Adjacency, Refused> {
    let adj = adj.ok_or(Refused::Drop(BAD_ADJACENCY))?;
    let mut ip = Ipv6::new_checked(d).map_err(|_| Refused::Drop(BAD_ADJACENCY))?;
    let ours = meta.flags & LOCALLY_ORIGINATED != 0;
    if !ours {
        if off_its_link(&ip.src(), meta.rx_interface, adj.tx.get()) {
            return Err(Refused::Drop(LINK_LOCAL_SOURCE));
        }
        if ip.hop_limit() <= 1 {
            return Err(Refused::Icmp(ErrorKind::TimeExceeded, 0));
        }
        if ip.total_len() > u32::from(adj.mtu) {
            return Err(Refused::Icmp(ErrorKind::PacketTooBig, adj.mtu));
        }
        ip.set_hop_limit(ip.hop_limit() - 1);
    } else if ip.total_len() > u32::from(adj.mtu) {
        return Err(Refused::Drop(TOO_BIG));
    }
    meta.tx_interface = adj.tx.get();
    meta.l2_offset = meta.data_offset().wrapping_sub(adj.header_len as u16);
    Ok(adj)
}
