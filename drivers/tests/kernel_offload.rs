//! TCP through AF_PACKET ports whose peers keep the kernel's default offloads (issue 24): the
//! namespaces' veths hand over frames with their TCP checksum still to fill in and as GSO
//! super-frames up to 64 KiB. Quiver keeps that work on the buffers (virtio-net headers) and
//! gives it back to the kernel on an AF_PACKET egress, or does it in software toward a port
//! that does not take it. A real transfer of a few MB is checked for content at the far end.
//!
//! Needs root, `ip`, `ethtool` and `/usr/bin/python3`; without them each test prints why and
//! passes, unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`.

mod common;

use std::sync::Arc;

use common::*;
use drivers::af_packet::{AfPacketConfig, AfPacketPort};
use graph_nodes::names;

const PYTHON: &str = "/usr/bin/python3";

fn ready(test: &str) -> bool {
    system_ready_with(test, &[PYTHON, "/usr/sbin/ethtool"])
}

/// Sends `mib` MiB from `from` to a server at `to_addr` in `to` (see `testkit::tcp`).
fn transfer(from: &Netns, to: &Netns, to_addr: &str, mib: u32) -> (String, String) {
    testkit::tcp::transfer(&from.name, &to.name, to_addr, 5001, mib)
}

fn offloads(ns: &Netns, dev: &str) -> String {
    String::from_utf8_lossy(&ns.sh(&format!("ethtool -k {dev}")).stdout).into_owned()
}

#[test]
fn tcp_crosses_an_af_packet_cross_connect_between_veths_with_default_offloads() {
    if !ready("tcp_crosses_an_af_packet_cross_connect_between_veths_with_default_offloads") {
        return;
    }
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let (v1, v2) = (
        Veth::new(&ns1, "10.0.24.1/24"),
        Veth::new(&ns2, "10.0.24.2/24"),
    );
    for (ns, v) in [(&ns1, &v1), (&ns2, &v2)] {
        let k = offloads(ns, &v.inner);
        assert!(k.contains("tx-checksumming: on"), "default offloads: {k}");
        assert!(k.contains("tcp-segmentation-offload: on"), "{k}");
    }
    let mut fwd = forwarding();
    let a = af_packet_port(&mut fwd, &v1.root, 1);
    let b = af_packet_port(&mut fwd, &v2.root, 1);
    fwd.cross_connect(a.1, b.1).unwrap();
    let q = Quiver::start(fwd, &[a.clone(), b.clone()], &[0]);

    let (received, sent) = transfer(&ns1, &ns2, "10.0.24.2", 8);
    assert_eq!(received, sent, "every byte arrived, in order");
    assert!(sent.starts_with("8388608 "), "{sent}");

    assert!(detail(&*a.0, "rx-checksum-partial") > 0);
    assert!(
        detail(&*a.0, "rx-gso-frames") > 0,
        "super-frames came in whole"
    );
    assert!(detail(&*b.0, "tx-gso-frames") > 0, "and left whole");
    for p in [&a, &b] {
        assert_eq!(detail(&*p.0, "rx-bad-vnet-hdr"), 0);
        assert_eq!(detail(&*p.0, "tx-too-long"), 0);
    }
    assert_eq!(
        q.error(names::OFFLOAD_RESOLVE, "gso-segmented"),
        0,
        "the kernel segments, not Quiver"
    );
}

#[test]
fn super_frames_toward_a_port_without_offloads_are_segmented_in_software() {
    if !ready("super_frames_toward_a_port_without_offloads_are_segmented_in_software") {
        return;
    }
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let (v1, v2) = (
        Veth::new(&ns1, "10.0.25.1/24"),
        Veth::new(&ns2, "10.0.25.2/24"),
    );
    // The far side takes no offloads: its port has no virtio-net headers, its peer sends
    // complete frames.
    ns2.sh(&format!("ethtool -K {} tx off", v2.inner));
    let mut fwd = forwarding();
    let a = af_packet_port(&mut fwd, &v1.root, 1);
    let plain = AfPacketConfig {
        offload: false,
        ..AfPacketConfig::new(&v2.root, 1)
    };
    let port = AfPacketPort::open(&plain).expect("AF_PACKET without offloads");
    let mtu = port.mtu() as u16;
    let b = add_port(&mut fwd, Arc::new(port), mtu);
    fwd.cross_connect(a.1, b.1).unwrap();
    let q = Quiver::start(fwd, &[a.clone(), b.clone()], &[0]);

    let (received, sent) = transfer(&ns1, &ns2, "10.0.25.2", 4);
    assert_eq!(received, sent, "every byte arrived, in order");
    assert!(sent.starts_with("4194304 "), "{sent}");

    let segmented = q.error(names::OFFLOAD_RESOLVE, "gso-segmented");
    let segments = q.error(names::OFFLOAD_RESOLVE, "gso-segments");
    assert!(segmented > 0, "super-frames were cut in software");
    assert!(segments > segmented, "{segments} segments of {segmented}");
    assert!(
        q.error(names::OFFLOAD_RESOLVE, "csum-completed") > 0,
        "ACKs and the like"
    );
    assert_eq!(q.error(names::OFFLOAD_RESOLVE, "bad-offload"), 0);
    assert_eq!(detail(&*b.0, "tx-too-long"), 0, "segments fit the MTU");
    assert_eq!(detail(&*b.0, "rx-too-long"), 0);
}

#[test]
fn tcp_is_routed_between_veths_with_default_offloads_and_jumbo_frames() {
    if !ready("tcp_is_routed_between_veths_with_default_offloads_and_jumbo_frames") {
        return;
    }
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let (v1, v2) = (
        Veth::new(&ns1, "10.0.27.2/24"),
        Veth::new(&ns2, "10.0.28.2/24"),
    );
    // Jumbo frames: segments of 9000 bytes span several buffers.
    for (ns, v) in [(&ns1, &v1), (&ns2, &v2)] {
        run(&["ip", "link", "set", &v.root, "mtu", "9000"]);
        ns.ip(&["link", "set", &v.inner, "mtu", "9000"]);
    }
    ns1.ip(&["route", "add", "default", "via", "10.0.27.1"]);
    ns2.ip(&["route", "add", "default", "via", "10.0.28.1"]);
    let mut fwd = forwarding();
    let a = af_packet_port(&mut fwd, &v1.root, 1);
    let b = af_packet_port(&mut fwd, &v2.root, 1);
    fwd.add_address(a.1, u32::from(std::net::Ipv4Addr::new(10, 0, 27, 1)), 24)
        .unwrap();
    fwd.add_address(b.1, u32::from(std::net::Ipv4Addr::new(10, 0, 28, 1)), 24)
        .unwrap();
    let q = Quiver::start(fwd, &[a.clone(), b.clone()], &[0]);
    // ARP both ways before the transfer.
    ns1.ping("10.0.28.2", std::time::Duration::from_secs(20));

    let (received, sent) = transfer(&ns1, &ns2, "10.0.28.2", 4);
    assert_eq!(received, sent, "every byte arrived, in order");
    assert!(sent.starts_with("4194304 "), "{sent}");
    assert!(detail(&*a.0, "rx-gso-frames") > 0);
    assert!(
        q.error(names::OFFLOAD_RESOLVE, "gso-segmented") > 0,
        "cut before the L3 path read them"
    );
    assert_eq!(q.error(names::OFFLOAD_RESOLVE, "bad-offload"), 0);
    assert_eq!(detail(&*b.0, "tx-too-long"), 0);
}

/// Receives datagrams on `argv[1]`:5002 until 3 s pass without one; prints how many came and
/// how many were malformed (not 1000 bytes of one repeated value).
const UDP_SERVER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE: no drop for want of room
s.bind((sys.argv[1], 5002))
s.settimeout(3)
print("listening", flush=True)
n = bad = 0
try:
    while True:
        d = s.recv(65536)
        n += 1
        bad += len(d) != 1000 or d != d[:1] * len(d)
except socket.timeout:
    pass
print(n, bad, flush=True)
"#;

/// Sends 20 datagrams of 8000 bytes to `argv[1]`:5002 as UDP GSO super-frames of 1000-byte
/// segments (`UDP_SEGMENT`).
const UDP_CLIENT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_UDP, 103, 1000)
s.connect((sys.argv[1], 5002))
for i in range(20):
    s.send(bytes([i]) * 8000)
"#;

#[test]
fn udp_super_frames_leave_as_datagrams_through_either_kind_of_port() {
    if !ready("udp_super_frames_leave_as_datagrams_through_either_kind_of_port") {
        return;
    }
    for offload in [true, false] {
        let (ns1, ns2) = (Netns::new(), Netns::new());
        let (v1, v2) = (
            Veth::new(&ns1, "10.0.29.1/24"),
            Veth::new(&ns2, "10.0.29.2/24"),
        );
        if !offload {
            ns2.sh(&format!("ethtool -K {} tx off", v2.inner));
        }
        let mut fwd = forwarding();
        let a = af_packet_port(&mut fwd, &v1.root, 1);
        let config = AfPacketConfig {
            offload,
            ..AfPacketConfig::new(&v2.root, 1)
        };
        let port = AfPacketPort::open(&config).expect("AF_PACKET");
        let mtu = port.mtu() as u16;
        let b = add_port(&mut fwd, Arc::new(port), mtu);
        fwd.cross_connect(a.1, b.1).unwrap();
        let q = Quiver::start(fwd, &[a.clone(), b.clone()], &[0]);
        // Neighbours known first: no datagram waits for ARP.
        ns1.ping("10.0.29.2", std::time::Duration::from_secs(20));

        let (mut server, mut lines) = python_server(&ns2, UDP_SERVER, &["10.0.29.2"]);
        let client = ns1.exec(&[PYTHON, "-c", UDP_CLIENT, "10.0.29.2"]);
        assert!(
            client.status.success(),
            "{}",
            String::from_utf8_lossy(&client.stderr)
        );
        let got = lines.next().and_then(Result::ok).unwrap_or_default();
        let _ = server.wait();
        assert_eq!(
            got, "160 0",
            "offload {offload}: 20 × 8 datagrams, all whole"
        );
        assert!(
            detail(&*a.0, "rx-gso-frames") > 0,
            "UDP super-frames came in"
        );
        let segmented = q.error(names::OFFLOAD_RESOLVE, "gso-segmented");
        if offload {
            assert!(detail(&*b.0, "tx-gso-frames") > 0);
            assert_eq!(segmented, 0);
        } else {
            assert!(segmented > 0, "cut in software");
        }
    }
}
