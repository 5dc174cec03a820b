//! `wg-control-input`: what the WireGuard control side sends through the graph.

use std::net::{IpAddr, SocketAddr};

use dataplane::buffer::flags;
use dataplane::{Context, Frame, Node, NodeSpec, FRAME_SIZE};

use super::{outer, write_outer4, write_outer6};
use crate::nodes::names;
use crate::nodes::origin::LOCALLY_ORIGINATED;
use crate::state::ForwardingState;
use crate::wire::checksum::ones_sum;
use crate::wire::WireError;

/// `wg-control-input`'s arcs and errors.
mod arcs {
    use super::names;
    dataplane::next_arcs! {
        pub(super) LOOKUP => names::IP4_LOOKUP,
        LOOKUP6 => names::IP6_LOOKUP,
        INPUT => names::IP4_INPUT,
        IP6 => names::IP6_INPUT,
    }
    dataplane::node_errors! {
        pub(super) NO_BUFFERS => ("no-buffers", "no buffer for a datagram of the control side's"),
        NO_TUNNEL => ("no-tunnel", "the datagram's tunnel is gone"),
        TOO_LONG => ("too-long", "the datagram does not fit a buffer"),
        WRONG_FAMILY => ("wrong-family", "a datagram to a peer of another family than the tunnel's address"),
    }
}

/// Datagrams of the control side's one pass takes at most.
const CONTROL_BURST: usize = 32;

/// The input node `wg-control-input`: what the WireGuard control side sends (handshake
/// messages from the tunnel's address and port to a peer, in UDP over IPv4 or IPv6 as the
/// tunnel's address is, to be routed; packets it decrypted itself, received on the tunnel's
/// interface). Any worker may take them.
#[derive(Default)]
pub struct WgControlInput;

impl WgControlInput {
    /// A new node.
    pub fn new() -> Self {
        WgControlInput
    }
}

impl Node<ForwardingState> for WgControlInput {
    fn spec(&self) -> NodeSpec {
        NodeSpec::input(names::WG_CONTROL_INPUT)
            .nexts(arcs::NEXTS)
            .errors(arcs::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, _frame: &mut Frame) -> usize {
        use arcs::*;
        let state = cx.state();
        if state.wg_output.is_empty() {
            return 0;
        }
        let mut made = 0;
        for _ in 0..CONTROL_BURST.min(FRAME_SIZE) {
            let Some(dg) = state.wg_output.pop() else {
                break;
            };
            let Some(t) = state
                .wireguard
                .get(dg.tunnel as usize)
                .and_then(Option::as_ref)
            else {
                cx.count_error(NO_TUNNEL, 1);
                continue;
            };
            let data = dg.data();
            let (arc, at) = match (dg.inner, data.first().map(|b| b >> 4)) {
                (true, Some(6)) => (IP6, 0),
                (true, _) => (INPUT, 0),
                (false, _) if dg.peer.is_ipv6() != t.is_ipv6() => {
                    cx.count_error(WRONG_FAMILY, 1);
                    continue;
                }
                (false, _) if t.is_ipv6() => (LOOKUP6, outer(true)),
                (false, _) => (LOOKUP, outer(false)),
            };
            let Some(bi) = cx.buffers.alloc_one() else {
                cx.count_error(NO_BUFFERS, 1);
                continue;
            };
            let total = data.len() + usize::from(at);
            if total > usize::from(cx.buffers.data_size())
                || !cx.buffers.set_length(bi, total as u16)
            {
                cx.buffers.free_one(bi);
                cx.count_error(TOO_LONG, 1);
                continue;
            }
            let d = cx.buffers.data_mut(bi);
            d[usize::from(at)..].copy_from_slice(data);
            if !dg.inner {
                let len = data.len() as u16;
                // Never fails: the buffer was sized for the outer headers, the families match.
                let _ = match (t.local, dg.peer) {
                    (IpAddr::V6(src), SocketAddr::V6(to)) => write_outer6(
                        d,
                        (u128::from(src), t.port),
                        (u128::from(*to.ip()), to.port()),
                        len,
                        ones_sum(data),
                    ),
                    (IpAddr::V4(src), SocketAddr::V4(to)) => write_outer4(
                        d,
                        (u32::from(src), t.port),
                        (u32::from(*to.ip()), to.port()),
                        len,
                    ),
                    _ => Err(WireError::Unsupported),
                };
            }
            let meta = cx.buffers.meta_mut(bi);
            meta.l3_offset = meta.data_offset();
            if dg.inner {
                meta.rx_interface = t.interface.get();
            } else {
                meta.rx_interface = u32::MAX;
                meta.flags |= LOCALLY_ORIGINATED;
                if !t.is_ipv6() {
                    meta.flags |= flags::IP4_CHECKSUM_OK;
                }
            }
            cx.enqueue_slice(arc, &[bi]);
            made += 1;
        }
        made
    }
}
