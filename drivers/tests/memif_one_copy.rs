//! Between two memif ports a frame is copied once: received without a copy (left in the
//! sender's memory), copied from there straight into the receiver's. Proven by the ports'
//! copy counters (`rx-zero-copy`, `rx-copied`, `tx-peer-to-peer`) and the pool's count of
//! frames copied in later (`materialised_count`), never by a time; with frames checked intact
//! and in order, every buffer and every ring slot back; a sender that leaves while its frames
//! are held; and a routed path, where ip4-rewrite changes the frame.

use dataplane::BufferIndex;
use std::sync::Arc;

use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, TxQueue};
use drivers::memif_port::{MemifControl, MemifPort, MemifPortConfig};
use drivers::{LinkStatus, Port};
use graph_nodes::{Forwarding, IfIndex};
use memif::{InterfaceConfig, Mode, Role, Slave, SocketAddress};

mod memif_support;

use memif_support::{connect, port_config, queue_frame, slave_config, wait_for, Quiver, WORKERS};

fn socket(test: &str) -> SocketAddress {
    SocketAddress::Path(
        std::env::temp_dir().join(format!("quiver-1copy-{}-{test}.sock", std::process::id())),
    )
}

fn detail(port: &MemifPort, name: &str) -> u64 {
    port.stats()
        .detail
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

/// Quiver's forwarder over two memif master ports, configured by `setup`.
fn start(test: &str, setup: impl FnOnce(&mut Forwarding, &[IfIndex])) -> Quiver {
    let sock = socket(test);
    let configs = (0..2)
        .map(|id| port_config(&format!("memif{id}"), Role::Master, sock.clone(), id))
        .collect();
    Quiver::start(configs, 8 * 1024, setup)
}

fn slave(test: &str, id: u32) -> Slave {
    Slave::new(socket(test), slave_config(id, Mode::Ethernet)).unwrap()
}

/// An L2 [`queue_frame`] for queue `q`, sequence `seq`.
fn l2_frame(q: u8, seq: u32, len: usize) -> Vec<u8> {
    queue_frame(q, seq, len, 29)
}

/// Sends `per_queue` frames (`make(q, seq)`) on every queue of `from`; checks that `to`
/// receives on the same queue exactly `expect(q, seq)` for each, in order.
fn send_and_check(
    from: &mut Slave,
    to: &mut Slave,
    per_queue: u32,
    make: impl Fn(u8, u32) -> Vec<u8>,
    expect: impl Fn(u8, u32) -> Vec<u8>,
    seq_of: impl Fn(&[u8]) -> u32,
) {
    let mut sent = [0u32; WORKERS];
    let mut next = [0u32; WORKERS];
    // At most 256 frames in flight per queue: `to`'s 1024-slot ring never overflows.
    wait_for("frames across Quiver", 60, || {
        for q in 0..WORKERS {
            let room = (next[q] + 256).min(per_queue);
            if sent[q] < room {
                let batch: Vec<Vec<u8>> = (sent[q]..room.min(sent[q] + 64))
                    .map(|s| make(q as u8, s))
                    .collect();
                let refs: Vec<&[u8]> = batch.iter().map(|f| &f[..]).collect();
                sent[q] += from.interface_mut().tx_burst(q, &refs) as u32;
            }
            to.interface_mut().rx_burst(q, 256, &mut |got: &[u8]| {
                let seq = seq_of(got);
                assert_eq!(seq, next[q], "queue {q}: lost, duplicated or reordered");
                assert_eq!(
                    got,
                    &expect(q as u8, seq)[..],
                    "queue {q}: frame {seq} wrong"
                );
                next[q] += 1;
            });
        }
        next.iter().all(|&n| n == per_queue)
    });
}

#[test]
fn an_l2_cross_connect_between_memif_ports_copies_each_frame_once() {
    const TEST: &str = "xc";
    let mut quiver = start(TEST, |f, i| {
        f.cross_connect(i[0], i[1]).unwrap();
        f.cross_connect(i[1], i[0]).unwrap();
    });
    let start_free = quiver.pool.free_count();
    let (mut a, mut b) = (slave(TEST, 0), slave(TEST, 1));
    connect(&quiver, &mut [&mut a, &mut b]);
    let (p0, p1) = (quiver.ports[0].clone(), quiver.ports[1].clone());

    // Frames up to a memif buffer (2048 bytes): one descriptor each, never copied in.
    const N: u32 = 3000;
    let len_of = |s: u32| [60usize, 1514, 2048, 64 + (s as usize * 13) % 1900][s as usize % 4];
    let seq_of = |f: &[u8]| u32::from_be_bytes(f[15..19].try_into().unwrap());
    let make = |q, s| l2_frame(q, s, len_of(s));
    send_and_check(&mut a, &mut b, N, make, make, seq_of);
    send_and_check(&mut b, &mut a, N, make, make, seq_of);
    let total = u64::from(N) * WORKERS as u64;
    for p in [&p0, &p1] {
        assert_eq!(p.stats().rx_packets, total);
        assert_eq!(p.stats().tx_packets, total);
        assert_eq!(
            detail(p, "rx-zero-copy"),
            total,
            "{}: every frame left where it was",
            p.name()
        );
        assert_eq!(
            detail(p, "rx-copied"),
            0,
            "{}: no frame copied in",
            p.name()
        );
        assert_eq!(
            detail(p, "tx-peer-to-peer"),
            total,
            "{}: every frame copied peer to peer",
            p.name()
        );
    }
    // So each frame was copied exactly once: nothing copied it into a Quiver buffer later.
    assert_eq!(quiver.pool.materialised_count(), 0);

    // A frame longer than a memif buffer spans descriptors: it is copied in, then out.
    let jumbo = |q, s| l2_frame(q, s, 5000);
    send_and_check(&mut a, &mut b, 10, jumbo, jumbo, seq_of);
    assert_eq!(detail(&p0, "rx-copied"), 10 * WORKERS as u64);
    assert_eq!(
        detail(&p1, "tx-peer-to-peer"),
        total,
        "copied frames come from Quiver"
    );

    // A traced frame is read by the trace (copied in once), the others still are not.
    let dp = quiver.dp.as_ref().unwrap();
    dp.trace_add("memif0-input", 4).unwrap();
    let (zc, p2p) = (detail(&p0, "rx-zero-copy"), detail(&p1, "tx-peer-to-peer"));
    send_and_check(&mut a, &mut b, 10, make, make, seq_of);
    let traced = dp.trace_show();
    assert_eq!(traced.len(), 4, "{traced:?}");
    assert!(traced
        .iter()
        .all(|t| t.nodes.iter().any(|n| n == "l2-xconnect")));
    assert_eq!(quiver.pool.materialised_count(), 4);
    let frames = 10 * WORKERS as u64;
    assert_eq!(detail(&p0, "rx-zero-copy"), zc + frames);
    assert_eq!(detail(&p1, "tx-peer-to-peer"), p2p + frames - 4);

    // Frames towards a peer that left are freed without a copy, and their slots go back.
    b.disconnect("test: receiver leaves");
    wait_for("memif1 down", 10, || {
        quiver.ports[1].link() != LinkStatus::Up
    });
    for q in 0..WORKERS {
        let f = l2_frame(q as u8, 0, 100);
        let mut sent = 0;
        while sent < 50 {
            sent += a.interface_mut().tx_burst(q, &[&f[..]]);
        }
    }
    wait_for("drops counted", 10, || {
        detail(&p1, "tx-link-down") == 50 * WORKERS as u64
    });
    // Every slot of A's rings back with A, nothing held, every buffer back.
    wait_for("slots and buffers back", 10, || {
        (0..WORKERS).all(|q| a.interface().tx_unconsumed(q) == 0)
            && detail(&p0, "rx-held") == 0
            && quiver.pool.free_count() == start_free
    });
    assert_eq!(
        quiver.pool.materialised_count(),
        4,
        "dropped frames were never copied"
    );
    assert_eq!(quiver.pool.double_free_count(), 0);
    quiver.stop();
    assert_eq!(quiver.pool.free_count(), quiver.pool.capacity() as usize);
}

/// A receiver posting buffers smaller than the sender's frames: each frame, held in the
/// sender's memory, is copied straight into several of the receiver's buffers (a chain), once.
#[test]
fn a_held_frame_larger_than_the_receivers_buffers_is_copied_into_a_chain() {
    const TEST: &str = "small_bufs";
    let mut quiver = start(TEST, |f, i| {
        f.cross_connect(i[0], i[1]).unwrap();
        f.cross_connect(i[1], i[0]).unwrap();
    });
    let mut a = slave(TEST, 0);
    let mut small = slave_config(1, Mode::Ethernet);
    small.buffer_size = 512;
    let mut b = Slave::new(socket(TEST), small).unwrap();
    connect(&quiver, &mut [&mut a, &mut b]);

    const N: u32 = 1000;
    let len_of = |s: u32| [60usize, 511, 512, 513, 1514, 2048][s as usize % 6];
    let seq_of = |f: &[u8]| u32::from_be_bytes(f[15..19].try_into().unwrap());
    let make = |q, s| l2_frame(q, s, len_of(s));
    send_and_check(&mut a, &mut b, N, make, make, seq_of);
    let total = u64::from(N) * WORKERS as u64;
    let p1 = &quiver.ports[1];
    assert_eq!(p1.stats().tx_packets, total);
    assert_eq!(p1.stats().tx_dropped, 0);
    assert_eq!(detail(p1, "tx-peer-to-peer"), total);
    assert_eq!(quiver.pool.materialised_count(), 0);
    quiver.stop();
}

/// An IPv4/UDP frame to Quiver's memif0 for 10.1.0.2, with sequence `seq` in the payload.
fn ip4_frame(to_mac: [u8; 6], q: u8, seq: u32, len: usize) -> Vec<u8> {
    let mut f = l2_frame(q, seq, len);
    f[0..6].copy_from_slice(&to_mac);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (len - 14) as u16;
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&ip_len.to_be_bytes());
    h[8] = 64;
    h[9] = 17;
    h[12..16].copy_from_slice(&[10, 0, 0, 2]);
    h[16..20].copy_from_slice(&[10, 1, 0, 2]);
    let c = checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    f[14..34].copy_from_slice(&h);
    // UDP: ports, length, no checksum; the sequence right after.
    f[34..36].copy_from_slice(&1000u16.to_be_bytes());
    f[36..38].copy_from_slice(&2000u16.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f[40..42].copy_from_slice(&[0, 0]);
    f[42] = q;
    f[43..47].copy_from_slice(&seq.to_be_bytes());
    f
}

fn checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[test]
fn a_routed_frame_received_without_a_copy_is_rewritten_correctly() {
    const TEST: &str = "routed";
    const NEIGHBOR: [u8; 6] = [0x02, 0, 0, 0, 0, 0xbb];
    let ip = |a, b, c, d| u32::from_be_bytes([a, b, c, d]);
    let mut quiver = start(TEST, |f, i| {
        f.add_address(i[0], ip(10, 0, 0, 1), 24).unwrap();
        f.add_address(i[1], ip(10, 1, 0, 1), 24).unwrap();
        f.add_neighbor(i[1], ip(10, 1, 0, 2), NEIGHBOR).unwrap();
    });
    let start_free = quiver.pool.free_count();
    let (mut a, mut b) = (slave(TEST, 0), slave(TEST, 1));
    connect(&quiver, &mut [&mut a, &mut b]);
    let (p0, p1) = (quiver.ports[0].clone(), quiver.ports[1].clone());
    let (mac0, mac1) = (p0.mac(), p1.mac());

    const N: u32 = 1000;
    let len_of = |s: u32| 60 + (s as usize * 7) % 1400;
    let make = |q, s| ip4_frame(mac0, q, s, len_of(s));
    // What leaves: new Ethernet addresses, TTL 63, checksum updated, the rest as sent.
    let expect = |q, s| {
        let mut f = make(q, s);
        f[0..6].copy_from_slice(&NEIGHBOR);
        f[6..12].copy_from_slice(&mac1);
        f[22] = 63;
        f[24..26].copy_from_slice(&[0, 0]);
        let c = checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f
    };
    let seq_of = |f: &[u8]| u32::from_be_bytes(f[43..47].try_into().unwrap());
    send_and_check(&mut a, &mut b, N, make, expect, seq_of);
    let total = u64::from(N) * WORKERS as u64;
    // Received without a copy, copied in once when ethernet-input read the headers (the
    // rewrite then changes Quiver's copy, never the sender's memory), copied out once.
    assert_eq!(detail(&p0, "rx-zero-copy"), total);
    assert_eq!(quiver.pool.materialised_count(), total);
    assert_eq!(detail(&p1, "tx-peer-to-peer"), 0);
    assert_eq!(p1.stats().tx_packets, total);
    // A frame for another MAC is dropped (named) after being read.
    let stray = ip4_frame([0x02, 9, 9, 9, 9, 9], 0, 0, 100);
    assert_eq!(a.interface_mut().tx_burst(0, &[&stray[..]]), 1);
    let dp = quiver.dp.as_ref().unwrap();
    wait_for("the stray frame dropped", 10, || {
        dp.runtime().summed().error("ethernet-input", "not-for-us") == 1
    });
    wait_for("slots and buffers back", 10, || {
        (0..WORKERS).all(|q| a.interface().tx_unconsumed(q) == 0)
            && detail(&p0, "rx-held") == 0
            && quiver.pool.free_count() == start_free
    });
    quiver.stop();
    assert_eq!(quiver.pool.free_count(), quiver.pool.capacity() as usize);
}

#[test]
fn frames_held_when_their_sender_leaves_are_still_sent_intact_and_all_released() {
    // The port's queues driven by hand (no workers), so frames are held across the sender's
    // departure for certain.
    const TEST: &str = "leave";
    let sock = socket(TEST);
    let control = MemifControl::start(1).unwrap();
    let ports: Vec<Arc<MemifPort>> = (0..2)
        .map(|id| {
            let c = MemifPortConfig::new(&format!("memif{id}"), Role::Master, sock.clone(), id);
            control.add_port(c).unwrap()
        })
        .collect();
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 1024,
        hugepages: HugepagePolicy::Never,
        ..BufferPoolConfig::default()
    })
    .unwrap();
    let mut wb = pool.worker_buffers();
    let mut q0 = ports[0].queue_pair(0).unwrap();
    let mut q1 = ports[1].queue_pair(0).unwrap();
    let one_queue = |id| {
        let mut c = InterfaceConfig::new(id);
        c.queue_pairs = 1;
        Slave::new(sock.clone(), c).unwrap()
    };
    let (mut a, mut b) = (one_queue(0), one_queue(1));
    let up = |a: &mut Slave, b: &mut Slave| {
        wait_for("links up", 20, || {
            a.poll().unwrap();
            b.poll().unwrap();
            a.interface().is_up()
                && b.interface().is_up()
                && ports.iter().all(|p| p.link() == LinkStatus::Up)
        })
    };
    up(&mut a, &mut b);
    let seq_of = |f: &[u8]| u32::from_be_bytes(f[15..19].try_into().unwrap());

    let frames: Vec<Vec<u8>> = (0..8).map(|s| l2_frame(0, s, 100 + s as usize)).collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    assert_eq!(a.interface_mut().tx_burst(0, &refs), 8);
    let mut got = [BufferIndex::NONE; 32];
    let mut n = 0;
    wait_for("A's frames received", 10, || {
        n += q0.rx.receive(&mut wb, &mut got[n..]);
        n == 8
    });
    assert_eq!(wb.external_count(), 8, "held in A's memory");
    assert_eq!(detail(&ports[0], "rx-held"), 8);
    assert_eq!(
        a.interface().tx_unconsumed(0),
        8,
        "A's slots stay taken while held"
    );

    // A leaves (and unmaps its memory) with its frames held in Quiver.
    a.disconnect("test: sender leaves");
    drop(a);
    wait_for("memif0 down", 10, || ports[0].link() != LinkStatus::Up);
    assert_eq!(q0.rx.receive(&mut wb, &mut got[8..]), 0);
    // Four go out to B, copied straight from A's memory, still mapped by Quiver.
    assert_eq!(q1.tx.transmit(&mut wb, &got[..4]), 4);
    assert_eq!(detail(&ports[1], "tx-peer-to-peer"), 4);
    // One is read (copied in), the rest dropped.
    assert_eq!(wb.data(got[4]), &frames[4][..]);
    assert_eq!(pool.materialised_count(), 1);
    wb.free(&got[4..8]);
    assert_eq!(wb.external_count(), 0);
    let mut at_b = Vec::new();
    wait_for("B receives the four", 10, || {
        b.interface_mut()
            .rx_burst(0, 64, &mut |f: &[u8]| at_b.push(f.to_vec()));
        at_b.len() == 4
    });
    assert_eq!(at_b, frames[..4]);

    // A comes back: later frames flow, held and released as before.
    let mut a = one_queue(0);
    up(&mut a, &mut b);
    let more: Vec<Vec<u8>> = (100..164).map(|s| l2_frame(0, s, 1500)).collect();
    let refs: Vec<&[u8]> = more.iter().map(|f| &f[..]).collect();
    assert_eq!(a.interface_mut().tx_burst(0, &refs), 64);
    let mut n = 0;
    wait_for("A's new frames received", 10, || {
        n += q0.rx.receive(&mut wb, &mut got[n..]);
        n == 32
    });
    assert_eq!(q1.tx.transmit(&mut wb, &got[..32]), 32);
    let mut n = 0;
    wait_for("the rest received", 10, || {
        n += q0.rx.receive(&mut wb, &mut got[n..]);
        n == 32
    });
    assert_eq!(q1.tx.transmit(&mut wb, &got[..32]), 32);
    let mut at_b = Vec::new();
    wait_for("B receives them", 10, || {
        b.interface_mut()
            .rx_burst(0, 64, &mut |f: &[u8]| at_b.push(f.to_vec()));
        at_b.len() == 64
    });
    assert_eq!(
        at_b.iter().map(|f| seq_of(f)).collect::<Vec<_>>(),
        (100..164).collect::<Vec<_>>()
    );
    assert_eq!(at_b, more);
    assert_eq!(detail(&ports[0], "rx-zero-copy"), 8 + 64);
    assert_eq!(detail(&ports[1], "tx-peer-to-peer"), 4 + 64);
    // Released slots go back with the next poll.
    q0.rx.receive(&mut wb, &mut got);
    assert_eq!(a.interface().tx_unconsumed(0), 0, "every slot back with A");
    assert_eq!(detail(&ports[0], "rx-held"), 0);
    assert_eq!(wb.external_count(), 0);
    assert_eq!(
        wb.prune_external(),
        1,
        "only the live connection's source is left"
    );
    drop(wb);
    assert_eq!(pool.free_count(), 1024);
    assert_eq!(pool.double_free_count(), 0);
}
