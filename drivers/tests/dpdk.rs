//! DPDK ethdev ports for real, in one EAL shared by every test of this binary (DPDK starts its
//! EAL once per process): `net_ring` port pairs forwarding through the graph's L2 cross-connect,
//! `net_null` sources and sinks, `net_memif` servers with Quiver's own memif crate as the client,
//! a `net_tap` port answering the kernel's ping, and the proof that no packet is copied.
//!
//! The EAL runs with `--no-pci` (the host's NICs are never touched), `--in-memory` (or `--no-huge`
//! when hugepages are short), `--no-telemetry` and a file prefix unique to this process. Needs root;
//! without it every test prints why and passes, unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`, which
//! makes a missing prerequisite a failure. The tests take turns (one lock), since they share the
//! EAL, the cores and the worker.

#![cfg(feature = "dpdk")]

use dataplane::BufferIndex;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::{Dataplane, GraphBuilder, IdlePolicy, PortInput, RuntimeSnapshot, WorkerConfig};
use drivers::dpdk::{
    ring_port, DpdkMempool, DpdkPort, DpdkPortConfig, Eal, EalConfig, EalMemory, Ring, PREFIX_SIZE,
};
use drivers::{LinkStatus, Port};
use graph_nodes::nodes::XconnectStats;
use graph_nodes::{add_forwarding_nodes, names, FibConfig, Forwarding, ForwardingState, IfIndex};
use memif::{InterfaceConfig, Slave, SocketAddress};
use testkit::{free_hugepages, require, wait_for, Needs};

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
/// Free 2 MiB hugepages below which the EAL uses ordinary pages instead.
const HUGEPAGES_WANTED: u64 = 64;

static SERIAL: Mutex<()> = Mutex::new(());

/// The test binary's EAL, started by the first test that needs it; `None` (after saying why)
/// when the test should skip.
fn eal(test: &str) -> Option<(&'static Eal, MutexGuard<'static, ()>)> {
    let root = Needs {
        root: true,
        ..Needs::default()
    };
    if !require(test, &root) {
        return None;
    }
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    static CONFIG: OnceLock<EalConfig> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let mut c = EalConfig::vdevs_only();
        c.file_prefix = format!("quiver-dpdk-test-{}", std::process::id());
        if free_hugepages() < HUGEPAGES_WANTED {
            c.memory = EalMemory::NoHuge { megabytes: 256 };
        }
        c
    });
    let affinity_before = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    let eal = Eal::init(config).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert_eq!(
        nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap(),
        affinity_before,
        "rte_eal_init left the calling thread pinned"
    );
    Some((eal, guard))
}

/// The CPU the worker runs on: the last one this process may use.
fn worker_core() -> usize {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    (0..nix::sched::CpuSet::count())
        .rev()
        .find(|&c| set.is_set(c).unwrap_or(false))
        .unwrap()
}

fn pool(buffers: u32) -> Arc<BufferPool> {
    BufferPool::new(&BufferPoolConfig {
        buffers,
        prefix_size: PREFIX_SIZE,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap()
}

/// Drops the last handle of `mempool` (its ports and queues must be gone) and checks that freeing
/// it left every buffer on Quiver's free stack: `rte_mempool_free` takes each object back through
/// the ops' dequeue, which must not empty the pool.
fn mempool_freed_with_every_buffer_back(pool: &Arc<BufferPool>, mempool: Arc<DpdkMempool>) {
    assert_eq!(
        Arc::strong_count(&mempool),
        1,
        "ports still hold the mempool"
    );
    drop(mempool);
    assert_eq!(
        pool.free_count(),
        pool.capacity() as usize,
        "buffers kept by freeing the mempool"
    );
    assert_eq!(pool.double_free_count(), 0);
    assert_eq!(pool.in_use_count(), 0);
}

/// No buffer leaked while `mempool` still lives; then
/// [`mempool_freed_with_every_buffer_back`].
fn every_buffer_back(pool: &Arc<BufferPool>, mempool: Arc<DpdkMempool>) {
    assert_eq!(
        pool.free_count(),
        pool.capacity() as usize,
        "buffers leaked"
    );
    assert_eq!(pool.double_free_count(), 0);
    mempool_freed_with_every_buffer_back(pool, mempool);
}

/// A test's EAL and its turn ([`eal`]), a pool and the pool's mempool.
type EalAndPool = (
    &'static Eal,
    MutexGuard<'static, ()>,
    Arc<BufferPool>,
    Arc<DpdkMempool>,
);

/// The test's EAL ([`eal`]), a pool of `buffers` and its mempool; `None` when the test skips.
fn eal_and_pool(test: &str, buffers: u32) -> Option<EalAndPool> {
    let (eal, serial) = eal(test)?;
    let pool = pool(buffers);
    let mempool = DpdkMempool::new(eal, pool.clone()).unwrap();
    Some((eal, serial, pool, mempool))
}

/// [`frame`]s from `src` to `dst` of the lengths `sizes`, numbered from `first`.
fn frames(dst: [u8; 6], src: [u8; 6], first: u32, sizes: &[usize]) -> Vec<Vec<u8>> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &l)| frame(dst, src, first + i as u32, l))
        .collect()
}

/// A frame from `src` to `dst` (EtherType 0x88b5, local experimental) carrying `seq` and a
/// pattern derived from it.
fn frame(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seq * 7) as u8)
        .collect();
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

/// Starts one worker whose graph polls every port and forwards with `fwd`'s configuration;
/// returns it with the worker's cross-connect counters (readable after the worker stops).
fn start(
    pool: &Arc<BufferPool>,
    fwd: &mut Forwarding,
    ports: Vec<(Arc<dyn Port>, IfIndex)>,
) -> (Dataplane<ForwardingState>, Arc<XconnectStats>) {
    let (dp, mut xc) = start_on(vec![worker_core()], pool, fwd, ports);
    (dp, xc.remove(0))
}

/// As [`start`], with one worker per entry of `cores`, each polling its own queue of every port;
/// the cross-connect counters are in worker order.
fn start_on(
    cores: Vec<usize>,
    pool: &Arc<BufferPool>,
    fwd: &mut Forwarding,
    ports: Vec<(Arc<dyn Port>, IfIndex)>,
) -> (Dataplane<ForwardingState>, Vec<Arc<XconnectStats>>) {
    let workers = WorkerConfig {
        cores,
        idle: IdlePolicy::ADAPTIVE,
    };
    // Each worker's cross-connect counters, by worker index.
    type Slot = Mutex<Vec<(usize, Arc<XconnectStats>)>>;
    let slot: Arc<Slot> = Arc::default();
    let xc = slot.clone();
    let dp = Dataplane::start(&workers, pool.clone(), fwd.snapshot(), move |init| {
        let mut b = GraphBuilder::new();
        let mut tx = Vec::new();
        for (port, index) in &ports {
            let qp = port.queue_pair(init.index).map_err(|e| e.to_string())?;
            b.add(PortInput::new(
                &format!("{}-input", port.name()),
                names::ETHERNET_INPUT,
                index.get(),
                qp.rx,
            ));
            tx.push((*index, qp.tx));
        }
        let handles = add_forwarding_nodes(&mut b, tx);
        xc.lock().unwrap().push((init.index, handles.xconnect));
        b.build().map_err(|e| e.to_string())
    })
    .unwrap();
    fwd.commit(&dp).unwrap();
    let mut xc = std::mem::take(&mut *slot.lock().unwrap());
    xc.sort_by_key(|x| x.0);
    (dp, xc.into_iter().map(|x| x.1).collect())
}

fn forwarding() -> Forwarding {
    Forwarding::new(FibConfig {
        long_prefix_groups: 64,
        hugepages: HugepagePolicy::Never,
    })
    .unwrap()
}

fn drops(rt: &RuntimeSnapshot) -> (u64, String) {
    let s = rt.summed();
    (s.errors.iter().map(|e| e.count).sum(), s.format_errors())
}

fn packets_of(rt: &RuntimeSnapshot, node: &str) -> u64 {
    rt.summed().node(node).map_or(0, |n| n.packets)
}

/// Frames of every size, some longer than one buffer (chained).
fn sizes(n: usize) -> Vec<usize> {
    (0..n)
        .map(|i| match i % 50 {
            7 => 3000,
            23 => 4500,
            _ => 60 + (i * 37) % 1455,
        })
        .collect()
}

/// Sends `frames` into `inject` and collects what comes out of `collect` (in order) until all
/// arrived or the deadline passes, keeping no more than `window` in flight.
#[allow(clippy::too_many_arguments)]
fn pump_rings(
    mempool: &DpdkMempool,
    buffers: &mut dataplane::WorkerBuffers,
    inject: &mut Ring,
    collect: &mut Ring,
    frames: &[Vec<u8>],
    window: usize,
) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut sent = 0;
    let mut out = [BufferIndex::NONE; 256];
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < frames.len() && Instant::now() < deadline {
        if sent < frames.len() && sent - got.len() < window {
            let end = (sent + 32).min(frames.len());
            let mut batch = Vec::new();
            for f in &frames[sent..end] {
                let bi = buffers.alloc_one().expect("a buffer");
                buffers.write_packet(bi, f).unwrap();
                batch.push(bi);
            }
            let n = inject.enqueue(mempool, buffers, &batch);
            buffers.free(&batch[n..]);
            sent += n;
        }
        let n = collect.dequeue(mempool, buffers, &mut out);
        for &bi in &out[..n] {
            let mut v = Vec::new();
            buffers.copy_packet(bi, &mut v);
            got.push(v);
        }
        buffers.free(&out[..n]);
        std::thread::yield_now();
    }
    got
}

#[test]
fn ring_ports_cross_connected_through_the_graph() {
    let Some((eal, _serial, pool, mempool)) =
        eal_and_pool("ring_ports_cross_connected_through_the_graph", 8192)
    else {
        return;
    };
    let mut rings: Vec<Ring> = ["a_in", "a_out", "b_in", "b_out"]
        .iter()
        .map(|n| Ring::create(eal, &format!("xc_{n}"), 1024).unwrap())
        .collect();
    let name_a = ring_port(eal, "xc_a", &[&rings[0]], &[&rings[1]]).unwrap();
    let name_b = ring_port(eal, "xc_b", &[&rings[2]], &[&rings[3]]).unwrap();
    assert_eq!(name_a, "net_ring_xc_a");
    let a = Arc::new(DpdkPort::open(&mempool, &DpdkPortConfig::new(&name_a, 1)).unwrap());
    let b = Arc::new(DpdkPort::open(&mempool, &DpdkPortConfig::new(&name_b, 1)).unwrap());
    assert_eq!(a.link(), LinkStatus::Up);

    let mut fwd = forwarding();
    let ia = fwd.add_port("a", MAC_A, 9000).unwrap();
    let ib = fwd.add_port("b", MAC_B, 9000).unwrap();
    fwd.cross_connect(ia, ib).unwrap();
    let (dp, xc) = start(&pool, &mut fwd, vec![(a.clone(), ia), (b.clone(), ib)]);

    let mut buffers = pool.worker_buffers();
    let sz = sizes(5000);
    let ab = frames(MAC_B, MAC_A, 0, &sz);
    let ba = frames(MAC_A, MAC_B, 100_000, &sz);
    let (a_in, rest) = rings.split_at_mut(1);
    let (a_out, rest) = rest.split_at_mut(1);
    let (b_in, b_out) = rest.split_at_mut(1);
    let got_ab = pump_rings(
        &mempool,
        &mut buffers,
        &mut a_in[0],
        &mut b_out[0],
        &ab,
        512,
    );
    let got_ba = pump_rings(
        &mempool,
        &mut buffers,
        &mut b_in[0],
        &mut a_out[0],
        &ba,
        512,
    );
    assert_eq!(got_ab.len(), ab.len(), "a → b frames");
    assert!(got_ab == ab, "a → b frames altered or reordered");
    assert_eq!(got_ba.len(), ba.len(), "b → a frames");
    assert!(got_ba == ba, "b → a frames altered or reordered");

    let bytes: u64 = sz.iter().map(|&l| l as u64).sum();
    let rt = dp.runtime();
    let (sa, sb) = (a.stats(), b.stats());
    dp.stop();
    assert_eq!(drops(&rt).0, 0, "{}", drops(&rt).1);
    assert_eq!(packets_of(&rt, &format!("{name_a}-input")), 5000);
    assert_eq!(packets_of(&rt, &format!("{name_b}-input")), 5000);
    assert_eq!(xc.get(ia), (5000, bytes));
    assert_eq!(xc.get(ib), (5000, bytes));
    // (net_ring in DPDK 22.11 counts packets, not bytes.)
    assert_eq!((sa.rx_packets, sa.tx_packets), (5000, 5000));
    assert_eq!((sb.rx_packets, sb.tx_packets), (5000, 5000));
    let chained = sz.iter().filter(|&&l| l > 2048).count() as u64;
    let detail = |s: &drivers::PortStats, k: &str| {
        s.detail.iter().find(|(n, _)| n == k).map(|d| d.1).unwrap()
    };
    assert_eq!(detail(&sa, "rx-chained"), chained);
    assert_eq!(
        detail(&sa, "rx-foreign-mbuf") + detail(&sb, "rx-foreign-mbuf"),
        0
    );

    drop(buffers);
    drop((a, b));
    assert!(rings.iter().all(Ring::is_empty));
    assert_eq!(mempool.cached(), 0, "every lcore cache flushed");
    every_buffer_back(&pool, mempool);
}

#[test]
fn null_ports_generate_and_swallow_with_exact_counts() {
    let Some((eal, _serial, pool, mempool)) =
        eal_and_pool("null_ports_generate_and_swallow_with_exact_counts", 8192)
    else {
        return;
    };
    eal.create_vdev("net_null_t0", "size=64,copy=1").unwrap();
    eal.create_vdev("net_null_t1", "size=64,copy=1").unwrap();
    let n0 = Arc::new(DpdkPort::open(&mempool, &DpdkPortConfig::new("net_null_t0", 1)).unwrap());
    let n1 = Arc::new(DpdkPort::open(&mempool, &DpdkPortConfig::new("net_null_t1", 1)).unwrap());
    let mut fwd = forwarding();
    let i0 = fwd.add_port("null0", n0.mac(), 1500).unwrap();
    let i1 = fwd.add_port("null1", n1.mac(), 1500).unwrap();
    fwd.cross_connect(i0, i1).unwrap();
    let (dp, xc) = start(&pool, &mut fwd, vec![(n0.clone(), i0), (n1.clone(), i1)]);
    wait_for("200k generated frames", 60, || {
        packets_of(&dp.runtime(), "net_null_t0-input") >= 200_000
    });
    dp.stop();
    // Nothing moves any more: the devices' counters and the graph's agree exactly.
    let (s0, s1) = (n0.stats(), n1.stats());
    let (rx0, rx1) = (s0.rx_packets, s1.rx_packets);
    assert!(rx0 >= 200_000);
    assert_eq!(
        xc.get(i0),
        (rx0, 64 * rx0),
        "the graph forwarded every frame of null0"
    );
    assert_eq!(
        xc.get(i1),
        (rx1, 64 * rx1),
        "the graph forwarded every frame of null1"
    );
    // (net_null in DPDK 22.11 counts packets, not bytes.)
    assert_eq!(s1.tx_packets, rx0, "null1 sent all of null0's");
    assert_eq!(s0.tx_packets, rx1, "null0 sent all of null1's");
    assert_eq!(
        s0.rx_dropped + s1.rx_dropped + s0.tx_dropped + s1.tx_dropped,
        0
    );
    drop((n0, n1));
    assert_eq!(mempool.cached(), 0);
    every_buffer_back(&pool, mempool);
}

/// Sends `frames` from `from` and collects what `to` receives, polling both control channels,
/// with at most `window` frames in flight.
fn pump_memif(from: &mut Slave, to: &mut Slave, frames: &[Vec<u8>], window: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < frames.len() && Instant::now() < deadline {
        from.poll().unwrap();
        to.poll().unwrap();
        if sent < frames.len() && sent - got.len() < window {
            let end = (sent + 32).min(frames.len());
            let refs: Vec<&[u8]> = frames[sent..end].iter().map(|f| f.as_slice()).collect();
            sent += from.interface_mut().tx_burst(0, &refs);
        }
        to.interface_mut()
            .rx_burst(0, 256, &mut |p: &[u8]| got.push(p.to_vec()));
        std::thread::yield_now();
    }
    got
}

#[test]
fn memif_servers_in_dpdk_with_quiver_memif_clients() {
    let Some((eal, _serial, pool, mempool)) =
        eal_and_pool("memif_servers_in_dpdk_with_quiver_memif_clients", 8192)
    else {
        return;
    };
    let paths: Vec<std::path::PathBuf> = (0..2)
        .map(|i| {
            std::env::temp_dir().join(format!("quiver-dpdk-{}-memif{i}.sock", std::process::id()))
        })
        .collect();
    let mut ports = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let _ = std::fs::remove_file(p);
        let name = format!("net_memif_t{i}");
        eal.create_vdev(
            &name,
            &format!("role=server,id=0,socket={},socket-abstract=no", p.display()),
        )
        .unwrap();
        ports.push(Arc::new(
            DpdkPort::open(&mempool, &DpdkPortConfig::new(&name, 1)).unwrap(),
        ));
    }
    let mut fwd = forwarding();
    let i0 = fwd.add_port("memif0", ports[0].mac(), 9000).unwrap();
    let i1 = fwd.add_port("memif1", ports[1].mac(), 9000).unwrap();
    fwd.cross_connect(i0, i1).unwrap();
    let (dp, xc) = start(
        &pool,
        &mut fwd,
        vec![(ports[0].clone(), i0), (ports[1].clone(), i1)],
    );
    let mut clients: Vec<Slave> = paths
        .iter()
        .map(|p| {
            let mut s =
                Slave::new(SocketAddress::Path(p.clone()), InterfaceConfig::new(0)).unwrap();
            s.retry_interval = Duration::from_millis(10);
            s
        })
        .collect();
    wait_for("both memif links up", 30, || {
        clients.iter_mut().for_each(|c| c.poll().unwrap());
        clients.iter().all(|c| c.interface().is_up())
            && ports.iter().all(|p| p.link() == LinkStatus::Up)
    });
    let sz = sizes(3000);
    let fwd_frames = frames(MAC_B, MAC_A, 0, &sz);
    let back_frames = frames(MAC_A, MAC_B, 50_000, &sz);
    let (c0, c1) = clients.split_at_mut(1);
    let got = pump_memif(&mut c0[0], &mut c1[0], &fwd_frames, 256);
    assert_eq!(got.len(), fwd_frames.len(), "client 0 → client 1");
    assert!(
        got == fwd_frames,
        "frames altered or reordered on the way 0 → 1"
    );
    let got = pump_memif(&mut c1[0], &mut c0[0], &back_frames, 256);
    assert_eq!(got.len(), back_frames.len(), "client 1 → client 0");
    assert!(
        got == back_frames,
        "frames altered or reordered on the way 1 → 0"
    );

    let bytes: u64 = sz.iter().map(|&l| l as u64).sum();
    let rt = dp.runtime();
    let (s0, s1) = (ports[0].stats(), ports[1].stats());
    dp.stop();
    assert_eq!(drops(&rt).0, 0, "{}", drops(&rt).1);
    assert_eq!(xc.get(i0), (3000, bytes));
    assert_eq!(xc.get(i1), (3000, bytes));
    assert_eq!(
        (s0.rx_packets, s0.rx_bytes, s0.tx_packets),
        (3000, bytes, 3000)
    );
    assert_eq!(
        (s1.rx_packets, s1.tx_packets, s1.tx_bytes),
        (3000, 3000, bytes)
    );
    for c in &clients {
        assert_eq!(c.interface().bad_descriptors(), 0);
    }
    drop(clients);
    drop(ports);
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    every_buffer_back(&pool, mempool);
}

fn have_tool(tool: &str, test: &str) -> bool {
    let found = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| std::path::Path::new(d).join(tool).exists());
    if !found {
        if std::env::var("QUIVER_REQUIRE_SYSTEM_TESTS").as_deref() == Ok("1") {
            panic!("{test}: QUIVER_REQUIRE_SYSTEM_TESTS=1 but `{tool}` is not installed");
        }
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "skipping {test}: `{tool}` not installed");
    }
    found
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn tap_port_answers_the_kernels_arp_and_ping() {
    const TEST: &str = "tap_port_answers_the_kernels_arp_and_ping";
    let Some((eal, _serial)) = eal(TEST) else {
        return;
    };
    if !have_tool("ip", TEST) || !have_tool("ping", TEST) {
        return;
    }
    let iface = format!("qdtap{}", std::process::id() % 100_000);
    let pool = pool(4096);
    let mempool = DpdkMempool::new(eal, pool.clone()).unwrap();
    eal.create_vdev("net_tap_t0", &format!("iface={iface}"))
        .unwrap();
    let tap = Arc::new(DpdkPort::open(&mempool, &DpdkPortConfig::new("net_tap_t0", 1)).unwrap());
    // The kernel's side: an address in the benchmarking range (RFC 2544), nothing else routed.
    ip(&["addr", "add", "198.18.77.1/24", "dev", &iface]);
    ip(&["link", "set", &iface, "up"]);
    let kernel_mac = std::fs::read_to_string(format!("/sys/class/net/{iface}/address")).unwrap();
    let kernel_mac: Vec<u8> = kernel_mac
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    let mut fwd = forwarding();
    let t = fwd.add_port("tap", tap.mac(), 1500).unwrap();
    fwd.add_address(t, u32::from_be_bytes([198, 18, 77, 2]), 24)
        .unwrap();
    fwd.add_neighbor(
        t,
        u32::from_be_bytes([198, 18, 77, 1]),
        kernel_mac.try_into().unwrap(),
    )
    .unwrap();
    let (dp, _xc) = start(&pool, &mut fwd, vec![(tap.clone(), t)]);
    wait_for("the tap link up", 30, || tap.link() == LinkStatus::Up);
    // The kernel asks for Quiver's MAC (ARP), then pings: each try waits at most a second for
    // its reply; the loop ends at the first answered one.
    let mut answered = false;
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !answered && Instant::now() < deadline {
        let out = Command::new("ping")
            .args(["-c", "1", "-W", "1", "-n", "-I", &iface, "198.18.77.2"])
            .output()
            .expect("run ping");
        answered = out.status.success();
        last = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
    }
    let rt = dp.runtime().summed();
    let stats = tap.stats();
    dp.stop();
    assert!(
        answered,
        "the kernel's ping was never answered; the last try:\n{last}"
    );
    assert!(rt.error(names::IP4_LOCAL, "echo-replies") >= 1);
    assert!(rt.error(names::ARP_INPUT, "requests-answered") >= 1);
    assert!(stats.rx_packets >= 2 && stats.tx_packets >= 2, "{stats:?}");
    drop(tap);
    wait_for("the tap interface gone with its port", 10, || {
        !std::path::Path::new(&format!("/sys/class/net/{iface}")).exists()
    });
    every_buffer_back(&pool, mempool);
}

#[test]
fn received_packets_are_the_very_buffers_that_were_sent() {
    let Some((eal, _serial, pool, mempool)) =
        eal_and_pool("received_packets_are_the_very_buffers_that_were_sent", 1024)
    else {
        return;
    };
    let mut z_in = Ring::create(eal, "zc_in", 256).unwrap();
    let mut z_out = Ring::create(eal, "zc_out", 256).unwrap();
    let name = ring_port(eal, "zc", &[&z_in], &[&z_out]).unwrap();
    let port = DpdkPort::open(&mempool, &DpdkPortConfig::new(&name, 1)).unwrap();
    assert!(port.queue_pair(1).is_err(), "one queue pair only");
    let mut qp = port.queue_pair(0).unwrap();
    assert!(
        port.queue_pair(0).is_err(),
        "a queue pair is handed out once"
    );

    let mut buffers = pool.worker_buffers();
    let small = frame(MAC_B, MAC_A, 1, 200);
    let big = frame(MAC_B, MAC_A, 2, 5000);
    let p1 = buffers.alloc_one().unwrap();
    buffers.write_packet(p1, &small).unwrap();
    let p2 = buffers.alloc_one().unwrap();
    buffers.write_packet(p2, &big).unwrap();
    let chain: Vec<BufferIndex> = buffers.chain(p2).collect();
    assert_eq!(chain.len(), 3);
    let in_use = pool.in_use_count();
    assert_eq!(in_use, 4);

    assert_eq!(z_in.enqueue(&mempool, &mut buffers, &[p1, p2]), 2);
    assert_eq!(pool.in_use_count(), in_use, "in the ring, still in use");
    let mut out = [BufferIndex::NONE; 32];
    let mut n = 0;
    wait_for("the two packets received", 10, || {
        n += qp.rx.receive(&mut buffers, &mut out[n..]);
        n == 2
    });
    assert_eq!(
        &out[..2],
        &[p1, p2],
        "received as the same buffers: nothing was copied"
    );
    assert_eq!(buffers.chain(p2).collect::<Vec<_>>(), chain);
    let (base, len) = pool.memory();
    let locator = pool.locator();
    for &bi in &chain {
        let d = buffers.data(bi).as_ptr();
        assert!(
            d >= base && d < base.wrapping_add(len),
            "data inside Quiver's region"
        );
        let (owner, off) = locator.index_of(d).unwrap();
        assert_eq!(owner, bi);
        assert_eq!(
            off,
            PREFIX_SIZE as usize + 64 + buffers.meta(bi).data_offset() as usize,
            "the mbuf's data offset is the buffer's"
        );
    }
    let mut v = Vec::new();
    buffers.copy_packet(p1, &mut v);
    assert_eq!(v, small);
    v.clear();
    buffers.copy_packet(p2, &mut v);
    assert_eq!(v, big);

    // Headers prepended in the graph travel with the packet: the data offset crosses over.
    buffers
        .prepend(p1, 4)
        .unwrap()
        .copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(qp.tx.transmit(&mut buffers, &[p1, p2]), 2);
    assert_eq!(
        pool.in_use_count(),
        in_use,
        "handed to the device, still in use"
    );
    let mut got = [BufferIndex::NONE; 8];
    assert_eq!(z_out.dequeue(&mempool, &mut buffers, &mut got), 2);
    assert_eq!(&got[..2], &[p1, p2], "transmitted as the same buffers");
    v.clear();
    buffers.copy_packet(p1, &mut v);
    assert_eq!(&v[..4], &[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(&v[4..], &small[..]);
    v.clear();
    buffers.copy_packet(p2, &mut v);
    assert_eq!(v, big);
    buffers.free(&[p1, p2]);
    assert_eq!(pool.in_use_count(), 0);

    drop(qp);
    drop(buffers);
    drop(port);
    every_buffer_back(&pool, mempool);
}

#[test]
fn a_pool_without_room_for_the_mbuf_is_refused() {
    let Some((eal, _serial)) = eal("a_pool_without_room_for_the_mbuf_is_refused") else {
        return;
    };
    let plain = BufferPool::new(&BufferPoolConfig {
        buffers: 64,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap();
    let err = DpdkMempool::new(eal, plain).err().expect("refused");
    assert!(err.to_string().contains("prefix"), "{err}");
    let pool = pool(64);
    let first = DpdkMempool::new(eal, pool.clone()).unwrap();
    assert!(
        DpdkMempool::new(eal, pool.clone()).is_err(),
        "one mempool per pool"
    );
    drop(first);
    DpdkMempool::new(eal, pool).expect("a pool may get a mempool again once the first is gone");
}

#[test]
fn two_workers_each_poll_their_own_queue_of_two_queue_ports() {
    let Some((eal, _serial)) = eal("two_workers_each_poll_their_own_queue_of_two_queue_ports")
    else {
        return;
    };
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    let mut cores: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .take(2)
        .collect();
    if cores.len() < 2 {
        cores.push(cores[0]);
    }
    let pool = pool(8192);
    let mempool = DpdkMempool::new(eal, pool.clone()).unwrap();
    let mut ports = Vec::new();
    for name in ["net_null_mq0", "net_null_mq1"] {
        eal.create_vdev(name, "size=64,copy=1").unwrap();
        let p = DpdkPort::open(&mempool, &DpdkPortConfig::new(name, 2)).unwrap();
        assert_eq!(p.queues(), 2);
        assert!(
            p.rss(),
            "net_null offers RSS: the two queues are configured for it"
        );
        ports.push(Arc::new(p));
    }
    let mut fwd = forwarding();
    let i0 = fwd.add_port("mq0", ports[0].mac(), 1500).unwrap();
    let i1 = fwd.add_port("mq1", ports[1].mac(), 1500).unwrap();
    fwd.cross_connect(i0, i1).unwrap();
    let (dp, xc) = start_on(
        cores,
        &pool,
        &mut fwd,
        vec![(ports[0].clone(), i0), (ports[1].clone(), i1)],
    );
    wait_for("frames on both workers' queues", 60, || {
        let rt = dp.runtime();
        rt.workers.iter().all(|w| {
            w.node("net_null_mq0-input").map_or(0, |n| n.packets) >= 50_000
                && w.node("net_null_mq1-input").map_or(0, |n| n.packets) >= 50_000
        })
    });
    dp.stop();
    let (s0, s1) = (ports[0].stats(), ports[1].stats());
    let by_workers = |i| xc.iter().map(|x| x.get(i).0).sum::<u64>();
    assert!(xc
        .iter()
        .all(|x| x.get(i0).0 >= 50_000 && x.get(i1).0 >= 50_000));
    assert_eq!(
        by_workers(i0),
        s0.rx_packets,
        "every frame of mq0, over both workers"
    );
    assert_eq!(
        by_workers(i1),
        s1.rx_packets,
        "every frame of mq1, over both workers"
    );
    assert_eq!(s1.tx_packets, s0.rx_packets);
    assert_eq!(s0.tx_packets, s1.rx_packets);
    drop(ports);
    assert_eq!(mempool.cached(), 0, "both workers' lcore caches flushed");
    every_buffer_back(&pool, mempool);
}
