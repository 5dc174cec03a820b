//! WireGuard over IPv4 (issue 23), carrying IPv4 and IPv6. `wg4-encrypt` seals an IP packet
//! routed (or L3 cross-connected) to a WireGuard interface into a transport message in
//! UDP/IPv4 to the peer whose allowed IPs (of the packet's family) hold its destination, and
//! sends it to be routed on the underlay, as `vxlan4-encap` does; `wg4-decrypt` takes UDP for a
//! tunnel's port from `ip4-local`, checks the receiver index and the replay window, opens the
//! message in place, checks the inner source against the peer's allowed IPs and hands the inner
//! packet, as received on the tunnel's interface, to `ip4-input` or `ip6-input`. Handshake messages and transport messages of sessions the control
//! side has not confirmed are punted to it (a bounded queue: a full one is a counted drop);
//! what it sends comes back through the input node `wg4-control-input`. See
//! `crate::wireguard` for the state and who writes what. Nothing here allocates or blocks.

use dataplane::buffer::{flags, WorkerBuffers};
use dataplane::BufferIndex;
use dataplane::{Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};
use wireguard::transport::{self, sealed_len};
use wireguard::wire::TRANSPORT_HEADER_LEN;

use super::names;
use super::origin::LOCALLY_ORIGINATED;
use crate::state::{ForwardingState, IfIndex};
use crate::wire::{self, Ipv4, Ipv6, Udp, WireError};
use crate::wireguard::{WgDatagram, WgPeerCounters, WgReceiver, WG_DATAGRAM_MAX};

/// Outer IPv4 + UDP.
const OUTER: u16 = (wire::IP4_HEADER + wire::UDP_HEADER) as u16;

/// Writes an outer IPv4 + UDP header (no options, UDP checksum 0) for `payload` bytes at the
/// start of `h` (`Truncated` when it has no room for them).
fn write_outer(
    h: &mut [u8],
    (src, sport): (u32, u16),
    (dst, dport): (u32, u16),
    payload: u16,
) -> Result<(), WireError> {
    let mut ip = Ipv4::new_checked(h)?;
    ip.reset_header();
    ip.set_total_len(payload + OUTER);
    ip.set_ttl(64);
    ip.set_protocol(wire::PROTO_UDP);
    ip.set_src(src);
    ip.set_dst(dst);
    ip.fill_checksum();
    let mut udp = Udp::new_checked(ip.payload_mut())?;
    udp.set_src_port(sport);
    udp.set_dst_port(dport);
    udp.set_len(payload + wire::UDP_HEADER as u16);
    udp.set_checksum(0);
    Ok(())
}

/// `wg4-encrypt`'s arcs and errors.
mod encrypt {
    use super::names;
    dataplane::next_arcs! { pub(super) LOOKUP => names::IP4_LOOKUP }
    dataplane::node_errors! {
        pub(super) NO_TUNNEL => ("no-tunnel", "sent to an interface that is not a WireGuard tunnel"),
        NOT_IP => ("not-ip", "neither an IPv4 nor an IPv6 packet"),
        CHAINED => ("chained", "longer than one buffer"),
        NO_PEER => ("no-peer", "no peer's allowed IPs hold the destination"),
        NO_SESSION => ("no-session", "no session with the peer yet (a handshake was asked for)"),
        NO_ENDPOINT => ("no-endpoint", "the peer's endpoint is unknown"),
        COUNTER_EXHAUSTED => ("counter-exhausted", "the session's counter is used up"),
        NO_ROOM => ("no-room", "no room in the buffer for the transport header, padding and tag"),
    }
}

/// The `wg4-encrypt` node.
pub struct Wg4Encrypt {
    nexts: [Next; FRAME_SIZE],
}

impl Wg4Encrypt {
    /// A new node.
    pub fn new() -> Self {
        Wg4Encrypt {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl Default for Wg4Encrypt {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for Wg4Encrypt {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::WG4_ENCRYPT)
            .nexts(encrypt::NEXTS)
            .errors(encrypt::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use encrypt::*;
        let state = cx.state();
        let base = cx.error_id(0);
        let fib = state.fib.prefetcher();
        let bis = frame.as_slice();
        let n = bis.len();
        for (&bi, next) in bis.iter().zip(&mut self.nexts[..n]) {
            let verdict = (|| {
                let meta = cx.buffers.meta(bi);
                let t = state
                    .tx_class(IfIndex::new(meta.tx_interface))
                    .wireguard_tunnel()
                    .and_then(|t| state.wireguard.get(t as usize)?.as_ref())
                    .ok_or(NO_TUNNEL)?;
                if meta.next().is_some() {
                    return Err(CHAINED);
                }
                let d = cx.buffers.data(bi);
                let peer = match d.first().map(|b| b >> 4) {
                    Some(4) => Ipv4::new_checked(d).map(|ip| t.peer_for(ip.dst())),
                    Some(6) => {
                        Ipv6::new_checked(d).map(|ip| t.peer_for6(u128::from_be_bytes(ip.dst())))
                    }
                    _ => Err(WireError::Unsupported),
                }
                .map_err(|_| NOT_IP)?
                .ok_or(NO_PEER)?;
                let counters = &t.shared.peers[peer];
                let p = &t.peers[peer];
                let Some(session) = p.send.as_ref() else {
                    counters
                        .want_handshake
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    return Err(NO_SESSION);
                };
                if p.endpoint.1 == 0 {
                    return Err(NO_ENDPOINT);
                }
                let len = d.len();
                if cx
                    .buffers
                    .prepend(bi, TRANSPORT_HEADER_LEN as u16)
                    .is_none()
                    || !cx.buffers.set_length(bi, sealed_len(len) as u16)
                {
                    return Err(NO_ROOM);
                }
                let Some(counter) = session.counter.next() else {
                    counters
                        .want_handshake
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    return Err(COUNTER_EXHAUSTED);
                };
                if counter >= wireguard::timers::REKEY_AFTER_MESSAGES {
                    counters
                        .want_handshake
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                let sealed = transport::seal(&session.keys, counter, cx.buffers.data_mut(bi), len)
                    .map_err(|_| NO_ROOM)?;
                let h = cx.buffers.prepend(bi, OUTER).ok_or(NO_ROOM)?;
                write_outer(h, (t.local, t.port), p.endpoint, sealed as u16)
                    .map_err(|_| NO_ROOM)?;
                WgPeerCounters::bump(&counters.tx_packets, 1);
                WgPeerCounters::bump(&counters.tx_bytes, len as u64);
                Ok(p.endpoint.0)
            })();
            match verdict {
                Ok(dst) => {
                    fib.prefetch(dst);
                    let meta = cx.buffers.meta_mut(bi);
                    meta.flags &= !flags::FLOW_HASH_VALID;
                    meta.flags |= flags::IP4_CHECKSUM_OK | flags::UDP_GSO_OK | LOCALLY_ORIGINATED;
                    meta.l3_offset = meta.data_offset();
                    *next = LOOKUP;
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

/// `wg4-decrypt`'s arcs and errors.
mod decrypt {
    use super::names;
    dataplane::next_arcs! {
        pub(super) INPUT => names::IP4_INPUT,
        IP6 => names::IP6_INPUT,
    }
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
    }
}

/// The `wg4-decrypt` node: UDP for a tunnel's port, outer IPv4 header first.
pub struct Wg4Decrypt {
    nexts: [Next; FRAME_SIZE],
}

impl Wg4Decrypt {
    /// A new node.
    pub fn new() -> Self {
        Wg4Decrypt {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl Default for Wg4Decrypt {
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
    /// To the control side.
    Punt {
        tunnel: u32,
        src: u32,
        sport: u16,
        at: u16,
        len: u16,
    },
}

/// `wg4-decrypt`'s work on one datagram: what it is, and for a transport message of a
/// published session, decrypted in place (the buffer then holds the inner packet). Inlined
/// into the node's loop; `Err` is the error to count.
#[inline(always)]
fn decrypt_one(
    state: &ForwardingState,
    buffers: &mut WorkerBuffers,
    bi: BufferIndex,
) -> Result<Verdict, u16> {
    use decrypt::*;
    let d = buffers.data(bi);
    let ip = Ipv4::new_checked(d).map_err(|_| TRUNCATED)?;
    let udp = Udp::new_checked(ip.payload()).map_err(|_| TRUNCATED)?;
    let msg_at = ip.header_len() + wire::UDP_HEADER;
    if udp.payload().len() < 4 || buffers.meta(bi).next().is_some() {
        return Err(TRUNCATED);
    }
    let (src, dst) = (ip.src(), ip.dst());
    let (sport, dport) = (udp.src_port(), udp.dst_port());
    let msg = usize::from(udp.len())
        .checked_sub(wire::UDP_HEADER)
        .filter(|&l| l >= 4)
        .and_then(|l| udp.payload().get(..l))
        .ok_or(TRUNCATED)?;
    let tunnel = state.wireguard_at(dst, dport).ok_or(NO_TUNNEL)?;
    let t = state.wireguard[tunnel as usize].as_ref().ok_or(NO_TUNNEL)?;
    let kind = wireguard::wire::message_type(msg).map_err(|_| UNKNOWN_TYPE)?;
    let len = msg.len();
    let punt = Verdict::Punt {
        tunnel,
        src,
        sport,
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
        _ => wire::ipv6::HEADER_LEN,
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

impl Node<ForwardingState> for Wg4Decrypt {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::WG4_DECRYPT)
            .nexts(decrypt::NEXTS)
            .errors(decrypt::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        use decrypt::*;
        let state = cx.state();
        let base = cx.error_id(0);
        let bis = frame.as_slice();
        let n = bis.len();
        for (&bi, next) in bis.iter().zip(&mut self.nexts[..n]) {
            let verdict = decrypt_one(state, cx.buffers, bi);
            match verdict {
                Ok(Verdict::Inner) => *next = INPUT,
                Ok(Verdict::Inner6) => *next = IP6,
                Ok(Verdict::Punt {
                    tunnel,
                    src,
                    sport,
                    at,
                    len,
                }) => {
                    let q = state.wireguard[tunnel as usize]
                        .as_ref()
                        .map(|t| &t.shared.punts);
                    let code = match q {
                        Some(q) if !q.is_full() && usize::from(len) <= WG_DATAGRAM_MAX => {
                            let mut dg = WgDatagram::new(tunnel, src, sport);
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

/// `wg4-control-input`'s arcs and errors.
mod control {
    use super::names;
    dataplane::next_arcs! {
        pub(super) LOOKUP => names::IP4_LOOKUP,
        INPUT => names::IP4_INPUT,
        IP6 => names::IP6_INPUT,
    }
    dataplane::node_errors! {
        pub(super) NO_BUFFERS => ("no-buffers", "no buffer for a datagram of the control side's"),
        NO_TUNNEL => ("no-tunnel", "the datagram's tunnel is gone"),
        TOO_LONG => ("too-long", "the datagram does not fit a buffer"),
    }
}

/// Datagrams of the control side's one pass takes at most.
const CONTROL_BURST: usize = 32;

/// The input node `wg4-control-input`: what the WireGuard control side sends (handshake
/// messages in UDP/IPv4 from the tunnel's address and port, to be routed; packets it decrypted
/// itself, received on the tunnel's interface). Any worker may take them.
#[derive(Default)]
pub struct Wg4ControlInput;

impl Wg4ControlInput {
    /// A new node.
    pub fn new() -> Self {
        Wg4ControlInput
    }
}

impl Node<ForwardingState> for Wg4ControlInput {
    fn spec(&self) -> NodeSpec {
        NodeSpec::input(names::WG4_CONTROL_INPUT)
            .nexts(control::NEXTS)
            .errors(control::ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, _frame: &mut Frame) -> usize {
        use control::*;
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
            let Some(bi) = cx.buffers.alloc_one() else {
                cx.count_error(NO_BUFFERS, 1);
                continue;
            };
            let data = dg.data();
            let (arc, at) = match (dg.inner, data.first().map(|b| b >> 4)) {
                (true, Some(6)) => (IP6, 0),
                (true, _) => (INPUT, 0),
                (false, _) => (LOOKUP, OUTER),
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
                // Never fails: the buffer was sized for the outer headers.
                let _ = write_outer(d, (t.local, t.port), (dg.addr, dg.port), data.len() as u16);
            }
            let meta = cx.buffers.meta_mut(bi);
            meta.l3_offset = meta.data_offset();
            if dg.inner {
                meta.rx_interface = t.interface.get();
            } else {
                meta.rx_interface = u32::MAX;
                meta.flags |= flags::IP4_CHECKSUM_OK | LOCALLY_ORIGINATED;
            }
            cx.enqueue_slice(arc, &[bi]);
            made += 1;
        }
        made
    }
}
