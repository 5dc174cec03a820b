//! Quiver's memif ports, driven the way a CNF drives them: peers built on the `memif` crate
//! connect to Quiver's master ports, and frames cross an L2 cross-connect between two memif
//! ports on two workers.

use drivers::memif_port::{MemifControl, MemifPortConfig};
use drivers::{LinkStatus, Port};
use memif::{Mode, Role, Slave, SocketAddress};

mod memif_support;

use memif_support::{connect, port_config, queue_frame, slave_config, wait_for, Quiver, WORKERS};

fn socket(test: &str) -> SocketAddress {
    SocketAddress::Path(
        std::env::temp_dir().join(format!("quiver-drv-{}-{test}.sock", std::process::id())),
    )
}

/// Quiver with memif ports, 0 and 1 cross-connected.
fn start(configs: Vec<MemifPortConfig>) -> Quiver {
    Quiver::start(configs, 16 * 1024, |f, i| {
        f.cross_connect(i[0], i[1]).unwrap();
        f.cross_connect(i[1], i[0]).unwrap();
    })
}

/// A [`queue_frame`] for queue `q` with sequence `seq`.
fn frame(q: u8, seq: u32, len: usize) -> Vec<u8> {
    queue_frame(q, seq, len, 31)
}

/// Sends `per_queue` frames on every queue of `from` and checks that `to` receives each exactly
/// once, intact, in order per queue. Returns the frames' total bytes.
fn cross(from: &mut Slave, to: &mut Slave, per_queue: u32, len_of: impl Fn(u32) -> usize) -> u64 {
    let mut sent = [0u32; WORKERS];
    let mut next = [0u32; WORKERS];
    let mut bytes = 0u64;
    // Each queue's frames leave on that queue; Quiver's worker w polls queue w and transmits on
    // its own queue w, so order holds per queue. At most 512 frames are in flight per queue
    // (with the sizes used here, about 720 of `to`'s 1024 slots), so `to`'s ring never overflows
    // (Quiver would count and drop) however late this thread runs.
    wait_for("frames across the cross-connect", 60, || {
        for q in 0..WORKERS {
            let room = (next[q] + 512).min(per_queue);
            if sent[q] < room {
                let batch: Vec<Vec<u8>> = (sent[q]..room.min(sent[q] + 64))
                    .map(|s| frame(q as u8, s, len_of(s)))
                    .collect();
                let refs: Vec<&[u8]> = batch.iter().map(|f| &f[..]).collect();
                sent[q] += from.interface_mut().tx_burst(q, &refs) as u32;
            }
            to.interface_mut().rx_burst(q, 256, &mut |got: &[u8]| {
                let (fq, seq) = (got[14], u32::from_be_bytes(got[15..19].try_into().unwrap()));
                assert_eq!(
                    usize::from(fq),
                    q,
                    "frame of queue {fq} arrived on queue {q}"
                );
                assert_eq!(seq, next[q], "queue {q}: lost, duplicated or reordered");
                assert_eq!(
                    got,
                    &frame(fq, seq, len_of(seq))[..],
                    "queue {q}: corrupted"
                );
                bytes += got.len() as u64;
                next[q] += 1;
            });
        }
        next.iter().all(|&n| n == per_queue)
    });
    bytes
}

#[test]
fn frames_cross_between_two_memif_ports_on_two_workers_exactly_once() {
    let sock = socket("xc");
    // One listening socket serves both interfaces (ids 0 and 1).
    let quiver = start(vec![
        port_config("memif0", Role::Master, sock.clone(), 0),
        port_config("memif1", Role::Master, sock.clone(), 1),
    ]);
    let start_free = quiver.pool.free_count();
    let mut a = Slave::new(sock.clone(), slave_config(0, Mode::Ethernet)).unwrap();
    let mut b = Slave::new(sock.clone(), slave_config(1, Mode::Ethernet)).unwrap();
    connect(&quiver, &mut [&mut a, &mut b]);

    // Sizes from minimum to jumbo: 9000-byte frames span five memif buffers on each side and
    // five Quiver buffers inside.
    let len_of = |s: u32| match s % 10 {
        0 => 9000,
        1 => 1514,
        _ => 60 + (s as usize * 13) % 1400,
    };
    let ab = cross(&mut a, &mut b, 5000, len_of);
    let ba = cross(&mut b, &mut a, 5000, len_of);
    let total = 5000 * WORKERS as u64;
    let st0 = quiver.ports[0].stats();
    let st1 = quiver.ports[1].stats();
    assert_eq!((st0.rx_packets, st0.rx_bytes), (total, ab));
    assert_eq!((st1.tx_packets, st1.tx_bytes), (total, ab));
    assert_eq!((st1.rx_packets, st1.rx_bytes), (total, ba));
    assert_eq!((st0.tx_packets, st0.tx_bytes), (total, ba));
    assert_eq!((st0.rx_dropped, st0.tx_dropped), (0, 0));
    // Both workers carried traffic.
    let summed = quiver.dp.as_ref().unwrap().runtime();
    for w in 0..WORKERS {
        let per_worker: u64 = summed.workers[w]
            .nodes
            .iter()
            .filter(|n| n.name.ends_with("-input") && n.name.starts_with("memif"))
            .map(|n| n.packets)
            .sum();
        assert_eq!(
            per_worker,
            2 * 5000,
            "worker {w} should carry its queue's frames"
        );
    }
    // Every buffer came back.
    wait_for("buffers back", 10, || {
        quiver.pool.free_count() == start_free
    });
}

/// A CNF may transmit the moment its link is up. By then Quiver's port is up on every worker,
/// so frames from an already connected peer cross to it at once, none dropped as link-down.
#[test]
fn a_port_is_up_on_the_workers_before_its_peer_is_told_connected() {
    let sock = socket("up_first");
    let quiver = start(vec![
        port_config("memif0", Role::Master, sock.clone(), 0),
        port_config("memif1", Role::Master, sock.clone(), 1),
    ]);
    let mut a = Slave::new(sock.clone(), slave_config(0, Mode::Ethernet)).unwrap();
    wait_for("memif0 up", 20, || {
        a.poll().unwrap();
        a.interface().is_up() && quiver.ports[0].link() == LinkStatus::Up
    });
    let mut b = Slave::new(sock.clone(), slave_config(1, Mode::Ethernet)).unwrap();
    // Only b's own view is waited for, as a CNF would.
    wait_for("memif1 up at its peer", 20, || {
        b.poll().unwrap();
        b.interface().is_up()
    });
    assert_eq!(quiver.ports[1].link(), LinkStatus::Up);
    assert_eq!(quiver.ports[1].connected_queues(), WORKERS);
    let bytes = cross(&mut a, &mut b, 200, |s| 60 + s as usize % 200);
    let tx_link_down: u64 = quiver.ports[1]
        .stats()
        .detail
        .iter()
        .find(|(k, _)| k == "tx-link-down")
        .map(|(_, v)| *v)
        .expect("a tx-link-down counter");
    assert_eq!(tx_link_down, 0);
    assert_eq!(quiver.ports[1].stats().tx_bytes, bytes);
}

#[test]
fn a_peer_that_leaves_takes_its_link_down_and_its_frames_are_counted_then_it_comes_back() {
    let (s0, s1) = (socket("relink0"), socket("relink1"));
    let mut quiver = start(vec![
        port_config("memif0", Role::Master, s0.clone(), 7),
        port_config("memif1", Role::Master, s1.clone(), 7),
    ]);
    let mut a = Slave::new(s0, slave_config(7, Mode::Ethernet)).unwrap();
    let mut b = Slave::new(s1, slave_config(7, Mode::Ethernet)).unwrap();
    connect(&quiver, &mut [&mut a, &mut b]);
    cross(&mut a, &mut b, 100, |_| 100);

    b.disconnect("test: peer leaves");
    wait_for(
        "memif1 down",
        10,
        || matches!(quiver.ports[1].link(), LinkStatus::Down(ref why) if why.contains("peer leaves")),
    );
    // Frames towards the missing peer are dropped and counted as such, none lost silently.
    let f = frame(0, 0, 100);
    let mut sent = 0;
    while sent < 50 {
        sent += a.interface_mut().tx_burst(0, &[&f[..]]);
    }
    wait_for("drops counted", 10, || {
        let d = &quiver.ports[1].stats().detail;
        d.iter().any(|(k, v)| k == "tx-link-down" && *v == 50)
    });
    // The slave reconnects on its own; traffic flows again on fresh queues.
    connect(&quiver, &mut [&mut a, &mut b]);
    cross(&mut a, &mut b, 100, |_| 100);
    assert_eq!(quiver.ports[1].memif_counters().connects, 2);
    assert_eq!(quiver.ports[1].memif_counters().disconnects, 1);
    quiver.stop();
}

#[test]
fn a_sender_that_leaves_mid_stream_leaves_every_frame_and_buffer_accounted_for() {
    let sock = socket("leave");
    let quiver = start(vec![
        port_config("memif0", Role::Master, sock.clone(), 0),
        port_config("memif1", Role::Master, sock.clone(), 1),
    ]);
    let start_free = quiver.pool.free_count();
    let mut a = Slave::new(sock.clone(), slave_config(0, Mode::Ethernet)).unwrap();
    let mut b = Slave::new(sock, slave_config(1, Mode::Ethernet)).unwrap();
    connect(&quiver, &mut [&mut a, &mut b]);

    // A floods both queues while B reads nothing: B's rings fill, so frames are in flight on
    // every stage (A's ring, Quiver's graph, B's ring) and Quiver drops some as tx-full. Then A
    // leaves without a word of warning about what it had published.
    let len_of = |s: u32| [60usize, 1514, 9000, 333][s as usize % 4];
    const PER_QUEUE: u32 = 4000;
    let mut sent = [0u32; WORKERS];
    wait_for("A's frames sent", 60, || {
        for (q, s) in sent.iter_mut().enumerate() {
            let batch: Vec<Vec<u8>> = (*s..PER_QUEUE.min(*s + 64))
                .map(|k| frame(q as u8, k, len_of(k)))
                .collect();
            let refs: Vec<&[u8]> = batch.iter().map(|f| &f[..]).collect();
            *s += a.interface_mut().tx_burst(q, &refs) as u32;
        }
        sent.iter().all(|&s| s == PER_QUEUE)
    });
    a.disconnect("test: sender leaves mid-stream");
    wait_for(
        "memif0 down",
        10,
        || matches!(quiver.ports[0].link(), LinkStatus::Down(ref why) if why.contains("sender leaves")),
    );

    // B drains what reached it: each frame intact, in order per queue, none twice.
    let mut next = [0u32; WORKERS];
    let mut got = 0u64;
    let dp = quiver.dp.as_ref().unwrap();
    wait_for("every frame Quiver took accounted for", 30, || {
        for (q, n) in next.iter_mut().enumerate() {
            b.interface_mut().rx_burst(q, 256, &mut |f: &[u8]| {
                let (fq, seq) = (f[14], u32::from_be_bytes(f[15..19].try_into().unwrap()));
                assert_eq!(
                    usize::from(fq),
                    q,
                    "frame of queue {fq} arrived on queue {q}"
                );
                assert!(
                    seq >= *n,
                    "queue {q}: {seq} after {n}: duplicated or reordered"
                );
                assert_eq!(f, &frame(fq, seq, len_of(seq))[..], "queue {q}: corrupted");
                *n = seq + 1;
                got += 1;
            });
        }
        let tx_full = dp.runtime().summed().error("interface-output", "tx-full");
        let (st0, st1) = (quiver.ports[0].stats(), quiver.ports[1].stats());
        st1.tx_packets == got && st0.rx_packets == got + tx_full + st1.tx_dropped
    });
    // Quiver took frames from A's ring, and the drops are named, not silent: A sent far more
    // than B's rings hold, so some met a full ring.
    let st0 = quiver.ports[0].stats();
    assert!(st0.rx_packets > 0 && st0.rx_packets <= u64::from(PER_QUEUE) * WORKERS as u64);
    assert!(dp.runtime().summed().error("interface-output", "tx-full") > 0);
    assert!(got > 0, "B received nothing");
    assert_eq!(quiver.ports[0].memif_counters().disconnects, 1);
    // No buffer is left behind: not in the graph, not in a queue, not on a dead connection.
    wait_for("buffers back", 10, || {
        quiver.pool.free_count() == start_free
    });
}

#[test]
fn ip_mode_ports_carry_bare_ip_packets() {
    let sock = socket("ipmode");
    let mut configs = vec![
        port_config("memif-ip0", Role::Master, sock.clone(), 0),
        port_config("memif-ip1", Role::Master, sock.clone(), 1),
    ];
    for c in &mut configs {
        c.mode = Mode::Ip;
    }
    let quiver = start(configs);
    let mut a = Slave::new(sock.clone(), slave_config(0, Mode::Ip)).unwrap();
    let mut b = Slave::new(sock, slave_config(1, Mode::Ip)).unwrap();
    connect(&quiver, &mut [&mut a, &mut b]);
    // A bare IPv4 packet (version nibble 4) crosses unchanged: Quiver adds an Ethernet header
    // on the way in and leaves it out on the way out.
    let mut ip = vec![0x45u8, 0, 0, 40];
    ip.extend((0..36).map(|i| i as u8));
    let mut got: Vec<Vec<u8>> = Vec::new();
    wait_for("IP packet across", 10, || {
        if got.is_empty() {
            a.interface_mut().tx_burst(0, &[&ip[..]]);
        }
        b.interface_mut()
            .rx_burst(0, 8, &mut |p: &[u8]| got.push(p.to_vec()));
        !got.is_empty()
    });
    assert_eq!(got[0], ip);
}

#[test]
fn ports_are_refused_when_their_configuration_cannot_work() {
    let control = MemifControl::start(1).unwrap();
    let sock = socket("refused");
    let mut bad = port_config("m0", Role::Slave, sock.clone(), 0);
    bad.log2_ring_size = 15;
    assert!(control.add_port(bad).is_err());
    let ok = control
        .add_port(port_config("m0", Role::Master, sock.clone(), 0))
        .unwrap();
    // Same name again, or the same id on the same socket: refused, the first port unaffected.
    assert!(control
        .add_port(port_config("m0", Role::Master, sock.clone(), 1))
        .is_err());
    assert!(control
        .add_port(port_config("m1", Role::Master, sock.clone(), 0))
        .is_err());
    assert!(ok.queue_pair(0).is_ok());
    assert!(ok.queue_pair(0).is_err(), "a queue pair is handed out once");
    assert!(ok.queue_pair(1).is_err(), "opened for one worker");
    assert!(control.remove_port("m0"));
    assert!(!control.remove_port("m0"));
}
