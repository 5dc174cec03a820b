//! Master ↔ slave in one process over a real control socket.

mod common;

use common::{frame, sock_addr, sock_path, wait_for};
use memif::{InterfaceConfig, LinkState, Master, MasterConfig, Mode, Slave, SocketAddress};

fn connect_pair(
    addr: SocketAddress,
    mcfg: InterfaceConfig,
    scfg: InterfaceConfig,
) -> (Master, Slave) {
    let id = mcfg.id;
    let mut m = Master::bind(addr.clone(), MasterConfig::default()).unwrap();
    m.add_interface(mcfg).unwrap();
    let mut s = Slave::new(addr, scfg).unwrap();
    wait_for("link up", 10, || {
        m.poll().unwrap();
        s.poll().unwrap();
        m.interface(id).unwrap().is_up() && s.interface().is_up()
    });
    (m, s)
}

fn transfer(m: &mut Master, s: &mut Slave, id: u32, sizes: &[usize]) {
    // Slave → master.
    let frames: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &l)| frame(i as u32, l))
        .collect();
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut sent = 0;
    wait_for("slave → master frames", 10, || {
        if sent < frames.len() {
            let refs: Vec<&[u8]> = frames[sent..].iter().map(|f| f.as_slice()).collect();
            sent += s.interface_mut().tx_burst(0, &refs);
        }
        m.interface_mut(id)
            .unwrap()
            .rx_burst(0, 64, &mut |p: &[u8]| got.push(p.to_vec()));
        got.len() == frames.len()
    });
    assert_eq!(got, frames);
    // Master → slave.
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut sent = 0;
    wait_for("master → slave frames", 10, || {
        if sent < frames.len() {
            let refs: Vec<&[u8]> = frames[sent..].iter().map(|f| f.as_slice()).collect();
            sent += m.interface_mut(id).unwrap().tx_burst(0, &refs);
        }
        s.interface_mut()
            .rx_burst(0, 64, &mut |p: &[u8]| got.push(p.to_vec()));
        got.len() == frames.len()
    });
    assert_eq!(got, frames);
}

/// `Master::poll_with` hands an application the new connection's queues before the slave is
/// told CONNECTED, so frames the slave sends the moment it is up find them in place.
#[test]
fn queues_are_handed_out_before_the_slave_reads_connected() {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let addr = sock_addr("up_before_connected");
    let mut m = Master::bind(addr.clone(), MasterConfig::default()).unwrap();
    m.add_interface(InterfaceConfig::new(4)).unwrap();
    let mut s = Slave::new(addr, InterfaceConfig::new(4)).unwrap();
    let mut handed = Vec::new();
    wait_for("link up", 10, || {
        m.poll_with(|iface| {
            let fd = s.control_fd().expect("the slave is connecting");
            let mut pfd = [PollFd::new(fd, PollFlags::POLLIN)];
            let unread = poll(&mut pfd, PollTimeout::ZERO).unwrap();
            handed.push((iface.id(), iface.detach_queues().is_some(), unread));
        })
        .unwrap();
        s.poll().unwrap();
        s.interface().is_up()
    });
    // Once, with the queues, and while nothing (CONNECTED included) waited for the slave.
    assert_eq!(handed, [(4, true, 0)]);
    assert!(m.interface(4).unwrap().is_up());
}

#[test]
fn frames_both_ways_filesystem_socket() {
    let addr = sock_addr("fs_both_ways");
    let (mut m, mut s) = connect_pair(addr, InterfaceConfig::new(3), InterfaceConfig::new(3));
    assert_eq!(m.interface(3).unwrap().peer_name(), "memif3");
    // More frames than the ring holds (1024), so indices wrap and slots are reused.
    let sizes: Vec<usize> = (0..3000).map(|i| 60 + (i * 37) % 1400).collect();
    transfer(&mut m, &mut s, 3, &sizes);
    let mc = m.interface(3).unwrap().counters();
    let sc = s.interface().counters();
    let bytes: u64 = sizes.iter().map(|&l| l as u64).sum();
    assert_eq!((mc.rx_packets, mc.rx_bytes), (3000, bytes));
    assert_eq!((mc.tx_packets, mc.tx_bytes), (3000, bytes));
    assert_eq!((sc.rx_packets, sc.tx_packets), (3000, 3000));
    assert_eq!(m.interface(3).unwrap().bad_descriptors(), 0);
    assert_eq!(s.interface().bad_descriptors(), 0);
    drop(m);
    assert!(!sock_path("fs_both_ways").exists());
}

#[test]
fn chained_frames_larger_than_a_buffer() {
    let addr = SocketAddress::parse(&format!("@quiver-memif-{}-chained", std::process::id()));
    let mut cfg = InterfaceConfig::new(0);
    cfg.buffer_size = 1024;
    cfg.log2_ring_size = 5;
    let (mut m, mut s) = connect_pair(addr, InterfaceConfig::new(0), cfg);
    let sizes: Vec<usize> = (0..200)
        .map(|i| [64, 1024, 1025, 3000, 9000, 2049][i % 6])
        .collect();
    transfer(&mut m, &mut s, 0, &sizes);
    // A frame needing more slots than the ring has is dropped (counted), not left blocking.
    let huge = frame(1, 40_000);
    let small = frame(2, 100);
    assert_eq!(s.interface_mut().tx_burst(0, &[&huge, &small]), 2);
    assert_eq!(s.interface().counters().tx_dropped, 1);
    let mi = m.interface_mut(0).unwrap();
    assert_eq!(mi.tx_burst(0, &[&huge, &small]), 2);
    assert_eq!(mi.counters().tx_dropped, 1);
    let mut got = Vec::new();
    wait_for("small frames after the huge ones", 10, || {
        m.interface_mut(0)
            .unwrap()
            .rx_burst(0, 8, &mut |p: &[u8]| got.push(p.to_vec()));
        s.interface_mut()
            .rx_burst(0, 8, &mut |p: &[u8]| got.push(p.to_vec()));
        got.len() == 2
    });
    assert_eq!(got, vec![small.clone(), small]);
}

#[test]
fn ip_mode_multiple_queues_and_interrupts() {
    let addr = sock_addr("ip_mq");
    let mut cfg = InterfaceConfig::new(9);
    cfg.mode = Mode::Ip;
    cfg.queue_pairs = 3;
    cfg.log2_ring_size = 8;
    let (mut m, mut s) = connect_pair(addr, cfg.clone(), cfg);
    assert_eq!(m.interface(9).unwrap().rx_queues(), 3);
    assert_eq!(s.interface().tx_queues(), 3);
    // Interrupt mode on the master's rx queue 2: the slave's tx signals the eventfd.
    m.interface_mut(9).unwrap().set_rx_interrupt(2, true);
    let f = frame(5, 100);
    assert_eq!(s.interface_mut().tx_burst(2, &[&f]), 1);
    let mi = m.interface(9).unwrap();
    let fd = mi.rx_event_fd(2).unwrap();
    let mut p = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
    assert_eq!(nix::poll::poll(&mut p, 5000u16).unwrap(), 1);
    assert_eq!(mi.clear_rx_event(2), 1);
    let mut got = Vec::new();
    m.interface_mut(9)
        .unwrap()
        .rx_burst(2, 8, &mut |p: &[u8]| got.push(p.to_vec()));
    assert_eq!(got, vec![f.clone()]);
    // Polling mode (the default) on queue 0: no signal.
    assert_eq!(s.interface_mut().tx_burst(0, &[&f]), 1);
    assert_eq!(m.interface(9).unwrap().clear_rx_event(0), 0);
    // Slave rx in interrupt mode: master tx on queue 1 signals.
    s.interface_mut().set_rx_interrupt(1, true);
    assert_eq!(m.interface_mut(9).unwrap().tx_burst(1, &[&f]), 1);
    let si = s.interface();
    let mut p = [nix::poll::PollFd::new(
        si.rx_event_fd(1).unwrap(),
        nix::poll::PollFlags::POLLIN,
    )];
    assert_eq!(nix::poll::poll(&mut p, 5000u16).unwrap(), 1);
    let mut bufs = vec![Vec::new(); 4];
    assert_eq!(s.interface_mut().rx_burst_into(1, &mut bufs), 1);
    assert_eq!(bufs[0], f);
}

#[test]
fn slave_reconnects_when_the_master_returns() {
    let addr = sock_addr("reconnect");
    let (m, mut s) = connect_pair(
        addr.clone(),
        InterfaceConfig::new(1),
        InterfaceConfig::new(1),
    );
    s.retry_interval = std::time::Duration::from_millis(1);
    drop(m);
    wait_for("slave sees the master go", 10, || {
        s.poll().unwrap();
        !s.interface().is_up()
    });
    match s.interface().link() {
        LinkState::Down(r) => assert!(r.contains("master shutting down"), "{r}"),
        LinkState::Up => unreachable!(),
    }
    let mut m = Master::bind(addr, MasterConfig::default()).unwrap();
    m.add_interface(InterfaceConfig::new(1)).unwrap();
    wait_for("reconnect", 10, || {
        m.poll().unwrap();
        s.poll().unwrap();
        m.interface(1).unwrap().is_up() && s.interface().is_up()
    });
    transfer(&mut m, &mut s, 1, &[64, 1500, 200]);
    assert_eq!(s.interface().counters().connects, 2);
}

#[test]
fn slave_disconnect_is_seen_by_the_master_with_its_reason() {
    let addr = sock_addr("slave_disc");
    let (mut m, mut s) = connect_pair(addr, InterfaceConfig::new(4), InterfaceConfig::new(4));
    s.disconnect("bye now");
    wait_for("master link down", 10, || {
        m.poll().unwrap();
        !m.interface(4).unwrap().is_up()
    });
    assert_eq!(
        m.interface(4).unwrap().link(),
        &LinkState::Down("peer disconnected: bye now".into())
    );
}

/// Queues detached for other threads carry the traffic, count on the interface, stop when the
/// connection goes down, and a reconnect yields working queues again.
#[test]
fn detached_queues_work_from_other_threads_and_across_reconnects() {
    use memif::PeerFrame;
    let addr = sock_addr("detached");
    let mut cfg = InterfaceConfig::new(9);
    cfg.queue_pairs = 2;
    let (mut m, mut s) = connect_pair(addr, cfg.clone(), cfg);
    for round in 0..2u32 {
        let mq = m.interface_mut(9).unwrap().detach_queues().unwrap();
        let sq = s.interface_mut().detach_queues().unwrap();
        assert_eq!(
            (mq.rx.len(), mq.tx.len(), sq.rx.len(), sq.tx.len()),
            (2, 2, 2, 2)
        );
        assert!(m.interface_mut(9).unwrap().detach_queues().is_none());
        // Slave tx queue q → master rx queue q, each pair on its own threads, 2000 frames each.
        let frames: Vec<Vec<u8>> = (0..2000)
            .map(|i| frame(i, 60 + (i as usize % 1500)))
            .collect();
        std::thread::scope(|scope| {
            for (mut tx, mut rx) in sq.tx.into_iter().zip(mq.rx) {
                let frames = &frames;
                scope.spawn(move || {
                    let mut sent = 0;
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                    while sent < frames.len() && std::time::Instant::now() < deadline {
                        let refs: Vec<&[u8]> = frames[sent..].iter().map(|f| &f[..]).collect();
                        sent += tx.transmit(&refs[..]);
                    }
                });
                scope.spawn(move || {
                    let mut got = 0usize;
                    wait_for("detached rx", 10, || {
                        rx.receive(256, &mut |f: &PeerFrame<'_>| {
                            let mut b = vec![0; f.len()];
                            assert!(f.copy_to(0, &mut b));
                            assert_eq!(b, frames[got]);
                            // Partial copies stay inside the frame.
                            assert!(!f.copy_to(f.len() - 1, &mut [0, 0]));
                            got += 1;
                            true
                        });
                        got == frames.len()
                    });
                });
            }
        });
        let mc = m.interface(9).unwrap().counters();
        assert_eq!(mc.rx_packets, 4000 * u64::from(round + 1));
        assert_eq!(
            s.interface().counters().tx_packets,
            4000 * u64::from(round + 1)
        );
        // Master tx stays usable until the link drops; afterwards nothing is taken.
        let mut mtx = mq.tx;
        assert!(mtx[0].is_live());
        s.disconnect("test reconnect");
        wait_for("master sees the disconnect", 10, || {
            m.poll().unwrap();
            !m.interface(9).unwrap().is_up()
        });
        assert!(!mtx[0].is_live());
        assert_eq!(mtx[0].transmit(&[&frame(1, 60)[..]][..]), 0);
        wait_for("link up again", 10, || {
            m.poll().unwrap();
            s.poll().unwrap();
            m.interface(9).unwrap().is_up() && s.interface().is_up()
        });
    }
}
