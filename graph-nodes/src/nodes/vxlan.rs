//! VXLAN over IPv4 (RFC 7348). `vxlan4-encap` writes a tunnel's precomputed outer IPv4 + UDP +
//! VXLAN header into the headroom and sends the packet to be routed on the underlay;
//! `vxlan4-input` checks and strips it and delivers the inner frame to the tunnel's L2 side
//! (its cross-connect), or to `ethernet-input` for a routed tunnel (an L3 interface).

use dataplane::buffer::flags;
use dataplane::{Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::ip6_lookup::flow_hash6;
use super::names;
use super::origin::LOCALLY_ORIGINATED;
use crate::state::ForwardingState;
use crate::wire::{self, ipv4, Ethernet, Ipv4, Ipv6, Udp, Vxlan};

/// Bytes the encapsulation adds before the outer Ethernet header.
pub const ENCAP_LEN: u16 = (wire::IP4_HEADER + wire::UDP_HEADER + wire::VXLAN_HEADER) as u16;

/// The UDP source port for an inner frame: a hash of its headers (IPv4's or IPv6's flow, else
/// the MACs), in 49152–65535; and the hash.
#[inline]
pub fn source_port(inner: &[u8]) -> (u16, u32) {
    let h = match Ethernet::new_checked(inner) {
        Ok(eth) => match (eth.ethertype(), eth.payload()) {
            (wire::ETHERTYPE_IP4, p) if Ipv4::new_checked(p).is_ok() => {
                Ipv4::new_checked(p).map_or(0, |ip| ip.flow_hash())
            }
            (wire::ETHERTYPE_IP6, p) if Ipv6::new_checked(p).is_ok() => {
                Ipv6::new_checked(p).map_or(0, |ip| flow_hash6(&ip))
            }
            // Neither (or too short for its header): the MAC addresses.
            _ => {
                let [a, b, c] = eth.address_words();
                wire::flow_hash(a, b, 0, c)
            }
        },
        Err(_) => 0,
    };
    (0xc000 | (h & 0x3fff) as u16, h)
}

/// `vxlan4-encap`'s arcs and errors.
mod encap {
    use super::names;
    dataplane::next_arcs! { pub(super) LOOKUP => names::IP4_LOOKUP }
    dataplane::node_errors! {
        pub(super) NO_TUNNEL => ("no-tunnel", "sent to an interface that is not a VXLAN tunnel"),
        NO_HEADROOM => ("no-headroom", "no headroom for the outer headers"),
    }
}
use encap::LOOKUP;

/// Packets ahead whose buffer is prefetched.
const PREFETCH_AHEAD: usize = 4;

/// The `vxlan4-encap` node.
pub struct Vxlan4Encap {
    nexts: [Next; FRAME_SIZE],
}

impl Vxlan4Encap {
    /// A new node.
    pub fn new() -> Self {
        Vxlan4Encap {
            nexts: [LOOKUP; FRAME_SIZE],
        }
    }
}

impl Default for Vxlan4Encap {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for Vxlan4Encap {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::VXLAN4_ENCAP)
            .nexts(encap::NEXTS)
            .errors(encap::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use encap::{NO_HEADROOM, NO_TUNNEL};
        let state = cx.state();
        let base = cx.error_id(0);
        let n = frame.len();
        let bis = frame.as_slice();
        let mut dropped = false;
        let (mut last_tx, mut tunnel) = (u32::MAX, None);
        // Held in registers: the stores into packets below would otherwise make the compiler
        // reload these tables' addresses and lengths for every packet.
        let (tx_class, tunnels) = (&state.tx_class[..], &state.tunnels[..]);
        let fib = state.fib.prefetcher();
        let mut buffers = cx.buffers.view();
        for (i, (&bi, next)) in bis.iter().zip(&mut self.nexts[..n]).enumerate() {
            if let Some(&ahead) = bis.get(i + PREFETCH_AHEAD) {
                buffers.prefetch(ahead);
            }
            let (meta, headroom, inner) = buffers.meta_headroom_and_data_mut(bi);
            let tx = meta.tx_interface;
            if tx != last_tx {
                last_tx = tx;
                tunnel = tx_class
                    .get(tx as usize)
                    .and_then(|c| c.tunnel())
                    .and_then(|t| tunnels.get(t as usize));
            }
            let Some(t) = tunnel else {
                meta.error = base + NO_TUNNEL;
                *next = Next::DROP;
                dropped = true;
                continue;
            };
            let inner_len = meta.total_length();
            let (sport, hash) = source_port(inner);
            meta.flow_hash = hash;
            meta.flags |= flags::FLOW_HASH_VALID
                | flags::IP4_CHECKSUM_OK
                | flags::UDP_GSO_OK
                | LOCALLY_ORIGINATED;
            // The outer headers go at the end of the headroom (a fixed-size place: no length
            // arithmetic), and the window moves back over them.
            let Some(h) = headroom
                .last_chunk_mut::<{ ENCAP_LEN as usize }>()
                .filter(|_| meta.retreat(ENCAP_LEN))
            else {
                meta.error = base + NO_HEADROOM;
                *next = Next::DROP;
                dropped = true;
                continue;
            };
            meta.l3_offset = meta.data_offset();
            // The underlay is the default table's, whatever table the inner frame was in.
            meta.rx_interface = u32::MAX;
            *h = t.header;
            // ip4-lookup finds the outer destination's FIB line in cache.
            fib.prefetch(t.dst);
            let ip_len = (inner_len + ENCAP_LEN as u32) as u16;
            // The template's IPv4 header has no options: UDP follows at a fixed place.
            let (ip, udp) = h.split_at_mut(wire::IP4_HEADER);
            if let (Ok(mut ip), Ok(mut udp)) = (Ipv4::new_checked(ip), Udp::new_checked(udp)) {
                ip.set_total_len(ip_len);
                ip.set_checksum(ipv4::checksum_with_len(t.ip_sum, ip_len));
                udp.set_src_port(sport);
                udp.set_len(ip_len - wire::IP4_HEADER as u16);
            }
        }
        if dropped {
            cx.enqueue_to_nexts(&self.nexts[..n], bis);
            self.nexts[..n].fill(LOOKUP);
        } else {
            cx.enqueue_frame(LOOKUP, frame);
        }
        n
    }
}

/// `vxlan4-input`'s arcs and errors.
mod input {
    use super::names;
    dataplane::next_arcs! {
        pub(super) XCONNECT => names::L2_XCONNECT,
        ROUTED => names::ETHERNET_INPUT,
    }
    dataplane::node_errors! {
        pub(super) TOO_SHORT => ("too-short", "too short for VXLAN and an inner Ethernet header"),
        BAD_FLAGS => ("bad-flags", "VXLAN flags without the I (valid VNI) bit"),
        NO_TUNNEL => ("no-tunnel", "no tunnel for this source, destination and VNI"),
    }
}
use input::{ROUTED, XCONNECT};

/// The `vxlan4-input` node: IPv4 packets for our VXLAN port, outer IPv4 header first.
pub struct Vxlan4Input {
    nexts: [Next; FRAME_SIZE],
    last: Option<((u32, u32, u32), u32)>,
}

impl Vxlan4Input {
    /// A new node.
    pub fn new() -> Self {
        Vxlan4Input {
            nexts: [XCONNECT; FRAME_SIZE],
            last: None,
        }
    }
}

impl Default for Vxlan4Input {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for Vxlan4Input {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::VXLAN4_INPUT)
            .nexts(input::NEXTS)
            .errors(input::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use input::{BAD_FLAGS, NO_TUNNEL, TOO_SHORT};
        let state = cx.state();
        let base = cx.error_id(0);
        let bis = frame.as_slice();
        for (i, &bi) in bis.iter().enumerate() {
            let d = cx.buffers.data(bi);
            let verdict = (|| {
                if d.len() < ENCAP_LEN as usize + wire::ETHERNET_HEADER {
                    return Err(TOO_SHORT);
                }
                // ip4-input let no options through: the lengths checked above hold the headers.
                let ip = Ipv4::new_checked(d).map_err(|_| TOO_SHORT)?;
                let udp = Udp::new_checked(ip.payload()).map_err(|_| TOO_SHORT)?;
                let vx = Vxlan::new_checked(udp.payload()).map_err(|_| TOO_SHORT)?;
                if !vx.has_vni() {
                    return Err(BAD_FLAGS);
                }
                let key = (ip.src(), ip.dst(), vx.vni());
                // Last-hit cache, checked against the current tables (they may have changed).
                let cached = self.last.filter(|&(k, t)| {
                    k == key
                        && state
                            .tunnels
                            .get(t as usize)
                            .is_some_and(|x| (x.dst, x.src, x.vni) == key)
                });
                let t = match cached {
                    Some((_, t)) => t,
                    None => {
                        let &t = state.tunnel_by_key.get(&key).ok_or(NO_TUNNEL)?;
                        self.last = Some((key, t));
                        t
                    }
                };
                let x = state.tunnels.get(t as usize).ok_or(NO_TUNNEL)?;
                Ok((x.interface, if x.routed { ROUTED } else { XCONNECT }))
            })();
            match verdict {
                Ok((iface, next)) => {
                    cx.buffers.advance(bi, ENCAP_LEN);
                    let m = cx.buffers.meta_mut(bi);
                    m.rx_interface = iface.get();
                    m.flags &=
                        !(flags::IP4_CHECKSUM_OK | flags::FLOW_HASH_VALID | LOCALLY_ORIGINATED);
                    m.l2_offset = m.data_offset();
                    self.nexts[i] = next;
                }
                Err(code) => {
                    cx.buffers.meta_mut(bi).error = base + code;
                    self.nexts[i] = Next::DROP;
                }
            }
        }
        cx.enqueue_to_nexts(&self.nexts[..bis.len()], bis);
        bis.len()
    }
}
