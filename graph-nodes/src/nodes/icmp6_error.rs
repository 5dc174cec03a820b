//! `ip6-icmp-error`: ICMPv6 errors back to a packet's source (RFC 4443): Packet Too Big with
//! the next hop's MTU (so path MTU discovery works through Quiver, RFC 8201) and Time Exceeded
//! (hop limit). The node that refuses a packet says which with [`icmp_error`] and sends it
//! here; the error is made in the packet's own buffer: a new IPv6 and ICMPv6 header in front
//! of as much of the packet as keeps the error within the minimum MTU (1280), the rest of the
//! chain freed.
//!
//! Its source is the receiving interface's address for the packet's source (its link-local
//! one for a link-local source), else its first address, else the packet's destination (an L3
//! cross-connect's interfaces have none). It goes back the way the packet came: through the
//! cross-connect of the interface it was bound for, else through the FIB. As RFC 4443 2.4 asks,
//! no error is sent about an ICMPv6 error, for a multicast destination, or to a source that is
//! not a unicast address, and errors are rate-limited per worker.

use std::time::Instant;

use dataplane::buffer::{BufferMeta, WorkerBuffers};
use dataplane::BufferIndex;
use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::ip6_input::EXTENSION_BOUND;
use super::names;
use super::origin::LOCALLY_ORIGINATED;
use crate::state::{ForwardingState, IfIndex};
use crate::wire::icmp6::{self, Icmp6};
use crate::wire::ipv6::{self, Ip6Addr, HEADER_LEN};
use crate::wire::Ipv6;

next_arcs! {
    L3XC => names::IP6_L3XC,
    LOOKUP => names::IP6_LOOKUP,
}

node_errors! {
    SENT => ("sent", "ICMPv6 errors sent (not a drop)"),
    NOT_FOR_THIS => ("not-for-this", "no error about an ICMPv6 error, a multicast destination or a non-unicast source"),
    RATE_LIMITED => ("rate-limited", "over the per-worker budget of ICMPv6 errors"),
    TOO_SHORT => ("too-short", "no room in the buffer to build the error"),
}

/// Errors a worker sends per second at most (and in a burst).
const RATE: f64 = 1000.0;
const BURST: f64 = 100.0;
/// The IPv6 minimum MTU an error must fit in (RFC 4443 2.4 (c)).
const MIN_MTU: usize = 1280;
/// The error's own headers: IPv6 and ICMPv6's eight bytes.
const HEADERS: usize = HEADER_LEN + 8;

/// Which error a packet gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Packet Too Big: longer than its next hop's MTU.
    PacketTooBig,
    /// Time Exceeded: its hop limit would reach zero.
    TimeExceeded,
}

/// Marks packet `meta` for the error `kind` (with the next hop's `mtu` for a Packet Too Big),
/// before it is sent to `ip6-icmp-error`.
pub(crate) fn icmp_error(meta: &mut BufferMeta, kind: ErrorKind, mtu: u16) {
    meta.opaque[0] = match kind {
        ErrorKind::PacketTooBig => u32::from(icmp6::PACKET_TOO_BIG),
        ErrorKind::TimeExceeded => u32::from(icmp6::TIME_EXCEEDED),
    };
    meta.opaque[1] = u32::from(mtu);
}

/// The `ip6-icmp-error` node.
pub struct Ip6IcmpError {
    nexts: [Next; FRAME_SIZE],
    tokens: f64,
    last: Option<Instant>,
}

impl Ip6IcmpError {
    /// A new node, its budget full.
    pub fn new() -> Self {
        Ip6IcmpError {
            nexts: [Next::DROP; FRAME_SIZE],
            tokens: BURST,
            last: None,
        }
    }

    /// Refills the budget for the time since the last frame.
    fn refill(&mut self) {
        let now = Instant::now();
        if let Some(last) = self.last {
            let add = now.duration_since(last).as_secs_f64() * RATE;
            self.tokens = (self.tokens + add).min(BURST);
        }
        self.last = Some(now);
    }
}

impl Default for Ip6IcmpError {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether the packet `d` (IPv6 header first) may get an error: its source and destination.
fn eligible(d: &[u8]) -> Result<(Ip6Addr, Ip6Addr), u16> {
    let ip = Ipv6::new_checked(d).map_err(|_| TOO_SHORT)?;
    let (src, dst) = (ip.src(), ip.dst());
    if ipv6::is_multicast(&src) || ipv6::is_unspecified(&src) || ipv6::is_multicast(&dst) {
        return Err(NOT_FOR_THIS);
    }
    // An ICMPv6 error's type is its first byte; one behind extension headers is found too.
    let upper = ipv6::walk(ip.payload(), ip.next_header(), EXTENSION_BOUND).ok();
    let icmp_error = upper.is_some_and(|u| {
        u.protocol == icmp6::PROTO_ICMP6
            && !u.later_fragment
            && ip
                .payload()
                .get(u.offset)
                .is_some_and(|&t| icmp6::is_error(t))
    });
    if icmp_error {
        return Err(NOT_FOR_THIS);
    }
    Ok((src, dst))
}

/// Makes packet `bi` the error of type `t` with `value` (the MTU, or 0): as much of it as fits
/// the minimum MTU behind a new IPv6 header (`from` → `to`) and an ICMPv6 header.
fn build(
    buffers: &mut WorkerBuffers,
    bi: BufferIndex,
    (t, value): (u8, u32),
    from: &Ip6Addr,
    to: &Ip6Addr,
) -> Result<(), u16> {
    buffers.unchain(bi);
    let quote = buffers.data(bi).len().min(MIN_MTU - HEADERS);
    if !buffers.set_length(bi, quote as u16) || buffers.prepend(bi, HEADERS as u16).is_none() {
        return Err(TOO_SHORT);
    }
    buffers.meta_mut(bi).clear_offload();
    let upper = (8 + quote) as u16;
    let mut ip = Ipv6::new_checked(buffers.data_mut(bi)).map_err(|_| TOO_SHORT)?;
    ip.reset_header();
    ip.set_payload_len(upper);
    ip.set_next_header(icmp6::PROTO_ICMP6);
    ip.set_hop_limit(64);
    ip.set_src(from);
    ip.set_dst(to);
    let pseudo = ip.pseudo_header_sum(icmp6::PROTO_ICMP6, u32::from(upper));
    let body = ip.payload_mut();
    let (head, _) = body.split_at_mut_checked(8).ok_or(TOO_SHORT)?;
    head[4..8].copy_from_slice(&value.to_be_bytes());
    let mut icmp = Icmp6::new_checked(body).map_err(|_| TOO_SHORT)?;
    icmp.set_msg_type(t);
    icmp.set_code(0);
    icmp.fill_checksum(pseudo);
    Ok(())
}

impl Node<ForwardingState> for Ip6IcmpError {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP6_ICMP_ERROR)
            .nexts(NEXTS)
            .errors(ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        self.refill();
        let state = cx.state();
        let base = cx.error_id(0);
        let bis = frame.as_slice();
        let mut sent = 0;
        for (i, &bi) in bis.iter().enumerate() {
            let meta = cx.buffers.meta(bi);
            let rx = IfIndex::new(meta.rx_interface);
            let kind = (meta.opaque[0] as u8, meta.opaque[1]);
            let adj = state.adjacencies.get(meta.adjacency as usize).copied();
            let verdict = if self.tokens < 1.0 {
                Err(RATE_LIMITED)
            } else {
                eligible(cx.buffers.data(bi)).and_then(|(src, dst)| {
                    let from = state
                        .interface(rx)
                        .and_then(|iface| {
                            iface
                                .address6_for(u128::from_be_bytes(src))
                                .or(iface.addresses6.first().map(|&(a, _)| a))
                        })
                        .map_or(dst, u128::to_be_bytes);
                    build(cx.buffers, bi, kind, &from, &src)
                })
            };
            self.nexts[i] = match verdict {
                Ok(()) => {
                    self.tokens -= 1.0;
                    sent += 1;
                    let meta = cx.buffers.meta_mut(bi);
                    meta.flags |= LOCALLY_ORIGINATED;
                    // Back the way it came.
                    match adj.filter(|_| state.l3xconnect(rx).is_some()) {
                        Some(adj) => {
                            meta.rx_interface = adj.tx.get();
                            L3XC
                        }
                        // Looked up in the table of the interface the packet came in on.
                        None => LOOKUP,
                    }
                }
                Err(code) => {
                    cx.buffers.meta_mut(bi).error = base + code;
                    Next::DROP
                }
            };
        }
        if sent > 0 {
            cx.count_error(SENT, sent);
        }
        cx.enqueue_to_nexts(&self.nexts[..bis.len()], bis);
        bis.len()
    }
}
