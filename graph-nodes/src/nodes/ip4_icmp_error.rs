//! `ip4-icmp-error`: an IPv4 packet too long for its next hop with Don't Fragment set becomes
//! ICMP "fragmentation needed" (type 3 code 4, RFC 1191, with the next hop's MTU) back to its
//! source, so that path MTU discovery works through Quiver instead of stalling. `ip4-rewrite`
//! sends such packets here. The error is made in the packet's own buffer: a new IPv4 and ICMP
//! header in front of the packet's IP header and first 8 bytes of payload (RFC 792), the rest
//! of the chain freed.
//!
//! Its source is the receiving interface's address in the sender's subnet (or its first), else
//! the offending packet's destination (an L3 cross-connect's interfaces have no address). It
//! goes back the way the packet came: an L3 cross-connected packet through the cross-connect of
//! the interface it was bound for (which leads back), any other through the FIB. As RFC 1812
//! asks, no error is sent about an ICMP error, a fragment other than the first, or a source
//! that is not a unicast host, and errors are rate-limited per worker.

use dataplane::BufferIndex;
use std::time::Instant;

use dataplane::buffer::WorkerBuffers;
use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::names;
use super::origin::LOCALLY_ORIGINATED;
use crate::state::{ForwardingState, IfIndex};
use crate::wire::{self, icmp, Icmp4, Ipv4};

next_arcs! {
    L3XC => names::IP4_L3XC,
    LOOKUP => names::IP4_LOOKUP,
}

node_errors! {
    SENT => ("sent", "ICMP fragmentation-needed errors sent (not a drop)"),
    NOT_FOR_THIS => ("not-for-this", "no error for an ICMP error, a later fragment or a non-unicast source"),
    RATE_LIMITED => ("rate-limited", "over the per-worker budget of ICMP errors"),
    TOO_SHORT => ("too-short", "no room in the buffer to build the error"),
}

/// Errors a worker sends per second at most (and in a burst).
const RATE: f64 = 1000.0;
const BURST: f64 = 100.0;

/// The `ip4-icmp-error` node.
pub struct Ip4IcmpError {
    nexts: [Next; FRAME_SIZE],
    tokens: f64,
    last: Option<Instant>,
}

impl Ip4IcmpError {
    /// A new node, its budget full.
    pub fn new() -> Self {
        Ip4IcmpError {
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

impl Default for Ip4IcmpError {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for Ip4IcmpError {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP4_ICMP_ERROR)
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
            let meta = cx.buffers.meta_mut(bi);
            let (rx, adjacency) = (IfIndex::new(meta.rx_interface), meta.adjacency);
            let adj = state.adjacencies.get(adjacency as usize).copied();
            let verdict = match adj {
                Some(adj) if self.tokens >= 1.0 => {
                    let d = cx.buffers.data(bi);
                    match eligible(d) {
                        Ok((src, dst, quote)) => {
                            let from = state
                                .interfaces
                                .get(rx.as_usize())
                                .and_then(Option::as_ref)
                                .and_then(|iface| {
                                    iface
                                        .address_for(src)
                                        .or(iface.addresses.first().map(|&(a, _)| a))
                                })
                                .unwrap_or(dst);
                            build(cx.buffers, bi, quote, from, src, adj.mtu).map(|()| {
                                self.tokens -= 1.0;
                                // Back the way it came.
                                let meta = cx.buffers.meta_mut(bi);
                                meta.flags |= LOCALLY_ORIGINATED;
                                if state.l3xconnect(rx).is_some() {
                                    meta.rx_interface = adj.tx.get();
                                    L3XC
                                } else {
                                    // Looked up in the arrival interface's table.
                                    LOOKUP
                                }
                            })
                        }
                        Err(code) => Err(code),
                    }
                }
                Some(_) => Err(RATE_LIMITED),
                None => Err(NOT_FOR_THIS),
            };
            self.nexts[i] = match verdict {
                Ok(next) => {
                    sent += 1;
                    next
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

/// Whether the packet `d` (IPv4 header first) may get an error: its source, destination and
/// how many of its bytes the error quotes (header and 8 bytes of payload).
fn eligible(d: &[u8]) -> Result<(u32, u32, usize), u16> {
    let ip = Ipv4::new_checked(d).map_err(|_| TOO_SHORT)?;
    let ihl = ip.header_len();
    let src = ip.src();
    let unicast = src != 0 && src != u32::MAX && (src >> 28) != 0xe && (src >> 24) != 127;
    // An ICMP message's type is its first byte (it may be all the packet has).
    let icmp_error = ip.protocol() == wire::PROTO_ICMP
        && ip
            .payload()
            .first()
            .is_some_and(|&t| !matches!(t, 0 | 8 | 13 | 14 | 15 | 16 | 17 | 18));
    if ip.frag_offset() != 0 || !unicast || icmp_error || ihl < wire::IP4_HEADER {
        return Err(NOT_FOR_THIS);
    }
    Ok((src, ip.dst(), (ihl + 8).min(d.len())))
}

/// Makes packet `bi` the error: its first `quote` bytes behind a new IPv4 header (`from` →
/// `to`) and an ICMP header carrying `mtu`.
fn build(
    buffers: &mut WorkerBuffers,
    bi: BufferIndex,
    quote: usize,
    from: u32,
    to: u32,
    mtu: u16,
) -> Result<(), u16> {
    const HEADERS: usize = wire::IP4_HEADER + icmp::HEADER_LEN;
    buffers.unchain(bi);
    if !buffers.set_length(bi, quote as u16) || buffers.prepend(bi, HEADERS as u16).is_none() {
        return Err(TOO_SHORT);
    }
    let meta = buffers.meta_mut(bi);
    meta.clear_offload();
    let mut ip = Ipv4::new_checked(buffers.data_mut(bi)).map_err(|_| TOO_SHORT)?;
    // Version 4, 20-byte header, DSCP CS6 (network control), no fragmentation, TTL 64, ICMP.
    ip.reset_header();
    ip.set_dscp_ecn(0xc0);
    ip.set_total_len((HEADERS + quote) as u16);
    ip.set_ttl(64);
    ip.set_protocol(wire::PROTO_ICMP);
    ip.set_src(from);
    ip.set_dst(to);
    ip.fill_checksum();
    let mut icmp = Icmp4::new_checked(ip.payload_mut()).map_err(|_| TOO_SHORT)?;
    icmp.set_msg_type(icmp::DEST_UNREACHABLE);
    icmp.set_code(icmp::FRAG_NEEDED);
    icmp.set_rest_of_header(0);
    icmp.set_next_hop_mtu(mtu);
    icmp.fill_checksum();
    Ok(())
}
