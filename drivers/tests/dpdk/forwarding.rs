//! `net_ring` and `net_null` ports forwarding through the graph's L2 cross-connect: frames of
//! every size (chained too) intact and in order, exact counts, and two workers each polling its
//! own queue of two-queue ports.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::BufferIndex;
use drivers::dpdk::{ring_port, DpdkMempool, DpdkPort, DpdkPortConfig, Ring};
use drivers::{LinkStatus, Port};
use testkit::wait_for;

use crate::eal::{eal, eal_and_pool, every_buffer_back, pool};
use crate::graph::{drops, forwarding, frames, packets_of, sizes, start, start_on, MAC_A, MAC_B};

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
