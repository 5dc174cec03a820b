//! Helpers shared by the fuzz targets: the forwarding rig (a real graph of Quiver's nodes driven
//! by hand, ports fed from lists and captured), frame builders for seeds and wrappers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::harness::{CaptureTx, Captured, ScriptedRx};
use dataplane::{Graph, GraphBuilder, PortInput, TxQueue, WorkerBuffers};
use graph_nodes::state::FastMap;
use graph_nodes::wireguard::{WgPeer, WgReceiver, WgRecvSession, WgSendSession};
use graph_nodes::{
    add_forwarding_nodes, FibConfig, Forwarding, ForwardingState, IfIndex, LocalState, Path,
};
use wireguard::replay::ReplayWindow;
use wireguard::transport::{SendCounter, TransportKeys};

pub mod ip6;
pub mod nd_model;
pub mod wg6;

/// The MAC of the rig's port `i`.
pub const fn mac(i: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, 0, i + 1]
}
/// The host behind eth0.
pub const HOST_A: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x0a];
/// The host behind eth1 (and the VXLAN tunnel's far end).
pub const HOST_B: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x0b];
/// The VXLAN tunnel's VNI.
pub const VNI: u32 = 0x12_3456;
/// Ports of the rig.
pub const PORTS: usize = 7;
/// The WireGuard tunnel's local end (eth1's address) and port.
pub const WG_LOCAL: (u32, u16) = (ip(192, 168, 1, 1), 51820);
/// The WireGuard peer's endpoint (HOST_B).
pub const WG_PEER: (u32, u16) = (ip(192, 168, 1, 2), 51821);
/// Our receiver index of the WireGuard session.
pub const WG_OUR_INDEX: u32 = 0x1111;
/// The peer's receiver index.
pub const WG_PEER_INDEX: u32 = 0x2222;

/// The WireGuard session's keys: ours and the peer's (mirrored), created now.
pub fn wg_keys() -> (TransportKeys, TransportKeys) {
    let now = Instant::now();
    let ours = TransportKeys {
        send: [7; 32],
        recv: [9; 32],
        local_index: WG_OUR_INDEX,
        remote_index: WG_PEER_INDEX,
        created: now,
        initiator: true,
    };
    let theirs = TransportKeys {
        send: [9; 32],
        recv: [7; 32],
        local_index: WG_PEER_INDEX,
        remote_index: WG_OUR_INDEX,
        created: now,
        initiator: false,
    };
    (ours, theirs)
}

/// The datagram the WireGuard targets send, by `mode % 4`: 0, a transport message the peer
/// sealed around `rest` (at most 1,400 bytes of it) at counter `c0 | c1 << 8`; 1, the same
/// with one byte (picked by `c0`) flipped by `c1 | 1`; 2 and 3, `rest` as it is.
pub fn wg_message(mode: u8, c0: u8, c1: u8, rest: &[u8]) -> Vec<u8> {
    if mode % 4 > 1 {
        return rest.to_vec();
    }
    let (_, theirs) = wg_keys();
    let inner = &rest[..rest.len().min(1400)];
    let mut buf = vec![0u8; wireguard::transport::sealed_len(inner.len())];
    buf[16..16 + inner.len()].copy_from_slice(inner);
    let counter = u64::from(u16::from_le_bytes([c0, c1]));
    let n = wireguard::transport::seal(&theirs, counter, &mut buf, inner.len()).unwrap();
    buf.truncate(n);
    if mode % 4 == 1 && !buf.is_empty() {
        let at = usize::from(c0) % buf.len();
        buf[at] ^= c1 | 1;
    }
    buf
}

/// The WireGuard tunnel's peer and receiving sessions, with fresh keys, counter and window.
fn wg_sessions() -> (Vec<WgPeer>, FastMap<u32, WgReceiver>) {
    wg_sessions_of(
        std::net::SocketAddr::from((std::net::Ipv4Addr::from(WG_PEER.0), WG_PEER.1)),
        vec![(ip(10, 9, 0, 0), 24), (ip(10, 0, 1, 0), 24)],
        Vec::new(),
    )
}

/// One peer at `endpoint` allowed `allowed` and `allowed6`, and our receiving sessions (the
/// peer's, [`WG_OUR_INDEX`], and a pending handshake's), with fresh keys, counter and window.
pub fn wg_sessions_of(
    endpoint: std::net::SocketAddr,
    allowed: Vec<(u32, u8)>,
    allowed6: Vec<(u128, u8)>,
) -> (Vec<WgPeer>, FastMap<u32, WgReceiver>) {
    let (ours, _) = wg_keys();
    let mut receivers = FastMap::default();
    receivers.insert(
        WG_OUR_INDEX,
        WgReceiver::Session {
            peer: 0,
            session: Arc::new(WgRecvSession {
                keys: ours.clone(),
                window: Mutex::new(ReplayWindow::new()),
            }),
        },
    );
    receivers.insert(0x3333, WgReceiver::Pending);
    let peer = WgPeer {
        endpoint: Some(endpoint),
        allowed,
        allowed6,
        send: Some(Arc::new(WgSendSession {
            keys: ours,
            counter: Arc::new(SendCounter::new()),
        })),
    };
    (vec![peer], receivers)
}

/// An IPv4 address.
pub const fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

/// One capture of a port.
pub struct Port {
    /// Its interface.
    pub index: IfIndex,
    /// Frames to receive.
    pub rx: Arc<Mutex<VecDeque<Vec<u8>>>>,
    /// Frames it sent.
    pub tx: Captured,
}

/// The forwarding graph with a small FIB:
/// - eth0 L3 10.0.1.1/24 (neighbour 10.0.1.2 = HOST_A), VLAN 100 on it: 10.100.0.1/24;
/// - eth1 L3 192.168.1.1/24 (neighbour 192.168.1.2 = HOST_B); routes 10.2.0.0/16 via
///   192.168.1.2, 10.3.0.0/16 ECMP via 192.168.1.2 and 10.0.1.2, 10.4.0.0/16 via 192.168.1.9
///   (unresolved: ARP), 10.5.5.16/28 via 10.0.1.2, a drop route 10.66.0.0/16;
/// - a VXLAN tunnel 192.168.1.1 → 192.168.1.2 VNI 0x123456 over eth1, L2 cross-connected to eth2;
/// - eth3 ↔ eth4 L2 cross-connect;
/// - eth5 (172.16.5.1/24) ↔ eth6 (172.16.6.1/24) L3 cross-connect, next hops 172.16.6.2
///   (neighbour HOST_B) and 172.16.5.2 (unresolved);
/// - a WireGuard tunnel wg0 listening on 192.168.1.1:51820, its peer at 192.168.1.2:51821
///   (allowed 10.9.0.0/24 and 10.0.1.0/24) with a session in place, 10.9.0.0/24 routed to it.
pub struct Rig {
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
    /// The WireGuard tunnel's index.
    pub wg_tunnel: u32,
}

impl Rig {
    /// Builds the rig described above.
    pub fn new() -> Rig {
        let (pool, buffers, mut fwd) = rig_parts();
        let p: Vec<IfIndex> = (0..PORTS as u8)
            .map(|i| fwd.add_port(&format!("eth{i}"), mac(i), 1500).unwrap())
            .collect();
        fwd.add_address(p[0], ip(10, 0, 1, 1), 24).unwrap();
        fwd.add_neighbor(p[0], ip(10, 0, 1, 2), HOST_A).unwrap();
        let vlan = fwd.add_vlan(p[0], 100, "eth0.100").unwrap();
        fwd.add_address(vlan, ip(10, 100, 0, 1), 24).unwrap();
        fwd.add_address(p[1], ip(192, 168, 1, 1), 24).unwrap();
        fwd.add_neighbor(p[1], ip(192, 168, 1, 2), HOST_B).unwrap();
        let via = |interface, next_hop| Path {
            interface,
            next_hop,
        };
        fwd.add_route(ip(10, 2, 0, 0), 16, &[via(p[1], ip(192, 168, 1, 2))])
            .unwrap();
        fwd.add_route(
            ip(10, 3, 0, 0),
            16,
            &[via(p[1], ip(192, 168, 1, 2)), via(p[0], ip(10, 0, 1, 2))],
        )
        .unwrap();
        fwd.add_route(ip(10, 4, 0, 0), 16, &[via(p[1], ip(192, 168, 1, 9))])
            .unwrap();
        fwd.add_route(ip(10, 5, 5, 16), 28, &[via(p[0], ip(10, 0, 1, 2))])
            .unwrap();
        fwd.add_drop_route(ip(10, 66, 0, 0), 16).unwrap();
        let t = fwd
            .add_vxlan_tunnel("vxlan0", ip(192, 168, 1, 1), ip(192, 168, 1, 2), VNI, 4789)
            .unwrap();
        fwd.cross_connect(p[2], t).unwrap();
        fwd.cross_connect(p[3], p[4]).unwrap();
        fwd.add_address(p[5], ip(172, 16, 5, 1), 24).unwrap();
        fwd.add_address(p[6], ip(172, 16, 6, 1), 24).unwrap();
        fwd.add_neighbor(p[6], ip(172, 16, 6, 2), HOST_B).unwrap();
        fwd.l3_cross_connect(p[5], p[6], ip(172, 16, 6, 2), ip(172, 16, 5, 2))
            .unwrap();
        let (peers, receivers) = wg_sessions();
        let (wg, wg_tunnel) = fwd
            .add_wireguard_tunnel(
                "wg0",
                std::net::Ipv4Addr::from(WG_LOCAL.0).into(),
                WG_LOCAL.1,
                peers.clone(),
                1500,
            )
            .unwrap();
        fwd.set_wireguard_sessions(wg_tunnel, peers, receivers)
            .unwrap();
        fwd.add_route(ip(10, 9, 0, 0), 24, &[via(wg, ip(10, 9, 0, 1))])
            .unwrap();
        let published = LocalState::default();
        fwd.commit(&published).unwrap();
        let (graph, ports) = port_graph(&p);
        Rig {
            pool,
            buffers,
            fwd,
            published,
            graph,
            ports,
            wg_tunnel,
        }
    }

    /// Puts a fresh WireGuard session in place (new keys' time, counter and replay window),
    /// so that every input sees the same state.
    pub fn reset_wireguard(&mut self) {
        let (peers, receivers) = wg_sessions();
        self.fwd
            .set_wireguard_sessions(self.wg_tunnel, peers, receivers)
            .unwrap();
        self.fwd.commit(&self.published).unwrap();
    }

    /// Receives each `(port, frame)` and runs the graph until it is idle; returns what each
    /// port sent. Panics unless every buffer is back in the pool afterwards.
    pub fn inject(&mut self, frames: &[(usize, Vec<u8>)]) -> Vec<Vec<Vec<u8>>> {
        let state = self.published.current();
        run_until_idle(
            &mut self.graph,
            &mut self.buffers,
            &self.ports,
            &state,
            frames,
        );
        // Learned neighbours are the control side's to commit: forgotten here, so every
        // input sees the same tables.
        self.fwd.take_events();
        take_sent(&self.ports, &self.pool)
    }

    /// A node's error counter.
    pub fn error(&self, node: &str, name: &str) -> u64 {
        self.graph.handle().runtime().error(node, name)
    }
}

impl Default for Rig {
    fn default() -> Self {
        Rig::new()
    }
}

/// What every rig starts from: a pool of 2048 buffers on ordinary pages, its worker's buffers,
/// and forwarding tables sized for a rig.
pub fn rig_parts() -> (Arc<BufferPool>, WorkerBuffers, Forwarding) {
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 2048,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap();
    let buffers = pool.worker_buffers();
    let fwd = Forwarding::new(FibConfig {
        long_prefix_groups: 64,
        hugepages: HugepagePolicy::Never,
        ..FibConfig::default()
    })
    .unwrap();
    (pool, buffers, fwd)
}

/// What each of `ports` sent since it was last taken; panics unless every buffer of `pool` is
/// back and none was freed twice.
pub fn take_sent(ports: &[Port], pool: &BufferPool) -> Vec<Vec<Vec<u8>>> {
    let sent = ports
        .iter()
        .map(|p| std::mem::take(&mut *p.tx.lock().unwrap()))
        .collect();
    assert_eq!(pool.in_use_count(), 0, "buffers leaked");
    assert_eq!(pool.double_free_count(), 0, "a buffer was freed twice");
    sent
}

/// A graph of every forwarding node with an input node `ethN-input` and a captured transmit
/// queue for each of the ports `p` (`ethN`, in order).
pub fn port_graph(p: &[IfIndex]) -> (Graph<ForwardingState>, Vec<Port>) {
    let mut b = GraphBuilder::new();
    let mut ports = Vec::new();
    let mut tx: Vec<(IfIndex, Box<dyn TxQueue>)> = Vec::new();
    for (i, &index) in p.iter().enumerate() {
        let (rxq, rx) = ScriptedRx::new();
        let (txq, captured) = CaptureTx::new();
        b.add(PortInput::new(
            &format!("eth{i}-input"),
            "ethernet-input",
            index.get(),
            rxq,
        ));
        tx.push((index, Box::new(txq)));
        ports.push(Port {
            index,
            rx,
            tx: captured,
        });
    }
    add_forwarding_nodes(&mut b, tx);
    (b.build().unwrap(), ports)
}

/// Puts each `(port, frame)` on its port's receive list (the port number modulo the ports')
/// and runs `graph` until every frame is received and nothing is pending. Panics if the graph
/// does not become idle.
pub fn run_until_idle(
    graph: &mut Graph<ForwardingState>,
    buffers: &mut WorkerBuffers,
    ports: &[Port],
    state: &ForwardingState,
    frames: &[(usize, Vec<u8>)],
) {
    for (p, f) in frames {
        ports[*p % ports.len()]
            .rx
            .lock()
            .unwrap()
            .push_back(f.clone());
    }
    for _ in 0..64 {
        graph.run_pass(buffers, state);
        if ports.iter().all(|p| p.rx.lock().unwrap().is_empty()) && graph.pending_packets() == 0 {
            break;
        }
    }
    assert_eq!(graph.pending_packets(), 0, "the graph is idle");
    assert!(
        ports.iter().all(|p| p.rx.lock().unwrap().is_empty()),
        "every frame received"
    );
}

/// The Internet checksum.
pub fn inet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    for (i, b) in bytes.iter().enumerate() {
        sum += if i % 2 == 0 {
            (*b as u64) << 8
        } else {
            *b as u64
        };
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 packet (no options) with a correct header checksum.
pub fn ipv4(src: u32, dst: u32, proto: u8, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let total = 20 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    p[8] = ttl;
    p[9] = proto;
    p[12..16].copy_from_slice(&src.to_be_bytes());
    p[16..20].copy_from_slice(&dst.to_be_bytes());
    let c = inet_checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..].copy_from_slice(payload);
    p
}

/// A UDP datagram (checksum 0).
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = vec![0u8; 8 + payload.len()];
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u[8..].copy_from_slice(payload);
    u
}

/// An Ethernet II frame.
pub fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Splits a packet-path input into `(port, frame)` records: a port byte, a 16-bit big-endian
/// length, then that many bytes (fewer at the end). At most 16 frames.
pub fn records(mut data: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    while data.len() >= 3 && out.len() < 16 {
        let port = data[0] as usize % PORTS;
        let len = u16::from_be_bytes([data[1], data[2]]) as usize;
        let rest = &data[3..];
        let n = len.min(rest.len());
        out.push((port, rest[..n].to_vec()));
        data = &rest[n..];
    }
    out
}

/// The inverse of [`records`], for seeds.
pub fn encode_records(frames: &[(usize, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (p, f) in frames {
        out.push(*p as u8);
        out.extend_from_slice(&(f.len() as u16).to_be_bytes());
        out.extend_from_slice(f);
    }
    out
}
