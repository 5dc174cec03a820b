//! `ip6-local`: IPv6 packets for this node (its addresses, its link-local address, the
//! multicast groups it is in). ICMPv6 echo requests are answered (so people can ping Quiver):
//! through the FIB, or, to a link-local source, straight back on its link; neighbour discovery
//! goes to `ip6-nd`; VXLAN (UDP to the VXLAN port, right after the IPv6 header, to a unicast
//! address of ours) to `vxlan6-input`, and UDP likewise to a WireGuard tunnel's address and
//! port to `wg6-decrypt`; anything else is counted and dropped. ICMPv6 is found behind
//! extension headers too.

use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::ip6_input::EXTENSION_BOUND;
use super::names;
use super::origin::LOCALLY_ORIGINATED;
use super::reply_on_link::reply_on_link;
use crate::state::ForwardingState;
use crate::wire::icmp6::{self, Icmp6};
use crate::wire::{self, ipv6, Ipv6, Udp};

next_arcs! {
    LOOKUP => names::IP6_LOOKUP,
    ND => names::IP6_ND,
    OUTPUT => names::INTERFACE_OUTPUT,
    VXLAN => names::VXLAN6_INPUT,
    WIREGUARD => names::WG6_DECRYPT,
}

node_errors! {
    UNKNOWN_PROTOCOL => ("unknown-protocol", "for us, but no handler for its protocol"),
    BAD_ICMP => ("bad-icmp", "ICMPv6 shorter than its header or with a bad checksum"),
    ICMP_NOT_ECHO => ("icmp-not-echo", "ICMPv6 other than an echo request or neighbour discovery"),
    MULTICAST_ECHO => ("multicast-echo", "echo requests to a multicast group (not answered)"),
    ECHO_REPLIES => ("echo-replies", "echo replies sent (not a drop)"),
    NO_LINK_HEADER => ("no-link-header", "a reply to a link-local source, with no Ethernet header to answer behind"),
}

/// The `ip6-local` node.
pub struct Ip6Local {
    nexts: [Next; FRAME_SIZE],
}

impl Ip6Local {
    /// A new node.
    pub fn new() -> Self {
        Ip6Local {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl Default for Ip6Local {
    fn default() -> Self {
        Self::new()
    }
}

/// Where packet `d` (IPv6 header first) goes: neighbour discovery, VXLAN (to `state`'s VXLAN
/// port), WireGuard (to a tunnel's address and port), or an echo request turned into its reply
/// in place.
fn handle(d: &mut [u8], state: &ForwardingState) -> Result<Next, u16> {
    let ip = Ipv6::new_checked(&*d).map_err(|_| BAD_ICMP)?;
    let upper = ipv6::walk(ip.payload(), ip.next_header(), EXTENSION_BOUND)
        .map_err(|_| UNKNOWN_PROTOCOL)?;
    if upper.protocol == wire::PROTO_UDP && upper.offset == 0 && !ipv6::is_multicast(&ip.dst()) {
        return match Udp::new_checked(ip.payload()).map(|u| u.dst_port()) {
            Ok(port) if port == state.vxlan_port => Ok(VXLAN),
            Ok(port)
                if !state.wireguard.is_empty()
                    && state
                        .wireguard_at6(u128::from_be_bytes(ip.dst()), port)
                        .is_some() =>
            {
                Ok(WIREGUARD)
            }
            _ => Err(UNKNOWN_PROTOCOL),
        };
    }
    if upper.protocol != icmp6::PROTO_ICMP6 || upper.later_fragment {
        return Err(UNKNOWN_PROTOCOL);
    }
    let t = ip.payload().get(upper.offset).copied().ok_or(BAD_ICMP)?;
    match t {
        icmp6::NEIGHBOR_SOLICITATION
        | icmp6::NEIGHBOR_ADVERTISEMENT
        | icmp6::ROUTER_SOLICITATION
        | icmp6::ROUTER_ADVERTISEMENT
        | icmp6::REDIRECT => return Ok(ND),
        icmp6::ECHO_REQUEST => {}
        _ => return Err(ICMP_NOT_ECHO),
    }
    if ipv6::is_multicast(&ip.dst()) {
        return Err(MULTICAST_ECHO);
    }
    let upper_len = ip.total_len() as usize - ipv6::HEADER_LEN - upper.offset;
    let pseudo = ip.pseudo_header_sum(icmp6::PROTO_ICMP6, upper_len as u32);
    let (src, dst) = (ip.src(), ip.dst());
    let mut ip = Ipv6::new_checked(d).map_err(|_| BAD_ICMP)?;
    {
        let body = ip
            .payload_mut()
            .get_mut(upper.offset..upper.offset + upper_len)
            .ok_or(BAD_ICMP)?;
        let mut icmp = Icmp6::new_checked(body).map_err(|_| BAD_ICMP)?;
        if !icmp.checksum_ok(pseudo) || icmp.code() != 0 {
            return Err(BAD_ICMP);
        }
        // Type 128 → 129: one 16-bit word changes; swapping the addresses leaves the
        // pseudo-header's sum as it was.
        let old = icmp.type_and_code();
        icmp.set_msg_type(icmp6::ECHO_REPLY);
        let c = wire::checksum_update(icmp.checksum(), old, icmp.type_and_code());
        icmp.set_checksum(c);
    }
    ip.set_src(&dst);
    ip.set_dst(&src);
    ip.set_hop_limit(64);
    Ok(LOOKUP)
}

impl Node<ForwardingState> for Ip6Local {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP6_LOCAL)
            .nexts(NEXTS)
            .errors(ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let base = cx.error_id(0);
        let mut replies = 0;
        let bis = frame.as_slice();
        let n = bis.len();
        let state = cx.state();
        for (&bi, next) in bis.iter().zip(&mut self.nexts[..n]) {
            let verdict = handle(cx.buffers.data_mut(bi), state);
            // A reply to a link-local source goes back on its link, not through the FIB.
            let on_link = verdict == Ok(LOOKUP)
                && Ipv6::new_checked(cx.buffers.data(bi))
                    .is_ok_and(|ip| ipv6::is_link_local(&ip.dst()));
            let verdict = match verdict {
                Ok(LOOKUP) if on_link => {
                    if reply_on_link(state, cx.buffers, bi, None) {
                        Ok(OUTPUT)
                    } else {
                        Err(NO_LINK_HEADER)
                    }
                }
                other => other,
            };
            let meta = cx.buffers.meta_mut(bi);
            *next = match verdict {
                Ok(arc) if arc == LOOKUP || arc == OUTPUT => {
                    replies += 1;
                    // rx_interface stays: a reply through the FIB is looked up in the
                    // table of the interface the request came in on.
                    meta.flags |= LOCALLY_ORIGINATED;
                    arc
                }
                Ok(arc) => arc,
                Err(code) => {
                    meta.error = base + code;
                    Next::DROP
                }
            };
        }
        if replies > 0 {
            cx.count_error(ECHO_REPLIES, replies);
        }
        cx.enqueue_to_nexts(&self.nexts[..n], bis);
        n
    }
}
