//! memif queue counts as peers negotiate them, and why a peer is refused, the way an operator
//! meets them: a Quiver slave against a master that takes one queue pair (libmemif's and VPP's
//! default, behind a HELLO that offers more, as libmemif's does), two workers sharing that
//! one transmit queue, and a Quiver master refusing a slave with the wrong secret.

use drivers::memif_port::{MemifPort, MemifPortConfig};
use drivers::{LinkStatus, Port};
use memif::{InterfaceConfig, Master, MasterConfig, Mode, RefusalKind, Role, Slave, SocketAddress};

mod memif_support;

use memif_support::{port_config, queue_frame, slave_config, wait_for, Quiver, WORKERS};

fn socket(test: &str) -> SocketAddress {
    SocketAddress::Path(
        std::env::temp_dir().join(format!("quiver-drvq-{}-{test}.sock", std::process::id())),
    )
}

/// A master like libmemif's: interface 1 takes `queues` pairs, and HELLO offers up to 256 (a
/// second interface on the socket takes that many), so a slave that trusts HELLO alone asks
/// for more than interface 1 accepts.
fn narrow_master(sock: &SocketAddress, queues: u16) -> Master {
    let mut m = Master::bind(sock.clone(), MasterConfig::default()).unwrap();
    let mut one = InterfaceConfig::new(1);
    one.queue_pairs = queues;
    m.add_interface(one).unwrap();
    let mut wide = InterfaceConfig::new(9);
    wide.queue_pairs = 256;
    m.add_interface(wide).unwrap();
    m
}

/// A counter of `port`'s detail.
fn counter(port: &MemifPort, name: &str) -> u64 {
    port.stats()
        .detail
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

#[test]
fn a_slave_port_takes_the_one_queue_its_master_allows_and_both_workers_send_through_it() {
    let (s_wide, s_narrow) = (socket("wide"), socket("narrow"));
    let mut master = narrow_master(&s_narrow, 1);
    // "wide": a master with a queue pair per worker; "narrow": a slave of the default
    // configuration (one queue pair), cross-connected.
    let mut narrow = MemifPortConfig::new("narrow", Role::Slave, s_narrow, 1);
    narrow.queues = 1;
    let quiver = Quiver::start(
        vec![port_config("wide", Role::Master, s_wide.clone(), 0), narrow],
        16 * 1024,
        |f, i| {
            f.cross_connect(i[0], i[1]).unwrap();
            f.cross_connect(i[1], i[0]).unwrap();
        },
    );
    let start_free = quiver.pool.free_count();
    let mut cnf = Slave::new(s_wide, slave_config(0, Mode::Ethernet)).unwrap();
    wait_for("both links up", 20, || {
        cnf.poll().unwrap();
        master.poll().unwrap();
        cnf.interface().is_up()
            && master.interface(1).unwrap().is_up()
            && quiver.ports.iter().all(|p| p.link() == LinkStatus::Up)
    });
    let agreed = quiver.ports[1].status().negotiated.expect("connected");
    assert_eq!((agreed.rx_queues, agreed.tx_queues), (1, 1));
    assert_eq!(quiver.ports[1].connected_queues(), 1);
    assert_eq!(master.interface(1).unwrap().refusals().total(), 0);

    // The CNF sends on both queues, so both workers receive and both send out of narrow's
    // one ring: every frame arrives once, intact, in order per queue it was sent on.
    const PER_QUEUE: u32 = 3000;
    let len_of = |s: u32| 60 + (s as usize * 13) % 1400;
    let mut sent = [0u32; WORKERS];
    let mut next = [0u32; WORKERS];
    wait_for("frames through the shared queue", 60, || {
        master.poll().unwrap();
        for q in 0..WORKERS {
            // At most 256 in flight per queue: the master's ring (1024 slots) never overflows.
            let room = (next[q] + 256).min(PER_QUEUE);
            if sent[q] < room {
                let batch: Vec<Vec<u8>> = (sent[q]..room.min(sent[q] + 32))
                    .map(|s| queue_frame(q as u8, s, len_of(s), 7))
                    .collect();
                let refs: Vec<&[u8]> = batch.iter().map(|f| &f[..]).collect();
                sent[q] += cnf.interface_mut().tx_burst(q, &refs) as u32;
            }
        }
        let iface = master.interface_mut(1).unwrap();
        iface.rx_burst(0, 256, &mut |got: &[u8]| {
            let (fq, seq) = (
                usize::from(got[14]),
                u32::from_be_bytes(got[15..19].try_into().unwrap()),
            );
            assert!(fq < WORKERS, "frame of no queue: {fq}");
            assert_eq!(seq, next[fq], "queue {fq}: lost, duplicated or reordered");
            assert_eq!(got, &queue_frame(fq as u8, seq, len_of(seq), 7)[..]);
            next[fq] += 1;
        });
        next.iter().all(|&n| n == PER_QUEUE)
    });
    // Both workers received (so both sent on the shared queue).
    let rt = quiver.dp.as_ref().unwrap().runtime();
    for w in 0..WORKERS {
        let got: u64 = rt.workers[w]
            .nodes
            .iter()
            .filter(|n| n.name == "wide-input")
            .map(|n| n.packets)
            .sum();
        assert_eq!(got, u64::from(PER_QUEUE), "worker {w}");
    }
    assert_eq!(counter(&quiver.ports[1], "tx-link-down"), 0);
    assert_eq!(quiver.ports[1].stats().tx_dropped, 0);

    // And back: the master's one queue reaches worker 0, which sends on wide's queue 0.
    let mut back = 0u32;
    wait_for("frames back", 30, || {
        master.poll().unwrap();
        if back == 0 {
            let f = queue_frame(0, 0, 300, 9);
            back = master.interface_mut(1).unwrap().tx_burst(0, &[&f[..]]) as u32;
        }
        let mut got = 0;
        cnf.interface_mut().rx_burst(0, 8, &mut |p: &[u8]| {
            got += usize::from(p == &queue_frame(0, 0, 300, 9)[..])
        });
        got == 1
    });
    wait_for("every buffer back", 10, || {
        quiver.pool.free_count() == start_free
    });
}

#[test]
fn a_slave_port_asking_for_more_queues_than_its_master_takes_says_why_it_is_down() {
    let sock = socket("toomany");
    let mut master = narrow_master(&sock, 1);
    let mut c = MemifPortConfig::new("greedy", Role::Slave, sock, 1);
    c.queues = 2;
    let quiver = Quiver::start(vec![c], 1024, |_, _| {});
    wait_for("the master's refusal seen on both sides", 20, || {
        master.poll().unwrap();
        let refused = master
            .interface(1)
            .unwrap()
            .refusals()
            .count(RefusalKind::TooManyQueues)
            > 0;
        let why = match quiver.ports[0].link() {
            LinkStatus::Down(r) => r,
            LinkStatus::Up => String::new(),
        };
        refused && why.contains("out of range: the interface has 1 queue(s)")
    });
}

#[test]
fn a_master_port_shows_what_a_slave_chose_and_why_it_refused_one() {
    let sock = socket("shows");
    let mut c = MemifPortConfig::new("locked", Role::Master, sock.clone(), 3);
    c.secret = Some("sesame".into());
    let quiver = Quiver::start(vec![c], 1024, |_, _| {});
    let port = &quiver.ports[0];

    let mut wrong = InterfaceConfig::new(3);
    wrong.secret = Some("open".into());
    let mut intruder = Slave::new(sock.clone(), wrong).unwrap();
    wait_for("the refusal shown", 20, || {
        intruder.poll().unwrap();
        let s = port.status();
        let shown = match port.link() {
            LinkStatus::Down(r) => r.contains("last peer refused: incorrect secret (peer pid"),
            LinkStatus::Up => false,
        };
        s.refusals.count(RefusalKind::IncorrectSecret) > 0 && shown
    });
    assert!(counter(port, "refused-incorrect-secret") > 0);
    assert_eq!(counter(port, "refused-mode-mismatch"), 0);
    let last = port.status().refusals.last().cloned().unwrap();
    assert_eq!(last.peer_pid, Some(std::process::id() as i32));
    drop(intruder);

    // A slave of its own choosing: 256-slot rings, 1024-byte buffers, one queue pair.
    let mut good = InterfaceConfig::new(3);
    good.secret = Some("sesame".into());
    good.log2_ring_size = 8;
    good.buffer_size = 1024;
    let mut cnf = Slave::new(sock, good).unwrap();
    wait_for("the link up", 20, || {
        cnf.poll().unwrap();
        cnf.interface().is_up() && port.link() == LinkStatus::Up
    });
    let agreed = port.status().negotiated.expect("connected");
    assert_eq!(
        (agreed.rx_queues, agreed.tx_queues, agreed.ring_size),
        (1, 1, 256)
    );
    assert_eq!(agreed.buffer_size, Some(1024));
    // The refusals stay on record after a good peer connects.
    assert!(port.status().refusals.count(RefusalKind::IncorrectSecret) > 0);
}
