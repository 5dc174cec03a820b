//! `port-input`'s one hook for drivers: a queue may hand frames on itself, bypassing the graph
//! (`RxQueue::receive_or_bypass`), but only while nothing needs to see every packet.

use dataplane::BufferIndex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::harness::PacketSink;
use dataplane::trace::TraceArm;
use dataplane::{
    GraphBuilder, PortsInput, RxBurst, RxMode, RxQueue, WorkerBuffers, PORT_INPUT, SLEEP_AFTER,
};

/// A queue that, allowed to, "forwards" the first `direct` frames of each burst itself
/// (counting them in `bypassed`) and receives the rest into buffers.
struct Shortcut {
    frames: Arc<Mutex<VecDeque<u8>>>,
    direct: usize,
    bypassed: Arc<AtomicU64>,
}

impl RxQueue for Shortcut {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        let mut frames = self.frames.lock().unwrap();
        let mut n = 0;
        while n < out.len() {
            let Some(&b) = frames.front() else { break };
            let bi = buffers.alloc_one().unwrap();
            buffers.write_packet(bi, &[b; 60]).unwrap();
            frames.pop_front();
            out[n] = bi;
            n += 1;
        }
        n
    }

    fn receive_or_bypass(
        &mut self,
        buffers: &mut WorkerBuffers,
        out: &mut [BufferIndex],
    ) -> RxBurst {
        let bypassed = {
            let mut frames = self.frames.lock().unwrap();
            let k = self.direct.min(frames.len()).min(out.len());
            frames.drain(..k);
            k
        };
        self.bypassed.fetch_add(bypassed as u64, Ordering::Relaxed);
        RxBurst {
            received: self.receive(buffers, out),
            bypassed,
        }
    }
}

#[test]
fn a_queue_bypasses_the_graph_only_while_port_input_is_not_traced() {
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 1024,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap();
    let mut buffers = pool.worker_buffers();
    let frames: Arc<Mutex<VecDeque<u8>>> = Arc::default();
    let bypassed = Arc::new(AtomicU64::new(0));
    let mut input = PortsInput::new(PORT_INPUT, "sink");
    assert!(input.attach(
        7,
        Box::new(Shortcut {
            frames: frames.clone(),
            direct: 3,
            bypassed: bypassed.clone(),
        })
    ));
    let sink = PacketSink::new("sink");
    let seen = sink.report();
    let mut b = GraphBuilder::<()>::new();
    b.add(input).add(sink);
    let mut g = b.build().unwrap();
    let h = g.handle();

    // Untraced: 3 of the 10 go the queue's own way, all 10 count as port-input's packets.
    frames.lock().unwrap().extend(0..10);
    assert_eq!(g.run_pass(&mut buffers, &()), 10);
    assert_eq!(bypassed.load(Ordering::Relaxed), 3);
    assert_eq!(seen.packets(), 7);

    // Traced: every packet goes through the graph, and is traced there.
    h.trace_arm(Some(TraceArm::new(PORT_INPUT, 100)));
    frames.lock().unwrap().extend(0..10);
    assert_eq!(g.run_pass(&mut buffers, &()), 10);
    assert_eq!(
        bypassed.load(Ordering::Relaxed),
        3,
        "nothing bypassed while traced"
    );
    assert_eq!(seen.packets(), 17);
    assert_eq!(h.trace_packets().len(), 10);

    // Trace over: the shortcut is taken again.
    h.trace_arm(None);
    frames.lock().unwrap().extend(0..10);
    assert_eq!(g.run_pass(&mut buffers, &()), 10);
    assert_eq!(bypassed.load(Ordering::Relaxed), 6);
    assert_eq!(seen.packets(), 24);
    drop(g);
    drop(buffers);
    assert_eq!(pool.free_count(), 1024, "every buffer back");
}

/// A queue over the receiving end of a datagram socket pair: each datagram is a frame; it
/// counts how often it is polled, and its socket wakes it. It keeps the modes it is told in
/// order, as a driver would publish them.
struct Datagrams {
    socket: std::os::unix::net::UnixDatagram,
    polls: Arc<AtomicU64>,
    modes: Arc<Mutex<Vec<RxMode>>>,
}

impl RxQueue for Datagrams {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        self.polls.fetch_add(1, Ordering::Relaxed);
        let mut n = 0;
        let mut frame = [0u8; 64];
        while n < out.len() {
            let Ok(len) = self.socket.recv(&mut frame) else {
                break;
            };
            let bi = buffers.alloc_one().unwrap();
            buffers.write_packet(bi, &frame[..len]).unwrap();
            out[n] = bi;
            n += 1;
        }
        n
    }

    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.socket.as_raw_fd())
    }

    fn set_mode(&mut self, mode: RxMode) {
        self.modes.lock().unwrap().push(mode);
    }
}

#[test]
fn an_idle_queue_sleeps_until_its_descriptor_is_readable() {
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 256,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap();
    let mut buffers = pool.worker_buffers();
    let (theirs, ours) = std::os::unix::net::UnixDatagram::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    let polls = Arc::new(AtomicU64::new(0));
    let mut input = PortsInput::new(PORT_INPUT, "sink");
    assert!(input.attach(
        3,
        Box::new(Datagrams {
            socket: ours,
            polls: polls.clone(),
            modes: Arc::default(),
        })
    ));
    let sink = PacketSink::new("sink");
    let seen = sink.report();
    let mut b = GraphBuilder::<()>::new();
    b.add(input).add(sink);
    let mut g = b.build().unwrap();
    let asleep = |g: &mut dataplane::Graph<()>| -> Vec<u32> {
        g.node_mut::<PortsInput>(PORT_INPUT)
            .unwrap()
            .asleep()
            .collect()
    };

    // Idle for SLEEP_AFTER polls: asleep, and no longer polled.
    for _ in 0..SLEEP_AFTER {
        assert_eq!(g.run_pass(&mut buffers, &()), 0);
    }
    assert_eq!(asleep(&mut g), [3]);
    let counted =
        |g: &dataplane::Graph<()>, name: &str| g.handle().runtime().error(PORT_INPUT, name);
    assert_eq!(counted(&g, "queue-slept"), 1, "the sleep is counted");
    let polled = polls.load(Ordering::Relaxed);
    assert_eq!(polled, u64::from(SLEEP_AFTER));
    for _ in 0..10_000 {
        g.run_pass(&mut buffers, &());
    }
    assert_eq!(
        polls.load(Ordering::Relaxed),
        polled,
        "not polled while asleep"
    );
    let attached: Vec<u32> = g
        .node_mut::<PortsInput>(PORT_INPUT)
        .unwrap()
        .interfaces()
        .collect();
    assert_eq!(attached, [3], "still attached");

    // A frame: the descriptor wakes the queue and the frame goes through.
    theirs.send(&[0x42; 60]).unwrap();
    let mut passes = 0u64;
    while seen.packets() == 0 {
        g.run_pass(&mut buffers, &());
        passes += 1;
        assert!(passes < 50_000_000, "the queue never woke");
    }
    assert_eq!(seen.packets(), 1);
    assert!(asleep(&mut g).is_empty(), "polled again");
    assert_eq!(counted(&g, "queue-woken"), 1, "the wake is counted");

    // Asleep again, then detached while asleep: nothing is left watching it.
    for _ in 0..=SLEEP_AFTER {
        g.run_pass(&mut buffers, &());
    }
    assert_eq!(asleep(&mut g), [3]);
    assert_eq!(counted(&g, "queue-slept"), 2);
    let node = g.node_mut::<PortsInput>(PORT_INPUT).unwrap();
    assert!(node.detach(3).is_some());
    assert_eq!(node.interfaces().count(), 0);
    drop(g);
    drop(buffers);
    assert_eq!(pool.free_count(), 256, "every buffer back");
}

#[test]
fn a_queue_is_told_interrupt_when_it_sleeps_and_polling_when_traffic_wakes_it() {
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 256,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap();
    let mut buffers = pool.worker_buffers();
    let (theirs, ours) = std::os::unix::net::UnixDatagram::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    let modes: Arc<Mutex<Vec<RxMode>>> = Arc::default();
    let mut input = PortsInput::new(PORT_INPUT, "sink");
    assert!(input.attach(
        5,
        Box::new(Datagrams {
            socket: ours,
            polls: Arc::default(),
            modes: modes.clone(),
        })
    ));
    let sink = PacketSink::new("sink");
    let seen = sink.report();
    let mut b = GraphBuilder::<()>::new();
    b.add(input).add(sink);
    let mut g = b.build().unwrap();
    let told = || modes.lock().unwrap().clone();
    assert_eq!(told(), [RxMode::Polling], "attached: polled");

    // Idle: told once, when it sleeps, however many passes follow.
    for _ in 0..SLEEP_AFTER - 1 {
        g.run_pass(&mut buffers, &());
    }
    assert_eq!(told(), [RxMode::Polling], "not idle long enough yet");
    for _ in 0..3 * SLEEP_AFTER {
        g.run_pass(&mut buffers, &());
    }
    assert_eq!(told(), [RxMode::Polling, RxMode::Interrupt]);

    // Traffic: woken, told polling, and the frame goes through.
    theirs.send(&[0x17; 60]).unwrap();
    let mut passes = 0u64;
    while seen.packets() == 0 {
        g.run_pass(&mut buffers, &());
        passes += 1;
        assert!(passes < 50_000_000, "the queue never woke");
    }
    assert_eq!(
        told(),
        [RxMode::Polling, RxMode::Interrupt, RxMode::Polling]
    );

    // Traffic keeps it polling: no more changes while frames keep coming.
    for k in 0..3 * u64::from(SLEEP_AFTER) {
        if k % 1000 == 0 {
            theirs.send(&[0x18; 60]).unwrap();
        }
        g.run_pass(&mut buffers, &());
    }
    assert_eq!(told().len(), 3, "{:?}", told());

    // Asleep again, then detached while asleep: told polling (no longer waited on).
    for _ in 0..=SLEEP_AFTER {
        g.run_pass(&mut buffers, &());
    }
    assert_eq!(told().last(), Some(&RxMode::Interrupt));
    let node = g.node_mut::<PortsInput>(PORT_INPUT).unwrap();
    let queue = node.detach(5).expect("attached");
    assert_eq!(told().last(), Some(&RxMode::Polling));
    drop(queue);
    drop(g);
    drop(buffers);
    assert_eq!(pool.free_count(), 256, "every buffer back");
}
