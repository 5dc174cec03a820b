//! VXLAN over IPv6 (RFC 7348 section 5, RFC 8200 8.1). `vxlan6-encap` writes a tunnel's
//! precomputed outer IPv6 + UDP + VXLAN header into the headroom, with the UDP checksum that
//! IPv6 requires (the tunnel's fixed part of the sum is precomputed; the inner frame is summed
//! once) and the flow label from the inner frame's hash (RFC 6438), and sends the packet to
//! be routed on the underlay; `vxlan6-input` checks the checksum (a zero one is refused, as
//! Linux refuses it unless told otherwise), strips the headers and delivers the inner frame
//! to the tunnel's L2 side.

use dataplane::buffer::flags;
use dataplane::{BufferIndex, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::names;
use super::origin::LOCALLY_ORIGINATED;
use super::vxlan::source_port;
use crate::forwarding::VXLAN6_HEADER;
use crate::state::ForwardingState;
use crate::wire::checksum::{fold, ones_sum, Summer};
use crate::wire::{self, ipv6, Ipv6, Udp, Vxlan};

/// Bytes the encapsulation adds before the outer Ethernet header.
pub const ENCAP6_LEN: u16 = VXLAN6_HEADER as u16;

/// Where the UDP header starts in the outer headers.
const UDP_AT: usize = ipv6::HEADER_LEN;

/// `vxlan6-encap`'s arcs and errors.
mod encap {
    use super::names;
    dataplane::next_arcs! { pub(super) LOOKUP => names::IP6_LOOKUP }
    dataplane::node_errors! {
        pub(super) NO_TUNNEL => ("no-tunnel", "sent to an interface that is not a VXLAN tunnel over IPv6"),
        NO_HEADROOM => ("no-headroom", "no headroom for the outer headers"),
        TOO_LONG => ("too-long", "longer than an IPv6 payload can be"),
    }
}
use encap::LOOKUP;

/// Packets ahead whose buffer is prefetched.
const PREFETCH_AHEAD: usize = 4;

/// The UDP checksum field for the sum `acc` of everything it covers: the inverted fold, and
/// 0xffff for a computed zero (zero means "no checksum", which IPv6 does not allow).
#[inline(always)]
pub(super) fn udp_checksum(acc: u64) -> u16 {
    match !fold(acc) {
        0 => 0xffff,
        c => c,
    }
}

/// The `vxlan6-encap` node.
pub struct Vxlan6Encap {
    nexts: [Next; FRAME_SIZE],
    /// Packets of the frame whose bytes go on in chained buffers (their checksum is finished
    /// after the loop), with the sum so far of each.
    chained: Vec<(BufferIndex, u64)>,
}

impl Vxlan6Encap {
    /// A new node.
    pub fn new() -> Self {
        Vxlan6Encap {
            nexts: [LOOKUP; FRAME_SIZE],
            chained: Vec::with_capacity(FRAME_SIZE),
        }
    }
}

impl Default for Vxlan6Encap {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for Vxlan6Encap {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::VXLAN6_ENCAP)
            .nexts(encap::NEXTS)
            .errors(encap::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use encap::{NO_HEADROOM, NO_TUNNEL, TOO_LONG};
        let state = cx.state();
        let base = cx.error_id(0);
        let n = frame.len();
        let bis = frame.as_slice();
        let mut dropped = false;
        let (mut last_tx, mut tunnel) = (u32::MAX, None);
        let (tx_class, tunnels) = (&state.tx_class[..], &state.tunnels6[..]);
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
                    .and_then(|c| c.tunnel6())
                    .and_then(|t| tunnels.get(t as usize));
            }
            let Some(t) = tunnel else {
                meta.error = base + NO_TUNNEL;
                *next = Next::DROP;
                dropped = true;
                continue;
            };
            let inner_len = meta.total_length();
            let udp_len = inner_len + (wire::UDP_HEADER + wire::VXLAN_HEADER) as u32;
            if udp_len > u32::from(u16::MAX) {
                meta.error = base + TOO_LONG;
                *next = Next::DROP;
                dropped = true;
                continue;
            }
            let udp_len = udp_len as u16;
            let (sport, hash) = source_port(inner);
            let inner_sum = ones_sum(inner);
            let chained = meta.next().is_some();
            let Some(h) = headroom
                .last_chunk_mut::<{ VXLAN6_HEADER }>()
                .filter(|_| meta.retreat(ENCAP6_LEN))
            else {
                meta.error = base + NO_HEADROOM;
                *next = Next::DROP;
                dropped = true;
                continue;
            };
            meta.flow_hash = hash;
            meta.flags |= flags::FLOW_HASH_VALID | LOCALLY_ORIGINATED;
            meta.l3_offset = meta.data_offset();
            // The underlay is the default table's, whatever table the inner frame was in.
            meta.rx_interface = u32::MAX;
            *h = t.header;
            let acc =
                u64::from(t.fixed_sum) + 2 * u64::from(udp_len) + u64::from(sport) + inner_sum;
            let (ip, udp) = h.split_at_mut(UDP_AT);
            if let (Ok(mut ip), Ok(mut udp)) = (Ipv6::new_checked(ip), Udp::new_checked(udp)) {
                ip.set_payload_len(udp_len);
                ip.set_flow_label(hash);
                udp.set_src_port(sport);
                udp.set_len(udp_len);
                udp.set_checksum(udp_checksum(acc));
            }
            if chained {
                self.chained.push((bi, acc));
            }
        }
        // The rare packet in several buffers: its later buffers join the sum.
        for (bi, acc) in self.chained.drain(..) {
            let head = cx.buffers.data(bi).len();
            let mut s = Summer::default();
            // The head's bytes after the outer headers were summed; an odd count of them puts
            // the next byte in the low half of its word.
            if (head - VXLAN6_HEADER) % 2 == 1 {
                s.add(&[0]);
            }
            let rest = sum_from_rest(cx, bi, s);
            let d = cx.buffers.data_mut(bi);
            if let Ok(mut udp) = Udp::new_checked(&mut d[UDP_AT..]) {
                udp.set_checksum(udp_checksum(acc + rest));
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

/// `s` fed with packet `bi`'s bytes after its first buffer: their unfolded sum.
fn sum_from_rest(cx: &Context<'_, ForwardingState>, bi: BufferIndex, mut s: Summer) -> u64 {
    for b in cx.buffers.chain(bi).skip(1) {
        s.add(cx.buffers.data(b));
    }
    s.acc()
}

/// `vxlan6-input`'s arcs and errors.
mod input {
    use super::names;
    dataplane::next_arcs! {
        pub(super) XCONNECT => names::L2_XCONNECT,
        ROUTED => names::ETHERNET_INPUT,
    }
    dataplane::node_errors! {
        pub(super) TOO_SHORT => ("too-short", "too short for VXLAN and an inner Ethernet header"),
        BAD_LENGTH => ("bad-length", "a UDP length other than the IPv6 payload length"),
        ZERO_CHECKSUM => ("zero-checksum", "UDP without a checksum (IPv6 requires one)"),
        BAD_CHECKSUM => ("bad-checksum", "the UDP checksum does not match"),
        BAD_FLAGS => ("bad-flags", "VXLAN flags without the I (valid VNI) bit"),
        NO_TUNNEL => ("no-tunnel", "no tunnel for this source, destination and VNI"),
    }
}
use input::{ROUTED, XCONNECT};

/// The `vxlan6-input` node: IPv6 packets for our VXLAN port with no extension headers (as
/// `ip6-local` sends them), outer IPv6 header first.
pub struct Vxlan6Input {
    nexts: [Next; FRAME_SIZE],
    last: Option<((u128, u128, u32), u32)>,
}

impl Vxlan6Input {
    /// A new node.
    pub fn new() -> Self {
        Vxlan6Input {
            nexts: [XCONNECT; FRAME_SIZE],
            last: None,
        }
    }
}

impl Default for Vxlan6Input {
    fn default() -> Self {
        Self::new()
    }
}

/// The tunnel key (outer source, destination, VNI) of packet `bi`, once its lengths, UDP
/// checksum and VXLAN flags are checked.
fn checked_key(
    cx: &Context<'_, ForwardingState>,
    bi: BufferIndex,
) -> Result<(u128, u128, u32), u16> {
    use input::{BAD_CHECKSUM, BAD_FLAGS, BAD_LENGTH, TOO_SHORT, ZERO_CHECKSUM};
    let d = cx.buffers.data(bi);
    if d.len() < VXLAN6_HEADER + wire::ETHERNET_HEADER {
        return Err(TOO_SHORT);
    }
    let ip = Ipv6::new_checked(d).map_err(|_| TOO_SHORT)?;
    let udp = Udp::new_checked(ip.payload()).map_err(|_| TOO_SHORT)?;
    if udp.len() != ip.payload_len() {
        return Err(BAD_LENGTH);
    }
    if udp.checksum() == 0 {
        return Err(ZERO_CHECKSUM);
    }
    let mut s = Summer::default();
    s.add(&d[UDP_AT..]);
    let sum = if cx.buffers.meta(bi).next().is_some() {
        sum_from_rest(cx, bi, s)
    } else {
        s.acc()
    };
    // Summed with the field, a right checksum makes all ones.
    let pseudo = ip.pseudo_header_sum(wire::PROTO_UDP, u32::from(udp.len()));
    if fold(pseudo + sum) != 0xffff {
        return Err(BAD_CHECKSUM);
    }
    let vx = Vxlan::new_checked(udp.payload()).map_err(|_| TOO_SHORT)?;
    if !vx.has_vni() {
        return Err(BAD_FLAGS);
    }
    let (src, dst) = (u128::from_be_bytes(ip.src()), u128::from_be_bytes(ip.dst()));
    Ok((src, dst, vx.vni()))
}

impl Node<ForwardingState> for Vxlan6Input {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::VXLAN6_INPUT)
            .nexts(input::NEXTS)
            .errors(input::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use input::NO_TUNNEL;
        let state = cx.state();
        let base = cx.error_id(0);
        let bis = frame.as_slice();
        for (i, &bi) in bis.iter().enumerate() {
            let verdict = checked_key(cx, bi).and_then(|key| {
                // Last-hit cache, checked against the current tables (they may have changed).
                let cached = self.last.filter(|&(k, t)| {
                    k == key
                        && state
                            .tunnels6
                            .get(t as usize)
                            .is_some_and(|x| (x.dst, x.src, x.vni) == key)
                });
                let t = match cached {
                    Some((_, t)) => t,
                    None => {
                        let &t = state.tunnel6_by_key.get(&key).ok_or(NO_TUNNEL)?;
                        self.last = Some((key, t));
                        t
                    }
                };
                let x = state.tunnels6.get(t as usize).ok_or(NO_TUNNEL)?;
                Ok((x.interface, if x.routed { ROUTED } else { XCONNECT }))
            });
            match verdict {
                Ok((iface, next)) => {
                    cx.buffers.advance(bi, ENCAP6_LEN);
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
