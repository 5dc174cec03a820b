//! `ip4-local`: packets for our own addresses. ICMP echo requests are answered (so people can
//! ping Quiver); VXLAN goes to `vxlan4-input`, UDP for a WireGuard tunnel's address and port (a
//! tunnel over IPv4) to `wg4-decrypt`; anything else is counted and dropped.

use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::names;
use super::origin::LOCALLY_ORIGINATED;
use crate::state::ForwardingState;
use crate::wire::{self, icmp, Icmp4, Ipv4, Udp};

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

/// Turns an echo request into its reply in place.
fn echo_reply(mut ip: Ipv4<&mut [u8]>) -> Result<(), u16> {
    let mut icmp = Icmp4::new_checked(ip.payload_mut()).map_err(|_| BAD_ICMP)?;
    if !icmp.checksum_ok() {
        return Err(BAD_ICMP);
    }
    if icmp.msg_type() != icmp::ECHO_REQUEST || icmp.code() != 0 {
        return Err(ICMP_NOT_ECHO);
    }
    // Type 8 → 0: one 16-bit word of the ICMP header changes.
    let old = icmp.type_and_code();
    icmp.set_msg_type(icmp::ECHO_REPLY);
    let c = wire::checksum_update(icmp.checksum(), old, icmp.type_and_code());
    icmp.set_checksum(c);
    let (src, dst) = (ip.src(), ip.dst());
    ip.set_src(dst);
    ip.set_dst(src);
    ip.set_ttl(64);
    ip.fill_checksum();
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
            let verdict = match Ipv4::new_checked(d) {
                Ok(ip) if ip.protocol() == wire::PROTO_ICMP => echo_reply(ip).map(|()| LOOKUP),
                Ok(ip) if ip.protocol() == wire::PROTO_UDP => {
                    match Udp::new_checked(ip.payload()).map(|u| u.dst_port()) {
                        Ok(port) if port == vxlan_port => Ok(VXLAN),
                        Ok(port) if any_wg && state.wireguard_at(ip.dst(), port).is_some() => {
                            Ok(WIREGUARD)
                        }
                        _ => Err(UNKNOWN_PROTOCOL),
                    }
                }
                _ => Err(UNKNOWN_PROTOCOL),
            };
            match verdict {
                Ok(next) => {
                    if next == LOOKUP {
                        // rx_interface stays: the reply is looked up in its table.
                        meta.flags |= LOCALLY_ORIGINATED;
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
