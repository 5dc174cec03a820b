//! The forwarder changed while it forwards, the way NSM's control plane drives it: ports and
//! cross-connects added and removed at run time through `Forwarder`'s API, with memif peers
//! built on our `memif` crate exchanging frames, and bad requests refused with the status a
//! gRPC layer maps them to, leaving nothing behind.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memif::{InterfaceConfig, Slave, SocketAddress};
use quiver::config::PortSection;
use quiver::control::owner::{Applied, Change, ConfigOwner};
use quiver::{Forwarder, ForwarderError, Owned};
use testkit::wait_for;

#[path = "runtime_ports/ip_mode.rs"]
mod ip_mode;
#[path = "runtime_ports/l3_peers.rs"]
mod l3_peers;
#[path = "runtime_ports/support.rs"]
mod support;

use support::{link_of, links_up, memif_master, port, slave, socket, start, step, Flow, WORKERS};

#[test]
fn a_cross_connect_added_and_removed_at_run_time_carries_frames_and_the_running_one_loses_none() {
    let (s0, s1) = (socket("live", 0), socket("live", 1));
    let (f, pool) = start(&format!(
        "[[port]]\nname = \"memif0\"\ntype = \"memif\"\nrole = \"master\"\nsocket = \"{}\"\nid = 0\n\
         [[port]]\nname = \"memif1\"\ntype = \"memif\"\nrole = \"master\"\nsocket = \"{}\"\nid = 1\n\
         [[xconnect]]\na = \"memif0\"\nb = \"memif1\"\n",
        s0.display(),
        s0.display()
    ));
    let start_free = pool.free_count();
    // Owned as in the daemon: changes go to the owner, which runs housekeeping between them.
    let owner = ConfigOwner::start(f, Duration::from_millis(1));
    let f = owner.control();
    let link = |n: &str| f.view().port(n).map(|e| e.port.link());

    let mut a = slave(&s0, 0);
    let mut b = slave(&s0, 1);
    links_up(link, &["memif0", "memif1"], &mut [&mut a, &mut b]);

    // Traffic through the first cross-connect, both ways, on every queue, for the whole test.
    let running = Arc::new(AtomicBool::new(true));
    let traffic = {
        let running = running.clone();
        std::thread::spawn(move || {
            let (mut ab, mut ba) = (Flow::default(), Flow::default());
            while running.load(Ordering::Relaxed) {
                step(1, &mut a, &mut b, &mut ab, true);
                step(2, &mut b, &mut a, &mut ba, true);
            }
            // Every frame sent arrives: none lost while the other ports came and went.
            wait_for("the last frames through memif0 ↔ memif1", 20, || {
                step(1, &mut a, &mut b, &mut ab, false);
                step(2, &mut b, &mut a, &mut ba, false);
                ab.received == ab.sent && ba.received == ba.sent
            });
            (ab, ba)
        })
    };
    // What memif1 has sent so far: the first cross-connect's traffic.
    let memif1_tx = || f.view().port("memif1").unwrap().port.stats().tx_packets;
    wait_for("traffic through the first cross-connect", 20, || {
        memif1_tx() > 1000
    });

    // A second pair of ports on their own socket, cross-connected, owned by one connection.
    let conn = Some("connection-2".to_string());
    {
        let add = |name, id| {
            f.apply(Change::AddPort {
                port: memif_master(name, &s1, id),
                owner: conn.clone(),
            })
            .unwrap()
        };
        let (i2, i3) = (add("memif2", 0), add("memif3", 1));
        assert!(matches!(i2, Applied::Interface(_)));
        assert_ne!(i2, i3);
        f.apply(Change::CrossConnect {
            a: "memif2".into(),
            b: "memif3".into(),
            owner: conn.clone(),
        })
        .unwrap();
        assert_eq!(
            f.view().owned_by("connection-2"),
            vec![
                Owned::Port("memif2".into()),
                Owned::Port("memif3".into()),
                Owned::CrossConnect("memif2".into(), "memif3".into()),
            ]
        );
    }
    assert!(s1.exists(), "memif2's socket is listening");
    let mut c = slave(&s1, 0);
    let mut d = slave(&s1, 1);
    links_up(link, &["memif2", "memif3"], &mut [&mut c, &mut d]);
    let (mut cd, mut dc) = (Flow::default(), Flow::default());
    wait_for("frames through the new cross-connect", 30, || {
        let more = cd.total_sent() < 2000;
        step(3, &mut c, &mut d, &mut cd, more);
        step(4, &mut d, &mut c, &mut dc, more);
        cd.total_received() >= 2000 && cd.received == cd.sent && dc.received == dc.sent
    });
    {
        let v = f.view();
        let s2 = v.port("memif2").unwrap().port.stats();
        let s3 = v.port("memif3").unwrap().port.stats();
        assert_eq!(s2.rx_packets, cd.total_sent());
        assert_eq!(s3.tx_packets, cd.total_received());
        assert_eq!(s3.rx_packets, dc.total_sent());
        assert_eq!(s2.tx_packets, dc.total_received());
        // One polling node for the ports per worker, whatever the number of ports.
        let rt = f.dataplane().runtime();
        for w in &rt.workers {
            let polling: Vec<&str> = w
                .nodes
                .iter()
                .filter(|n| n.kind == dataplane::NodeKind::Input)
                .map(|n| n.name.as_str())
                .collect();
            assert_eq!(
                polling
                    .iter()
                    .filter(|&&n| n == dataplane::PORT_INPUT)
                    .count(),
                1,
                "{polling:?}"
            );
            assert!(
                polling.iter().all(|&n| !n.starts_with("memif")),
                "no node per port: {polling:?}"
            );
        }
    }

    // Close the connection: its ports and cross-connect go, the socket with them.
    let removed = f
        .apply(Change::RemoveOwned {
            owner: "connection-2".into(),
        })
        .unwrap();
    assert_eq!(removed, Applied::Removed(3));
    {
        let v = f.view();
        assert!(v.owned_by("connection-2").is_empty());
        assert!(v.port("memif2").is_none() && v.port("memif3").is_none());
        assert_eq!(v.interfaces.len(), 2);
        let objects = f.inspect(|f| f.forwarding().object_counts()).unwrap();
        assert_eq!(objects, (0, 0));
    }
    assert!(!s1.exists(), "the removed ports' memif socket is gone");
    wait_for("the removed ports' peers see the link go", 10, || {
        c.poll().ok();
        d.poll().ok();
        !c.interface().is_up() && !d.interface().is_up()
    });

    // Traffic on the first cross-connect kept flowing meanwhile; stop it and count.
    let before = memif1_tx();
    wait_for("more traffic after the removal", 20, || {
        memif1_tx() > before + 1000
    });
    running.store(false, Ordering::Relaxed);
    let (ab, ba) = traffic
        .join()
        .expect("the first cross-connect lost no frame");
    {
        let v = f.view();
        let s0 = v.port("memif0").unwrap().port.stats();
        let s1 = v.port("memif1").unwrap().port.stats();
        assert_eq!(
            (s0.rx_packets, s1.tx_packets),
            (ab.total_sent(), ab.total_sent())
        );
        assert_eq!(
            (s1.rx_packets, s0.tx_packets),
            (ba.total_sent(), ba.total_sent())
        );
        assert_eq!(
            (s0.rx_dropped, s0.tx_dropped, s1.rx_dropped, s1.tx_dropped),
            (0, 0, 0, 0)
        );
    }
    wait_for("every buffer back in the pool", 10, || {
        pool.free_count() == start_free
    });
    owner.stop().unwrap().stop();
    assert_eq!(pool.free_count(), start_free);
    assert!(!s0.exists(), "memif0's socket is gone with the forwarder");
    eprintln!(
        "first cross-connect: {} + {} frames; second: {} + {}",
        ab.total_sent(),
        ba.total_sent(),
        cd.total_sent(),
        dc.total_sent()
    );
}

#[test]
fn bad_requests_get_their_status_and_leave_nothing_behind() {
    let (f, pool) = start("");
    let start_free = pool.free_count();
    let mut f = f;
    let sock = socket("bad", 0);
    let i0 = f
        .add_port(&memif_master("m0", &sock, 0), Some("c1"))
        .unwrap();
    f.add_port(&memif_master("m1", &sock, 1), None).unwrap();
    let state = |f: &Forwarder| {
        (
            f.ports().len(),
            f.forwarding().interfaces().count(),
            f.forwarding().routes().len(),
            f.forwarding().neighbors().len(),
            f.forwarding().object_counts(),
        )
    };
    let before = state(&f);
    // An L3 cross-connect of `a` and m1 (peers 10.0.0.1 and 10.0.0.2).
    let l3xc_with_m1 = |f: &mut Forwarder, a: &str| {
        let (peer_b, peer_a) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        f.l3_cross_connect(a, "m1", peer_b.into(), peer_a.into(), None)
    };

    let not_found = |r: Result<(), ForwarderError>| matches!(r, Err(ForwarderError::NotFound(_)));
    assert!(not_found(f.remove_port("nope")));
    assert!(not_found(f.disconnect("m0")), "m0 is not cross-connected");
    assert!(not_found(f.cross_connect("m0", "nope", None)));
    assert!(not_found(f.remove_route("10.9.0.0".parse().unwrap(), 16)));
    assert!(not_found(
        f.remove_neighbor("m0", "10.0.0.9".parse().unwrap())
    ));
    assert!(not_found(f.remove_address(
        "m0",
        "10.0.0.1".parse().unwrap(),
        24
    )));
    assert!(not_found(f.add_route(
        "10.9.0.0".parse().unwrap(),
        16,
        &[("10.0.0.2".parse().unwrap(), "nope")],
        None
    )));
    assert!(matches!(
        f.add_port(&memif_master("m0", &socket("bad", 1), 0), None),
        Err(ForwarderError::AlreadyExists(_))
    ));
    assert!(
        matches!(
            f.add_port(&memif_master("m2", &sock, 1), None),
            Err(ForwarderError::AlreadyExists(_))
        ),
        "memif socket and id in use"
    );
    assert!(matches!(
        f.cross_connect("m0", "m0", None),
        Err(ForwarderError::InvalidArgument(_))
    ));
    assert!(matches!(
        l3xc_with_m1(&mut f, "m1"),
        Err(ForwarderError::InvalidArgument(_))
    ));
    assert!(matches!(
        f.add_route("10.9.0.0".parse().unwrap(), 33, &[], None),
        Err(ForwarderError::InvalidArgument(_))
    ));
    assert!(matches!(
        f.add_port(&port("name = \"bad ring\"\ntype = \"memif\"\nrole = \"master\"\nsocket = \"/tmp/x.sock\"\n"), None),
        Err(ForwarderError::InvalidArgument(_))
    ));
    let mut ring = memif_master("m3", &socket("bad", 2), 0);
    if let PortSection::Memif(m) = &mut ring {
        m.ring_size = 1000;
    }
    assert!(matches!(
        f.add_port(&ring, None),
        Err(ForwarderError::InvalidArgument(_))
    ));
    let mut in_ns = memif_master("m4", &socket("bad", 3), 0);
    if let PortSection::Memif(m) = &mut in_ns {
        m.netns = Some("/run/netns/quiver-no-such-namespace".into());
    }
    assert!(matches!(
        f.add_port(&in_ns, None),
        Err(ForwarderError::NotFound(_))
    ));
    // A cross-connect in place: a second one on either port is refused.
    f.cross_connect("m0", "m1", Some("c1")).unwrap();
    assert!(matches!(
        l3xc_with_m1(&mut f, "m0"),
        Err(ForwarderError::AlreadyExists(_))
    ));
    f.disconnect("m1").unwrap();
    assert!(f.owned_by("c1") == vec![Owned::Port("m0".into())]);

    // Nothing was left behind by the refusals.
    assert_eq!(state(&f), before);
    for n in 1..4 {
        assert!(!socket("bad", n).exists(), "no socket for a refused port");
    }
    let rt = f.dataplane().runtime();
    assert!(rt.workers.iter().all(|w| w.node("port-input").is_some()));

    // An owner's objects go with it; the rest stays.
    f.add_address("m0", "10.0.0.1".parse().unwrap(), 24, Some("c1"))
        .unwrap();
    f.add_neighbor(
        "m0",
        "10.0.0.2".parse().unwrap(),
        [2, 0, 0, 0, 0, 2],
        Some("c1"),
    )
    .unwrap();
    f.add_route(
        "10.9.0.0".parse().unwrap(),
        16,
        &[("10.0.0.2".parse().unwrap(), "m0")],
        Some("c1"),
    )
    .unwrap();
    assert_eq!(f.owned_by("c1").len(), 4);
    assert_eq!(f.remove_owned("c1").unwrap(), 4);
    assert_eq!(f.remove_owned("c1").unwrap(), 0, "closing twice is fine");
    assert!(f.port("m0").is_none());
    assert_eq!(f.ports().len(), 1);
    assert_eq!(f.forwarding().routes().len(), 0);
    assert_eq!(f.forwarding().neighbors().len(), 0);
    assert!(sock.exists(), "m1 still listens");
    // The index freed is reused by the next port, which works like the first.
    assert_eq!(f.add_port(&memif_master("m5", &sock, 0), None).unwrap(), i0);
    f.remove_port("m5").unwrap();
    f.remove_port("m1").unwrap();
    assert!(!sock.exists());
    f.stop();
    assert_eq!(pool.free_count(), start_free);
}

#[test]
fn the_forwarder_can_be_shared_with_a_control_plane() {
    fn send<T: Send>() {}
    send::<Forwarder>();
    send::<ForwarderError>();
}

/// A network namespace, deleted on drop.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("/usr/sbin/ip")
            .args(["netns", "del", &self.0])
            .output();
    }
}

#[test]
fn memif_ports_added_inside_a_network_namespace_serve_peers_there() {
    if !testkit::require(
        "memif_ports_added_inside_a_network_namespace",
        &testkit::Needs {
            root: true,
            tools: &["/usr/sbin/ip"],
            ..testkit::Needs::default()
        },
    ) {
        return;
    }
    let ns = Netns(format!("quiver-rt-memif-{}", std::process::id()));
    let out = std::process::Command::new("/usr/sbin/ip")
        .args(["netns", "add", &ns.0])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let path = PathBuf::from(format!("/run/netns/{}", ns.0));
    // An abstract socket: it exists only in the namespace it is bound in.
    let name = format!("@quiver-rt-{}", std::process::id());
    let (f, pool) = start("");
    let start_free = pool.free_count();
    let f = Mutex::new(f);
    for (port, id) in [("pod0", 0), ("pod1", 1)] {
        let mut section = port_section_memif(port, &name, id);
        if let PortSection::Memif(m) = &mut section {
            m.netns = Some(path.clone());
        }
        f.lock().unwrap().add_port(&section, Some("pod")).unwrap();
    }
    f.lock()
        .unwrap()
        .cross_connect("pod0", "pod1", Some("pod"))
        .unwrap();

    // The peers run inside the namespace, where the socket is.
    let (ab, ba) = std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&path).unwrap();
            nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let addr = SocketAddress::parse(&name);
            let peer = |id| {
                let mut c = InterfaceConfig::new(id);
                c.queue_pairs = WORKERS as u16;
                Slave::new(addr.clone(), c).unwrap()
            };
            let (mut a, mut b) = (peer(0), peer(1));
            links_up(link_of(&f), &["pod0", "pod1"], &mut [&mut a, &mut b]);
            let (mut ab, mut ba) = (Flow::default(), Flow::default());
            wait_for("frames through the namespace's memif ports", 30, || {
                let more = ab.total_sent() < 1000;
                step(5, &mut a, &mut b, &mut ab, more);
                step(6, &mut b, &mut a, &mut ba, more);
                ab.total_received() >= 1000 && ab.received == ab.sent && ba.received == ba.sent
            });
            (ab, ba)
        })
        .join()
        .unwrap()
    });
    let mut f = f.into_inner().unwrap();
    assert_eq!(
        f.port("pod0").unwrap().port.stats().rx_packets,
        ab.total_sent()
    );
    assert_eq!(
        f.port("pod0").unwrap().port.stats().tx_packets,
        ba.total_sent()
    );
    assert_eq!(f.remove_owned("pod").unwrap(), 3);
    assert!(f.ports().is_empty());
    f.stop();
    assert_eq!(pool.free_count(), start_free);
}

fn port_section_memif(name: &str, socket: &str, id: u32) -> PortSection {
    port(&format!(
        "name = \"{name}\"\ntype = \"memif\"\nrole = \"master\"\nsocket = \"{socket}\"\nid = {id}\nqueues = {WORKERS}\n"
    ))
}
