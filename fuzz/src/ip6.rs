//! The IPv6 rig of the `ip6_input` and `nd` targets: a real forwarding graph with two routed
//! ports and IPv6 routes, addresses and neighbours, driven by hand; and the ledger that checks
//! what became of every packet (forwarded, or dropped under a named reason).

use std::sync::Arc;

use dataplane::buffer::BufferPool;
use dataplane::{Graph, WorkerBuffers, WorkerRuntime, ERROR_DROP};
use graph_nodes::forwarding::Path6;
use graph_nodes::state::DataplaneEvent;
use graph_nodes::{Forwarding, ForwardingState, IfIndex, LocalState};

use crate::{
    inet_checksum, mac, port_graph, rig_parts, run_until_idle, take_sent, Port, HOST_A, HOST_B,
};

/// An IPv6 address from its text.
pub fn a6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>()
        .expect("an IPv6 address")
        .octets()
}

/// Ports of the IPv6 rig.
pub const PORTS6: usize = 3;
/// The MTU of each port of the IPv6 rig: eth1 has IPv6's minimum, so that Packet Too Big is
/// near.
pub const MTU6: [usize; PORTS6] = [1500, 1280, 1500];
/// The VNI of the rig's VXLAN tunnel over IPv6.
pub const VNI6: u32 = 0x65_4321;
/// The VLAN of eth0's sub-interface.
pub const VLAN6: u16 = 200;
/// A host the rig knows nothing of (an NS sender, an unknown neighbour).
pub const HOST_C: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 0x0c];

/// Our IPv6 addresses: eth0 fd00:1::fe/64, eth0.200 fd00:200::fe/64, eth1 fd00:2::fe/64.
pub fn our_globals() -> [[u8; 16]; 3] {
    [a6("fd00:1::fe"), a6("fd00:200::fe"), a6("fd00:2::fe")]
}

/// The EUI-64 link-local address of MAC `m`, written out by hand (RFC 4291 appendix A).
pub fn eui64(m: [u8; 6]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..2].copy_from_slice(&[0xfe, 0x80]);
    a[8..16].copy_from_slice(&[m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]);
    a
}

/// The forwarding graph with IPv6 on two routed ports:
/// - eth0 (MTU 1500) fd00:1::fe/64, neighbour fd00:1::2 = HOST_A; VLAN 200 on it,
///   fd00:200::fe/64 with neighbour fd00:200::2 = HOST_A;
/// - eth1 (MTU 1280) fd00:2::fe/64, neighbours fd00:2::1 and fe80::b = HOST_B;
/// - routes fd00:99::/48 via fd00:2::1, fd00:98::/48 ECMP via fd00:2::1 and fd00:1::2,
///   fd00:97::/48 via fd00:2::9 (unresolved: neighbour discovery), fd00:96::/48 via fe80::b on
///   eth1 (a link-local next hop), fd00:95::/48 via fd00:200::2 (the VLAN), a blackhole
///   fd00:66::/48; no default route;
/// - eth2 (L2) cross-connected to a VXLAN tunnel over IPv6 from fd00:2::fe to fd00:2::1, VNI
///   [`VNI6`], port 4789.
///
/// The routed ports have their EUI-64 link-local addresses.
pub struct Rig6 {
    /// The pool.
    pub pool: Arc<BufferPool>,
    /// The worker's buffers.
    pub buffers: WorkerBuffers,
    /// The forwarding tables' writer.
    pub fwd: Forwarding,
    /// The published state.
    pub published: LocalState,
    /// The graph.
    pub graph: Graph<ForwardingState>,
    /// The ports.
    pub ports: Vec<Port>,
}

impl Rig6 {
    /// Builds the rig described above.
    pub fn new() -> Rig6 {
        let (pool, buffers, mut fwd) = rig_parts();
        let p: Vec<IfIndex> = (0..PORTS6)
            .map(|i| {
                fwd.add_port(&format!("eth{i}"), mac(i as u8), MTU6[i] as u16)
                    .unwrap()
            })
            .collect();
        let w = |s: &str| u128::from_be_bytes(a6(s));
        fwd.add_address6(p[0], w("fd00:1::fe"), 64).unwrap();
        fwd.add_neighbor6(p[0], w("fd00:1::2"), HOST_A).unwrap();
        let vlan = fwd.add_vlan(p[0], VLAN6, "eth0.200").unwrap();
        fwd.add_address6(vlan, w("fd00:200::fe"), 64).unwrap();
        fwd.add_neighbor6(vlan, w("fd00:200::2"), HOST_A).unwrap();
        fwd.add_address6(p[1], w("fd00:2::fe"), 64).unwrap();
        fwd.add_neighbor6(p[1], w("fd00:2::1"), HOST_B).unwrap();
        fwd.add_neighbor6(p[1], w("fe80::b"), HOST_B).unwrap();
        let via = |interface, s: &str| Path6 {
            next_hop: w(s),
            interface,
        };
        fwd.add_route6(w("fd00:99::"), 48, &[via(p[1], "fd00:2::1")])
            .unwrap();
        fwd.add_route6(
            w("fd00:98::"),
            48,
            &[via(p[1], "fd00:2::1"), via(p[0], "fd00:1::2")],
        )
        .unwrap();
        fwd.add_route6(w("fd00:97::"), 48, &[via(p[1], "fd00:2::9")])
            .unwrap();
        fwd.add_route6(w("fd00:96::"), 48, &[via(p[1], "fe80::b")])
            .unwrap();
        fwd.add_route6(w("fd00:95::"), 48, &[via(vlan, "fd00:200::2")])
            .unwrap();
        fwd.add_drop_route6(w("fd00:66::"), 48).unwrap();
        let tunnel = fwd
            .add_vxlan6_tunnel("vxlan6", w("fd00:2::fe"), w("fd00:2::1"), VNI6, 4789)
            .unwrap();
        fwd.cross_connect(p[2], tunnel).unwrap();
        let published = LocalState::default();
        fwd.commit(&published).unwrap();
        let (graph, ports) = port_graph(&p);
        Rig6 {
            pool,
            buffers,
            fwd,
            published,
            graph,
            ports,
        }
    }

    /// Receives each `(port, frame)`, runs the graph until it is idle and checks the ledger
    /// ([`Ledger::check`]): what each port sent, and the neighbours the data path reported
    /// (taken, not committed: every input sees the same tables). Panics unless every buffer
    /// is back in the pool afterwards.
    pub fn inject(
        &mut self,
        frames: &[(usize, Vec<u8>)],
    ) -> (Vec<Vec<Vec<u8>>>, Vec<DataplaneEvent>) {
        let before = Ledger::new(&self.graph.handle().runtime());
        let state = self.published.current();
        run_until_idle(
            &mut self.graph,
            &mut self.buffers,
            &self.ports,
            &state,
            frames,
        );
        let mut events = Vec::new();
        while let Some(e) = state.events.pop() {
            events.push(e);
        }
        let sent = take_sent(&self.ports, &self.pool);
        let after = self.graph.handle().runtime();
        let out: usize = sent.iter().map(Vec::len).sum();
        before.check(&after, frames.len() as u64, out as u64);
        (sent, events)
    }

    /// A node's error counter.
    pub fn error(&self, node: &str, name: &str) -> u64 {
        self.graph.handle().runtime().error(node, name)
    }
}

impl Default for Rig6 {
    fn default() -> Self {
        Rig6::new()
    }
}

/// Counters that count something other than a packet dropped (a reply sent, a message made, a
/// report lost): every other error counter is a drop's reason.
const NOT_DROPS: &[(&str, &str)] = &[
    ("ip6-local", "echo-replies"),
    ("ip6-nd", "solicitations-answered"),
    ("ip6-nd", "events-lost"),
    ("ip6-nd-resolve", "solicitations-sent"),
    ("ip6-nd-resolve", "no-buffers"),
    ("ip6-nd-resolve", "no-source-address"),
    ("ip6-nd-probe", "solicitations-sent"),
    ("ip6-nd-probe", "no-buffers"),
    ("ip6-nd-probe", "no-source-address"),
    ("ip6-icmp-error", "sent"),
    ("ip4-local", "echo-replies"),
    ("arp-input", "requests-answered"),
    ("ip4-arp", "requests-sent"),
    ("ip4-icmp-error", "sent"),
    ("offload-resolve", "csum-completed"),
    ("offload-resolve", "gso-segmented"),
    ("offload-resolve", "gso-segments"),
    ("interface-output", "capture-dropped"),
];

/// Packets the graph makes of its own (not from a received one): neighbour solicitations and
/// ARP requests.
const ORIGINATED: &[(&str, &str)] = &[
    ("ip6-nd-resolve", "solicitations-sent"),
    ("ip6-nd-probe", "solicitations-sent"),
    ("ip4-arp", "requests-sent"),
];

/// The graph's counters before a run, to check what the run did with its packets.
pub struct Ledger {
    before: WorkerRuntime,
}

impl Ledger {
    /// The counters now.
    pub fn new(now: &WorkerRuntime) -> Ledger {
        Ledger {
            before: now.clone(),
        }
    }

    /// What counter `node`/`name` counted since.
    fn delta(&self, after: &WorkerRuntime, node: &str, name: &str) -> u64 {
        after.error(node, name) - self.before.error(node, name)
    }

    /// The packets `node` handled since.
    fn packets(&self, after: &WorkerRuntime, node: &str) -> u64 {
        let n = |r: &WorkerRuntime| r.node(node).map_or(0, |n| n.packets);
        n(after) - n(&self.before)
    }

    /// Checks that `received` packets (and those the graph originated) all came out: `sent`
    /// frames, and drops each counted under a reason with a name (none under `error-drop`'s
    /// "no-reason", none under a counter that is not a drop's). `ip6-rewrite`'s hop-limit and
    /// MTU counters count both the packets they send to `ip6-icmp-error` (not drops) and, for
    /// packets of ours, drops.
    pub fn check(&self, after: &WorkerRuntime, received: u64, sent: u64) {
        let drops = self.packets(after, ERROR_DROP);
        let originated: u64 = ORIGINATED
            .iter()
            .map(|&(n, e)| self.delta(after, n, e))
            .sum();
        assert_eq!(
            received + originated,
            sent + drops,
            "{received} received and {originated} made: {sent} sent and {drops} dropped"
        );
        assert_eq!(
            self.delta(after, ERROR_DROP, "no-reason"),
            0,
            "a packet dropped without a reason"
        );
        let counted: u64 = after
            .errors
            .iter()
            .zip(&self.before.errors)
            .filter(|(e, _)| !NOT_DROPS.contains(&(e.node.as_str(), e.name.as_str())))
            .map(|(e, b)| e.count - b.count)
            .sum();
        let to_icmp_error =
            self.packets(after, "ip6-icmp-error") + self.packets(after, "ip4-icmp-error");
        assert_eq!(
            counted - to_icmp_error,
            drops,
            "drops counted under their reasons (less {to_icmp_error} ICMP errors asked for)"
        );
    }
}

/// An IPv6 packet of `next` with `payload` (its payload length the payload's).
pub fn ip6(src: [u8; 16], dst: [u8; 16], hop: u8, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    p.extend_from_slice(&[next, hop]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(payload);
    p
}

/// The checksum of upper-layer message `msg` of protocol `proto` between `src` and `dst`
/// (its own checksum field counted as it is: 0 when `msg` verifies), by the plain definition
/// (RFC 8200 8.1).
pub fn l4_sum(src: &[u8; 16], dst: &[u8; 16], proto: u8, msg: &[u8]) -> u16 {
    let mut over = Vec::with_capacity(40 + msg.len());
    over.extend_from_slice(src);
    over.extend_from_slice(dst);
    over.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    over.extend_from_slice(&[0, 0, 0, proto]);
    over.extend_from_slice(msg);
    inet_checksum(&over)
}

/// The ICMPv6 checksum of message `msg` between `src` and `dst` ([`l4_sum`]).
pub fn icmp6_sum(src: &[u8; 16], dst: &[u8; 16], msg: &[u8]) -> u16 {
    l4_sum(src, dst, 58, msg)
}

/// Writes the checksum of upper-layer message `msg` of protocol `proto` (ICMPv6, UDP or TCP;
/// nothing for another, or one too short for its checksum field) between `src` and `dst`.
pub fn fill_l4_sum(src: &[u8; 16], dst: &[u8; 16], proto: u8, msg: &mut [u8]) {
    let at = match proto {
        58 => 2,
        17 => 6,
        6 => 16,
        _ => return,
    };
    if msg.len() >= at + 2 {
        msg[at..at + 2].fill(0);
        let c = match l4_sum(src, dst, proto, msg) {
            0 if proto == 17 => 0xffff,
            c => c,
        };
        msg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
}

/// Writes the checksum of ICMPv6 message `msg` (at least 4 bytes) between `src` and `dst`.
pub fn fill_icmp6_sum(src: &[u8; 16], dst: &[u8; 16], msg: &mut [u8]) {
    fill_l4_sum(src, dst, 58, msg);
}

/// An ICMPv6 message in IPv6, its checksum filled.
pub fn icmp6(src: [u8; 16], dst: [u8; 16], hop: u8, msg: &[u8]) -> Vec<u8> {
    let mut m = msg.to_vec();
    fill_icmp6_sum(&src, &dst, &mut m);
    ip6(src, dst, hop, 58, &m)
}

/// A neighbour solicitation (135) or advertisement (136) body for `target` with `flags` and a
/// link-layer option of kind `opt` carrying `mac` (checksum zero).
pub fn nd_msg(t: u8, flags: u8, target: [u8; 16], opt: u8, mac: [u8; 6]) -> Vec<u8> {
    let mut m = vec![t, 0, 0, 0, flags, 0, 0, 0];
    m.extend_from_slice(&target);
    m.extend_from_slice(&[opt, 1]);
    m.extend_from_slice(&mac);
    m
}

/// The Ethernet address IPv6 multicast `a` goes to (33:33 and its low 32 bits).
pub fn multicast_mac(a: &[u8; 16]) -> [u8; 6] {
    [0x33, 0x33, a[12], a[13], a[14], a[15]]
}

/// Checks every frame a routed port of the rig sent (eth0, eth1; eth2 sends what VXLAN
/// carried): from the port's MAC, IPv6 (tagged with VLAN
/// [`VLAN6`] on eth0's sub-interface), version 6, exactly as long as its header says (no
/// bytes after the packet), within the port's MTU, a hop limit left, a unicast source. A
/// packet from one of `ours` (addresses no received packet came from) is Quiver's own: an
/// ICMPv6 one verifies and an ICMPv6 error fits IPv6's minimum MTU.
pub fn check_sent(sent: &[Vec<Vec<u8>>], ours: &[[u8; 16]]) {
    for (p, frames) in sent.iter().enumerate().take(2) {
        for f in frames {
            assert!(f.len() >= 14, "eth{p} sent a {}-byte frame", f.len());
            assert_eq!(f[6..12], mac(p as u8), "eth{p} sent from another MAC");
            let et = u16::from_be_bytes([f[12], f[13]]);
            let l2 = if et == 0x8100 && p == 0 {
                assert_eq!(f.get(14..16), Some(&VLAN6.to_be_bytes()[..]), "tag");
                assert_eq!(f.get(16..18), Some(&[0x86, 0xdd][..]), "tagged EtherType");
                18
            } else {
                assert_eq!(et, 0x86dd, "eth{p} sent EtherType {et:#06x}");
                14
            };
            let pkt = &f[l2..];
            assert!(
                pkt.len() <= MTU6[p],
                "eth{p} sent {} bytes of IPv6",
                pkt.len()
            );
            assert!(
                pkt.len() >= 40,
                "eth{p} sent a {}-byte IPv6 packet",
                pkt.len()
            );
            assert_eq!(pkt[0] >> 4, 6, "version");
            let len = 40 + usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
            assert_eq!(len, pkt.len(), "eth{p} sent bytes beyond the IPv6 packet");
            assert_ne!(pkt[7], 0, "eth{p} sent a packet with no hop left");
            let src: [u8; 16] = pkt[8..24].try_into().unwrap();
            let dst: [u8; 16] = pkt[24..40].try_into().unwrap();
            assert_ne!(src[0], 0xff, "eth{p} sent from a multicast source");
            if ours.contains(&src) && matches!(pkt[6], 17 | 58) {
                let msg = &pkt[40..];
                let what = if pkt[6] == 17 {
                    "UDP (VXLAN)"
                } else {
                    "ICMPv6"
                };
                assert_eq!(l4_sum(&src, &dst, pkt[6], msg), 0, "our {what} verifies");
                if msg.first().is_some_and(|&t| t < 128) {
                    assert!(pkt.len() <= 1280, "an ICMPv6 error of {} bytes", pkt.len());
                }
            }
        }
    }
}

/// The addresses among `ours` that no packet of `frames` (Ethernet frames, perhaps tagged)
/// came from: a packet from one of them that the rig sends is its own.
pub fn unspoofed(frames: &[(usize, Vec<u8>)], ours: &[[u8; 16]]) -> Vec<[u8; 16]> {
    let source = |f: &[u8], l2: usize| f.get(l2 + 8..l2 + 24).map(|s| s.to_vec());
    let sources: Vec<Vec<u8>> = frames
        .iter()
        .flat_map(|(_, f)| [source(f, 14), source(f, 18)])
        .flatten()
        .collect();
    ours.iter()
        .copied()
        .filter(|a| !sources.iter().any(|s| s == a))
        .collect()
}

/// Every address of the rig's own: globals and both ports' link-local ones.
pub fn our_addresses() -> Vec<[u8; 16]> {
    let mut all = our_globals().to_vec();
    all.push(eui64(mac(0)));
    all.push(eui64(mac(1)));
    all
}

/// Splits an `ip6_input` input into `(port, frame)` records: a selector byte, a 16-bit
/// big-endian length, then that many bytes of IPv6 packet (fewer at the end; at most 9000),
/// made a frame by [`ip6_frame`]. At most 16 frames.
pub fn ip6_records(mut data: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    while data.len() >= 3 && out.len() < 16 {
        let sel = data[0];
        let len = u16::from_be_bytes([data[1], data[2]]) as usize;
        let rest = &data[3..];
        let n = len.min(rest.len()).min(9000);
        out.push(ip6_frame(sel, &rest[..n]));
        data = &rest[n..];
    }
    out
}

/// The inverse of [`ip6_records`], for seeds: `(selector, packet)` records.
pub fn encode_ip6_records(packets: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (sel, p) in packets {
        out.push(*sel);
        out.extend_from_slice(&(p.len() as u16).to_be_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// Selector bit: the payload length is set to the bytes that follow the header.
pub const SEL_FIX_LENGTH: u8 = 0x08;
/// Selector bit: an ICMPv6, UDP or TCP message (behind extension headers too) gets its
/// checksum.
pub const SEL_FIX_CHECKSUM: u8 = 0x10;
/// Selector bit: to eth2 (VXLAN's L2 side) instead of eth0 or eth1.
pub const SEL_ETH2: u8 = 0x80;

/// The frame IPv6 packet `packet` arrives in, as selector `sel` says: bit 0 the port (eth0,
/// eth1; [`SEL_ETH2`] eth2); bits 1-2 the Ethernet destination (0: the port's MAC, 1: the multicast MAC of the
/// packet's destination, 2: another host's MAC, 3: the port's MAC with VLAN tag 200);
/// [`SEL_FIX_LENGTH`]; [`SEL_FIX_CHECKSUM`]; bits 5-6 the hop limit (1: 255, 2: 1, else as
/// it is). From HOST_A on eth0, HOST_B on eth1.
pub fn ip6_frame(sel: u8, packet: &[u8]) -> (usize, Vec<u8>) {
    use graph_nodes::wire::ipv6;
    let port = if sel & SEL_ETH2 != 0 {
        2
    } else {
        usize::from(sel & 1)
    };
    let mut p = packet.to_vec();
    if sel & SEL_FIX_LENGTH != 0 && p.len() >= 40 {
        let len = (p.len() - 40).min(usize::from(u16::MAX)) as u16;
        p[4..6].copy_from_slice(&len.to_be_bytes());
    }
    if p.len() >= 8 {
        match (sel >> 5) & 3 {
            1 => p[7] = 255,
            2 => p[7] = 1,
            _ => {}
        }
    }
    if sel & SEL_FIX_CHECKSUM != 0 && p.len() >= 40 {
        let claimed = 40 + usize::from(u16::from_be_bytes([p[4], p[5]]));
        let end = claimed.min(p.len());
        let src: [u8; 16] = p[8..24].try_into().unwrap();
        let dst: [u8; 16] = p[24..40].try_into().unwrap();
        if let Ok(up) = ipv6::walk(&p[40..end], p[6], 8) {
            if !up.later_fragment {
                fill_l4_sum(&src, &dst, up.protocol, &mut p[40 + up.offset..end]);
            }
        }
    }
    let kind = (sel >> 1) & 3;
    let to = match kind {
        1 => p.get(24..40).map_or([0x33, 0x33, 0, 0, 0, 1], |d| {
            multicast_mac(&<[u8; 16]>::try_from(d).unwrap())
        }),
        2 => HOST_C,
        _ => mac(port as u8),
    };
    let from = [HOST_A, HOST_B, HOST_C][port];
    let mut f = Vec::with_capacity(18 + p.len());
    f.extend_from_slice(&to);
    f.extend_from_slice(&from);
    if kind == 3 {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&VLAN6.to_be_bytes());
    }
    f.extend_from_slice(&[0x86, 0xdd]);
    f.extend_from_slice(&p);
    (port, f)
}
