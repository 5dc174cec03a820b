//! `wg4-encrypt` and `wg6-encrypt`: an IP packet sent to a WireGuard interface, sealed to its
//! peer in UDP over the tunnel's underlay family.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use dataplane::buffer::{flags, WorkerBuffers};
use dataplane::BufferIndex;
use dataplane::{Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};
use wireguard::transport::{self, sealed_len_within};
use wireguard::wire::TRANSPORT_HEADER_LEN;

use super::{outer, write_outer4, write_outer6};
use crate::nodes::names;
use crate::nodes::origin::LOCALLY_ORIGINATED;
use crate::state::{ForwardingState, IfIndex};
use crate::wire::checksum::ones_sum;
use crate::wire::{Ipv4, Ipv6, WireError};
use crate::wireguard::{WgPeerCounters, WgTunnel};

/// `wg4-encrypt`'s arcs.
mod arcs4 {
    use super::names;
    dataplane::next_arcs! { pub(super) LOOKUP => names::IP4_LOOKUP }
}

/// `wg6-encrypt`'s arcs (the same index as IPv4's).
mod arcs6 {
    use super::names;
    dataplane::next_arcs! { pub(super) LOOKUP => names::IP6_LOOKUP }
}

/// Both encrypt nodes' errors.
mod errors {
    dataplane::node_errors! {
        pub(super) NO_TUNNEL => ("no-tunnel", "sent to an interface that is not a WireGuard tunnel over this node's family"),
        NOT_IP => ("not-ip", "neither an IPv4 nor an IPv6 packet"),
        CHAINED => ("chained", "longer than one buffer"),
        NO_PEER => ("no-peer", "no peer's allowed IPs hold the destination"),
        NO_SESSION => ("no-session", "no session with the peer yet (a handshake was asked for)"),
        NO_ENDPOINT => ("no-endpoint", "the peer's endpoint is unknown (or not of the tunnel's family)"),
        COUNTER_EXHAUSTED => ("counter-exhausted", "the session's counter is used up"),
        NO_ROOM => ("no-room", "no room in the buffer for the transport header, padding and tag"),
    }
}

/// The encrypt node of one underlay family: `wg6-encrypt` when `V6`, else `wg4-encrypt`.
pub struct WgEncrypt<const V6: bool> {
    nexts: [Next; FRAME_SIZE],
}

/// `wg4-encrypt`: WireGuard over IPv4.
pub type Wg4Encrypt = WgEncrypt<false>;

/// `wg6-encrypt`: WireGuard over IPv6.
pub type Wg6Encrypt = WgEncrypt<true>;

impl<const V6: bool> WgEncrypt<V6> {
    /// A new node.
    pub fn new() -> Self {
        WgEncrypt {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl<const V6: bool> Default for WgEncrypt<V6> {
    fn default() -> Self {
        Self::new()
    }
}

/// Seals packet `bi` (an IP packet sent to a WireGuard interface over the family `V6` says)
/// for its peer, in place: the buffer then holds the transport message. Returns the tunnel,
/// the peer's position and endpoint, and the inner packet's length. Inlined into the node's
/// loop; `Err` is the error to count.
#[inline(always)]
fn seal_one<'s, const V6: bool>(
    state: &'s ForwardingState,
    buffers: &mut WorkerBuffers,
    bi: BufferIndex,
) -> Result<(&'s WgTunnel, usize, SocketAddr, usize), u16> {
    use errors::*;
    let meta = buffers.meta(bi);
    let class = state.tx_class(IfIndex::new(meta.tx_interface));
    let t = if V6 {
        class.wireguard6_tunnel()
    } else {
        class.wireguard_tunnel()
    }
    .and_then(|t| state.wireguard.get(t as usize)?.as_ref())
    .ok_or(NO_TUNNEL)?;
    if meta.next().is_some() {
        return Err(CHAINED);
    }
    let d = buffers.data(bi);
    let peer = match d.first().map(|b| b >> 4) {
        Some(4) => Ipv4::new_checked(d).map(|ip| t.peer_for(ip.dst())),
        Some(6) => Ipv6::new_checked(d).map(|ip| t.peer_for6(u128::from_be_bytes(ip.dst()))),
        _ => Err(WireError::Unsupported),
    }
    .map_err(|_| NOT_IP)?
    .ok_or(NO_PEER)?;
    let counters = &t.shared.peers[peer];
    let p = &t.peers[peer];
    let Some(session) = p.send.as_ref() else {
        counters.want_handshake.store(true, Ordering::Relaxed);
        return Err(NO_SESSION);
    };
    let to = p
        .endpoint
        .filter(|e| e.port() != 0 && e.is_ipv6() == V6)
        .ok_or(NO_ENDPOINT)?;
    let len = d.len();
    // Padding to 16 stops at the tunnel interface's MTU, so a packet of its full MTU still
    // fits the underlay's.
    let mtu = state
        .interface(IfIndex::new(meta.tx_interface))
        .map_or(usize::MAX, |i| usize::from(i.mtu));
    if buffers.prepend(bi, TRANSPORT_HEADER_LEN as u16).is_none()
        || !buffers.set_length(bi, sealed_len_within(len, mtu) as u16)
    {
        return Err(NO_ROOM);
    }
    let Some(counter) = session.counter.next() else {
        counters.want_handshake.store(true, Ordering::Relaxed);
        return Err(COUNTER_EXHAUSTED);
    };
    if counter >= wireguard::timers::REKEY_AFTER_MESSAGES {
        counters.want_handshake.store(true, Ordering::Relaxed);
    }
    transport::seal_within(&session.keys, counter, buffers.data_mut(bi), len, mtu)
        .map_err(|_| NO_ROOM)?;
    Ok((t, peer, to, len))
}

impl<const V6: bool> Node<ForwardingState> for WgEncrypt<V6> {
    fn spec(&self) -> NodeSpec {
        if V6 {
            NodeSpec::internal(names::WG6_ENCRYPT).nexts(arcs6::NEXTS)
        } else {
            NodeSpec::internal(names::WG4_ENCRYPT).nexts(arcs4::NEXTS)
        }
        .errors(errors::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use errors::NO_ROOM;
        // Each family's one arc, at the same index.
        let lookup = if V6 { arcs6::LOOKUP } else { arcs4::LOOKUP };
        let state = cx.state();
        let base = cx.error_id(0);
        let fib = state.fib.prefetcher();
        let bis = frame.as_slice();
        let n = bis.len();
        for (&bi, next) in bis.iter().zip(&mut self.nexts[..n]) {
            let verdict = seal_one::<V6>(state, cx.buffers, bi).and_then(|(t, peer, to, len)| {
                let sealed = cx.buffers.data(bi).len();
                let payload = u16::try_from(sealed).map_err(|_| NO_ROOM)?;
                // The ciphertext's sum for the UDP checksum over IPv6: one pass over it, while
                // it is still in the cache from sealing.
                let sum = if V6 { ones_sum(cx.buffers.data(bi)) } else { 0 };
                let h = cx.buffers.prepend(bi, outer(V6)).ok_or(NO_ROOM)?;
                match (t.local, to) {
                    (std::net::IpAddr::V6(src), SocketAddr::V6(dst)) if V6 => write_outer6(
                        h,
                        (u128::from(src), t.port),
                        (u128::from(*dst.ip()), dst.port()),
                        payload,
                        sum,
                    ),
                    (std::net::IpAddr::V4(src), SocketAddr::V4(dst)) if !V6 => write_outer4(
                        h,
                        (u32::from(src), t.port),
                        (u32::from(*dst.ip()), dst.port()),
                        payload,
                    ),
                    _ => Err(WireError::Unsupported),
                }
                .map_err(|_| NO_ROOM)?;
                let counters = &t.shared.peers[peer];
                WgPeerCounters::bump(&counters.tx_packets, 1);
                WgPeerCounters::bump(&counters.tx_bytes, len as u64);
                Ok(to)
            });
            match verdict {
                Ok(to) => {
                    let meta = cx.buffers.meta_mut(bi);
                    meta.flags &= !flags::FLOW_HASH_VALID;
                    if let SocketAddr::V4(dst) = to {
                        fib.prefetch(u32::from(*dst.ip()));
                        meta.flags |=
                            flags::IP4_CHECKSUM_OK | flags::UDP_GSO_OK | LOCALLY_ORIGINATED;
                    } else {
                        // Datagrams of one peer coalesced into UDP GSO are IPv4's only.
                        meta.flags |= LOCALLY_ORIGINATED;
                    }
                    meta.l3_offset = meta.data_offset();
                    // The underlay is the default table's, whatever table the inner packet
                    // was in (as VXLAN's).
                    meta.rx_interface = u32::MAX;
                    *next = lookup;
                }
                Err(code) => {
                    cx.buffers.meta_mut(bi).error = base + code;
                    *next = Next::DROP;
                }
            }
        }
        cx.enqueue_to_nexts(&self.nexts[..n], bis);
        n
    }
}
