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

use std::time::Instant;

use dataplane::buffer::WorkerBuffers;
use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::{names, LOCALLY_ORIGINATED};
use crate::state::ForwardingState;
use crate::wire::{self, ip4};

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

/// ICMP type "destination unreachable" and its code "fragmentation needed and DF set".
const UNREACHABLE: u8 = 3;
const FRAG_NEEDED: u8 = 4;

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
            let (rx, adjacency) = (meta.rx_interface, meta.adjacency);
            let adj = state.adjacencies.get(adjacency as usize).copied();
            let verdict = match adj {
                Some(adj) if self.tokens >= 1.0 => {
                    let d = cx.buffers.data(bi);
                    match eligible(d) {
                        Ok((src, dst, quote)) => {
                            let from = state
                                .interfaces
                                .get(rx as usize)
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
                                    meta.rx_interface = adj.tx;
                                    L3XC
                                } else {
                                    meta.rx_interface = u32::MAX;
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
    if d.len() < wire::IP4_HEADER {
        return Err(TOO_SHORT);
    }
    let ihl = usize::from(d[0] & 0x0f) * 4;
    let (src, dst) = (wire::be32(d, ip4::SRC), wire::be32(d, ip4::DST));
    let offset = wire::be16(d, 6) & 0x1fff;
    let unicast = src != 0 && src != u32::MAX && (src >> 28) != 0xe && (src >> 24) != 127;
    let icmp_error = d[ip4::PROTO] == wire::PROTO_ICMP
        && d.get(ihl)
            .is_some_and(|&t| !matches!(t, 0 | 8 | 13 | 14 | 15 | 16 | 17 | 18));
    if offset != 0 || !unicast || icmp_error || ihl < wire::IP4_HEADER {
        return Err(NOT_FOR_THIS);
    }
    Ok((src, dst, (ihl + 8).min(d.len())))
}

/// Makes packet `bi` the error: its first `quote` bytes behind a new IPv4 header (`from` →
/// `to`) and an ICMP header carrying `mtu`.
fn build(
    buffers: &mut WorkerBuffers,
    bi: u32,
    quote: usize,
    from: u32,
    to: u32,
    mtu: u16,
) -> Result<(), u16> {
    const HEADERS: usize = wire::IP4_HEADER + 8;
    buffers.unchain(bi);
    if !buffers.set_length(bi, quote as u16) || buffers.prepend(bi, HEADERS as u16).is_none() {
        return Err(TOO_SHORT);
    }
    let meta = buffers.meta_mut(bi);
    meta.clear_offload();
    let d = buffers.data_mut(bi);
    let (ip, icmp) = d.split_at_mut(wire::IP4_HEADER);
    // Version 4, 20-byte header, DSCP CS6 (network control), no fragmentation, TTL 64, ICMP.
    ip.copy_from_slice(&[
        0x45,
        0xc0,
        0,
        0,
        0,
        0,
        0,
        0,
        64,
        wire::PROTO_ICMP,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ]);
    wire::put16(ip, 2, (HEADERS + quote) as u16);
    wire::put32(ip, ip4::SRC, from);
    wire::put32(ip, ip4::DST, to);
    let c = wire::checksum(ip);
    wire::put16(ip, ip4::CHECKSUM, c);
    icmp[..8].copy_from_slice(&[UNREACHABLE, FRAG_NEEDED, 0, 0, 0, 0, 0, 0]);
    wire::put16(icmp, 6, mtu);
    let c = wire::checksum(icmp);
    wire::put16(icmp, 2, c);
    Ok(())
}
