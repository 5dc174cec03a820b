//! The routed path end to end: ethernet-input → ip4-input → ip4-lookup → ip4-rewrite →
//! interface-output, for many random destinations against a naive longest-prefix match; and
//! routes changing under live traffic on two workers without a lost packet.

mod common;

use dataplane::BufferIndex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::harness::{read_sequence, PacketSource, SourceConfig};
use dataplane::{Dataplane, GraphBuilder, IdlePolicy, TxQueue, WorkerBuffers, WorkerConfig};
use graph_nodes::fib::lpm::mask;
use graph_nodes::{add_forwarding_nodes, names, FibConfig, Forwarding, Path};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

const NEXT_HOP_MACS: [[u8; 6]; 3] = [
    [2, 0xa0, 0, 0, 0, 1],
    [2, 0xa0, 0, 0, 0, 2],
    [2, 0xa0, 0, 0, 0, 3],
];

#[test]
fn many_random_destinations_follow_the_longest_prefix() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    // Routes in 100.0.0.0/8 of every length 8..=32, each via one of three next hops.
    let mut routes: Vec<(u32, u8, usize)> = Vec::new();
    for _ in 0..3000 {
        let len = 8 + (rng.next() % 25) as u8;
        let prefix = (0x6400_0000 | (rng.next() as u32 & 0x00ff_ffff)) & mask(len);
        routes.retain(|r| (r.0, r.1) != (prefix, len));
        routes.push((prefix, len, (rng.next() % 3) as usize));
    }
    let table = routes.clone();
    let mut r = Rig::new(&[MAC0, MAC1, MAC2, MAC3], move |f, p| {
        f.add_address(p[0], ip(10, 0, 0, 1), 24).unwrap();
        for k in 0..3 {
            f.add_address(p[k + 1], ip(10, 0, k as u8 + 1, 1), 24)
                .unwrap();
            f.add_neighbor(p[k + 1], ip(10, 0, k as u8 + 1, 2), NEXT_HOP_MACS[k])
                .unwrap();
        }
        for &(prefix, len, k) in &table {
            f.add_route(
                prefix,
                len,
                &[Path {
                    next_hop: ip(10, 0, k as u8 + 1, 2),
                    interface: p[k + 1],
                }],
            )
            .unwrap();
        }
    });
    let naive = |a: u32| {
        routes
            .iter()
            .filter(|(p, l, _)| a & mask(*l) == *p)
            .max_by_key(|r| r.1)
            .map(|r| r.2)
    };

    let mut frames = Vec::new();
    let mut expect = [Vec::new(), Vec::new(), Vec::new()];
    let mut no_route = 0;
    for i in 0..5000u32 {
        let dst = if i % 2 == 0 {
            // Inside a random route.
            let (p, l, _) = routes[(rng.next() % routes.len() as u64) as usize];
            p | (rng.next() as u32 & !mask(l))
        } else {
            0x6400_0000 | (rng.next() as u32 & 0x00ff_ffff)
        };
        let ttl = 2 + (rng.next() % 200) as u8;
        let pkt = ipv4(
            ip(10, 0, 0, 9),
            dst,
            17,
            ttl,
            &udp(i as u16, 9, &i.to_be_bytes()),
        );
        frames.push(eth(MAC0, HOST_A, 0x0800, &pkt));
        match naive(dst) {
            Some(k) => expect[k].push((pkt, ttl)),
            None => no_route += 1,
        }
    }
    r.inject(0, &frames);
    for k in 0..3 {
        let out = r.sent(k + 1);
        assert_eq!(out.len(), expect[k].len(), "packets out of port {}", k + 1);
        for (o, (pkt, ttl)) in out.iter().zip(&expect[k]) {
            assert_eq!(&o[..6], &NEXT_HOP_MACS[k], "next hop's MAC");
            assert_eq!(&o[6..12], &[MAC1, MAC2, MAC3][k], "our MAC");
            let ip = &o[14..];
            assert_eq!(ip[8], ttl - 1, "TTL decremented");
            assert_eq!(inet_checksum(&ip[..20]), 0, "header checksum valid");
            assert_eq!(&ip[20..], &pkt[20..], "payload untouched");
            assert_eq!(&ip[12..20], &pkt[12..20], "addresses untouched");
        }
    }
    assert_eq!(r.error(names::IP4_LOOKUP, "no-route"), no_route);
    r.assert_no_leaks();
}

/// A transmit queue that checks sequence numbers (at byte 42 of the frame) and frees.
struct SeqTx {
    seen: Arc<Mutex<Vec<u64>>>,
    bitmap: Vec<u64>,
    first: u64,
    duplicates: Arc<AtomicU64>,
    count: Arc<AtomicU64>,
    scratch: Vec<u8>,
}

impl TxQueue for SeqTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        for &bi in packets {
            self.scratch.clear();
            buffers.copy_packet(bi, &mut self.scratch);
            if let Some(s) = read_sequence(&self.scratch, 42) {
                let i = (s - self.first) as usize;
                if self.bitmap[i / 64] & (1 << (i % 64)) != 0 {
                    self.duplicates.fetch_add(1, Ordering::Relaxed);
                }
                self.bitmap[i / 64] |= 1 << (i % 64);
            }
        }
        self.count
            .fetch_add(packets.len() as u64, Ordering::Relaxed);
        buffers.free(packets);
        packets.len()
    }
}

impl Drop for SeqTx {
    fn drop(&mut self) {
        let mut seen = self.seen.lock().unwrap();
        seen.push(self.bitmap.iter().map(|w| w.count_ones() as u64).sum());
    }
}

#[test]
fn routes_change_under_traffic_without_losing_a_packet() {
    const PER_WORKER: u64 = 300_000;
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 16384,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap();
    let mut fwd = Forwarding::new(FibConfig {
        long_prefix_groups: 4096,
        hugepages: HugepagePolicy::Never,
        ..FibConfig::default()
    })
    .unwrap();
    let eth0 = fwd.add_port("eth0", MAC0, 1500).unwrap();
    let eth1 = fwd.add_port("eth1", MAC1, 1500).unwrap();
    fwd.add_address(eth0, ip(10, 0, 0, 1), 24).unwrap();
    fwd.add_address(eth1, ip(10, 0, 1, 1), 24).unwrap();
    fwd.add_neighbor(eth1, ip(10, 0, 1, 2), HOST_B).unwrap();
    fwd.add_route(
        ip(10, 9, 0, 0),
        16,
        &[Path {
            next_hop: ip(10, 0, 1, 2),
            interface: eth1,
        }],
    )
    .unwrap();
    let boot = graph_nodes::LocalState::default();
    fwd.commit(&boot).unwrap();

    let seen = Arc::new(Mutex::new(Vec::new()));
    let duplicates = Arc::new(AtomicU64::new(0));
    let count = Arc::new(AtomicU64::new(0));
    let (s, d, c) = (seen.clone(), duplicates.clone(), count.clone());
    let frame = eth(
        MAC0,
        HOST_A,
        0x0800,
        &ipv4(
            ip(10, 0, 0, 9),
            ip(10, 9, 1, 1),
            17,
            64,
            &udp(1, 2, &[0; 26]),
        ),
    );
    let workers = WorkerConfig {
        cores: vec![0, 1]
            .into_iter()
            .filter(|&c| c < std::thread::available_parallelism().unwrap().get())
            .collect::<Vec<_>>(),
        idle: IdlePolicy::Poll,
    };
    let workers = if workers.cores.len() < 2 {
        WorkerConfig {
            cores: vec![0, 0],
            ..workers
        }
    } else {
        workers
    };
    let dp = Dataplane::start(&workers, pool.clone(), fwd.snapshot(), move |init| {
        let first = init.index as u64 * PER_WORKER;
        let mut src = SourceConfig::new("src", names::ETHERNET_INPUT, vec![frame.clone()]);
        src.sequence_offset = Some(42);
        src.first_sequence = first;
        src.limit = Some(PER_WORKER);
        src.rate_pps = Some(150_000);
        src.rx_interface = eth0.get();
        let tx = SeqTx {
            seen: s.clone(),
            bitmap: vec![0; PER_WORKER.div_ceil(64) as usize],
            first,
            duplicates: d.clone(),
            count: c.clone(),
            scratch: Vec::new(),
        };
        let mut b = GraphBuilder::new();
        b.add(PacketSource::new(src));
        add_forwarding_nodes(&mut b, vec![(eth1, Box::new(tx) as Box<dyn TxQueue>)]);
        b.build().map_err(|e| e.to_string())
    })
    .unwrap();

    // Churn: 100 batches of 100 routes added, then removed, each batch one commit.
    let routes_before = fwd.route_count();
    let mut rng = Rng(42);
    let mut commits = 0;
    let mut commits_under_traffic = 0;
    let started = Instant::now();
    while commits < 200 && started.elapsed() < Duration::from_secs(120) {
        let batch: Vec<(u32, u8)> = (0..100)
            .map(|_| {
                let len = 16 + (rng.next() % 17) as u8;
                (
                    (0xc000_0000 | (rng.next() as u32 & 0x3fff_ffff)) & mask(len),
                    len,
                )
            })
            .collect();
        for &(p, l) in &batch {
            fwd.add_route(
                p,
                l,
                &[Path {
                    next_hop: ip(10, 0, 1, 2),
                    interface: eth1,
                }],
            )
            .unwrap();
        }
        fwd.commit(&dp).unwrap();
        for &(p, l) in &batch {
            fwd.remove_route(p, l);
        }
        fwd.commit(&dp).unwrap();
        commits += 2;
        if count.load(Ordering::Relaxed) < 2 * PER_WORKER {
            commits_under_traffic += 2;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while count.load(Ordering::Relaxed) < 2 * PER_WORKER {
        assert!(Instant::now() < deadline, "traffic did not finish");
        std::thread::yield_now();
    }
    let rt = dp.runtime().summed();
    dp.stop();
    // A slow machine may finish fewer of the 200 commits while packets still flow; what
    // matters is that many did.
    assert!(
        commits_under_traffic >= 20,
        "only {commits_under_traffic} commits overlapped the traffic"
    );
    assert_eq!(commits, 200);
    assert_eq!(count.load(Ordering::Relaxed), 2 * PER_WORKER);
    assert_eq!(duplicates.load(Ordering::Relaxed), 0);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![PER_WORKER, PER_WORKER],
        "every sequence number once per worker"
    );
    assert_eq!(
        rt.errors.iter().map(|e| e.count).sum::<u64>(),
        0,
        "no drops: {}",
        rt.format_errors()
    );
    assert_eq!(
        fwd.route_count(),
        routes_before,
        "only the configured routes remain"
    );
    assert_eq!(pool.in_use_count(), 0);
}
