//! Pieces the graph scenarios share: a bench packet source, a transmit queue that frees, route
//! generation with the benchmarks' depth mix, and a measuring loop.

use dataplane::BufferIndex;
use std::sync::Arc;

use dataplane::buffer::BufferPool;
use dataplane::{
    Context, Frame, Graph, Next, Node, NodeRuntime, NodeSpec, TxQueue, WorkerBuffers, WorkerRuntime,
};
use graph_nodes::IfIndex;

/// xorshift64*: deterministic and cheap.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The benchmarks' route depth mix: 16:5% 20:15% 22:20% 24:55% 28:3% 32:2%.
pub const DEPTH_MIX: [(u8, u32); 6] = [(16, 5), (20, 15), (22, 20), (24, 55), (28, 3), (32, 2)];

/// `n` distinct routes with the depth mix, and `lookups` destinations drawn from them.
pub fn routes_and_destinations(n: usize, lookups: usize, seed: u64) -> (Vec<(u32, u8)>, Vec<u32>) {
    let mut rng = Rng(seed);
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut routes = Vec::with_capacity(n);
    while routes.len() < n {
        let pick = (rng.next() % 100) as u32;
        let mut acc = 0;
        let depth = DEPTH_MIX
            .iter()
            .find(|(_, pct)| {
                acc += pct;
                pick < acc
            })
            .map_or(24, |d| d.0);
        let prefix = (rng.next() as u32) & graph_nodes::fib::lpm::mask(depth);
        if seen.insert((prefix, depth)) {
            routes.push((prefix, depth));
        }
    }
    let dsts = (0..lookups)
        .map(|_| {
            let (p, d) = routes[(rng.next() % n as u64) as usize];
            p | (rng.next() as u32 & !graph_nodes::fib::lpm::mask(d))
        })
        .collect();
    (routes, dsts)
}

/// An input node making packets from templates (each with the interface it arrives on),
/// optionally writing a new IPv4 destination into each (checksum fixed incrementally).
pub struct BenchSource {
    templates: Vec<(Vec<u8>, IfIndex)>,
    next_template: usize,
    destinations: Arc<Vec<u32>>,
    destinations6: Arc<Vec<u128>>,
    next_destination: usize,
}

impl BenchSource {
    /// Cycles through `templates`; with `destinations`, writes one into each packet's IPv4
    /// header (at byte 30, after a 14-byte Ethernet header).
    pub fn new(templates: Vec<(Vec<u8>, IfIndex)>, destinations: Arc<Vec<u32>>) -> Self {
        BenchSource {
            templates,
            next_template: 0,
            destinations,
            destinations6: Arc::new(Vec::new()),
            next_destination: 0,
        }
    }

    /// Cycles through `templates` (IPv6 frames), writing one of `destinations` into each
    /// packet's IPv6 header (at byte 38, after a 14-byte Ethernet header; IPv6 has no header
    /// checksum).
    pub fn new6(templates: Vec<(Vec<u8>, IfIndex)>, destinations: Arc<Vec<u128>>) -> Self {
        BenchSource {
            destinations6: destinations,
            ..BenchSource::new(templates, Arc::new(Vec::new()))
        }
    }
}

impl<S> Node<S> for BenchSource {
    fn spec(&self) -> NodeSpec {
        NodeSpec::input("bench-source").nexts(&["ethernet-input"])
    }

    fn process(&mut self, cx: &mut Context<'_, S>, frame: &mut Frame) -> usize {
        let n = cx.buffers.alloc_up_to(frame.spare_mut());
        for i in 0..n {
            let bi = frame.spare_mut()[i];
            let (t, rx) = &self.templates[self.next_template];
            self.next_template = (self.next_template + 1) % self.templates.len();
            cx.buffers.set_length(bi, t.len() as u16);
            let d = cx.buffers.data_mut(bi);
            d.copy_from_slice(t);
            if !self.destinations.is_empty() {
                let dst = self.destinations[self.next_destination];
                self.next_destination = (self.next_destination + 1) % self.destinations.len();
                let old = [
                    u16::from_be_bytes([d[30], d[31]]),
                    u16::from_be_bytes([d[32], d[33]]),
                ];
                d[30..34].copy_from_slice(&dst.to_be_bytes());
                let mut c = u16::from_be_bytes([d[24], d[25]]);
                c = graph_nodes::wire::checksum_update(c, old[0], (dst >> 16) as u16);
                c = graph_nodes::wire::checksum_update(c, old[1], dst as u16);
                d[24..26].copy_from_slice(&c.to_be_bytes());
            }
            if !self.destinations6.is_empty() {
                let dst = self.destinations6[self.next_destination];
                self.next_destination = (self.next_destination + 1) % self.destinations6.len();
                d[38..54].copy_from_slice(&dst.to_be_bytes());
            }
            cx.buffers.meta_mut(bi).rx_interface = rx.get();
        }
        frame.set_len(n);
        cx.enqueue_frame(Next::declared(0), frame);
        n
    }
}

/// A transmit queue that frees everything (the wire).
pub struct NullTx;

impl TxQueue for NullTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        buffers.free(packets);
        packets.len()
    }
}

/// Warms up, then runs passes until `packets` have been produced; returns the counters of the
/// measured part and the seconds it took.
pub fn measure<S: 'static>(
    graph: &mut Graph<S>,
    buffers: &mut WorkerBuffers,
    state: &S,
    packets: u64,
) -> (WorkerRuntime, f64) {
    for _ in 0..2000 {
        graph.run_pass(buffers, state);
    }
    let h = graph.handle();
    h.clear_counters();
    let t0 = std::time::Instant::now();
    let mut moved = 0u64;
    while moved < packets {
        moved += graph.run_pass(buffers, state) as u64;
    }
    (h.runtime(), t0.elapsed().as_secs_f64())
}

/// Node `name`'s counters: an error when the runtime has no such node (a name that drifted, a
/// node the graph lacks), which counting it as 0 cycles would hide in a sum.
pub fn node_of<'a>(rt: &'a WorkerRuntime, name: &str) -> Result<&'a NodeRuntime, String> {
    rt.node(name).ok_or_else(|| {
        let have: Vec<&str> = rt.nodes.iter().map(|n| n.name.as_str()).collect();
        format!("no node {name} in the worker's runtime (it has {have:?})")
    })
}

/// Clocks per packet of node `name`; an error when it is missing ([`node_of`]).
pub fn clocks_of(rt: &WorkerRuntime, name: &str) -> Result<f64, String> {
    Ok(node_of(rt, name)?.clocks_per_packet())
}

/// Clocks per packet of each named node, and their sum; an error when one is missing
/// ([`clocks_of`]).
pub fn node_clocks(rt: &WorkerRuntime, nodes: &[&str]) -> Result<(serde_json::Value, f64), String> {
    let mut map = serde_json::Map::new();
    let mut sum = 0.0;
    for n in nodes {
        let c = clocks_of(rt, n)?;
        sum += c;
        map.insert(n.to_string(), serde_json::json!(c));
    }
    Ok((serde_json::Value::Object(map), sum))
}

/// A pool big enough for the graph benches.
pub fn pool() -> Result<Arc<BufferPool>, String> {
    BufferPool::new(&dataplane::BufferPoolConfig {
        buffers: 16384,
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

/// Fails when the graph dropped packets.
pub fn check_clean(rt: &WorkerRuntime) -> Result<(), String> {
    let drops: u64 = rt
        .errors
        .iter()
        .filter(|e| {
            !matches!(
                e.name.as_str(),
                "echo-replies" | "requests-answered" | "requests-sent"
            )
        })
        .map(|e| e.count)
        .sum();
    if drops > 0 {
        return Err(format!(
            "the bench graph dropped packets:\n{}",
            rt.format_errors()
        ));
    }
    let _ = pool;
    Ok(())
}

/// A 78-byte Ethernet + IPv6 + UDP frame to `dst_mac`, from 2001:db8::2 to `dst`, hop limit
/// 64.
pub fn udp6_frame(dst_mac: [u8; 6], dst: u128) -> Vec<u8> {
    let mut f = vec![0u8; 78];
    f[..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    f[14] = 0x60;
    f[18..20].copy_from_slice(&24u16.to_be_bytes());
    f[20] = 17;
    f[21] = 64;
    f[22..38].copy_from_slice(&0x2001_0db8_0000_0000_0000_0000_0000_0002u128.to_be_bytes());
    f[38..54].copy_from_slice(&dst.to_be_bytes());
    f[54..56].copy_from_slice(&1024u16.to_be_bytes());
    f[56..58].copy_from_slice(&4321u16.to_be_bytes());
    f[58..60].copy_from_slice(&24u16.to_be_bytes());
    f
}

/// A 64-byte Ethernet / IPv4 / UDP frame from 10.0.0.2 to `dst`, to `dst_mac`.
pub fn udp_frame(dst_mac: [u8; 6], dst: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&50u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 2]);
    ip[16..20].copy_from_slice(&dst.to_be_bytes());
    let c = graph_nodes::wire::checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&1024u16.to_be_bytes());
    f[36..38].copy_from_slice(&4321u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f
}

#[cfg(test)]
mod tests {
    use dataplane::counters::LoopRuntime;
    use dataplane::{NodeKind, NodeRuntime, WorkerRuntime};

    use super::node_clocks;

    #[test]
    fn a_node_missing_from_the_runtime_is_an_error_not_0_cycles() {
        let rt = WorkerRuntime {
            worker: Some(0),
            core: None,
            nodes: vec![NodeRuntime {
                name: "ethernet-input".into(),
                kind: NodeKind::Internal,
                calls: 1,
                vectors: 1,
                packets: 4,
                cycles: 100,
            }],
            errors: Vec::new(),
            worker_loop: LoopRuntime::default(),
        };
        let (per_node, sum) = node_clocks(&rt, &["ethernet-input"]).unwrap();
        assert_eq!(
            (per_node["ethernet-input"].as_f64(), sum),
            (Some(25.0), 25.0)
        );
        let e = node_clocks(&rt, &["ethernet-input", "ip4-lookup"]).unwrap_err();
        assert!(e.contains("no node ip4-lookup"), "{e}");
    }
}
