//! The node graph: arcs by name, packets following arcs, counters that add up, cycles, trace.

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::harness::{PacketSink, PacketSource, PassThrough, SourceConfig};
use dataplane::BufferIndex;
use dataplane::{Context, Frame, GraphBuilder, GraphError, Next, Node, NodeSpec, ERROR_DROP};

fn pool() -> std::sync::Arc<BufferPool> {
    BufferPool::new(&BufferPoolConfig {
        buffers: 4096,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap()
}

/// Sends a packet by its first byte modulo 3: 0 → `even`, 1 → `odd`, 2 → dropped as `bad-kind`.
struct Classify;
const TO_EVEN: Next = Next::declared(0);
const TO_ODD: Next = Next::declared(1);
const BAD_KIND: u16 = 0;

impl Node<()> for Classify {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal("classify")
            .nexts(&["even", "odd"])
            .errors(&[("bad-kind", "first byte is 2 modulo 3")])
    }
    fn process(&mut self, cx: &mut Context<'_, ()>, frame: &mut Frame) -> usize {
        let mut nexts = [Next::DROP; 256];
        for (i, &bi) in frame.as_slice().iter().enumerate() {
            nexts[i] = match cx.buffers.data(bi)[0] % 3 {
                0 => TO_EVEN,
                1 => TO_ODD,
                _ => {
                    cx.buffers.meta_mut(bi).error = cx.error_id(BAD_KIND);
                    Next::DROP
                }
            };
        }
        cx.enqueue_to_nexts(&nexts[..frame.len()], frame.as_slice());
        frame.len()
    }
}

fn frames(n: u8) -> Vec<Vec<u8>> {
    (0..n).map(|i| vec![i; 64]).collect()
}

#[test]
fn unknown_arc_names_are_refused_at_build() {
    let mut b = GraphBuilder::<()>::new();
    b.add(PassThrough::new("a", "nowhere"));
    assert_eq!(
        b.build().err(),
        Some(GraphError::UnknownNext {
            node: "a".into(),
            next: "nowhere".into()
        })
    );

    let mut b = GraphBuilder::<()>::new();
    b.add(PacketSink::new("x")).add(PacketSink::new("x"));
    assert_eq!(b.build().err(), Some(GraphError::DuplicateNode("x".into())));

    let mut b = GraphBuilder::<()>::new();
    b.add(PacketSource::new(SourceConfig::new(
        "src",
        "sink",
        frames(1),
    )))
    .add(PacketSink::new("sink"))
    .add(PassThrough::new("p", "src"));
    assert_eq!(
        b.build().err(),
        Some(GraphError::ArcToInput {
            node: "p".into(),
            next: "src".into()
        })
    );

    let mut b = GraphBuilder::<()>::new();
    b.add(PacketSink::new(ERROR_DROP));
    assert_eq!(
        b.build().err(),
        Some(GraphError::DuplicateNode(ERROR_DROP.into()))
    );
}

#[test]
fn packets_follow_arcs_and_counters_add_up() {
    let pool = pool();
    let mut buffers = pool.worker_buffers();
    let mut src = SourceConfig::new("src", "classify", frames(3));
    src.limit = Some(3000);
    let even = PacketSink::new("even");
    let odd = PacketSink::new("odd");
    let (even_r, odd_r) = (even.report(), odd.report());
    let mut b = GraphBuilder::new();
    b.add(PacketSource::new(src))
        .add(Classify)
        .add(even)
        .add(odd);
    let mut g = b.build().unwrap();

    let mut made = 0;
    for _ in 0..100 {
        made += g.run_pass(&mut buffers, &());
    }
    assert_eq!(made, 3000);
    assert_eq!(even_r.packets(), 1000);
    assert_eq!(odd_r.packets(), 1000);

    let rt = g.handle().runtime();
    let c = rt.node("classify").unwrap();
    assert_eq!(c.packets, 3000);
    assert_eq!(rt.error("classify", "bad-kind"), 1000);
    // Packets in = packets out + drops, for every node.
    assert_eq!(
        c.packets,
        rt.node("even").unwrap().packets
            + rt.node("odd").unwrap().packets
            + rt.errors_of("classify")
    );
    assert_eq!(rt.node("src").unwrap().packets, c.packets);
    assert_eq!(
        rt.node(ERROR_DROP).unwrap().packets,
        rt.errors_of("classify")
    );
    assert_eq!(rt.error(ERROR_DROP, "no-reason"), 0);
    assert!(c.vectors >= 3000 / 256, "whole frames, not single packets");
    assert!(rt.worker_loop.busy_packets == 3000 && rt.worker_loop.idle_passes > 0);
    assert_eq!(pool.in_use_count(), 0, "every packet freed");

    let table = rt.format_runtime(dataplane::cycles::tsc_hz());
    assert!(
        table.contains("classify") && table.contains("Clocks/pkt"),
        "{table}"
    );
    assert!(rt.format_errors().contains("bad-kind"));

    g.handle().clear_counters();
    assert_eq!(g.handle().runtime().node("classify").unwrap().packets, 0);
}

/// Sends each packet around `loop-a` → `loop-b` → `loop-a` … three times, then to `out`.
struct Looper {
    name: &'static str,
    other: &'static str,
}
impl Node<()> for Looper {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(self.name).nexts(&[self.other, "out"])
    }
    fn process(&mut self, cx: &mut Context<'_, ()>, frame: &mut Frame) -> usize {
        for &bi in frame.as_slice() {
            let m = cx.buffers.meta_mut(bi);
            m.opaque[0] += 1;
            let next = if m.opaque[0] < 6 {
                Next::declared(0)
            } else {
                Next::declared(1)
            };
            cx.enqueue(next, bi);
        }
        frame.len()
    }
}

#[test]
fn a_graph_with_a_cycle_works() {
    let pool = pool();
    let mut buffers = pool.worker_buffers();
    let mut src = SourceConfig::new("src", "loop-a", frames(1));
    src.limit = Some(1000);
    let out = PacketSink::new("out");
    let report = out.report();
    let mut b = GraphBuilder::new();
    b.add(PacketSource::new(src))
        .add(Looper {
            name: "loop-a",
            other: "loop-b",
        })
        .add(Looper {
            name: "loop-b",
            other: "loop-a",
        })
        .add(out);
    let mut g = b.build().unwrap();
    for _ in 0..20 {
        g.run_pass(&mut buffers, &());
    }
    assert_eq!(report.packets(), 1000);
    let rt = g.handle().runtime();
    assert_eq!(rt.node("loop-a").unwrap().packets, 3000);
    assert_eq!(rt.node("loop-b").unwrap().packets, 3000);
    assert_eq!(pool.in_use_count(), 0);
}

#[test]
fn per_packet_enqueue_spills_into_several_frames() {
    // One node receiving 3 × 256 packets in one pass gets three full frames, none lost.
    let pool = pool();
    let mut buffers = pool.worker_buffers();
    let sink = PacketSink::new("sink").with_sequence(0, 0, 768);
    let report = sink.report();
    let mut b = GraphBuilder::new();
    for i in 0..3 {
        let mut src = SourceConfig::new(&format!("src{i}"), "split", frames(1));
        src.sequence_offset = Some(0);
        src.first_sequence = i * 256;
        src.limit = Some(256);
        b.add(PacketSource::new(src));
    }
    b.add(Looper {
        name: "split",
        other: "sink",
    })
    .add(PacketSink::new("out"))
    .add(sink);
    let mut g = b.build().unwrap();
    g.run_pass(&mut buffers, &());
    assert_eq!(report.packets(), 768);
    assert_eq!(report.missing(768), 0);
    assert_eq!(report.duplicates(), 0);
    let rt = g.handle().runtime();
    assert_eq!(rt.node("split").unwrap().vectors, 3);
    assert_eq!(rt.node("sink").unwrap().vectors, 3);
}

#[test]
fn a_traced_packet_names_every_node_it_passed_in_order() {
    let pool = pool();
    let mut buffers = pool.worker_buffers();
    let mut src = SourceConfig::new("src", "p1", frames(3));
    src.limit = Some(600);
    let mut b = GraphBuilder::new();
    b.add(PacketSource::new(src))
        .add(PassThrough::new("p1", "classify"))
        .add(Classify)
        .add(PacketSink::new("even"))
        .add(PacketSink::new("odd"));
    let mut g = b.build().unwrap();
    let h = g.handle();
    g.run_pass(&mut buffers, &()); // traffic before the trace is armed is not traced
    h.trace_arm(Some(dataplane::trace::TraceArm::new("src", 4)));
    for _ in 0..10 {
        g.run_pass(&mut buffers, &());
    }
    let traced = h.trace_packets();
    assert_eq!(traced.len(), 4, "exactly N packets traced");
    // Packets 256, 257, 258, 259 of the source: first bytes 1, 2, 0, 1 (sequence modulo 3).
    let paths: Vec<Vec<&str>> = traced
        .iter()
        .map(|p| p.nodes.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(paths[0], ["src", "p1", "classify", "odd"]);
    assert_eq!(paths[1], ["src", "p1", "classify", ERROR_DROP]);
    assert_eq!(paths[2], ["src", "p1", "classify", "even"]);
    let text = traced[1].to_string();
    assert!(
        text.contains("error classify.bad-kind"),
        "the drop reason is shown: {text}"
    );
    h.trace_clear();
    assert!(h.trace_packets().is_empty());
    assert_eq!(pool.in_use_count(), 0);
}

/// Sends every packet back to itself, forever; holds every tenth packet it sees.
struct Forever {
    held: Vec<BufferIndex>,
}
impl Node<()> for Forever {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal("forever").nexts(&["forever"])
    }
    fn process(&mut self, cx: &mut Context<'_, ()>, frame: &mut Frame) -> usize {
        for &bi in frame.as_slice() {
            if bi.get() % 10 == 0 && !self.held.contains(&bi) {
                self.held.push(bi);
            } else {
                cx.enqueue(Next::declared(0), bi);
            }
        }
        frame.len()
    }
    fn release(&mut self, buffers: &mut dataplane::WorkerBuffers) {
        buffers.free(&self.held);
        self.held.clear();
    }
}

#[test]
fn a_pass_is_capped_and_shutdown_frees_everything_still_queued() {
    let pool = pool();
    let mut buffers = pool.worker_buffers();
    let mut src = SourceConfig::new("src", "forever", frames(1));
    src.limit = Some(512);
    let mut b = GraphBuilder::new();
    b.add(PacketSource::new(src))
        .add(Forever { held: Vec::new() });
    let mut g = b.build().unwrap();
    g.run_pass(&mut buffers, &());
    assert!(
        g.pending_packets() > 0,
        "a cycle that never ends is cut off at the pass cap"
    );
    g.run_pass(&mut buffers, &());
    assert_eq!(pool.in_use_count(), 512, "nothing lost while circling");
    g.shutdown(&mut buffers, &());
    assert_eq!(g.pending_packets(), 0);
    assert_eq!(pool.in_use_count(), 0, "queued and held buffers all freed");
}
