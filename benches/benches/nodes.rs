#![allow(missing_docs)] // criterion_group! generates undocumented functions
//! Criterion benchmarks per forwarding node: each bench is one loop pass of 256 packets through a
//! graph that adds one node to the one before it, so differences between benches are that
//! node's cost (the bench runner's per-node clocks give the same from the runtime counters).

use dataplane::BufferIndex;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dataplane::buffer::{BufferPool, BufferPoolConfig};
use dataplane::{Context, Frame, GraphBuilder, Next, Node, NodeSpec, TxQueue, WorkerBuffers};
use graph_nodes::nodes::*;
use graph_nodes::{FibConfig, Forwarding, ForwardingState, IfIndex, LocalState, Path};

const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC1: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

/// 256 copies of one frame per pass, received on interface `rx`.
struct Source {
    frame: Vec<u8>,
    rx: IfIndex,
    next: &'static str,
}

impl Node<ForwardingState> for Source {
    fn spec(&self) -> NodeSpec {
        NodeSpec::input("source").nexts(&[self.next])
    }
    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let n = cx.buffers.alloc_up_to(frame.spare_mut());
        for i in 0..n {
            let bi = frame.spare_mut()[i];
            cx.buffers.set_length(bi, self.frame.len() as u16);
            cx.buffers.data_mut(bi).copy_from_slice(&self.frame);
            cx.buffers.meta_mut(bi).rx_interface = self.rx.get();
        }
        frame.set_len(n);
        cx.enqueue_frame(Next::declared(0), frame);
        n
    }
}

/// Frees whatever reaches it (stands in for the rest of the path).
struct Stop(&'static str);

impl Node<ForwardingState> for Stop {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(self.0)
    }
    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        cx.buffers.free(frame.as_slice());
        frame.len()
    }
}

struct NullTx;
impl TxQueue for NullTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        buffers.free(packets);
        packets.len()
    }
}

fn udp_to(dst: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&MAC0);
    f[6..12].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&ip(10, 0, 0, 2).to_be_bytes());
    f[30..34].copy_from_slice(&dst.to_be_bytes());
    let c = graph_nodes::wire::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

/// The forwarding state the cases run on: two routed ports (eth0, eth1, a route through eth1)
/// and a cross-connected pair (l2a, l2b). Returns the state's writer (kept alive while the
/// cases run), eth0, eth1 and l2a.
fn forwarding() -> (Forwarding, LocalState, IfIndex, IfIndex, IfIndex) {
    let mut fwd = Forwarding::new(FibConfig::default()).expect("fib");
    let eth0 = fwd.add_port("eth0", MAC0, 1500).unwrap();
    let eth1 = fwd.add_port("eth1", MAC1, 1500).unwrap();
    fwd.add_address(eth0, ip(10, 0, 0, 1), 24).unwrap();
    fwd.add_address(eth1, ip(10, 0, 1, 1), 24).unwrap();
    fwd.add_neighbor(eth1, ip(10, 0, 1, 2), [2, 1, 1, 1, 1, 1])
        .unwrap();
    fwd.add_route(
        ip(198, 51, 0, 0),
        16,
        &[Path {
            next_hop: ip(10, 0, 1, 2),
            interface: eth1,
        }],
    )
    .unwrap();
    let l2a = fwd.add_port("l2a", [2, 0, 0, 0, 1, 1], 1500).unwrap();
    let l2b = fwd.add_port("l2b", [2, 0, 0, 0, 1, 2], 1500).unwrap();
    fwd.cross_connect(l2a, l2b).unwrap();
    let local = LocalState::default();
    fwd.commit(&local).unwrap();
    (fwd, local, eth0, eth1, l2a)
}

/// Builds the nodes a case runs after its source.
type Build = fn(&mut GraphBuilder<ForwardingState>);

/// Each case: (name, frame, the port it arrives on, the source's next node, the nodes after it).
fn cases(
    ip4: Vec<u8>,
    eth0: IfIndex,
    l2a: IfIndex,
) -> Vec<(&'static str, Vec<u8>, IfIndex, &'static str, Build)> {
    vec![
        ("ethernet-input", ip4.clone(), eth0, "ethernet-input", |b| {
            b.add(EthernetInput::new())
                .add(Stop("ip4-input"))
                .add(Stop("arp-input"))
                .add(Stop("l2-xconnect"))
                .add(Stop("offload-resolve"))
                .add(Stop("ip6-l3xc"))
                .add(Stop("ip6-input"));
        }),
        ("+ ip4-input", ip4.clone(), eth0, "ethernet-input", |b| {
            b.add(EthernetInput::new())
                .add(Ip4Input::new())
                .add(Stop("ip4-l3xc"))
                .add(Stop("ip4-lookup"))
                .add(Stop("arp-input"))
                .add(Stop("l2-xconnect"))
                .add(Stop("offload-resolve"))
                .add(Stop("ip6-l3xc"))
                .add(Stop("ip6-input"));
        }),
        ("+ ip4-lookup", ip4.clone(), eth0, "ethernet-input", |b| {
            b.add(EthernetInput::new())
                .add(Ip4Input::new())
                .add(Stop("ip4-l3xc"))
                .add(Ip4Lookup::new())
                .add(Stop("ip4-rewrite"))
                .add(Stop("ip4-local"))
                .add(Stop("ip4-arp"))
                .add(Stop("arp-input"))
                .add(Stop("l2-xconnect"))
                .add(Stop("offload-resolve"))
                .add(Stop("ip6-l3xc"))
                .add(Stop("ip6-input"));
        }),
        ("+ ip4-rewrite", ip4.clone(), eth0, "ethernet-input", |b| {
            b.add(EthernetInput::new())
                .add(Ip4Input::new())
                .add(Stop("ip4-l3xc"))
                .add(Ip4Lookup::new())
                .add(Ip4Rewrite::new())
                .add(Stop("interface-output"))
                .add(Stop("ip4-icmp-error"))
                .add(Stop("ip4-local"))
                .add(Stop("ip4-arp"))
                .add(Stop("arp-input"))
                .add(Stop("l2-xconnect"))
                .add(Stop("offload-resolve"))
                .add(Stop("ip6-l3xc"))
                .add(Stop("ip6-input"));
        }),
        (
            "+ interface-output",
            ip4.clone(),
            eth0,
            "ethernet-input",
            |b| {
                add_forwarding_nodes(
                    b,
                    vec![(IfIndex::new(1), Box::new(NullTx) as Box<dyn TxQueue>)],
                );
            },
        ),
        (
            "l2: ethernet-input + l2-xconnect + interface-output",
            ip4.clone(),
            l2a,
            "ethernet-input",
            |b| {
                add_forwarding_nodes(
                    b,
                    vec![(IfIndex::new(3), Box::new(NullTx) as Box<dyn TxQueue>)],
                );
            },
        ),
    ]
}

fn nodes(c: &mut Criterion) {
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 8192,
        ..Default::default()
    })
    .expect("pool");
    // The writer stays alive while the cases run.
    let (_fwd, local, eth0, eth1, l2a) = forwarding();
    let state: Arc<ForwardingState> = local.current();
    let mut w = pool.worker_buffers();

    let ip4 = udp_to(ip(198, 51, 7, 9));
    let cases = cases(ip4, eth0, l2a);
    let mut g = c.benchmark_group("nodes");
    g.throughput(Throughput::Elements(256));
    for (name, frame, rx, next, build) in cases {
        let mut b = GraphBuilder::new();
        b.add(Source { frame, rx, next });
        build(&mut b);
        let mut graph = b.build().expect("graph");
        g.bench_function(name, |bch| bch.iter(|| graph.run_pass(&mut w, &state)));
        graph.shutdown(&mut w, &state);
    }
    g.finish();
    assert_eq!(
        eth1,
        IfIndex::new(1),
        "the benches' transmit queues assume eth1 is interface 1"
    );
}

criterion_group!(per_node, nodes);
criterion_main!(per_node);
