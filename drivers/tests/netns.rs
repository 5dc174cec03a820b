//! Network namespaces and NSM's KERNEL mechanism against the Linux kernel: veth pairs made over
//! netlink into namespaces made with iproute2, checked with `ip -j` and the kernel's own ping,
//! and memif control sockets that live inside a namespace.
//!
//! Quiver's side of each kernel-interface test runs inside a namespace of its own (through
//! `NetNs::run`), standing for the host: `remove_orphans` and `list_owned` then see only this
//! test's interfaces, whatever else runs on the machine, and deleting that namespace cleans up
//! whatever a failed test left.
//!
//! Needs root, `ip`, `ping` and `ethtool`; without them each test prints why and passes, unless
//! `QUIVER_REQUIRE_SYSTEM_TESTS=1`.

mod common;

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use drivers::kernel_interface::{
    list_owned, remove_orphans, KernelInterface, KernelInterfaceConfig, KernelInterfaceError,
    NeighborConfig, PolicyConfig, RouteConfig, RULE_PROTOCOL,
};
use drivers::memif_port::{MemifControl, MemifPortConfig};
use drivers::netns::{NetNs, NetNsError};
use drivers::{LinkStatus, Port};
use memif::socket::ControlSocket;
use memif::{InterfaceConfig, Master, MasterConfig, Role, Slave, SocketAddress};
use nix::errno::Errno::EINVAL;
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(20);

fn ready(test: &str) -> bool {
    if !system_ready(test) {
        return false;
    }
    if Command::new("ethtool").arg("--version").output().is_err() {
        return testkit::require(
            test,
            &testkit::Needs {
                tools: &["/usr/sbin/ethtool"],
                ..Default::default()
            },
        );
    }
    true
}

/// The namespace `ns` as Quiver sees it: NSM's `file://` form of its path.
fn open(ns: &Netns) -> NetNs {
    NetNs::open(&format!("file:///run/netns/{}", ns.name)).expect("the test namespace opens")
}

/// Runs `f` on a thread inside `ns` (Quiver's side of a test, in a namespace of its own).
fn in_namespace<T: Send>(ns: &Netns, f: impl FnOnce() -> T + Send) -> T {
    open(ns).run(f).expect("a thread enters the namespace")
}

/// `ip -j <args>` in the calling thread's namespace, parsed.
fn ip_json(args: &[&str]) -> Value {
    let mut v = vec!["ip", "-j"];
    v.extend_from_slice(args);
    let out = run(&v);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{v:?}: {e}"))
}

/// `ip -j -n <ns> <args>`, parsed.
fn ns_json(ns: &Netns, args: &[&str]) -> Value {
    let mut v = vec!["-n", ns.name.as_str()];
    v.extend_from_slice(args);
    ip_json(&v)
}

/// Names of the links in the calling thread's namespace (`ns`: in that one instead).
fn links(ns: Option<&Netns>) -> Vec<String> {
    let v = match ns {
        Some(ns) => ns_json(ns, &["link", "show"]),
        None => ip_json(&["link", "show"]),
    };
    v.as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect()
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

fn config(connection_id: &str, name: &str) -> KernelInterfaceConfig {
    KernelInterfaceConfig {
        connection_id: connection_id.into(),
        name: name.into(),
        mtu: 1400,
        addresses: vec!["10.60.0.2/24".into()],
        routes: vec![
            RouteConfig {
                prefix: "10.61.0.0/16".into(),
                next_hop: Some("10.60.0.1".into()),
            },
            RouteConfig {
                prefix: "10.62.0.7/24".into(), // host bits set: applied as 10.62.0.0/24
                next_hop: None,
            },
        ],
        neighbors: vec![NeighborConfig {
            ip: "10.60.0.9".into(),
            mac: "02:00:00:00:00:09".into(),
        }],
        peer_addresses: Vec::new(),
        policies: Vec::new(),
        alias: String::new(),
    }
}

#[test]
fn kernel_interface_is_configured_carries_ping_and_is_deleted_whole() {
    if !ready("kernel_interface_is_configured_carries_ping_and_is_deleted_whole") {
        return;
    }
    let (host, client) = (Netns::new(), Netns::new());
    let client_ns = open(&client);
    in_namespace(&host, || {
        let id = unique("conn-ping-");
        let iface = KernelInterface::create(&client_ns, &config(&id, "nsm0")).expect("create");
        assert_eq!(iface.name(), "nsm0");
        assert_eq!(iface.connection_id(), id);
        let host_end = iface.host_name().to_string();
        assert!(host_end.len() <= 15);

        // Quiver's end, in Quiver's namespace: tagged, the MTU, no IPv6 address.
        let l = &ip_json(&["-d", "link", "show", &host_end])[0];
        assert_eq!(str_of(l, "ifalias"), format!("quiver:{id}"));
        assert_eq!(l["mtu"], 1400);
        assert_eq!(l["linkinfo"]["info_kind"], "veth");
        assert!(ip_json(&["addr", "show", "dev", &host_end])[0]["addr_info"]
            .as_array()
            .unwrap()
            .is_empty());
        assert_eq!(
            list_owned()
                .unwrap()
                .iter()
                .map(|o| &o.connection_id)
                .collect::<Vec<_>>(),
            [&id]
        );

        // The client's end, in its namespace, with everything of the IP context.
        let l = &ns_json(&client, &["link", "show", "nsm0"])[0];
        assert_eq!(str_of(l, "ifalias"), format!("quiver:{id}"));
        assert_eq!(l["mtu"], 1400);
        assert!(
            l["flags"].as_array().unwrap().iter().any(|f| f == "UP"),
            "{l}"
        );
        let addrs = &ns_json(&client, &["-4", "addr", "show", "dev", "nsm0"])[0]["addr_info"];
        assert_eq!(addrs.as_array().unwrap().len(), 1, "{addrs}");
        assert_eq!(addrs[0]["local"], "10.60.0.2");
        assert_eq!(addrs[0]["prefixlen"], 24);
        assert_eq!(addrs[0]["broadcast"], "10.60.0.255");
        let routes = ns_json(&client, &["-4", "route", "show", "dev", "nsm0"]);
        let route = |dst: &str| {
            routes
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["dst"] == dst)
                .unwrap_or_else(|| panic!("no route to {dst}: {routes}"))
                .clone()
        };
        assert_eq!(route("10.61.0.0/16")["gateway"], "10.60.0.1");
        assert_eq!(route("10.62.0.0/24")["scope"], "link");
        assert_eq!(route("10.62.0.0/24")["gateway"], Value::Null);
        let neigh = ns_json(&client, &["neigh", "show", "dev", "nsm0"]);
        let n = neigh
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["dst"] == "10.60.0.9")
            .unwrap_or_else(|| panic!("no neighbour 10.60.0.9: {neigh}"));
        assert_eq!(n["lladdr"], "02:00:00:00:00:09");
        assert_eq!(n["state"][0], "PERMANENT");
        // The client keeps its offloads: Quiver's port takes partial checksums and
        // super-frames (issue 24).
        let k = String::from_utf8_lossy(&client.sh("ethtool -k nsm0").stdout).into_owned();
        assert!(k.contains("tx-checksumming: on"), "{k}");
        assert!(k.contains("tx-tcp-segmentation: on"), "{k}");

        // Quiver's end as an AF_PACKET port, Quiver answering for 10.60.0.1.
        let mut fwd = forwarding();
        let port = af_packet_port(&mut fwd, &host_end, 1);
        assert_eq!(port.0.mac(), iface.host_mac());
        wait_until("Quiver's end to be up", DEADLINE, || match port.0.link() {
            LinkStatus::Up => Ok(()),
            down => Err(format!("{down:?}")),
        });
        fwd.add_address(port.1, u32::from(std::net::Ipv4Addr::new(10, 60, 0, 1)), 24)
            .unwrap();
        let quiver = Quiver::start(fwd, std::slice::from_ref(&port), &[0]);
        // The first echoes may go while the client resolves 10.60.0.1; then every one is
        // answered.
        client.ping("10.60.0.1", DEADLINE);
        let out = client.ping("10.60.0.1", DEADLINE);
        assert!(out.contains("3 received"), "{out}");
        let (sent, _) = wait_counters_match(&client, "nsm0", &*port.0);
        assert!(sent >= 4, "an ARP request and 3 echo requests at least");
        drop(quiver);
        drop(port);

        iface.delete().expect("delete");
        assert!(!links(None).contains(&host_end), "{:?}", links(None));
        assert!(!links(Some(&client)).contains(&"nsm0".to_string()));
        assert!(list_owned().unwrap().is_empty());
        let routes = ns_json(&client, &["-4", "route", "show"]);
        assert!(!routes.to_string().contains("10.61.0.0"), "{routes}");
    });
}

#[test]
fn orphans_are_removed_and_owned_interfaces_kept() {
    if !ready("orphans_are_removed_and_owned_interfaces_kept") {
        return;
    }
    let (host, client) = (Netns::new(), Netns::new());
    let client_ns = open(&client);
    in_namespace(&host, || {
        let (live, dead) = (unique("conn-live-"), unique("conn-dead-"));
        let kept = KernelInterface::create(&client_ns, &config(&live, "live0")).unwrap();
        // A previous run's interface: its record is gone, the kernel still has it.
        let mut c = config(&dead, "dead0");
        c.addresses = vec!["10.70.0.2/24".into()];
        c.routes.clear();
        let orphan = KernelInterface::create(&client_ns, &c).unwrap();
        let orphan_end = orphan.host_name().to_string();
        drop(orphan);
        // And a veth Quiver did not make.
        run(&[
            "ip", "link", "add", "other0", "type", "veth", "peer", "name", "other1",
        ]);
        let mut owned: Vec<String> = list_owned()
            .unwrap()
            .into_iter()
            .map(|o| o.connection_id)
            .collect();
        owned.sort();
        let mut expected = vec![live.clone(), dead.clone()];
        expected.sort();
        assert_eq!(owned, expected);

        let removed = remove_orphans(&HashSet::from([live.clone()])).unwrap();
        assert_eq!(removed.len(), 1, "{removed:?}");
        assert_eq!(removed[0].connection_id, dead);
        assert_eq!(removed[0].name, orphan_end);
        let host_links = links(None);
        assert!(!host_links.contains(&orphan_end), "{host_links:?}");
        assert!(host_links.contains(&kept.host_name().to_string()));
        assert!(
            host_links.contains(&"other0".to_string()),
            "not ours: left alone"
        );
        let client_links = links(Some(&client));
        assert!(
            !client_links.contains(&"dead0".to_string()),
            "{client_links:?}"
        );
        assert!(client_links.contains(&"live0".to_string()));
        assert_eq!(list_owned().unwrap().len(), 1);
        // Nothing left to remove; the live one is still there.
        assert!(remove_orphans(&HashSet::from([live.clone()]))
            .unwrap()
            .is_empty());
        // With no live connection at all, everything of ours goes.
        assert_eq!(remove_orphans(&HashSet::new()).unwrap().len(), 1);
        assert!(list_owned().unwrap().is_empty());
        assert!(!links(Some(&client)).contains(&"live0".to_string()));
        assert!(links(None).contains(&"other0".to_string()));
        assert!(!drivers::kernel_interface::delete_for_connection(&live).unwrap());
    });
}

/// The IPv4 rules of `ns` as `ip -j rule` lists them: (protocol, table) of each one that is not
/// the kernel's own (local, main, default), sorted.
fn rules(ns: &Netns) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = ns_json(ns, &["-4", "rule", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !["local", "main", "default"].contains(&str_of(r, "table")))
        .map(|r| {
            let proto = match &r["protocol"] {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => String::new(),
            };
            (proto, str_of(r, "table").to_string())
        })
        .collect();
    v.sort();
    v
}

/// `config` with one policy: UDP from 10.60.0.2 to ports 7000-7010 through table routes to
/// 10.99.0.0/16 via 10.60.0.1.
fn with_policy(mut c: KernelInterfaceConfig) -> KernelInterfaceConfig {
    c.policies = vec![PolicyConfig {
        from: "10.60.0.2/32".into(),
        proto: "udp".into(),
        dst_port: "7000-7010".into(),
        routes: vec![RouteConfig {
            prefix: "10.99.0.0/16".into(),
            next_hop: Some("10.60.0.1".into()),
        }],
        ..PolicyConfig::default()
    }];
    c
}

/// A Quiver killed before its Close leaves its policy rules in the pod's namespace: its veth
/// goes when the next Quiver reaps it (the rule's table routes then nothing), the rule stays.
/// The next interface Quiver makes there removes such rules of its own, and only those.
#[test]
fn rules_a_killed_quiver_left_go_with_the_next_interface_made_there() {
    if !ready("rules_a_killed_quiver_left_go_with_the_next_interface_made_there") {
        return;
    }
    let (host, client) = (Netns::new(), Netns::new());
    let client_ns = open(&client);
    let ours = RULE_PROTOCOL.to_string();
    // Someone else's rule, to a table with no route: not Quiver's, left alone.
    run(&[
        "ip",
        "-n",
        &client.name,
        "rule",
        "add",
        "from",
        "10.1.2.3",
        "lookup",
        "200",
    ]);
    in_namespace(&host, || {
        let dead = unique("conn-dead-");
        let killed =
            KernelInterface::create(&client_ns, &with_policy(config(&dead, "pol0"))).unwrap();
        assert_eq!(
            rules(&client),
            vec![
                ("".to_string(), "200".to_string()),
                (ours.clone(), "1".into())
            ]
        );
        // Killed: nothing of it is removed, then the next Quiver reaps its veth.
        std::mem::forget(killed);
        assert_eq!(remove_orphans(&HashSet::new()).unwrap().len(), 1);
        assert!(!links(Some(&client)).contains(&"pol0".to_string()));
        assert_eq!(rules(&client).len(), 2, "the rule outlived its interface");

        // The connection healed: a new interface, the same policy.
        let healed = unique("conn-healed-");
        let mut c = with_policy(config(&healed, "pol1"));
        c.addresses = vec!["10.60.0.2/24".into()];
        let kept = KernelInterface::create(&client_ns, &c).unwrap();
        assert_eq!(
            rules(&client),
            vec![
                ("".to_string(), "200".to_string()),
                (ours.clone(), "1".into())
            ],
            "the orphan went, the new rule took its free table"
        );
        // A live interface's rule stays when another interface is made there.
        let mut other = with_policy(config(&unique("conn-other-"), "pol2"));
        other.addresses = vec!["10.65.0.2/24".into()];
        other.routes.clear();
        other.neighbors.clear();
        other.policies[0].from = "10.65.0.2/32".into();
        other.policies[0].routes[0].next_hop = Some("10.65.0.1".into());
        let second = KernelInterface::create(&client_ns, &other).unwrap();
        assert_eq!(rules(&client).len(), 3, "{:?}", rules(&client));
        second.delete().unwrap();
        kept.delete().unwrap();
        assert_eq!(rules(&client), vec![("".to_string(), "200".to_string())]);
    });
}

#[test]
fn bad_requests_get_their_error_and_leave_nothing_behind() {
    if !ready("bad_requests_get_their_error_and_leave_nothing_behind") {
        return;
    }
    let (host, client) = (Netns::new(), Netns::new());
    let client_ns = open(&client);
    in_namespace(&host, || {
        // What a fresh namespace has (lo, and fallback tunnels if their modules are loaded).
        let (host_before, client_before) = (links(None), links(Some(&client)));
        let nothing_left = |what: &str| {
            assert_eq!(links(None), host_before, "{what}: Quiver's namespace");
            assert_eq!(
                links(Some(&client)),
                client_before,
                "{what}: the client's namespace"
            );
            assert!(list_owned().unwrap().is_empty(), "{what}");
        };
        let id = unique("conn-bad-");

        let e = KernelInterface::create(&client_ns, &config(&id, "sixteen-chars-xx")).unwrap_err();
        assert!(matches!(e, KernelInterfaceError::InvalidName { .. }), "{e}");
        nothing_left("a 16-byte name");

        let e: KernelInterfaceError = NetNs::open("file:///run/netns/quiver-no-such-namespace")
            .unwrap_err()
            .into();
        assert!(
            matches!(
                e,
                KernelInterfaceError::NamespaceNotFound(NetNsError::NotFound { .. })
            ),
            "{e}"
        );
        let e: KernelInterfaceError = NetNs::open("inode://4/4026531992").unwrap_err().into();
        assert!(
            matches!(e, KernelInterfaceError::NamespaceNotFound(_)),
            "{e}"
        );

        for (field, bad) in [
            ("address", "10.60.0.300/24"),
            ("address", "10.60.0.2"),
            ("route", "10.61.0.0/40"),
        ] {
            let mut c = config(&id, "nsm0");
            if field == "address" {
                c.addresses = vec![bad.into()];
            } else {
                c.routes[0].prefix = bad.into();
            }
            let e = KernelInterface::create(&client_ns, &c).unwrap_err();
            assert!(
                matches!(&e, KernelInterfaceError::InvalidAddress { value, .. } if value == bad),
                "{bad}: {e}"
            );
            nothing_left(bad);
        }
        let mut c = config(&id, "nsm0");
        c.neighbors[0].mac = "02:00:00:00:00".into();
        let e = KernelInterface::create(&client_ns, &c).unwrap_err();
        assert!(
            matches!(e, KernelInterfaceError::InvalidAddress { .. }),
            "{e}"
        );
        nothing_left("a bad MAC");

        // A name the namespace already has.
        let e = KernelInterface::create(&client_ns, &config(&id, "lo")).unwrap_err();
        assert!(matches!(e, KernelInterfaceError::AlreadyExists(_)), "{e}");
        nothing_left("an existing name");

        // The kernel refuses a step midway (a multicast gateway: on-link, as every gateway
        // is, it must still be a unicast address): rolled back.
        let mut c = config(&id, "nsm0");
        c.routes[0].next_hop = Some("224.0.0.1".into());
        let e = KernelInterface::create(&client_ns, &c).unwrap_err();
        assert!(
            matches!(e, KernelInterfaceError::Netlink { source, .. } if source == EINVAL),
            "{e}"
        );
        nothing_left("a route the kernel refuses");

        // The same connection twice: the second is refused, the first untouched.
        let first = KernelInterface::create(&client_ns, &config(&id, "nsm0")).unwrap();
        let e = KernelInterface::create(&client_ns, &config(&id, "nsm1")).unwrap_err();
        assert!(matches!(e, KernelInterfaceError::AlreadyExists(_)), "{e}");
        assert_eq!(links(Some(&client)).len(), client_before.len() + 1);
        assert!(links(Some(&client)).contains(&"nsm0".to_string()));
        assert_eq!(links(None).len(), host_before.len() + 1);
        assert!(links(None).contains(&first.host_name().to_string()));
        first.delete().unwrap();
        nothing_left("after delete");
    });
}

fn memif_socket(test: &str) -> SocketAddress {
    SocketAddress::Abstract(
        format!("/quiver-test/{}/{test}/memif.socket", std::process::id()).into_bytes(),
    )
}

#[test]
fn memif_master_socket_in_a_namespace_serves_slaves_there_only() {
    if !ready("memif_master_socket_in_a_namespace_serves_slaves_there_only") {
        return;
    }
    let client = Netns::new();
    let addr = memif_socket("master");
    let control = MemifControl::start(1).unwrap();
    let mut cfg = MemifPortConfig::new("memif-nsc", Role::Master, addr.clone(), 0);
    cfg.netns = Some(open(&client));
    let port = control.add_port(cfg).unwrap();

    // Not from Quiver's own namespace: the abstract name is not there.
    let e = ControlSocket::connect(&addr).unwrap_err();
    assert!(e.to_string().contains("ECONNREFUSED"), "{e}");

    // A CNF in the client's namespace connects, and both ends come up.
    let slave_addr = addr.clone();
    let slave_up = client.run_in(move || {
        let mut slave = Slave::new(slave_addr, InterfaceConfig::new(0)).unwrap();
        let deadline = Instant::now() + DEADLINE;
        while !slave.interface().is_up() && Instant::now() < deadline {
            slave.poll().unwrap();
            if let Some(fd) = slave.control_fd() {
                let mut p = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
                let _ = nix::poll::poll(&mut p, nix::poll::PollTimeout::from(10u8));
            } else {
                std::thread::yield_now();
            }
        }
        let up = slave.interface().is_up();
        // Keep the connection until Quiver's side has seen it.
        (up, slave)
    });
    assert!(slave_up.0, "the slave in the namespace connected");
    wait_until("Quiver's master port to come up", DEADLINE, || {
        match port.link() {
            LinkStatus::Up => Ok(()),
            down => Err(format!("{down:?}")),
        }
    });
    drop(slave_up);
    assert!(control.remove_port("memif-nsc"));
}

#[test]
fn memif_slave_port_connects_to_a_master_in_a_namespace() {
    if !ready("memif_slave_port_connects_to_a_master_in_a_namespace") {
        return;
    }
    let endpoint = Netns::new();
    let endpoint_ns = open(&endpoint);
    let addr = memif_socket("slave");
    // The endpoint's master, its socket bound inside the endpoint's namespace.
    let mut master = Master::from_listener(
        endpoint_ns.listen_memif(&addr).unwrap(),
        addr.clone(),
        MasterConfig::default(),
    );
    master.add_interface(InterfaceConfig::new(7)).unwrap();

    let control = MemifControl::start(1).unwrap();
    // Without the namespace, the same address is not reachable.
    let lost = control
        .add_port(MemifPortConfig::new(
            "memif-host",
            Role::Slave,
            addr.clone(),
            7,
        ))
        .unwrap();
    let mut cfg = MemifPortConfig::new("memif-nse", Role::Slave, addr.clone(), 7);
    cfg.netns = Some(endpoint_ns.clone());
    let port = control.add_port(cfg).unwrap();
    wait_until("the slave port to come up", DEADLINE, || {
        master.poll().unwrap();
        match port.link() {
            LinkStatus::Up => Ok(()),
            down => Err(format!("{down:?}")),
        }
    });
    assert!(master.interface(7).unwrap().is_up());
    assert_eq!(master.interface(7).unwrap().counters().connects, 1);
    wait_until(
        "the slave outside the namespace to be refused",
        DEADLINE,
        || match lost.link() {
            LinkStatus::Down(why) if why.contains("ECONNREFUSED") => Ok(()),
            LinkStatus::Down(why) => Err(why),
            LinkStatus::Up => panic!("a slave outside the namespace reached the master"),
        },
    );
}
