//! Checksum and segmentation work a kernel left on frames (`dataplane::offload`): kept on an
//! L2 cross-connect toward a queue that accepts it, done in software (`offload-resolve`) toward
//! one that does not, and before the L3 path reads the frame.

mod common;

use dataplane::BufferIndex;
use std::sync::{Arc, Mutex};

use common::*;
use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::harness::{CaptureTx, ScriptedRx};
use dataplane::offload::{Gso, Offload};
use dataplane::{Graph, GraphBuilder, PortInput, RxQueue, TxQueue, WorkerBuffers};
use graph_nodes::{
    add_forwarding_nodes, FibConfig, Forwarding, ForwardingState, IfIndex, LocalState,
};

/// Frames handed out by a scripted queue, each with `offload` left on it (or only the first
/// of each receive, with `first_only`).
struct OffloadRx {
    inner: ScriptedRx,
    offload: Offload,
    first_only: bool,
}

impl RxQueue for OffloadRx {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        let n = self.inner.receive(buffers, out);
        let marked = if self.first_only { n.min(1) } else { n };
        for &bi in &out[..marked] {
            buffers.meta_mut(bi).set_offload(self.offload);
        }
        n
    }
}

/// What an offloading queue was given: bytes and the work left on them.
type Sent = Arc<Mutex<Vec<(Vec<u8>, Option<Offload>)>>>;

/// A queue that accepts offloads, as an AF_PACKET port with virtio-net headers does.
struct OffloadTx(Sent);

impl TxQueue for OffloadTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        for &bi in packets {
            let mut v = Vec::new();
            buffers.copy_packet(bi, &mut v);
            let o = buffers.meta(bi).offload().copied();
            self.0.lock().unwrap().push((v, o));
        }
        buffers.free(packets);
        packets.len()
    }

    fn accepts_offload(&self) -> bool {
        true
    }
}

struct Bench {
    pool: Arc<BufferPool>,
    buffers: WorkerBuffers,
    graph: Graph<ForwardingState>,
    state: LocalState,
    rx: Arc<Mutex<std::collections::VecDeque<Vec<u8>>>>,
}

impl Bench {
    /// eth0 (frames with `offload` on them) and eth1 (transmitting through `tx`), configured
    /// by `configure`.
    fn new(
        offload: Offload,
        tx: Box<dyn TxQueue>,
        configure: impl FnOnce(&mut Forwarding, IfIndex, IfIndex),
    ) -> Bench {
        Bench::marking(offload, false, tx, configure)
    }

    /// As [`Bench::new`], the work left only on the first frame of each receive with
    /// `first_only`.
    fn marking(
        offload: Offload,
        first_only: bool,
        tx: Box<dyn TxQueue>,
        configure: impl FnOnce(&mut Forwarding, IfIndex, IfIndex),
    ) -> Bench {
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers: 1024,
            hugepages: HugepagePolicy::Never,
            ..Default::default()
        })
        .unwrap();
        let mut fwd = Forwarding::new(FibConfig {
            long_prefix_groups: 64,
            hugepages: HugepagePolicy::Never,
            ..FibConfig::default()
        })
        .unwrap();
        let a = fwd.add_port("eth0", MAC0, 1500).unwrap();
        let b = fwd.add_port("eth1", MAC1, 1500).unwrap();
        configure(&mut fwd, a, b);
        let state = LocalState::default();
        fwd.commit(&state).unwrap();
        let (inner, rx) = ScriptedRx::new();
        let mut gb = GraphBuilder::new();
        gb.add(PortInput::new(
            "eth0-input",
            "ethernet-input",
            a.get(),
            OffloadRx {
                inner,
                offload,
                first_only,
            },
        ));
        let (sink, _) = CaptureTx::new();
        add_forwarding_nodes(&mut gb, vec![(a, Box::new(sink)), (b, tx)]);
        Bench {
            buffers: pool.worker_buffers(),
            pool,
            graph: gb.build().unwrap(),
            state,
            rx,
        }
    }

    fn inject(&mut self, frame: Vec<u8>) {
        self.inject_all(vec![frame]);
    }

    /// Hands `frames` over in one receive and runs the graph until they are through.
    fn inject_all(&mut self, frames: Vec<Vec<u8>>) {
        self.rx.lock().unwrap().extend(frames);
        let state = self.state.current();
        for _ in 0..16 {
            self.graph.run_pass(&mut self.buffers, &state);
        }
        assert_eq!(self.graph.pending_packets(), 0);
    }

    fn error(&self, name: &str) -> u64 {
        self.graph.handle().runtime().error("offload-resolve", name)
    }
}

/// Ethernet + IPv4 (10.0.1.2 → 10.0.2.2, TTL 64) + TCP (seq 1000, PSH ACK) + `payload`; the
/// TCP checksum field holds the pseudo-header's sum, as the kernel leaves it.
fn partial_tcp(to: [u8; 6], payload: &[u8]) -> Vec<u8> {
    let mut tcp = vec![
        0x30, 0x39, 0, 80, 0, 0, 0x03, 0xe8, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff,
    ];
    tcp.extend_from_slice(&[0, 0, 0, 0]);
    tcp.extend_from_slice(payload);
    let mut pseudo = vec![10, 0, 1, 2, 10, 0, 2, 2, 0, 6];
    pseudo.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
    let partial = !inet_checksum(&pseudo);
    tcp[16..18].copy_from_slice(&partial.to_be_bytes());
    eth(
        to,
        HOST_A,
        0x0800,
        &ipv4(ip(10, 0, 1, 2), ip(10, 0, 2, 2), 6, 64, &tcp),
    )
}

/// Whether the TCP checksum of an Ethernet + IPv4 (20 bytes) frame is right.
fn tcp_checksum_ok(f: &[u8]) -> bool {
    let tcp = &f[34..];
    let mut v = f[26..34].to_vec();
    v.extend_from_slice(&[0, 6]);
    v.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
    v.extend_from_slice(tcp);
    inet_checksum(&v) == 0
}

const CSUM: Offload = Offload {
    csum_start: 34,
    csum_offset: 16,
    gso_size: 0,
    gso: Gso::None,
    bits: Offload::NEEDS_CSUM,
};

#[test]
fn an_l2_cross_connect_hands_the_work_on_to_a_queue_that_accepts_it() {
    let sent = Sent::default();
    let gso = Offload {
        gso_size: 1000,
        gso: Gso::Tcp4,
        ..CSUM
    };
    let mut bench = Bench::new(gso, Box::new(OffloadTx(sent.clone())), |f, a, b| {
        f.cross_connect(a, b).unwrap()
    });
    let frame = partial_tcp(HOST_B, &[5; 3000]);
    bench.inject(frame.clone());
    assert_eq!(
        *sent.lock().unwrap(),
        vec![(frame, Some(gso))],
        "one frame, work and all"
    );
    assert_eq!(bench.error("gso-segmented"), 0);
    assert_eq!(bench.pool.in_use_count(), 0);
}

#[test]
fn an_l2_cross_connect_segments_and_checksums_for_a_queue_that_does_not() {
    let (tx, captured) = CaptureTx::new();
    let gso = Offload {
        gso_size: 1000,
        gso: Gso::Tcp4,
        ..CSUM
    };
    let mut bench = Bench::new(gso, Box::new(tx), |f, a, b| f.cross_connect(a, b).unwrap());
    let payload: Vec<u8> = (0..2500u32).map(|i| (i % 251) as u8).collect();
    bench.inject(partial_tcp(HOST_B, &payload));
    let out = std::mem::take(&mut *captured.lock().unwrap());
    assert_eq!(out.len(), 3);
    let mut got = Vec::new();
    for (i, f) in out.iter().enumerate() {
        assert!(tcp_checksum_ok(f), "segment {i}'s TCP checksum");
        assert_eq!(inet_checksum(&f[14..34]), 0, "segment {i}'s IPv4 checksum");
        got.extend_from_slice(&f[54..]);
    }
    assert_eq!(got, payload);
    assert_eq!(bench.error("gso-segmented"), 1);
    assert_eq!(bench.error("gso-segments"), 3);
    assert_eq!(bench.pool.in_use_count(), 0);

    // A checksum alone is filled in, the frame otherwise untouched.
    let (tx, captured) = CaptureTx::new();
    let mut bench = Bench::new(CSUM, Box::new(tx), |f, a, b| f.cross_connect(a, b).unwrap());
    let frame = partial_tcp(HOST_B, b"hello");
    bench.inject(frame.clone());
    let out = std::mem::take(&mut *captured.lock().unwrap());
    assert_eq!(out.len(), 1);
    assert!(tcp_checksum_ok(&out[0]));
    assert_eq!(out[0][..50], frame[..50]);
    assert_eq!(bench.error("csum-completed"), 1);
    assert_eq!(bench.pool.in_use_count(), 0);
}

#[test]
fn the_l3_path_gets_frames_with_the_work_done() {
    let sent = Sent::default();
    let mut bench = Bench::new(CSUM, Box::new(OffloadTx(sent.clone())), |f, a, b| {
        f.add_address(b, ip(10, 0, 2, 1), 24).unwrap();
        f.add_neighbor(a, ip(10, 0, 1, 2), HOST_A).unwrap();
        f.add_neighbor(b, ip(10, 0, 2, 2), HOST_B).unwrap();
        f.l3_cross_connect(a, b, ip(10, 0, 2, 2), ip(10, 0, 1, 2))
            .unwrap();
    });
    bench.inject(partial_tcp(MAC0, b"routed"));
    let out = std::mem::take(&mut *sent.lock().unwrap());
    assert_eq!(out.len(), 1);
    let (f, o) = &out[0];
    assert_eq!(*o, None, "nothing left for the egress");
    assert_eq!(f[..6], HOST_B);
    assert_eq!(f[22], 63, "routed: TTL decremented");
    assert!(tcp_checksum_ok(f));
    assert_eq!(bench.error("csum-completed"), 1);
    assert_eq!(bench.pool.in_use_count(), 0);
}

#[test]
fn work_that_does_not_fit_the_frame_is_dropped_and_counted() {
    let (tx, captured) = CaptureTx::new();
    let bad = Offload {
        csum_start: 38,
        gso_size: 100,
        gso: Gso::Tcp4,
        ..CSUM
    };
    let mut bench = Bench::new(bad, Box::new(tx), |f, a, b| f.cross_connect(a, b).unwrap());
    bench.inject(partial_tcp(HOST_B, &[1; 500]));
    assert!(captured.lock().unwrap().is_empty());
    assert_eq!(bench.error("bad-offload"), 1);
    assert_eq!(bench.pool.in_use_count(), 0);
}

/// A frame with work left, then frames without: the first goes to `offload-resolve` and the
/// others follow it there, so the L3 path gets them in the order they came (a UDP GSO run and
/// the datagrams of its flow that came alone, say).
#[test]
fn frames_after_one_with_work_left_keep_their_order() {
    let sent = Sent::default();
    let mut bench = Bench::marking(CSUM, true, Box::new(OffloadTx(sent.clone())), |f, a, b| {
        f.add_address(b, ip(10, 0, 2, 1), 24).unwrap();
        f.add_neighbor(a, ip(10, 0, 1, 2), HOST_A).unwrap();
        f.add_neighbor(b, ip(10, 0, 2, 2), HOST_B).unwrap();
        f.l3_cross_connect(a, b, ip(10, 0, 2, 2), ip(10, 0, 1, 2))
            .unwrap();
    });
    let payloads: [&[u8]; 4] = [b"first", b"second", b"third", b"fourth"];
    bench.inject_all(payloads.iter().map(|p| partial_tcp(MAC0, p)).collect());
    let out = std::mem::take(&mut *sent.lock().unwrap());
    // Ethernet, IPv4 and TCP headers (54 bytes), then the payload.
    let order: Vec<&[u8]> = out.iter().map(|(f, _)| &f[54..]).collect();
    assert_eq!(order, payloads, "the order they came in");
    assert_eq!(
        bench.error("csum-completed"),
        1,
        "only the first had work left"
    );
    assert_eq!(bench.pool.in_use_count(), 0);
}
