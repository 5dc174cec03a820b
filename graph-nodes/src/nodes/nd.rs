//! Neighbour discovery (RFC 4861) on the data path. `ip6-nd` takes what `ip6-local` hands it:
//! a solicitation for one of the receiving interface's addresses is answered (and its sender's
//! link-layer address reported), an advertisement is reported, router messages are counted and
//! never change anything (Quiver sends no router advertisements and takes no routes from the
//! link). `ip6-nd-resolve` asks, by a multicast solicitation, for next hops whose link-layer
//! address is unknown (once per millisecond per next hop) and drops the packet that needed it;
//! `ip6-nd-probe` sends the unicast solicitations the control side asks for (a stale neighbour
//! being confirmed). What is learned goes to the control side as events; it commits it.

use dataplane::buffer::INVALID_INDEX;
use dataplane::BufferIndex;
use dataplane::{cycles, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::ip6_input::EXTENSION_BOUND;
use super::names;
use super::origin::LOCALLY_ORIGINATED;
use super::reply_on_link::reply_on_link;
use crate::state::{
    AdjacencyKind, DataplaneEvent, ForwardingState, IfIndex, Interface, InterfaceKind,
};
use crate::wire::icmp6::{self, Icmp6};
use crate::wire::ipv6::{self, Ip6Addr, HEADER_LEN};
use crate::wire::{self, ethernet, nd, Ipv6, Mac};

/// `ip6-nd`'s arcs and errors.
mod input {
    use super::names;
    dataplane::next_arcs! { pub(super) OUTPUT => names::INTERFACE_OUTPUT }
    dataplane::node_errors! {
        pub(super) MALFORMED => ("malformed", "not a neighbour discovery message a receiver may act on (RFC 4861 7.1)"),
        BAD_HOP_LIMIT => ("bad-hop-limit", "hop limit is not 255 (the message was routed)"),
        BAD_CHECKSUM => ("bad-checksum", "ICMPv6 checksum is wrong"),
        NOT_FOR_US => ("not-for-us", "a solicitation for an address that is not the interface's"),
        SOLICITATIONS_ANSWERED => ("solicitations-answered", "solicitations answered (not a drop)"),
        ADVERTISEMENTS => ("advertisements", "advertisements received and reported (consumed here)"),
        ROUTER_MESSAGES => ("router-messages-ignored", "router solicitations, advertisements and redirects: Quiver takes nothing from them"),
        EVENTS_LOST => ("events-lost", "learned neighbours not reported: the control side is behind"),
        NO_LINK_HEADER => ("no-link-header", "no Ethernet header to answer behind"),
    }
}

/// `ip6-nd-resolve`'s and `ip6-nd-probe`'s arcs and errors.
mod request {
    use super::names;
    dataplane::next_arcs! { pub(super) OUTPUT => names::INTERFACE_OUTPUT }
    dataplane::node_errors! {
        pub(super) RESOLVING => ("resolving", "dropped while the next hop's link-layer address is resolved"),
        SOLICITATIONS_SENT => ("solicitations-sent", "neighbour solicitations sent (not a drop)"),
        NO_BUFFERS => ("no-buffers", "no buffer for a solicitation"),
        NO_SOURCE_ADDRESS => ("no-source-address", "the interface has no IPv6 address to ask from"),
    }
}

/// A solicitation frame: an Ethernet header (tagged on a sub-interface), IPv6, the NS with its
/// source link-layer option.
const NS_FRAME: usize = 18 + HEADER_LEN + nd::WITH_LINK_LAYER_LEN;

/// A neighbour solicitation from `iface` for `target`: multicast to its solicited-node group,
/// or unicast to `unicast` (a stale neighbour's confirmation). Its bytes and length; `None`
/// when the interface has no address to ask from.
fn solicitation(
    iface: &Interface,
    target: &Ip6Addr,
    unicast: Option<Mac>,
) -> Option<([u8; NS_FRAME], usize)> {
    let src = iface
        .link_local
        .or_else(|| iface.address6_for(u128::from_be_bytes(*target)))?
        .to_be_bytes();
    let (dst_ip, dst_mac) = match unicast {
        Some(mac) => (*target, mac),
        None => {
            let group = ipv6::solicited_node(target);
            (group, ipv6::multicast_mac(&group))
        }
    };
    let mut frame = [0u8; NS_FRAME];
    let tci = match iface.kind {
        InterfaceKind::Vlan { vlan, .. } => Some(vlan),
        _ => None,
    };
    let hl =
        ethernet::write_header(&mut frame, &dst_mac, &iface.mac, tci, wire::ETHERTYPE_IP6).ok()?;
    let body = frame.get_mut(hl..hl + HEADER_LEN + nd::WITH_LINK_LAYER_LEN)?;
    let mut ip = Ipv6::new_checked(body).ok()?;
    ip.reset_header();
    ip.set_payload_len(nd::WITH_LINK_LAYER_LEN as u16);
    ip.set_next_header(icmp6::PROTO_ICMP6);
    ip.set_hop_limit(255);
    ip.set_src(&src);
    ip.set_dst(&dst_ip);
    let pseudo = ip.pseudo_header_sum(icmp6::PROTO_ICMP6, nd::WITH_LINK_LAYER_LEN as u32);
    nd::write_solicitation(ip.payload_mut(), target, &iface.mac)?;
    Icmp6::new_checked(ip.payload_mut())
        .ok()?
        .fill_checksum(pseudo);
    Some((frame, hl + HEADER_LEN + nd::WITH_LINK_LAYER_LEN))
}

/// The `ip6-nd` node.
pub struct Ip6Nd {
    nexts: [Next; FRAME_SIZE],
}

impl Ip6Nd {
    /// A new node.
    pub fn new() -> Self {
        Ip6Nd {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl Default for Ip6Nd {
    fn default() -> Self {
        Self::new()
    }
}

/// What one neighbour discovery message asks of `ip6-nd`.
enum Verdict {
    /// Answer a solicitation for `target`: to `to` (its source), or to all nodes when the
    /// sender has no address yet (duplicate address detection); at `mac` when it gave one.
    Answer {
        target: Ip6Addr,
        to: Ip6Addr,
        mac: Option<Mac>,
    },
    /// Consumed: counted under this error (an advertisement, a router message).
    Consumed(u16),
}

/// Reads packet `d` (IPv6 header first) on interface `iface`; reports what it teaches.
fn read(iface: &Interface, d: &[u8]) -> Result<(Verdict, Option<DataplaneEvent>), u16> {
    use input::*;
    let ip = Ipv6::new_checked(d).map_err(|_| MALFORMED)?;
    let upper =
        ipv6::walk(ip.payload(), ip.next_header(), EXTENSION_BOUND).map_err(|_| MALFORMED)?;
    let len = (ip.total_len() as usize)
        .checked_sub(HEADER_LEN + upper.offset)
        .ok_or(MALFORMED)?;
    let msg = ip
        .payload()
        .get(upper.offset..upper.offset + len)
        .ok_or(MALFORMED)?;
    let t = *msg.first().ok_or(MALFORMED)?;
    if matches!(
        t,
        icmp6::ROUTER_SOLICITATION | icmp6::ROUTER_ADVERTISEMENT | icmp6::REDIRECT
    ) {
        return Ok((Verdict::Consumed(ROUTER_MESSAGES), None));
    }
    if ip.hop_limit() != 255 {
        return Err(BAD_HOP_LIMIT);
    }
    let pseudo = ip.pseudo_header_sum(icmp6::PROTO_ICMP6, len as u32);
    if !Icmp6::new_checked(msg).is_ok_and(|m| m.checksum_ok(pseudo)) {
        return Err(BAD_CHECKSUM);
    }
    let (src, dst) = (ip.src(), ip.dst());
    let learned = |ip: Ip6Addr, mac: Mac| DataplaneEvent::Neighbor6Learned {
        interface: iface.index,
        ip,
        mac,
    };
    match t {
        icmp6::NEIGHBOR_SOLICITATION => {
            let s = nd::solicitation(msg).map_err(|_| MALFORMED)?;
            let dad = ipv6::is_unspecified(&src);
            // RFC 4861 7.1.1: from no address, to a solicited-node group, with no link-layer
            // address.
            if dad && (!ipv6::is_solicited_node(&dst) || s.source_mac.is_some()) {
                return Err(MALFORMED);
            }
            if !iface.has_address6(u128::from_be_bytes(s.target)) {
                return Err(NOT_FOR_US);
            }
            let event = s.source_mac.filter(|_| !dad).map(|mac| learned(src, mac));
            let to = if dad { ipv6::ALL_NODES } else { src };
            Ok((
                Verdict::Answer {
                    target: s.target,
                    to,
                    mac: s.source_mac,
                },
                event,
            ))
        }
        icmp6::NEIGHBOR_ADVERTISEMENT => {
            let a = nd::advertisement(msg).map_err(|_| MALFORMED)?;
            // RFC 4861 7.1.2: an advertisement to a multicast group is never solicited.
            if ipv6::is_multicast(&dst) && a.solicited() {
                return Err(MALFORMED);
            }
            let event = a.target_mac.map(|mac| learned(a.target, mac));
            Ok((Verdict::Consumed(ADVERTISEMENTS), event))
        }
        _ => Err(MALFORMED),
    }
}

/// Makes packet `bi` the advertisement answering a solicitation for `target` from `to`, sent
/// back on its link (to `mac`, the sender's link-layer address, or its frame's source; to the
/// all-nodes group's MAC for duplicate address detection).
fn answer(
    state: &ForwardingState,
    cx: &mut Context<'_, ForwardingState>,
    bi: BufferIndex,
    iface: &Interface,
    (target, to, mac): (Ip6Addr, Ip6Addr, Option<Mac>),
) -> Result<(), u16> {
    use input::*;
    let all_nodes = to == ipv6::ALL_NODES;
    let flags =
        nd::FLAG_ROUTER | nd::FLAG_OVERRIDE | if all_nodes { 0 } else { nd::FLAG_SOLICITED };
    cx.buffers.unchain(bi);
    let len = (HEADER_LEN + nd::WITH_LINK_LAYER_LEN) as u16;
    if !cx.buffers.set_length(bi, len) {
        return Err(NO_LINK_HEADER);
    }
    cx.buffers.meta_mut(bi).clear_offload();
    let mut ip = Ipv6::new_checked(cx.buffers.data_mut(bi)).map_err(|_| MALFORMED)?;
    ip.reset_header();
    ip.set_payload_len(nd::WITH_LINK_LAYER_LEN as u16);
    ip.set_next_header(icmp6::PROTO_ICMP6);
    ip.set_hop_limit(255);
    ip.set_src(&target);
    ip.set_dst(&to);
    let pseudo = ip.pseudo_header_sum(icmp6::PROTO_ICMP6, nd::WITH_LINK_LAYER_LEN as u32);
    nd::write_advertisement(ip.payload_mut(), &target, flags, &iface.mac).ok_or(MALFORMED)?;
    Icmp6::new_checked(ip.payload_mut())
        .map_err(|_| MALFORMED)?
        .fill_checksum(pseudo);
    let l2_to = if all_nodes {
        Some(ipv6::multicast_mac(&ipv6::ALL_NODES))
    } else {
        mac
    };
    if !reply_on_link(state, cx.buffers, bi, l2_to) {
        return Err(NO_LINK_HEADER);
    }
    cx.buffers.meta_mut(bi).flags |= LOCALLY_ORIGINATED;
    Ok(())
}

impl Node<ForwardingState> for Ip6Nd {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP6_ND)
            .nexts(input::NEXTS)
            .errors(input::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use input::*;
        let state = cx.state();
        let base = cx.error_id(0);
        let bis = frame.as_slice();
        let n = bis.len();
        let mut answered = 0;
        for (&bi, next) in bis.iter().zip(&mut self.nexts[..n]) {
            let rx = IfIndex::new(cx.buffers.meta(bi).rx_interface);
            let verdict = match state.interface(rx) {
                None => Err(MALFORMED),
                Some(iface) => read(iface, cx.buffers.data(bi)).and_then(|(v, event)| {
                    if let Some(e) = event {
                        if state.events.push(e).is_err() {
                            cx.count_error(EVENTS_LOST, 1);
                        }
                    }
                    match v {
                        Verdict::Answer { target, to, mac } => {
                            answer(state, cx, bi, iface, (target, to, mac)).map(|()| OUTPUT)
                        }
                        Verdict::Consumed(code) => Err(code),
                    }
                }),
            };
            *next = match verdict {
                Ok(arc) => {
                    answered += 1;
                    arc
                }
                Err(code) => {
                    cx.buffers.meta_mut(bi).error = base + code;
                    Next::DROP
                }
            };
        }
        if answered > 0 {
            cx.count_error(SOLICITATIONS_ANSWERED, answered);
        }
        cx.enqueue_to_nexts(&self.nexts[..n], bis);
        n
    }
}

/// Slots of the solicitation throttle (direct-mapped by next hop).
const THROTTLE_SLOTS: usize = 256;

/// The `ip6-nd-resolve` node: packets whose next hop has no link-layer address yet.
pub struct Ip6NdResolve {
    throttle: Box<[(u128, u64); THROTTLE_SLOTS]>,
    interval: u64,
    requests: [BufferIndex; FRAME_SIZE],
}

impl Ip6NdResolve {
    /// A node that asks each next hop at most once per millisecond.
    pub fn new() -> Self {
        Ip6NdResolve {
            throttle: Box::new([(0, 0); THROTTLE_SLOTS]),
            interval: cycles::tsc_hz() / 1000,
            requests: [BufferIndex::NONE; FRAME_SIZE],
        }
    }
}

impl Default for Ip6NdResolve {
    fn default() -> Self {
        Self::new()
    }
}

/// Puts `frame` (`len` bytes) in a new buffer to leave by `tx`; `None` without a buffer.
fn send(cx: &mut Context<'_, ForwardingState>, tx: IfIndex, frame: &[u8]) -> Option<BufferIndex> {
    let bi = cx.buffers.alloc_one()?;
    cx.buffers.set_length(bi, frame.len() as u16);
    cx.buffers.data_mut(bi).copy_from_slice(frame);
    let m = cx.buffers.meta_mut(bi);
    m.tx_interface = tx.get();
    m.rx_interface = INVALID_INDEX;
    m.flags |= LOCALLY_ORIGINATED;
    Some(bi)
}

impl Node<ForwardingState> for Ip6NdResolve {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP6_ND_RESOLVE)
            .nexts(request::NEXTS)
            .errors(request::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use request::*;
        let state = cx.state();
        let now = cx.now();
        let resolving = cx.error_id(RESOLVING);
        let mut made = 0;
        for &bi in frame.as_slice() {
            let meta = cx.buffers.meta(bi);
            let Some(adj) = state.adjacencies.get(meta.adjacency as usize) else {
                continue;
            };
            let target = match adj.kind {
                AdjacencyKind::Glean => match Ipv6::new_checked(cx.buffers.data(bi)) {
                    Ok(ip) => ip.dst(),
                    Err(_) => continue,
                },
                _ => adj.next_hop6,
            };
            let t = u128::from_be_bytes(target);
            let key = wire::flow_hash(t as u32, (t >> 32) as u32, (t >> 64) as u8, adj.tx.get());
            let slot = &mut self.throttle[key as usize % THROTTLE_SLOTS];
            if slot.0 == t && now.wrapping_sub(slot.1) < self.interval {
                continue;
            }
            let Some(iface) = state.interface(adj.tx) else {
                continue;
            };
            if iface.neighbours_from_kernel {
                // The kernel's NIC: the control side asks the kernel (never solicit beside it).
                continue;
            }
            let Some((pkt, len)) = solicitation(iface, &target, None) else {
                cx.count_error(NO_SOURCE_ADDRESS, 1);
                continue;
            };
            let Some(req) = send(cx, adj.tx, &pkt[..len]) else {
                cx.count_error(NO_BUFFERS, 1);
                continue;
            };
            *slot = (t, now);
            self.requests[made] = req;
            made += 1;
        }
        for &bi in frame.as_slice() {
            cx.buffers.meta_mut(bi).error = resolving;
        }
        cx.enqueue_slice(Next::DROP, frame.as_slice());
        cx.enqueue_slice(OUTPUT, &self.requests[..made]);
        if made > 0 {
            cx.count_error(SOLICITATIONS_SENT, made as u64);
        }
        frame.len()
    }
}

/// Solicitations `ip6-nd-probe` sends per pass at most.
const PROBE_BURST: usize = 32;

/// The input node `ip6-nd-probe`: the unicast solicitations the control side asks for (see
/// `forwarding::neighbors`), taken by any worker.
#[derive(Default)]
pub struct Ip6NdProbe {
    requests: Vec<BufferIndex>,
}

impl Ip6NdProbe {
    /// A new node.
    pub fn new() -> Self {
        Ip6NdProbe {
            requests: Vec::with_capacity(PROBE_BURST),
        }
    }
}

impl Node<ForwardingState> for Ip6NdProbe {
    fn spec(&self) -> NodeSpec {
        NodeSpec::input(names::IP6_ND_PROBE)
            .nexts(request::NEXTS)
            .errors(request::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, _frame: &mut Frame) -> usize {
        use request::*;
        let state = cx.state();
        if state.nd_probes.is_empty() {
            return 0;
        }
        self.requests.clear();
        for _ in 0..PROBE_BURST {
            let Some(p) = state.nd_probes.pop() else {
                break;
            };
            let Some(iface) = state.interface(p.interface) else {
                continue;
            };
            if iface.neighbours_from_kernel {
                continue;
            }
            let Some((pkt, len)) = solicitation(iface, &p.target, Some(p.mac)) else {
                cx.count_error(NO_SOURCE_ADDRESS, 1);
                continue;
            };
            match send(cx, p.interface, &pkt[..len]) {
                Some(bi) => self.requests.push(bi),
                None => cx.count_error(NO_BUFFERS, 1),
            }
        }
        let made = self.requests.len();
        if made > 0 {
            cx.enqueue_slice(OUTPUT, &self.requests);
            cx.count_error(SOLICITATIONS_SENT, made as u64);
        }
        made
    }
}
