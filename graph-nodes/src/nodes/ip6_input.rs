//! `ip6-input`: checks an IPv6 header before anything trusts it, steps over extension headers
//! (at most [`EXTENSION_BOUND`], all within the first buffer), and says where the packet goes:
//! neighbour discovery and our link-local address to `ip6-local`, multicast for us likewise,
//! an L3 cross-connected interface's to `ip6-l3xc`, the rest to `ip6-lookup`. Every drop names
//! its reason.

use dataplane::buffer::flags;
use dataplane::BufferIndex;
use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::arcs::Arcs;
use super::names;
use crate::state::{ForwardingState, IfIndex, Interface};
use crate::wire::ipv6::{self, Ip6Addr, HEADER_LEN};
use crate::wire::Ipv6;

next_arcs! {
    LOOKUP => names::IP6_LOOKUP,
    LOCAL => names::IP6_LOCAL,
    L3XC => names::IP6_L3XC,
}

node_errors! {
    TOO_SHORT => ("too-short", "shorter than an IPv6 header"),
    BAD_VERSION => ("bad-version", "IP version is not 6"),
    TRUNCATED => ("truncated", "payload length beyond the received bytes"),
    BAD_SOURCE => ("bad-source", "source is multicast"),
    EXTENSIONS_TRUNCATED => ("extension-header-truncated", "an extension header runs past the first buffer"),
    EXTENSIONS_PAST_BOUND => ("extension-headers-past-bound", "more extension headers than the bound, or hop-by-hop options out of place"),
    LINK_LOCAL => ("link-local-not-ours", "for a link-local address that is not the receiving interface's"),
    MULTICAST => ("multicast-not-ours", "multicast that is not for this node (not routed)"),
}

/// Extension headers a packet may have before `ip6-input` gives up on it.
pub const EXTENSION_BOUND: usize = 8;

/// The `ip6-input` node.
pub struct Ip6Input {
    nexts: [Next; FRAME_SIZE],
    /// Chained packets longer than their IPv6 length, cut once the loop is done.
    trim: Vec<(BufferIndex, u32)>,
}

impl Ip6Input {
    /// A new node.
    pub fn new() -> Self {
        Ip6Input {
            nexts: [Next::DROP; FRAME_SIZE],
            trim: Vec::with_capacity(FRAME_SIZE),
        }
    }
}

impl Default for Ip6Input {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether multicast `dst` is for this node on `iface`: all-nodes, all-routers, or the
/// solicited-node group of one of its addresses.
fn multicast_for_us(dst: &Ip6Addr, iface: Option<&Interface>) -> bool {
    if *dst == ipv6::ALL_NODES || *dst == ALL_ROUTERS {
        return true;
    }
    ipv6::is_solicited_node(dst)
        && iface.is_some_and(|i| {
            let low = |a: u128| a.to_be_bytes()[13..] == dst[13..];
            i.link_local.is_some_and(low) || i.addresses6.iter().any(|&(a, _)| low(a))
        })
}

/// The all-routers multicast address, ff02::2.
const ALL_ROUTERS: Ip6Addr = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// Checks one packet (`d`: its IPv6 header first, `total` bytes in all, `in_buffer` of them in
/// the first buffer); its length and where it goes.
#[inline]
fn check(
    state: &ForwardingState,
    rx: IfIndex,
    d: &[u8],
    total: u32,
) -> Result<(u32, Ip6Addr, Next), u16> {
    let ip = Ipv6::new_checked(d).map_err(|_| TOO_SHORT)?;
    if ip.version() != 6 {
        return Err(BAD_VERSION);
    }
    let len = ip.total_len();
    if len > total {
        return Err(TRUNCATED);
    }
    let (src, dst) = (ip.src(), ip.dst());
    if ipv6::is_multicast(&src) {
        return Err(BAD_SOURCE);
    }
    let next = ip.next_header();
    if ipv6::is_extension(next) {
        // Only within the first buffer and the packet's own length.
        let own = (len as usize - HEADER_LEN).min(ip.payload().len());
        ipv6::walk(&ip.payload()[..own], next, EXTENSION_BOUND).map_err(|e| match e {
            ipv6::ExtensionError::Truncated => EXTENSIONS_TRUNCATED,
            ipv6::ExtensionError::PastBound => EXTENSIONS_PAST_BOUND,
        })?;
    }
    let arc = if ipv6::is_multicast(&dst) {
        if !multicast_for_us(&dst, state.interface(rx)) {
            return Err(MULTICAST);
        }
        LOCAL
    } else if ipv6::is_link_local(&dst) {
        let ours = state
            .interface(rx)
            .and_then(|i| i.link_local)
            .is_some_and(|a| a == u128::from_be_bytes(dst));
        if !ours {
            return Err(LINK_LOCAL);
        }
        LOCAL
    } else if state.any_l3xconnect && state.l3xconnect(rx).is_some() {
        L3XC
    } else {
        LOOKUP
    };
    Ok((len, dst, arc))
}

impl Node<ForwardingState> for Ip6Input {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP6_INPUT)
            .nexts(NEXTS)
            .errors(ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let base = cx.error_id(0);
        let fib = cx.state().fib6.prefetcher();
        let state = cx.state();
        let bis = frame.as_slice();
        let n = bis.len();
        let mut arcs = Arcs::new(&mut self.nexts[..n], LOOKUP);
        let mut buffers = cx.buffers.view();
        for (i, &bi) in bis.iter().enumerate() {
            let (meta, d) = buffers.meta_and_data_mut(bi);
            let rx = IfIndex::new(meta.rx_interface);
            let (len, dst, arc) = match check(state, rx, d, meta.total_length()) {
                Ok(good) => good,
                Err(code) => {
                    meta.error = base + code;
                    arcs.set(i, Next::DROP);
                    continue;
                }
            };
            if arc == LOOKUP {
                // Start fetching the FIB's root entry now; ip6-lookup finds it in cache.
                fib.prefetch(u128::from_be_bytes(dst));
            } else {
                arcs.set(i, arc);
            }
            meta.flags |= flags::L3_VALID;
            meta.l3_offset = meta.data_offset();
            // Trim Ethernet padding; a chain's tail is cut after the loop.
            if meta.next().is_none() {
                if (len as usize) < d.len() {
                    buffers.set_length(bi, len as u16);
                }
            } else if len < meta.total_length() {
                self.trim.push((bi, len));
            }
        }
        for (bi, len) in self.trim.drain(..) {
            cx.buffers.truncate(bi, len);
        }
        arcs.enqueue(cx, frame);
        n
    }
}
