//! The built-in demo: every worker routes a stream of UDP frames through Quiver's real
//! forwarding graph (ethernet-input → ip4-input → ip4-lookup → ip4-rewrite → interface-output)
//! between two in-memory ports, over 1,024 routes with two-way ECMP. One frame in a hundred is
//! bad on purpose (no route, TTL 1, a broken checksum), so the drop counters show their reasons.

use dataplane::BufferIndex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dataplane::harness::{PacketSource, SourceConfig};
use dataplane::{Graph, GraphBuilder, GraphError, TxQueue, WorkerBuffers, WorkerInit};
use graph_nodes::{
    add_forwarding_nodes, FibConfig, Forwarding, ForwardingError, ForwardingState, IfIndex, Path,
};

/// Where the demo's sequence number sits: the first UDP payload byte.
pub const SEQUENCE_OFFSET: usize = 42;

const IN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const OUT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xaa, 0x01];

fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

/// The demo's two ports, addresses, neighbours and routes.
pub struct DemoTopology {
    /// Forwarding configuration (to commit and publish).
    pub forwarding: Forwarding,
    /// Where traffic comes in.
    pub ingress: IfIndex,
    /// Where it leaves.
    pub egress: IfIndex,
}

/// Builds the demo's forwarding configuration.
pub fn topology(fib: FibConfig) -> Result<DemoTopology, ForwardingError> {
    let mut f = Forwarding::new(fib)?;
    let ingress = f.add_port("demo-in", IN_MAC, 1500)?;
    let egress = f.add_port("demo-out", OUT_MAC, 1500)?;
    f.add_address(ingress, ip(10, 0, 0, 1), 24)?;
    f.add_address(egress, ip(10, 0, 1, 1), 24)?;
    f.add_neighbor(ingress, ip(10, 0, 0, 2), HOST_MAC)?;
    let mut paths = Vec::new();
    for k in 0..2u8 {
        let nh = ip(10, 0, 1, 2 + k);
        f.add_neighbor(egress, nh, [0x02, 0, 0, 1, 0, k])?;
        paths.push(Path {
            next_hop: nh,
            interface: egress,
        });
    }
    for r in 0..1024u32 {
        f.add_route(0x0a01_0000 | r << 6, 26, &paths)?;
    }
    Ok(DemoTopology {
        forwarding: f,
        ingress,
        egress,
    })
}

/// An Ethernet / IPv4 / UDP frame of `size` bytes to `dst` with `ttl`, from host 10.0.0.2.
pub fn udp_frame(size: usize, dst: u32, ttl: u8, sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; size.max(60)];
    f[0..6].copy_from_slice(&IN_MAC);
    f[6..12].copy_from_slice(&HOST_MAC);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (f.len() - 14) as u16;
    let h = &mut f[14..34];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&ip_len.to_be_bytes());
    h[8] = ttl;
    h[9] = 17;
    h[12..16].copy_from_slice(&ip(10, 0, 0, 2).to_be_bytes());
    h[16..20].copy_from_slice(&dst.to_be_bytes());
    let sum = graph_nodes::wire::checksum(h);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&4321u16.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f
}

/// The traffic mix: 97 good frames to spread destinations, then one each with no route, TTL 1,
/// and a broken header checksum.
pub fn traffic(size: usize) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = (0..97u32)
        .map(|i| udp_frame(size, 0x0a01_0000 | (i * 677 % 65536), 64, 1024 + i as u16))
        .collect();
    v.push(udp_frame(size, ip(192, 0, 2, 1), 64, 7));
    v.push(udp_frame(size, ip(10, 1, 0, 1), 1, 8));
    let mut bad = udp_frame(size, ip(10, 1, 0, 1), 64, 9);
    bad[24] ^= 0x5a;
    v.push(bad);
    v
}

/// The demo's "wire": counts what leaves by the egress port and frees it.
pub struct CountingTx(pub Arc<AtomicU64>);

impl TxQueue for CountingTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        self.0.fetch_add(packets.len() as u64, Ordering::Relaxed);
        buffers.free(packets);
        packets.len()
    }
}

/// Builds one worker's demo graph: the source on the ingress port, every forwarding node, the
/// egress port's counting transmit queue.
pub fn build(
    init: &WorkerInit,
    topo: (IfIndex, IfIndex),
    rate_pps: u64,
    frame_size: usize,
    delivered: Arc<AtomicU64>,
) -> Result<Graph<ForwardingState>, GraphError> {
    let (ingress, egress) = topo;
    let mut src = SourceConfig::new(
        "demo-source",
        graph_nodes::names::ETHERNET_INPUT,
        traffic(frame_size),
    );
    src.sequence_offset = Some(SEQUENCE_OFFSET);
    src.first_sequence = (init.index as u64) << 48;
    src.rate_pps = (rate_pps > 0).then_some(rate_pps);
    src.rx_interface = ingress.get();
    let mut b = GraphBuilder::new();
    b.add(PacketSource::new(src));
    add_forwarding_nodes(
        &mut b,
        vec![(egress, Box::new(CountingTx(delivered)) as Box<dyn TxQueue>)],
    );
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
    use graph_nodes::LocalState;

    #[test]
    fn the_demo_forwards_97_of_100_and_names_the_3_drops() {
        let mut topo = topology(FibConfig {
            long_prefix_groups: 512,
            hugepages: HugepagePolicy::Never,
            ..FibConfig::default()
        })
        .unwrap();
        let local = LocalState::default();
        topo.forwarding.commit(&local).unwrap();
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers: 2048,
            hugepages: HugepagePolicy::Never,
            ..Default::default()
        })
        .unwrap();
        let mut w = pool.worker_buffers();
        let delivered = Arc::new(AtomicU64::new(0));
        let init = WorkerInit {
            index: 0,
            core: 0,
            workers: 1,
            pool: pool.clone(),
        };
        let mut g = build(&init, (topo.ingress, topo.egress), 0, 64, delivered.clone()).unwrap();
        let state = local.current();
        let mut made = 0;
        while made < 1000 {
            made += g.run_pass(&mut w, &state);
        }
        g.shutdown(&mut w, &state);
        let rt = g.handle().runtime();
        let made = made as u64;
        assert_eq!(
            delivered.load(Ordering::Relaxed),
            made / 100 * 97 + (made % 100).min(97)
        );
        assert_eq!(rt.error("ip4-lookup", "no-route"), made / 100);
        assert_eq!(rt.error("ip4-rewrite", "ttl-expired"), made / 100);
        assert_eq!(rt.error("ip4-input", "bad-checksum"), made / 100);
        assert_eq!(pool.in_use_count(), 0);
    }
}
