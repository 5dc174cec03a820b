//! `dispatch`: the graph's own cost per node at full 256-packet vectors.
//!
//! Three chains of 8 nodes between a packet source and a sink, each run on one pinned core:
//! pass-through nodes handing whole frames on, pass-through nodes that read every packet's
//! metadata and enqueue per packet, and MAC-swap nodes (VPP's sample node). Per-node clocks come
//! from the runtime counters that `show runtime` prints. The reference, in the same run, is the
//! MAC swap done as a plain loop over the same buffers with no graph at all, so the ratio is the
//! graph's overhead on a node that does real per-packet work.

use dataplane::buffer::{BufferPool, BufferPoolConfig};
use dataplane::harness::{MacSwap, PacketSink, PacketSource, PassThrough, SourceConfig};
use dataplane::BufferIndex;
use dataplane::{cycles, Context, Epochs, Frame, GraphBuilder, Next, Node, NodeSpec, Published};
use serde_json::json;

const CHAIN: usize = 8;
/// VPP's published figure for its sample node (a quad-loop MAC swap).
const VPP_SAMPLE_NODE: f64 = 16.0;

/// Reads each packet's metadata and enqueues it on its own, to its one next node.
struct PerPacket {
    name: String,
    next: String,
    nexts: [Next; 256],
}

impl Node<()> for PerPacket {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(&self.name).nexts(&[&self.next])
    }
    fn process(&mut self, cx: &mut Context<'_, ()>, frame: &mut Frame) -> usize {
        let bis = frame.as_slice();
        for (i, &bi) in bis.iter().enumerate() {
            let m = cx.buffers.meta(bi);
            self.nexts[i] = if m.rx_interface == u32::MAX - 1 {
                Next::DROP
            } else {
                Next::declared(0)
            };
        }
        cx.enqueue_to_nexts(&self.nexts[..bis.len()], bis);
        bis.len()
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Handoff,
    PerPacket,
    MacSwap,
}

struct ChainResult {
    per_node: f64,
    total_per_packet: f64,
    packets: u64,
    seconds: f64,
}

fn frame64() -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12] = 0x08;
    f
}

fn run_chain(pool: &std::sync::Arc<BufferPool>, kind: Kind, packets: u64) -> ChainResult {
    let mut buffers = pool.worker_buffers();
    let mut b = GraphBuilder::<()>::new();
    let name = |i: usize| {
        if i == CHAIN {
            "sink".to_string()
        } else {
            format!("n{i}")
        }
    };
    b.add(PacketSource::new(SourceConfig::new(
        "source",
        "n0",
        vec![frame64()],
    )));
    for i in 0..CHAIN {
        let (me, next) = (name(i), name(i + 1));
        match kind {
            Kind::Handoff => b.add(PassThrough::new(&me, &next)),
            Kind::PerPacket => b.add(PerPacket {
                name: me,
                next,
                nexts: [Next::DROP; 256],
            }),
            Kind::MacSwap => b.add(MacSwap::new(&me, &next)),
        };
    }
    b.add(PacketSink::new("sink"));
    let mut g = b.build().expect("bench graph");
    // Warm up, then measure from zeroed counters.
    for _ in 0..2000 {
        g.run_pass(&mut buffers, &());
    }
    let h = g.handle();
    h.clear_counters();
    let t0 = std::time::Instant::now();
    let mut moved = 0u64;
    while moved < packets {
        moved += g.run_pass(&mut buffers, &()) as u64;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let rt = h.runtime();
    let nodes: Vec<_> = (0..CHAIN)
        .map(|i| rt.node(&name(i)).expect("node").clone())
        .collect();
    let cycles: u64 = nodes.iter().map(|n| n.cycles).sum();
    let node_packets: u64 = nodes.iter().map(|n| n.packets).sum();
    g.shutdown(&mut buffers, &());
    ChainResult {
        per_node: cycles as f64 / node_packets as f64,
        total_per_packet: rt.worker_loop.busy_cycles_per_packet(),
        packets: moved,
        seconds,
    }
}

/// The same MAC swap over the same kind of buffers, as a plain loop: no frames, no dispatch.
fn direct_mac_swap(pool: &std::sync::Arc<BufferPool>, packets: u64) -> f64 {
    let mut buffers = pool.worker_buffers();
    let mut bis = [BufferIndex::NONE; 256];
    buffers.alloc(&mut bis).expect("256 buffers");
    let f = frame64();
    for &bi in &bis {
        buffers.write_packet(bi, &f).expect("one buffer each");
    }
    let rounds = packets / 256;
    let mut spent = 0u64;
    for _ in 0..rounds {
        let t0 = cycles::now();
        for (i, &bi) in bis.iter().enumerate() {
            if let Some(&ahead) = bis.get(i + 4) {
                buffers.prefetch_data(ahead);
            }
            let (meta, d) = buffers.meta_and_data_mut(bi);
            if d.len() >= 14 {
                let (dst, rest) = d.split_at_mut(6);
                dst.swap_with_slice(&mut rest[..6]);
                meta.tx_interface = meta.rx_interface;
            }
        }
        spent += cycles::now() - t0;
        std::hint::black_box(&bis);
    }
    buffers.free(&bis);
    spent as f64 / (rounds * 256) as f64
}

/// The worker loop's cost when there is nothing to do: a snapshot read and one empty poll.
fn empty_poll(pool: &std::sync::Arc<BufferPool>, passes: u64) -> f64 {
    let mut buffers = pool.worker_buffers();
    let mut src = SourceConfig::new("source", "sink", vec![frame64()]);
    src.limit = Some(0);
    let mut b = GraphBuilder::<()>::new();
    b.add(PacketSource::new(src)).add(PacketSink::new("sink"));
    let mut g = b.build().expect("idle graph");
    let epochs = Epochs::new();
    let state = Published::new(&epochs, ());
    let mut reader = epochs.reader();
    let t0 = cycles::now();
    for _ in 0..passes {
        let s = reader.read(&state);
        g.run_pass(&mut buffers, s);
    }
    (cycles::now() - t0) as f64 / passes as f64
}

/// Runs the scenario; returns the JSON line.
pub fn run(quick: bool) -> Result<String, String> {
    let core = super::pin_to_last_core()?;
    let packets: u64 = if quick { 20_000_000 } else { 200_000_000 };
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 8192,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let hz = cycles::tsc_hz();
    eprintln!(
        "dispatch: {packets} packets per chain of {CHAIN} nodes, core {core}, TSC {:.3} GHz, hugepages {}",
        hz as f64 / 1e9,
        pool.is_hugepage_backed()
    );
    let handoff = run_chain(&pool, Kind::Handoff, packets);
    eprintln!(
        "  pass-through, whole-frame handoff: {:.2} clocks/packet/node",
        handoff.per_node
    );
    let per_packet = run_chain(&pool, Kind::PerPacket, packets);
    eprintln!(
        "  pass-through, per-packet enqueue:  {:.2} clocks/packet/node",
        per_packet.per_node
    );
    let macswap = run_chain(&pool, Kind::MacSwap, packets);
    eprintln!(
        "  mac-swap in the graph:             {:.2} clocks/packet/node",
        macswap.per_node
    );
    let direct = direct_mac_swap(&pool, packets);
    eprintln!(
        "  mac-swap as a plain loop:          {:.2} clocks/packet (reference)",
        direct
    );
    let idle = empty_poll(&pool, if quick { 2_000_000 } else { 20_000_000 });
    eprintln!("  empty worker-loop pass:            {:.1} clocks", idle);
    if pool.in_use_count() != 0 {
        return Err(format!("{} buffers leaked", pool.in_use_count()));
    }
    Ok(json!({
        "scenario": "dispatch",
        "packets": handoff.packets,
        "mpps": handoff.packets as f64 / handoff.seconds / 1e6,
        "tsc_hz": hz,
        "cycles_per_packet": handoff.per_node,
        "per_node": {
            "handoff": handoff.per_node,
            "per_packet_enqueue": per_packet.per_node,
            "mac_swap": macswap.per_node,
        },
        "chain_total_cycles_per_packet": {
            "handoff": handoff.total_per_packet,
            "per_packet_enqueue": per_packet.total_per_packet,
            "mac_swap": macswap.total_per_packet,
        },
        "empty_poll_cycles": idle,
        "reference": {
            "name": "mac-swap as a plain loop over the same buffers, no graph (same run)",
            "cycles_per_packet": direct,
        },
        "ratio": macswap.per_node / direct,
        "published": { "vpp_sample_node_mac_swap_cycles_per_packet": VPP_SAMPLE_NODE },
        "hugepages": pool.is_hugepage_backed(),
    })
    .to_string())
}
