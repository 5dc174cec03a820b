//! A test rig: forwarding tables, one graph driven by hand, ports fed from lists and captured.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::harness::{CaptureTx, Captured, ScriptedRx};
use dataplane::{Graph, GraphBuilder, PortInput, TxQueue, WorkerBuffers};
use graph_nodes::{
    add_forwarding_nodes, FibConfig, Forwarding, ForwardingState, IfIndex, LocalState,
};

pub const MAC0: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const MAC1: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
pub const MAC2: [u8; 6] = [0x02, 0, 0, 0, 0, 0x03];
pub const MAC3: [u8; 6] = [0x02, 0, 0, 0, 0, 0x04];
pub const HOST_A: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x0a];
pub const HOST_B: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x0b];

pub fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

pub struct Port {
    pub index: IfIndex,
    pub rx: Arc<Mutex<VecDeque<Vec<u8>>>>,
    pub tx: Captured,
}

pub struct Rig {
    pub pool: Arc<BufferPool>,
    pub buffers: WorkerBuffers,
    pub fwd: Forwarding,
    pub published: LocalState,
    pub graph: Graph<ForwardingState>,
    pub ports: Vec<Port>,
    pub xconnect: Arc<graph_nodes::nodes::XconnectStats>,
}

impl Rig {
    /// Ports `eth0` … with MACs `macs`; `configure` runs before the graph is built.
    pub fn new(macs: &[[u8; 6]], configure: impl FnOnce(&mut Forwarding, &[IfIndex])) -> Rig {
        Self::with_tx(macs, configure, |_, q| Box::new(q))
    }

    /// As `new`, with a hook to wrap each port's capture queue.
    pub fn with_tx(
        macs: &[[u8; 6]],
        configure: impl FnOnce(&mut Forwarding, &[IfIndex]),
        wrap: impl Fn(usize, CaptureTx) -> Box<dyn TxQueue>,
    ) -> Rig {
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers: 4096,
            hugepages: HugepagePolicy::Never,
            ..Default::default()
        })
        .unwrap();
        let buffers = pool.worker_buffers();
        let mut fwd = Forwarding::new(FibConfig {
            long_prefix_groups: 1024,
            hugepages: HugepagePolicy::Never,
            ..FibConfig::default()
        })
        .unwrap();
        let indices: Vec<IfIndex> = macs
            .iter()
            .enumerate()
            .map(|(i, m)| fwd.add_port(&format!("eth{i}"), *m, 1500).unwrap())
            .collect();
        configure(&mut fwd, &indices);
        let published = LocalState::default();
        fwd.commit(&published).unwrap();
        let mut b = GraphBuilder::new();
        let mut ports = Vec::new();
        let mut tx: Vec<(IfIndex, Box<dyn TxQueue>)> = Vec::new();
        for (i, &index) in indices.iter().enumerate() {
            let (rxq, rx) = ScriptedRx::new();
            let (txq, captured) = CaptureTx::new();
            b.add(PortInput::new(
                &format!("eth{i}-input"),
                "ethernet-input",
                index.get(),
                rxq,
            ));
            tx.push((index, wrap(i, txq)));
            ports.push(Port {
                index,
                rx,
                tx: captured,
            });
        }
        let handles = add_forwarding_nodes(&mut b, tx);
        let graph = b.build().unwrap();
        Rig {
            pool,
            buffers,
            fwd,
            published,
            graph,
            ports,
            xconnect: handles.xconnect,
        }
    }

    /// Commits the forwarding changes.
    pub fn commit(&mut self) {
        self.fwd.commit(&self.published).unwrap();
    }

    /// Receives `frames` on port `p` and runs the graph until it is idle.
    pub fn inject(&mut self, p: usize, frames: &[Vec<u8>]) {
        self.ports[p]
            .rx
            .lock()
            .unwrap()
            .extend(frames.iter().cloned());
        self.run();
    }

    pub fn run(&mut self) {
        let state = self.published.current();
        for _ in 0..64 {
            self.graph.run_pass(&mut self.buffers, &state);
            if self.ports.iter().all(|p| p.rx.lock().unwrap().is_empty())
                && self.graph.pending_packets() == 0
            {
                break;
            }
        }
    }

    /// Takes what port `p` has transmitted.
    pub fn sent(&self, p: usize) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.ports[p].tx.lock().unwrap())
    }

    pub fn error(&self, node: &str, name: &str) -> u64 {
        self.graph.handle().runtime().error(node, name)
    }

    pub fn total_errors(&self) -> u64 {
        self.graph
            .handle()
            .runtime()
            .errors
            .iter()
            .map(|e| e.count)
            .sum()
    }

    /// Every buffer is back in the pool.
    pub fn assert_no_leaks(&self) {
        assert_eq!(self.pool.in_use_count(), 0, "buffers leaked");
        assert_eq!(self.pool.double_free_count(), 0);
    }
}

/// The Internet checksum, written independently of the code under test.
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

/// Recomputes an IPv4 header's checksum in place.
pub fn fix_ip_checksum(p: &mut [u8]) {
    p[10] = 0;
    p[11] = 0;
    let c = inet_checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
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

/// An ICMP echo request or reply.
pub fn icmp_echo(kind: u8, id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, 0, 0, 0];
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(data);
    let c = inet_checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// An Ethernet II frame.
/// An IPv6 packet (UDP, `payload` bytes) from `src` to `dst` with `hop` as its hop limit.
pub fn ipv6(src: &str, dst: &str, hop: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    p.extend_from_slice(&[17, hop]);
    p.extend_from_slice(&src.parse::<std::net::Ipv6Addr>().unwrap().octets());
    p.extend_from_slice(&dst.parse::<std::net::Ipv6Addr>().unwrap().octets());
    p.extend_from_slice(payload);
    p
}

pub fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A UDP-less IPv4 frame (protocol 17, 8 zero bytes) from host A (10.0.1.2) to `dst`, addressed
/// to eth0.
pub fn from_a(dst: u32) -> Vec<u8> {
    eth(
        MAC0,
        HOST_A,
        0x0800,
        &ipv4(ip(10, 0, 1, 2), dst, 17, 64, &[0; 8]),
    )
}

/// An 802.1Q-tagged Ethernet frame.
pub fn eth_vlan(dst: [u8; 6], src: [u8; 6], vlan: u16, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(18 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x8100u16.to_be_bytes());
    f.extend_from_slice(&vlan.to_be_bytes());
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An ARP packet for IPv4 over Ethernet.
pub fn arp(op: u16, sha: [u8; 6], spa: u32, tha: [u8; 6], tpa: u32) -> Vec<u8> {
    let mut a = vec![0, 1, 0x08, 0, 6, 4];
    a.extend_from_slice(&op.to_be_bytes());
    a.extend_from_slice(&sha);
    a.extend_from_slice(&spa.to_be_bytes());
    a.extend_from_slice(&tha);
    a.extend_from_slice(&tpa.to_be_bytes());
    a
}
