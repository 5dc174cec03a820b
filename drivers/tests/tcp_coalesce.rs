//! TCP segments coalesced on an AF_PACKET port's transmit (`queue::tcp_coalesce`), as GRO
//! would: a sender whose veth has segmentation and checksum offload off sends MSS-sized
//! segments with complete checksums; Quiver, cross-connecting them, sends runs of them as TCP
//! GSO super-frames. A real transfer is checked for content at the far end, and the far
//! end's stack must count no checksum error: the super-frame's checksum, derived from the
//! segments', is complete and right. With the far veth's offloads on, the super-frame crosses
//! it whole; with them off, the kernel segments it in software first.
//!
//! Needs root, `ip`, `ethtool` and `/usr/bin/python3`; without them each test prints why and
//! passes, unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`.

mod common;

use common::*;

const PYTHON: &str = "/usr/bin/python3";

/// The TCP checksum errors namespace `ns`'s stack counted.
fn tcp_checksum_errors(ns: &Netns) -> u64 {
    let out = ns.sh("cat /proc/net/snmp");
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("Tcp:"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let column = rows[0]
        .iter()
        .position(|&c| c == "InCsumErrors")
        .expect("InCsumErrors");
    rows[1][column].parse().expect("a number")
}

#[test]
fn a_connections_segments_leave_as_super_frames_and_arrive_intact() {
    if !system_ready_with(
        "a_connections_segments_leave_as_super_frames_and_arrive_intact",
        &[PYTHON, "/usr/sbin/ethtool"],
    ) {
        return;
    }
    for far_offloads in [true, false] {
        let (ns1, ns2) = (Netns::new(), Netns::new());
        let (v1, v2) = (
            Veth::new(&ns1, "10.0.26.1/24"),
            Veth::new(&ns2, "10.0.26.2/24"),
        );
        // The sender's stack segments and checksums every segment itself.
        ns1.sh(&format!("ethtool -K {} tx off tso off gso off", v1.inner));
        if !far_offloads {
            // The kernel segments Quiver's super-frames before the veth.
            run(&["ethtool", "-K", &v2.root, "tx", "off", "tso", "off"]);
        }
        let mut fwd = forwarding();
        let a = af_packet_port(&mut fwd, &v1.root, 1);
        let b = af_packet_port(&mut fwd, &v2.root, 1);
        fwd.cross_connect(a.1, b.1).unwrap();
        let _q = Quiver::start(fwd, &[a.clone(), b.clone()], &[0]);

        let (received, sent) = testkit::tcp::transfer(&ns1.name, &ns2.name, "10.0.26.2", 5001, 8);
        assert_eq!(
            received, sent,
            "far offloads {far_offloads}: every byte, in order"
        );
        assert!(sent.starts_with("8388608 "), "{sent}");

        assert_eq!(
            detail(&*a.0, "rx-gso-frames"),
            0,
            "the sender sent segments"
        );
        let frames = detail(&*b.0, "tx-tcp-gso-frames");
        let segments = detail(&*b.0, "tx-tcp-gso-segments");
        assert!(
            frames > 0,
            "far offloads {far_offloads}: runs left as super-frames"
        );
        assert!(
            segments >= 2 * frames,
            "{segments} segments in {frames} frames"
        );
        assert_eq!(detail(&*b.0, "tx-errors"), 0);
        assert_eq!(detail(&*b.0, "tx-too-long"), 0);
        assert_eq!(
            tcp_checksum_errors(&ns2),
            0,
            "far offloads {far_offloads}: every checksum verified"
        );
        wait_counters_match_as(&ns2, &v2.inner, &*b.0, far_offloads);
    }
}

#[test]
fn a_connections_segments_enter_a_tap_as_super_frames() {
    if !system_ready_with(
        "a_connections_segments_enter_a_tap_as_super_frames",
        &[PYTHON, "/usr/sbin/ethtool"],
    ) {
        return;
    }
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let v1 = Veth::new(&ns1, "10.0.27.1/24");
    ns1.sh(&format!("ethtool -K {} tx off tso off gso off", v1.inner));
    let mut fwd = forwarding();
    let a = af_packet_port(&mut fwd, &v1.root, 1);
    let (b, _tap) = tap_in(&mut fwd, &ns2, "10.0.27.2/24");
    fwd.cross_connect(a.1, b.1).unwrap();
    let _q = Quiver::start(fwd, &[a.clone(), b.clone()], &[0]);

    let (received, sent) = testkit::tcp::transfer(&ns1.name, &ns2.name, "10.0.27.2", 5003, 8);
    assert_eq!(received, sent, "every byte, in order");
    assert!(sent.starts_with("8388608 "), "{sent}");
    let frames = detail(&*b.0, "tx-tcp-gso-frames");
    let segments = detail(&*b.0, "tx-tcp-gso-segments");
    assert!(frames > 0, "runs entered the TAP as super-frames");
    assert!(
        segments >= 2 * frames,
        "{segments} segments in {frames} frames"
    );
    assert_eq!(detail(&*b.0, "tx-errors"), 0);
    assert_eq!(tcp_checksum_errors(&ns2), 0, "every checksum verified");
    let s = b.0.stats();
    assert!(
        s.tx_bytes >= 8 << 20,
        "the bytes of every segment: {}",
        s.tx_bytes
    );
}
