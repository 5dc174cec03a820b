//! `wg4-decrypt` and `wg6-decrypt`: UDP for a tunnel's address and port, opened into the inner
//! packet, or punted to the control side.

use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};

use dataplane::buffer::{flags, WorkerBuffers};
use dataplane::BufferIndex;
use dataplane::{Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};
use wireguard::transport;

use crate::nodes::names;
use crate::nodes::origin::LOCALLY_ORIGINATED;
use crate::state::ForwardingState;
use crate::wire::checksum::{fold, ones_sum};
use crate::wire::{self, ipv6, Ipv4, Ipv6, Udp};
use crate::wireguard::{WgDatagram, WgPeerCounters, WgReceiver, WG_DATAGRAM_MAX};

/// Both decrypt nodes' arcs.
mod arcs {
    use super::names;
    dataplane::next_arcs! {
        pub(super) INPUT => names::IP4_INPUT,
        IP6 => names::IP6_INPUT,
    }
}

/// The decrypt nodes' errors: `wg4-decrypt` has those up to [`PUNT_FULL`](errors::PUNT_FULL),
/// `wg6-decrypt` the IPv6 UDP checks' after them too.
mod errors {
    dataplane::node_errors! {
        pub(super) TRUNCATED => ("truncated", "too short for its UDP header or WireGuard message"),
        NO_TUNNEL => ("no-tunnel", "no WireGuard tunnel on this address and port"),
        UNKNOWN_TYPE => ("unknown-type", "not a WireGuard message type"),
        UNKNOWN_INDEX => ("unknown-index", "no session has this receiver index"),
        REPLAY => ("replay", "counter replayed or older than the replay window"),
        WINDOW_BUSY => ("replay-window-busy", "another worker held the session's replay window"),
        BAD_TAG => ("bad-tag", "the transport message failed authentication"),
        NOT_IP => ("not-ip", "decrypted, but neither an IPv4 nor an IPv6 packet that fits"),
        SOURCE_NOT_ALLOWED => ("source-not-allowed", "the inner source is not in the peer's allowed IPs"),
        KEEPALIVE => ("keepalive", "keepalives received (not an error)"),
        PUNTED => ("punted", "handed to the control side (not an error)"),
        PUNT_FULL => ("punt-queue-full", "the control side's queue was full"),
        BAD_LENGTH => ("bad-length", "a UDP length other than the IPv6 payload length"),
        ZERO_CHECKSUM => ("zero-checksum", "UDP without a checksum (IPv6 requires one)"),
        BAD_CHECKSUM => ("bad-checksum", "the UDP checksum does not match"),
    }
}

/// The decrypt node of one underlay family: `wg6-decrypt` when `V6` (UDP for a tunnel's port,
/// right after the outer IPv6 header, as `ip6-local` sends it), else `wg4-decrypt` (outer IPv4
/// header first).
pub struct WgDecrypt<const V6: bool> {
    nexts: [Next; FRAME_SIZE],
}

/// `wg4-decrypt`: WireGuard over IPv4.
pub type Wg4Decrypt = WgDecrypt<false>;

/// `wg6-decrypt`: WireGuard over IPv6.
pub type Wg6Decrypt = WgDecrypt<true>;

impl<const V6: bool> WgDecrypt<V6> {
    /// A new node.
    pub fn new() -> Self {
        WgDecrypt {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl<const V6: bool> Default for WgDecrypt<V6> {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a received datagram goes.
enum Verdict {
    /// Decrypted, IPv4: to `ip4-input`.
    Inner,
    /// Decrypted, IPv6: to `ip6-input`.
    Inner6,
    /// To the control side: the message of `len` bytes at `at`, from `src`.
    Punt {
        tunnel: u32,
        src: SocketAddr,
        at: u16,
        len: u16,
    },
}

/// A datagram's outer headers, checked: the tunnel it is for, where it came from, and where
/// its WireGuard message (of at least 4 bytes) lies.
struct Outer {
    tunnel: u32,
    src: SocketAddr,
    at: usize,
    len: usize,
}

/// The outer IPv4 and UDP headers of `d`.
#[inline(always)]
fn outer4(state: &ForwardingState, d: &[u8]) -> Result<Outer, u16> {
    use errors::*;
    let ip = Ipv4::new_checked(d).map_err(|_| TRUNCATED)?;
    let udp = Udp::new_checked(ip.payload()).map_err(|_| TRUNCATED)?;
    let len = usize::from(udp.len())
        .checked_sub(wire::UDP_HEADER)
        .filter(|&l| l >= 4 && l <= udp.payload().len())
        .ok_or(TRUNCATED)?;
    let tunnel = state
        .wireguard_at(ip.dst(), udp.dst_port())
        .ok_or(NO_TUNNEL)?;
    Ok(Outer {
        tunnel,
        src: SocketAddrV4::new(ip.src().into(), udp.src_port()).into(),
        at: ip.header_len() + wire::UDP_HEADER,
        len,
    })
}

/// The outer IPv6 and UDP headers of `d` (no extension headers), the UDP checksum verified:
/// IPv6 requires one (RFC 8200 8.1), so a zero one is refused, as Linux refuses it.
#[inline(always)]
fn outer6(state: &ForwardingState, d: &[u8]) -> Result<Outer, u16> {
    use errors::*;
    let ip = Ipv6::new_checked(d).map_err(|_| TRUNCATED)?;
    let udp = Udp::new_checked(ip.payload()).map_err(|_| TRUNCATED)?;
    if udp.len() != ip.payload_len() {
        return Err(BAD_LENGTH);
    }
    let datagram = ip
        .payload()
        .get(..usize::from(udp.len()))
        .ok_or(TRUNCATED)?;
    let len = datagram.len().saturating_sub(wire::UDP_HEADER);
    if len < 4 {
        return Err(TRUNCATED);
    }
    if udp.checksum() == 0 {
        return Err(ZERO_CHECKSUM);
    }
    // Summed with the field, a right checksum makes all ones.
    let pseudo = ip.pseudo_header_sum(wire::PROTO_UDP, u32::from(udp.len()));
    if fold(pseudo + ones_sum(datagram)) != 0xffff {
        return Err(BAD_CHECKSUM);
    }
    let (src, dst) = (u128::from_be_bytes(ip.src()), u128::from_be_bytes(ip.dst()));
    let tunnel = state.wireguard_at6(dst, udp.dst_port()).ok_or(NO_TUNNEL)?;
    Ok(Outer {
        tunnel,
        src: SocketAddrV6::new(src.into(), udp.src_port(), 0, 0).into(),
        at: ipv6::HEADER_LEN + wire::UDP_HEADER,
        len,
    })
}

/// The decrypt nodes' work on one datagram: what it is, and for a transport message of a
/// published session, decrypted in place (the buffer then holds the inner packet). Inlined
/// into the node's loop; `Err` is the error to count.
#[inline(always)]
fn decrypt_one<const V6: bool>(
    state: &ForwardingState,
    buffers: &mut WorkerBuffers,
    bi: BufferIndex,
) -> Result<Verdict, u16> {
    use errors::*;
    if buffers.meta(bi).next().is_some() {
        return Err(TRUNCATED);
    }
    let d = buffers.data(bi);
    let Outer {
        tunnel,
        src,
        at: msg_at,
        len,
    } = if V6 {
        outer6(state, d)?
    } else {
        outer4(state, d)?
    };
    let msg = &d[msg_at..msg_at + len];
    let t = state.wireguard[tunnel as usize].as_ref().ok_or(NO_TUNNEL)?;
    let kind = wireguard::wire::message_type(msg).map_err(|_| UNKNOWN_TYPE)?;
    let punt = Verdict::Punt {
        tunnel,
        src,
        at: msg_at as u16,
        len: len as u16,
    };
    if kind != wireguard::wire::TYPE_TRANSPORT {
        return Ok(punt);
    }
    let (receiver, counter) = transport::peek(msg).map_err(|_| TRUNCATED)?;
    let (peer, session) = match t.receivers.get(&receiver) {
        None => return Err(UNKNOWN_INDEX),
        Some(WgReceiver::Pending) => return Ok(punt),
        Some(WgReceiver::Session { peer, session }) => (usize::from(*peer), session),
    };
    let counters = &t.shared.peers[peer];
    let Ok(window) = session.window.try_lock() else {
        return Err(WINDOW_BUSY);
    };
    if window.check(counter).is_err() {
        WgPeerCounters::bump(&counters.replays, 1);
        return Err(REPLAY);
    }
    drop(window);
    buffers.advance(bi, msg_at as u16);
    buffers.set_length(bi, len as u16);
    let opened = transport::open(&session.keys, buffers.data_mut(bi));
    let Ok((_, range)) = opened else {
        WgPeerCounters::bump(&counters.bad_tags, 1);
        return Err(BAD_TAG);
    };
    let Ok(mut window) = session.window.try_lock() else {
        return Err(WINDOW_BUSY);
    };
    if window.accept(counter).is_err() {
        WgPeerCounters::bump(&counters.replays, 1);
        return Err(REPLAY);
    }
    drop(window);
    WgPeerCounters::bump(&counters.rx_packets, 1);
    if range.is_empty() {
        return Err(KEEPALIVE);
    }
    let plain = &buffers.data(bi)[range.clone()];
    let (inner_len, allowed, verdict) = match plain.first().map(|b| b >> 4) {
        Some(4) => {
            let inner = Ipv4::new_checked(plain).map_err(|_| NOT_IP)?;
            let len = usize::from(inner.total_len());
            (len, t.allows(peer, inner.src()), Verdict::Inner)
        }
        Some(6) => {
            let inner = Ipv6::new_checked(plain).map_err(|_| NOT_IP)?;
            let len = inner.total_len() as usize;
            let src = u128::from_be_bytes(inner.src());
            (len, t.allows6(peer, src), Verdict::Inner6)
        }
        _ => return Err(NOT_IP),
    };
    let least = match verdict {
        Verdict::Inner => wire::IP4_HEADER,
        _ => ipv6::HEADER_LEN,
    };
    if !(least..=plain.len()).contains(&inner_len) {
        return Err(NOT_IP);
    }
    if !allowed {
        return Err(SOURCE_NOT_ALLOWED);
    }
    WgPeerCounters::bump(&counters.rx_bytes, inner_len as u64);
    buffers.advance(bi, range.start as u16);
    buffers.set_length(bi, inner_len as u16);
    let meta = buffers.meta_mut(bi);
    meta.rx_interface = t.interface.get();
    meta.flags &= !(flags::IP4_CHECKSUM_OK | flags::FLOW_HASH_VALID | LOCALLY_ORIGINATED);
    meta.l3_offset = meta.data_offset();
    Ok(verdict)
}

impl<const V6: bool> Node<ForwardingState> for WgDecrypt<V6> {
    fn spec(&self) -> NodeSpec {
        let (name, errors) = if V6 {
            (names::WG6_DECRYPT, errors::ERRORS)
        } else {
            (
                names::WG4_DECRYPT,
                &errors::ERRORS[..=usize::from(errors::PUNT_FULL)],
            )
        };
        NodeSpec::internal(name).nexts(arcs::NEXTS).errors(errors)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use arcs::*;
        use errors::*;
        let state = cx.state();
        let base = cx.error_id(0);
        let bis = frame.as_slice();
        let n = bis.len();
        for (&bi, next) in bis.iter().zip(&mut self.nexts[..n]) {
            let verdict = decrypt_one::<V6>(state, cx.buffers, bi);
            match verdict {
                Ok(Verdict::Inner) => *next = INPUT,
                Ok(Verdict::Inner6) => *next = IP6,
                Ok(Verdict::Punt {
                    tunnel,
                    src,
                    at,
                    len,
                }) => {
                    let q = state.wireguard[tunnel as usize]
                        .as_ref()
                        .map(|t| &t.shared.punts);
                    let code = match q {
                        Some(q) if !q.is_full() && usize::from(len) <= WG_DATAGRAM_MAX => {
                            let mut dg = WgDatagram::new(tunnel, src);
                            let at = usize::from(at);
                            let msg = &cx.buffers.data(bi)[at..at + usize::from(len)];
                            dg.bytes[..msg.len()].copy_from_slice(msg);
                            dg.len = len;
                            match q.push(dg) {
                                Ok(()) => PUNTED,
                                Err(_) => PUNT_FULL,
                            }
                        }
                        _ => PUNT_FULL,
                    };
                    cx.buffers.meta_mut(bi).error = base + code;
                    *next = Next::DROP;
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
