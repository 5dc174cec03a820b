//! AF_XDP ports (issue 24, part 3): Quiver's XDP program on veths, one socket per worker in
//! copy mode, frames copied between the UMEM and Quiver's buffers.
//!
//! Needs root, `ip`, `ethtool` and `/usr/bin/python3`; without them each test prints why and
//! passes, unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`.

mod common;

use std::sync::Arc;

use common::*;
use drivers::af_xdp::{AfXdpConfig, AfXdpPort};

const PYTHON: &str = "/usr/bin/python3";

fn ready(test: &str) -> bool {
    system_ready_with(test, &[PYTHON, "/usr/sbin/ethtool"])
}

fn af_xdp_port(fwd: &mut graph_nodes::Forwarding, config: &AfXdpConfig) -> PortAt {
    let port =
        AfXdpPort::open(config).unwrap_or_else(|e| panic!("AF_XDP on {}: {e}", config.interface));
    add_port(fwd, Arc::new(port), 1500)
}

fn offloads(ns: &Netns, dev: &str) -> String {
    String::from_utf8_lossy(&ns.sh(&format!("ethtool -k {dev}")).stdout).into_owned()
}

#[test]
fn tcp_crosses_an_af_xdp_cross_connect_between_veths_with_default_offloads() {
    let test = "tcp_crosses_an_af_xdp_cross_connect_between_veths_with_default_offloads";
    if !ready(test) {
        return;
    }
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let (v1, v2) = (
        Veth::new(&ns1, "10.0.41.1/24"),
        Veth::new(&ns2, "10.0.41.2/24"),
    );
    for (ns, v) in [(&ns1, &v1), (&ns2, &v2)] {
        let k = offloads(ns, &v.inner);
        assert!(k.contains("tx-checksumming: on"), "default offloads: {k}");
    }
    let mut fwd = forwarding();
    let a = af_xdp_port(&mut fwd, &AfXdpConfig::new(&v1.root, 1));
    let b = af_xdp_port(&mut fwd, &AfXdpConfig::new(&v2.root, 1));
    fwd.cross_connect(a.1, b.1).unwrap();
    let q = Quiver::start(fwd, &[a.clone(), b.clone()], &[0]);

    assert!(
        offloads(&ns1, &v1.inner).contains("tcp-segmentation-offload: off"),
        "while the program is attached natively the namespace's end stops segmentation"
    );
    let (received, sent) = testkit::tcp::transfer(&ns1.name, &ns2.name, "10.0.41.2", 5041, 8);
    assert_eq!(received, sent, "every byte arrived, in order");
    assert!(sent.starts_with("8388608 "), "{sent}");
    let (data, acks) = (a.0.stats(), b.0.stats());
    assert!(
        data.rx_packets > 5000,
        "8 MiB in MTU-sized frames: {data:?}"
    );
    assert_eq!(
        data.rx_packets, acks.tx_packets,
        "every frame received was sent"
    );
    assert_eq!(acks.rx_packets, data.tx_packets);
    assert_eq!(data.rx_dropped + acks.rx_dropped, 0);
    // The namespaces' stacks left checksums for offload; Quiver recognised each and filled it
    // in before its AF_XDP egress (which takes no offload work).
    assert!(detail(&*a.0, "rx-checksum-partial") > 5000);
    assert_eq!(
        q.error(graph_nodes::names::OFFLOAD_RESOLVE, "csum-completed"),
        detail(&*a.0, "rx-checksum-partial") + detail(&*b.0, "rx-checksum-partial")
    );

    // The port goes and takes its program with it: the interfaces are as they were.
    drop(q);
    drop((a, b));
    for v in [&v1, &v2] {
        let link =
            String::from_utf8_lossy(&run(&["ip", "link", "show", &v.root]).stdout).into_owned();
        assert!(!link.contains("prog/xdp"), "{link}");
    }
    assert!(offloads(&ns1, &v1.inner).contains("tcp-segmentation-offload: on"));
}

/// Frames a UDP socket in `ns` sends to `to:port`, `count` of them, 100 bytes each.
fn udp_burst(ns: &Netns, to: &str, port: u16, count: u32) {
    let script = format!(
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         for i in range({count}): s.sendto(b'x' * 100, ('{to}', {port}))"
    );
    let out = ns.exec(&[PYTHON, "-c", &script]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn nstat(ns: &Netns, counter: &str) -> u64 {
    let out = ns.sh(&format!("nstat -az {counter}"));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(counter))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {counter}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn an_uplink_port_takes_only_tunnel_traffic_and_the_node_keeps_its_nic() {
    let test = "an_uplink_port_takes_only_tunnel_traffic_and_the_node_keeps_its_nic";
    if !ready(test) {
        return;
    }
    // A "node" namespace whose only NIC is a veth to a peer.
    let (node, peer) = (Netns::new(), Netns::new());
    let v = Veth::new(&peer, "10.0.42.1/24");
    run(&["ip", "link", "set", &v.root, "netns", &node.name]);
    node.ip(&["addr", "add", "10.0.42.2/24", "dev", &v.root]);
    node.ip(&["link", "set", &v.root, "up"]);

    let netns = drivers::netns::NetNs::open_path(std::path::Path::new(&format!(
        "/run/netns/{}",
        node.name
    )))
    .unwrap();
    let config = AfXdpConfig {
        tunnel_ports: vec![4789],
        ..AfXdpConfig::new(&v.root, 1)
    };
    let port = AfXdpPort::open_in(&config, Some(Arc::new(netns))).expect("uplink");
    let mut fwd = forwarding();
    let uplink = add_port(&mut fwd, Arc::new(port), 1500);
    let q = Quiver::start(fwd, std::slice::from_ref(&uplink), &[0]);

    // The node's own traffic: ARP, ping and TCP go to the node's stack as before.
    let ping = peer.ping("10.0.42.2", std::time::Duration::from_secs(5));
    assert!(ping.contains(", 0% packet loss"), "{ping}");
    let (received, sent) = testkit::tcp::transfer(&peer.name, &node.name, "10.0.42.2", 5042, 2);
    assert_eq!(received, sent);
    assert_eq!(uplink.0.stats().rx_packets, 0, "none of it reached Quiver");

    // UDP to the tunnel port goes to Quiver, every datagram, and the node never sees it; UDP
    // to another port is the node's.
    let (kernel_udp, no_port) = (nstat(&node, "UdpInDatagrams"), nstat(&node, "UdpNoPorts"));
    udp_burst(&peer, "10.0.42.2", 4789, 200);
    udp_burst(&peer, "10.0.42.2", 4790, 30);
    wait_until(
        "200 datagrams at Quiver",
        std::time::Duration::from_secs(10),
        || match uplink.0.stats().rx_packets {
            n if n >= 200 => Ok(()),
            n => Err(format!("{n}")),
        },
    );
    wait_until(
        "30 datagrams at the node",
        std::time::Duration::from_secs(10),
        || match nstat(&node, "UdpNoPorts") {
            n if n >= no_port + 30 => Ok(()),
            n => Err(format!("{n}")),
        },
    );
    assert_eq!(uplink.0.stats().rx_packets, 200);
    assert_eq!(nstat(&node, "UdpNoPorts"), no_port + 30);
    assert_eq!(nstat(&node, "UdpInDatagrams"), kernel_udp);
    drop(q);
}
