//! NSM across two nodes: two Quiver forwarders, each with its uplink (AF_PACKET) on one end of a
//! veth "underlay" that joins two network namespaces (the nodes), the NSC's memif CNF on
//! forwarder A, the NSE's on forwarder B. The test plays the nsmgrs (a relay that keeps only
//! the REMOTE mechanisms, as nsmgr does for an endpoint behind another nsmgr) and the NSE's
//! gRPC side. After Request, A offered VXLAN from its tunnel address, B chose the VNI and
//! answered with its own address, both built tunnels, and every frame the NSC sends crosses
//! NSC → A → VXLAN → B → NSE, counted at each step. A refresh keeps the VNI and rebuilds
//! nothing; Close through A removes everything on both forwarders, and so does a Close at B:
//! A watches B (MonitorConnections, through the nsmgrs) and closes its side when B's goes.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, IdlePolicy, WorkerConfig};
use nsm_forwarder::testing::{BlockingClient, TestEndpoint, TestNsmgr};
use nsm_forwarder::NsmHandle;
use nsm_proto::connection::{
    Connection, ConnectionEventType, MonitorScopeSelector, PathSegment, State,
};
use nsm_proto::networkservice::NetworkServiceRequest;
use quiver::{Config, Forwarder};
use testkit::{require, wait_for, Needs};

mod nsm_support;

use nsm_support::nodes::{underlay, Node, A_IP, A_MAC, B_IP, B_MAC};
use nsm_support::{
    link_up, mech, memif_endpoint, memif_sink, memif_source, nsc_connection, traffic_example,
    traffic_report, Netns, TempDir, IP,
};

/// Frames the NSC sends.
const FRAMES: u64 = 10_000;

fn request(id: &str, nsc: &Netns, refresh: Option<&Connection>) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(
            refresh
                .cloned()
                .unwrap_or_else(|| nsc_connection(id, "traffic")),
        ),
        mechanism_preferences: vec![mech("MEMIF", &[("inodeURL", &nsc.url())])],
    }
}

/// The two nodes with the NSC's connection built through A, refreshed, and every frame the
/// NSC sent counted through A, VXLAN and B to the NSE.
struct TwoNodes {
    client: BlockingClient,
    server_a: NsmHandle,
    server_b: NsmHandle,
    nsmgr: TestNsmgr,
    endpoint: TestEndpoint,
    a: Node,
    b: Node,
    /// The NSC's connection id.
    id: String,
    /// A's last answer to the NSC.
    answer: Connection,
    b_listen: String,
    _namespaces: [Netns; 4],
    _dir: TempDir,
}

impl TwoNodes {
    /// Everything up to the Close: `None` (after saying why) when the test cannot run here.
    fn with_traffic(test: &str) -> Option<TwoNodes> {
        if !require(
            test,
            &Needs {
                root: true,
                tools: &[IP],
                ..Needs::default()
            },
        ) {
            return None;
        }
        let traffic = traffic_example();
        let (nsc, nse) = (Netns::new("vnsc"), Netns::new("vnse"));
        let (node_a, node_b) = (Netns::new("vnodea"), Netns::new("vnodeb"));
        let dir = TempDir::new("nsm-vxlan");

        // The underlay: a veth pair, one end in each node.
        let (ua, ub) = underlay("vx", &node_a, &node_b);

        let a = Node::start(&node_a, &ua, A_IP, B_IP, B_MAC);
        let b = Node::start(&node_b, &ub, B_IP, A_IP, A_MAC);

        // The NSE's CNF: memif master on an abstract socket of its namespace, counting frames.
        let nse_socket = format!("@quiver-test-vxlan-nse-{}", std::process::id());
        let sink = memif_sink(&traffic, &nse, &nse_socket, FRAMES);
        let nse_sock = dir.join("nse.sock");
        let endpoint = memif_endpoint(&nse_sock, &nse, &nse_socket);

        // Node B's forwarder serves the NSE; the nsmgrs relay A's Requests to it; A serves the NSC.
        let b_listen = format!("unix://{}", dir.join("b.sock").display());
        let server_b = b.serve(
            "forwarder-b",
            &b_listen,
            B_IP,
            format!("unix://{}", nse_sock.display()),
        );
        let nsmgr_sock = dir.join("nsmgr.sock");
        let nsmgr = TestNsmgr::start(&nsmgr_sock, &b_listen).unwrap();
        let a_listen = format!("unix://{}", dir.join("a.sock").display());
        let server_a = a.serve(
            "forwarder-a",
            &a_listen,
            A_IP,
            format!("unix://{}", nsmgr_sock.display()),
        );
        let mut client = BlockingClient::connect(&a_listen).unwrap();

        let id = format!("vxlan-{}", std::process::id());
        let answer = client.request(request(&id, &nsc, None)).unwrap();
        assert_eq!(answer.state, State::Up as i32);

        // A offered VXLAN from its tunnel address (the only REMOTE mechanism it has).
        let relayed = nsmgr.log().requests;
        assert_eq!(relayed.len(), 1);
        let offer = &relayed[0].mechanism_preferences;
        assert_eq!(offer.len(), 1, "{offer:?}");
        assert_eq!(
            (offer[0].r#type.as_str(), offer[0].cls.as_str()),
            ("VXLAN", "REMOTE")
        );
        assert_eq!(offer[0].parameters["src_ip"], A_IP.to_string());
        assert_eq!(offer[0].parameters["src_port"], "4789");
        // Each built one tunnel toward the other, with the VNI B chose.
        let (ta, tb) = (a.tunnels(), b.tunnels());
        assert_eq!((ta.len(), tb.len()), (1, 1), "{ta:?} {tb:?}");
        assert_eq!((ta[0].local, ta[0].remote), (A_IP.into(), B_IP.into()));
        assert_eq!((tb[0].local, tb[0].remote), (B_IP.into(), A_IP.into()));
        assert_eq!(ta[0].vni, tb[0].vni);
        assert!((1..1 << 24).contains(&ta[0].vni));

        let endpoint_port = b
            .port_names()
            .into_iter()
            .find(|p| p.ends_with("-endpoint"))
            .expect("B's memif toward the NSE");
        wait_for("B's memif to the NSE to come up", 60, || {
            link_up(&b.0.fwd, &endpoint_port)
        });

        // A refresh keeps the VNI and rebuilds nothing.
        let again = client.request(request(&id, &nsc, Some(&answer))).unwrap();
        assert_eq!(again.state, State::Up as i32);
        assert_eq!((a.tunnels(), b.tunnels()), (ta.clone(), tb.clone()));

        // The NSC's CNF: slave on the socket A answered with, inside its own namespace.
        let socket = answer.mechanism.as_ref().unwrap().parameters["socketfile"].clone();
        let source = memif_source(&traffic, &nsc, &socket, FRAMES, "20k");
        let sent = source.wait();
        assert!(sent.status.success(), "the NSC's traffic failed: {sent:?}");
        let received = sink.wait();
        let (tx, rx) = (traffic_report(&sent), traffic_report(&received));
        let client_port = format!("nsm-{id}-client");
        let (a_client, a_up) = (a.stats(&client_port), a.stats("uplink"));
        let (b_up, b_endpoint) = (b.stats("uplink"), b.stats(&endpoint_port));
        let why = format!("NSC: {tx}\nNSE: {rx}\nA:\n{}\nB:\n{}", a.table(), b.table());
        // Every frame is counted at each step: the NSC sent them all, A received them all and
        // sent each one, encapsulated, on its uplink; B received them on its uplink and put on
        // the NSE's ring what reached the NSE, once, in order and intact.
        assert_eq!(tx["sent"], FRAMES, "{why}");
        assert_eq!(a_client.rx_packets, FRAMES, "{why}");
        assert!(a_up.tx_packets >= FRAMES, "{why}");
        // A UDP GSO super-frame is one received frame holding several datagrams.
        let b_up_datagrams =
            b_up.rx_packets - detail(&b_up, "rx-gso-frames") + detail(&b_up, "rx-gso-segments");
        assert!(b_up_datagrams >= b_endpoint.tx_packets, "{why}");
        assert_eq!(rx["unique"], b_endpoint.tx_packets, "{why}");
        assert_eq!(rx["received"], rx["unique"], "{why}");
        for k in ["duplicated", "reordered", "corrupted", "foreign"] {
            assert_eq!(rx[k], 0, "{k}: {why}");
        }
        assert!(b_endpoint.tx_packets > FRAMES / 2, "{why}");
        Some(TwoNodes {
            client,
            server_a,
            server_b,
            nsmgr,
            endpoint,
            a,
            b,
            id,
            answer: again,
            b_listen,
            _namespaces: [nsc, nse, node_a, node_b],
            _dir: dir,
        })
    }

    /// Nothing is left on either forwarder but its uplink: no tunnel, port, cross-connect or
    /// connection (VNI included).
    fn assert_both_clean(&self) {
        for (n, node, server) in [
            ("A", &self.a, &self.server_a),
            ("B", &self.b, &self.server_b),
        ] {
            assert!(node.tunnels().is_empty(), "{n}: no tunnel left");
            assert_eq!(node.port_names(), vec!["uplink".to_string()], "{n}");
            assert_eq!(server.core().connection_count(), 0, "{n}: connections left");
            let listed = server.core().summaries();
            assert!(listed.is_empty(), "{n}: still lists {listed:?}");
        }
        assert!(self.a.fwd().owned_by(&self.id).is_empty());
    }

    /// Stops both servers and forwarders (every buffer back).
    fn finish(self) {
        let TwoNodes {
            client,
            server_a,
            server_b,
            a,
            b,
            ..
        } = self;
        drop(client);
        drop(server_a);
        drop(server_b);
        a.0.stop();
        b.0.stop();
    }
}

/// Each test builds namespaces, veths and forwarders named after the process: they run one at a time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn frames_cross_two_forwarders_over_vxlan_and_close_cleans_both() {
    let _one = one_at_a_time();
    let Some(mut t) = TwoNodes::with_traffic("frames_cross_two_forwarders_over_vxlan") else {
        return;
    };
    // Close through A: A closes toward the nsmgrs, B toward the NSE; nothing is left on
    // either forwarder but its uplink.
    t.client.close(t.answer.clone()).unwrap();
    assert_eq!(t.nsmgr.log().closes.len(), 1, "A closed toward the nsmgrs");
    assert_eq!(t.endpoint.log().closes.len(), 1, "B closed toward the NSE");
    t.assert_both_clean();
    t.finish();
}

#[test]
fn close_at_b_reaches_a_through_its_watch_and_cleans_both() {
    let _one = one_at_a_time();
    let Some(mut t) = TwoNodes::with_traffic("close_at_b_reaches_a_through_its_watch") else {
        return;
    };
    // A watches its next hop (through the nsmgrs) for this connection: its own segment.
    let a_own = t.answer.path.as_ref().unwrap().path_segments[1].clone();
    assert_eq!(a_own.name, "forwarder-a");
    // One watch per generation: the refresh's replaced the Request's. Once the first is gone
    // (read first), the one stream open is the refresh's.
    wait_for("A's watch of B to be open", 60, || {
        let s = t.server_a.core().next_hop_stats();
        s.watches == 1 && t.server_a.core().next_hop_stats().streaming == 1
    });
    let selectors = t.nsmgr.log().monitors;
    assert_eq!(selectors.len(), 2, "{selectors:?}");
    for s in &selectors {
        let watched: Vec<(&str, &str)> = s
            .path_segments
            .iter()
            .map(|p| (p.name.as_str(), p.id.as_str()))
            .collect();
        assert_eq!(watched, [(a_own.name.as_str(), a_own.id.as_str())]);
    }
    // The NSC's view of A: its MonitorConnections, from the NSC's segment on.
    let mut events = t
        .client
        .monitor(MonitorScopeSelector {
            path_segments: vec![PathSegment {
                name: "nsc".into(),
                id: t.id.clone(),
                ..Default::default()
            }],
            network_services: vec![],
        })
        .unwrap();
    let initial = t
        .client
        .next_event(&mut events, Duration::from_secs(60))
        .unwrap()
        .expect("the initial state");
    assert_eq!(
        initial.connections.keys().collect::<Vec<_>>(),
        [&a_own.id],
        "{initial:?}"
    );

    // B's nsmgr closes the connection at B (as when the NSE's side goes away): the connection
    // as B got it, A's segment current.
    let at_b = t
        .nsmgr
        .log()
        .requests
        .last()
        .unwrap()
        .connection
        .clone()
        .unwrap();
    BlockingClient::connect(&t.b_listen)
        .unwrap()
        .close(at_b)
        .unwrap();
    assert_eq!(t.endpoint.log().closes.len(), 1, "B closed toward the NSE");
    // A learns it from its watch: it removes everything and tells the NSC's side DELETE.
    let deleted = loop {
        let ev = t
            .client
            .next_event(&mut events, Duration::from_secs(60))
            .unwrap()
            .expect("A published the connection deleted");
        if ev.r#type == ConnectionEventType::Delete as i32 {
            break ev;
        }
    };
    assert_eq!(deleted.connections.keys().collect::<Vec<_>>(), [&a_own.id]);
    wait_for("A to remove the connection", 60, || {
        t.server_a.core().connection_count() == 0
    });
    t.assert_both_clean();
    assert!(
        t.nsmgr.log().closes.is_empty(),
        "A sent no Close toward a next hop that closed already"
    );
    for server in [&t.server_a, &t.server_b] {
        wait_for("the watches to end", 60, || {
            server.core().next_hop_stats().watches == 0
        });
    }
    t.finish();
}

/// The forwarder's tunnel API on its own (no root needed): every refusal is clear and leaves
/// nothing; an owner's tunnel and its cross-connect go with the owner.
#[test]
fn tunnel_refusals_change_nothing_and_owners_remove_their_tunnels() {
    let _one = one_at_a_time();
    let dir = TempDir::new("vxlan-api");
    let cfg = Config::parse(&format!(
        r#"
[buffers]
hugepages = "never"
[[port]]
name = "m0"
type = "memif"
role = "master"
socket = "{}"
[[address]]
port = "m0"
ip = "10.9.0.1/24"
[[address]]
port = "m0"
ip = "2001:db8:9::1/64"
"#,
        dir.join("m0.sock").display()
    ))
    .unwrap();
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 4096,
        hugepages: HugepagePolicy::Never,
        ..BufferPoolConfig::default()
    })
    .unwrap();
    let workers = WorkerConfig {
        cores: vec![0],
        idle: IdlePolicy::ADAPTIVE,
    };
    let mut f = Forwarder::start(&cfg, &workers, pool).unwrap();
    let (local, remote): (IpAddr, IpAddr) = (
        Ipv4Addr::new(10, 9, 0, 1).into(),
        Ipv4Addr::new(10, 9, 0, 2).into(),
    );
    let (local6, remote6): (IpAddr, IpAddr) = (
        "2001:db8:9::1".parse().unwrap(),
        "2001:db8:9::2".parse().unwrap(),
    );
    use quiver::ForwarderError as E;
    let refusals = [
        (
            f.add_vxlan_tunnel(
                "t0",
                Ipv4Addr::new(10, 9, 0, 7).into(),
                remote,
                5,
                4789,
                None,
            ),
            "not an address of Quiver's",
        ),
        (
            f.add_vxlan_tunnel(
                "t0",
                "2001:db8:9::7".parse().unwrap(),
                remote6,
                5,
                4789,
                None,
            ),
            "not an address of Quiver's",
        ),
        (
            f.add_vxlan_tunnel("t0", local6, remote, 5, 4789, None),
            "not of one family",
        ),
        (
            f.add_vxlan_tunnel("t0", local6, "ff0e::1".parse().unwrap(), 5, 4789, None),
            "remote VTEP",
        ),
        (
            f.add_vxlan_tunnel("t0", local, remote, 1 << 24, 4789, None),
            "VNI",
        ),
        (
            f.add_vxlan_tunnel(
                "t0",
                local,
                Ipv4Addr::new(239, 0, 0, 1).into(),
                5,
                4789,
                None,
            ),
            "remote VTEP",
        ),
        (
            f.add_vxlan_tunnel("t0", local, remote, 5, 0, None),
            "port 0",
        ),
        (f.add_vxlan_tunnel("", local, remote, 5, 4789, None), "name"),
    ];
    for (r, says) in refusals {
        match r {
            Err(E::InvalidArgument(m)) => assert!(m.contains(says), "{m}"),
            other => panic!("expected InvalidArgument ({says}), got {other:?}"),
        }
    }
    assert!(matches!(
        f.add_vxlan_tunnel("m0", local, remote, 5, 4789, None),
        Err(E::AlreadyExists(_))
    ));
    assert!(f.tunnels().is_empty(), "no refusal left a tunnel");

    f.add_vxlan_tunnel("t0", local, remote, 5, 4789, Some("c1"))
        .unwrap();
    assert!(matches!(
        f.add_vxlan_tunnel("t1", local, remote, 5, 4789, None),
        Err(E::AlreadyExists(_))
    ));
    f.cross_connect("m0", "t0", Some("c1")).unwrap();
    assert_eq!(f.owned_by("c1").len(), 2);
    assert_eq!(f.remove_owned("c1").unwrap(), 2);
    assert!(f.tunnels().is_empty());
    // m0 is free again: the cross-connect went with the tunnel.
    f.add_vxlan_tunnel("t2", local, remote, 6, 4789, None)
        .unwrap();
    f.cross_connect("t2", "m0", None).unwrap();
    assert!(matches!(f.remove_vxlan_tunnel("nope"), Err(E::NotFound(_))));
    f.remove_vxlan_tunnel("t2").unwrap();
    assert!(f.tunnels().is_empty());
    // Over IPv6 likewise, and the same VNI to the same remote only once.
    f.add_vxlan_tunnel("t6", local6, remote6, 5, 4789, None)
        .unwrap();
    assert!(matches!(
        f.add_vxlan_tunnel("t7", local6, remote6, 5, 4789, None),
        Err(E::AlreadyExists(_))
    ));
    assert_eq!(f.tunnels()[0].remote, remote6);
    f.cross_connect("t6", "m0", None).unwrap();
    f.remove_vxlan_tunnel("t6").unwrap();
    assert!(f.tunnels().is_empty());
    f.stop();
}

/// Counter `name` of a port's details (0 when it has none).
fn detail(stats: &drivers::PortStats, name: &str) -> u64 {
    stats
        .detail
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, v)| *v)
}
