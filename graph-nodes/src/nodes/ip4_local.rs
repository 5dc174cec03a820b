//! `ip4-local`: packets for our own addresses. ICMP echo requests are answered (so people can
//! ping Quiver); VXLAN goes to `vxlan4-input`, UDP for a WireGuard tunnel's address and port to
//! `wg4-decrypt`; anything else is counted and dropped.

use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::{names, LOCALLY_ORIGINATED};
use crate::state::ForwardingState;
use crate::wire::{self, be16, be32, ip4};

next_arcs! {
    LOOKUP => names::IP4_LOOKUP,
    VXLAN => names::VXLAN4_INPUT,
    WIREGUARD => names::WG4_DECRYPT,
}

node_errors! {
    UNKNOWN_PROTOCOL => ("unknown-protocol", "for us, but no handler for its protocol or port"),
    BAD_ICMP => ("bad-icmp", "ICMP shorter than 8 bytes or with a bad checksum"),
    ICMP_NOT_ECHO => ("icmp-not-echo", "ICMP other than an echo request"),
    ECHO_REPLIES => ("echo-replies", "echo replies sent (not a drop)"),
}

/// The `ip4-local` node.
pub struct Ip4Local {
    nexts: [Next; FRAME_SIZE],
}

impl Ip4Local {
    /// A new node.
    pub fn new() -> Self {
        Ip4Local {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl Default for Ip4Local {
    fn default() -> Self {
        Self::new()
    }
}

/// Turns an echo request (IPv4 header at `d[0]`, no options) into its reply in place.
fn echo_reply(d: &mut [u8]) -> Result<(), u16> {
    let icmp = &d[wire::IP4_HEADER..];
    if icmp.len() < 8 || wire::checksum(icmp) != 0 {
        return Err(BAD_ICMP);
    }
    if icmp[0] != 8 || icmp[1] != 0 {
        return Err(ICMP_NOT_ECHO);
    }
    // Type 8 → 0: one 16-bit word of the ICMP header changes.
    let old = be16(d, wire::IP4_HEADER);
    d[wire::IP4_HEADER] = 0;
    let c = wire::checksum_update(
        be16(d, wire::IP4_HEADER + 2),
        old,
        be16(d, wire::IP4_HEADER),
    );
    wire::put16(d, wire::IP4_HEADER + 2, c);
    let (src, dst) = (be16(d, ip4::SRC), be16(d, ip4::SRC + 2));
    d.copy_within(ip4::DST..ip4::DST + 4, ip4::SRC);
    wire::put16(d, ip4::DST, src);
    wire::put16(d, ip4::DST + 2, dst);
    d[ip4::TTL] = 64;
    wire::put16(d, ip4::CHECKSUM, 0);
    let c = wire::checksum(&d[..wire::IP4_HEADER]);
    wire::put16(d, ip4::CHECKSUM, c);
    Ok(())
}

impl Node<ForwardingState> for Ip4Local {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP4_LOCAL)
            .nexts(NEXTS)
            .errors(ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let state = cx.state();
        let vxlan_port = state.vxlan_port;
        let any_wg = !state.wireguard.is_empty();
        let base = cx.error_id(0);
        let mut replies = 0;
        let bis = frame.as_slice();
        for (i, &bi) in bis.iter().enumerate() {
            let (meta, d) = cx.buffers.meta_and_data_mut(bi);
            let proto = if d.len() >= wire::IP4_HEADER {
                d[ip4::PROTO]
            } else {
                0
            };
            let verdict = match proto {
                wire::PROTO_ICMP => echo_reply(d).map(|()| LOOKUP),
                wire::PROTO_UDP
                    if d.len() >= wire::IP4_HEADER + wire::UDP_HEADER
                        && be16(d, wire::IP4_HEADER + 2) == vxlan_port =>
                {
                    Ok(VXLAN)
                }
                wire::PROTO_UDP
                    if any_wg
                        && d.len() >= wire::IP4_HEADER + wire::UDP_HEADER
                        && state
                            .wireguard_at(be32(d, ip4::DST), be16(d, wire::IP4_HEADER + 2))
                            .is_some() =>
                {
                    Ok(WIREGUARD)
                }
                _ => Err(UNKNOWN_PROTOCOL),
            };
            match verdict {
                Ok(next) => {
                    if next == LOOKUP {
                        meta.flags |= LOCALLY_ORIGINATED;
                        meta.rx_interface = u32::MAX;
                        replies += 1;
                    }
                    self.nexts[i] = next;
                }
                Err(code) => {
                    meta.error = base + code;
                    self.nexts[i] = Next::DROP;
                }
            }
        }
        if replies > 0 {
            cx.count_error(ECHO_REPLIES, replies);
        }
        cx.enqueue_to_nexts(&self.nexts[..bis.len()], bis);
        bis.len()
    }
}
