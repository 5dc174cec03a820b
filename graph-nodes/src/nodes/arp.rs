//! ARP: `arp-input` answers requests for our addresses and reports what it learns;
//! `ip4-arp` asks for unresolved next hops (rate-limited) and drops the packet that needed it.

use dataplane::buffer::INVALID_INDEX;
use dataplane::BufferIndex;
use dataplane::{cycles, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::names;
use super::origin::LOCALLY_ORIGINATED;
use crate::state::{
    AdjacencyKind, DataplaneEvent, ForwardingState, IfIndex, Interface, InterfaceKind,
};
use crate::wire::{self, arp, ethernet, Arp, Ipv4, Mac, WireError};

/// `arp-input`'s arcs and errors.
mod input {
    use super::names;
    dataplane::next_arcs! { pub(super) OUTPUT => names::INTERFACE_OUTPUT }
    dataplane::node_errors! {
        pub(super) MALFORMED => ("malformed", "not an IPv4-over-Ethernet ARP packet"),
        NOT_FOR_US => ("not-for-us", "a request for an address that is not ours"),
        REPLIES => ("replies", "replies received and learned (consumed here)"),
        REQUESTS_ANSWERED => ("requests-answered", "requests answered (not a drop)"),
        EVENTS_LOST => (
            "events-lost",
            "learned neighbours not reported: the control side is behind"
        ),
    }
}

/// `ip4-arp`'s arcs and errors.
mod request {
    use super::names;
    dataplane::next_arcs! { pub(super) OUTPUT => names::INTERFACE_OUTPUT }
    dataplane::node_errors! {
        pub(super) RESOLVING => ("resolving", "dropped while the next hop's MAC is resolved"),
        REQUESTS_SENT => ("requests-sent", "ARP requests sent (not a drop)"),
        NO_BUFFERS => ("no-buffers", "no buffer for an ARP request"),
        NO_SOURCE_ADDRESS => (
            "no-source-address",
            "the interface has no address in the next hop's subnet"
        ),
    }
}

/// The `arp-input` node.
pub struct ArpInput {
    nexts: [Next; FRAME_SIZE],
}

impl ArpInput {
    /// A new node.
    pub fn new() -> Self {
        ArpInput {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl Default for ArpInput {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes an ARP packet (after the L2 header) into `d`.
fn write_arp(
    d: &mut [u8],
    op: u16,
    sender: (&Mac, u32),
    target: (&Mac, u32),
) -> Result<(), WireError> {
    let mut arp = Arp::init(d)?;
    arp.set_op(op);
    arp.set_sender_mac(sender.0);
    arp.set_sender_ip(sender.1);
    arp.set_target_mac(target.0);
    arp.set_target_ip(target.1);
    Ok(())
}

/// Writes an Ethernet header (tagged on VLAN sub-interfaces) for `iface`; returns its length.
fn write_l2(
    d: &mut [u8],
    dst: &Mac,
    iface: &Interface,
    ethertype: u16,
) -> Result<usize, WireError> {
    let tci = match iface.kind {
        InterfaceKind::Vlan { vlan, .. } => Some(vlan),
        _ => None,
    };
    ethernet::write_header(d, dst, &iface.mac, tci, ethertype)
}

/// A broadcast ARP request from `iface` (its address `src`) for `target`: its bytes, and how
/// many of them it uses.
fn request(
    iface: &Interface,
    src: u32,
    target: u32,
) -> Result<([u8; 18 + wire::ARP_LEN], usize), WireError> {
    let mut pkt = [0u8; 18 + wire::ARP_LEN];
    let hl = write_l2(&mut pkt, &wire::BROADCAST, iface, wire::ETHERTYPE_ARP)?;
    let body = pkt.get_mut(hl..).unwrap_or_default();
    write_arp(body, arp::REQUEST, (&iface.mac, src), (&[0; 6], target))?;
    Ok((pkt, hl + wire::ARP_LEN))
}

impl Node<ForwardingState> for ArpInput {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::ARP_INPUT)
            .nexts(input::NEXTS)
            .errors(input::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use input::{EVENTS_LOST, MALFORMED, NOT_FOR_US, OUTPUT, REPLIES, REQUESTS_ANSWERED};
        let state = cx.state();
        let base = cx.error_id(0);
        let (mut answered, mut lost) = (0, 0);
        let bis = frame.as_slice();
        for (i, &bi) in bis.iter().enumerate() {
            let meta = cx.buffers.meta(bi);
            let rx = IfIndex::new(meta.rx_interface);
            let l2_len = meta.data_offset().saturating_sub(meta.l2_offset);
            let verdict = (|| {
                let arp = Arp::new_checked(cx.buffers.data(bi)).map_err(|_| MALFORMED)?;
                let (op, target_ip) = (arp.op(), arp.target_ip());
                let (sender_mac, sender_ip) = (arp.sender_mac(), arp.sender_ip());
                let iface = state.interface(rx).ok_or(MALFORMED)?;
                if sender_ip != 0 && iface.address_for(sender_ip).is_some() {
                    let event = DataplaneEvent::NeighborLearned {
                        interface: rx,
                        ip: sender_ip,
                        mac: sender_mac,
                    };
                    if state.events.push(event).is_err() {
                        lost += 1;
                    }
                }
                match op {
                    arp::REQUEST if iface.addresses.iter().any(|&(a, _)| a == target_ip) => {
                        // Answer in place: back to the L2 header, rewrite both headers.
                        if !cx.buffers.retreat(bi, l2_len) {
                            return Err(MALFORMED);
                        }
                        let d = cx.buffers.data_mut(bi);
                        let hl = write_l2(d, &sender_mac, iface, wire::ETHERTYPE_ARP)
                            .map_err(|_| MALFORMED)?;
                        if d.len() < hl + wire::ARP_LEN {
                            return Err(MALFORMED);
                        }
                        write_arp(
                            &mut d[hl..],
                            arp::REPLY,
                            (&iface.mac, target_ip),
                            (&sender_mac, sender_ip),
                        )
                        .map_err(|_| MALFORMED)?;
                        // The reply is its headers (padded to the Ethernet minimum as the
                        // request was): whatever else followed the request, up to a chain of
                        // buffers, is not sent back (fuzz: a 1708-byte request was answered
                        // with 1708 bytes, past the port's MTU).
                        let len = d.len().min((hl + wire::ARP_LEN).max(60));
                        cx.buffers.unchain(bi);
                        cx.buffers.set_length(bi, len as u16);
                        let m = cx.buffers.meta_mut(bi);
                        m.tx_interface = rx.get();
                        m.flags |= LOCALLY_ORIGINATED;
                        answered += 1;
                        Ok(OUTPUT)
                    }
                    arp::REQUEST => Err(NOT_FOR_US),
                    arp::REPLY => Err(REPLIES),
                    _ => Err(MALFORMED),
                }
            })();
            match verdict {
                Ok(next) => self.nexts[i] = next,
                Err(code) => {
                    cx.buffers.meta_mut(bi).error = base + code;
                    self.nexts[i] = Next::DROP;
                }
            }
        }
        if answered > 0 {
            cx.count_error(REQUESTS_ANSWERED, answered);
        }
        if lost > 0 {
            cx.count_error(EVENTS_LOST, lost);
        }
        cx.enqueue_to_nexts(&self.nexts[..bis.len()], bis);
        bis.len()
    }
}

const THROTTLE_SLOTS: usize = 1024;

/// The `ip4-arp` node: packets whose next hop has no MAC yet.
pub struct Ip4Arp {
    /// Direct-mapped (address, last request time) so that one next hop is asked at most once
    /// per interval per worker, without allocating.
    throttle: Box<[(u32, u64); THROTTLE_SLOTS]>,
    interval: u64,
    requests: [BufferIndex; FRAME_SIZE],
}

impl Ip4Arp {
    /// A node that asks each next hop at most once per millisecond.
    pub fn new() -> Self {
        Ip4Arp {
            throttle: Box::new([(0, 0); THROTTLE_SLOTS]),
            interval: cycles::tsc_hz() / 1000,
            requests: [BufferIndex::NONE; FRAME_SIZE],
        }
    }
}

impl Default for Ip4Arp {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for Ip4Arp {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP4_ARP)
            .nexts(request::NEXTS)
            .errors(request::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use request::{NO_BUFFERS, NO_SOURCE_ADDRESS, OUTPUT, REQUESTS_SENT, RESOLVING};
        let state = cx.state();
        let now = cx.now();
        let resolving = cx.error_id(RESOLVING);
        let mut sent = 0;
        let mut made = 0;
        for &bi in frame.as_slice() {
            let meta = cx.buffers.meta(bi);
            let Some(adj) = state.adjacencies.get(meta.adjacency as usize) else {
                continue;
            };
            let d = cx.buffers.data(bi);
            let target = match adj.kind {
                AdjacencyKind::Glean => Ipv4::new_checked(d).map_or(adj.next_hop, |ip| ip.dst()),
                _ => adj.next_hop,
            };
            let slot = &mut self.throttle
                [(wire::flow_hash(target, adj.tx.get(), 0, 0) as usize) % THROTTLE_SLOTS];
            if slot.0 == target && now.wrapping_sub(slot.1) < self.interval {
                continue;
            }
            let Some(iface) = state.interface(adj.tx) else {
                continue;
            };
            if iface.neighbours_from_kernel {
                // The kernel's NIC: the control side asks the kernel (never ARP beside it).
                continue;
            }
            let Some(src) = iface.address_for(target) else {
                cx.count_error(NO_SOURCE_ADDRESS, 1);
                continue;
            };
            // Never fails: the array holds a tagged header and the ARP packet.
            let Ok((pkt, len)) = request(iface, src, target) else {
                continue;
            };
            let Some(req) = cx.buffers.alloc_one() else {
                cx.count_error(NO_BUFFERS, 1);
                continue;
            };
            *slot = (target, now);
            cx.buffers.set_length(req, len as u16);
            cx.buffers.data_mut(req).copy_from_slice(&pkt[..len]);
            let m = cx.buffers.meta_mut(req);
            m.tx_interface = adj.tx.get();
            m.rx_interface = INVALID_INDEX;
            m.flags |= LOCALLY_ORIGINATED;
            self.requests[made] = req;
            made += 1;
            sent += 1;
        }
        for &bi in frame.as_slice() {
            cx.buffers.meta_mut(bi).error = resolving;
        }
        cx.enqueue_slice(Next::DROP, frame.as_slice());
        cx.enqueue_slice(OUTPUT, &self.requests[..made]);
        if sent > 0 {
            cx.count_error(REQUESTS_SENT, sent);
        }
        frame.len()
    }
}
