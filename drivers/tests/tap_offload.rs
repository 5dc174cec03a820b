//! TCP through TAP ports with offloads (issue 24): two TAP devices opened by Quiver's side with
//! virtio-net headers and `TUNSETOFFLOAD`, each moved into a namespace of its own (the device
//! keeps working: its queues are file descriptors Quiver holds), cross-connected. The
//! namespaces' stacks hand Quiver TCP super-frames with checksums to fill in, Quiver hands them
//! back whole, and a transfer of a few MB is checked for content at the far end. When Quiver's
//! side closes, the devices are gone from the namespaces too.
//!
//! Needs root, `ip` and `/usr/bin/python3`; without them the test prints why and passes,
//! unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`.

mod common;

use std::process::Command;

use common::*;
use graph_nodes::names;

const PYTHON: &str = "/usr/bin/python3";

#[test]
fn tcp_crosses_a_cross_connect_of_taps_moved_into_namespaces_with_offloads() {
    let test = "tcp_crosses_a_cross_connect_of_taps_moved_into_namespaces_with_offloads";
    if !system_ready(test) {
        return;
    }
    if !std::path::Path::new(PYTHON).exists() {
        testkit::unavailable(test, &format!("{PYTHON} is missing"));
        return;
    }
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let mut fwd = forwarding();
    let (a, tap1) = tap_in(&mut fwd, &ns1, "10.0.31.1/24");
    let (b, tap2) = tap_in(&mut fwd, &ns2, "10.0.31.2/24");
    fwd.cross_connect(a.1, b.1).unwrap();
    let q = Quiver::start(fwd, &[a.clone(), b.clone()], &[0]);

    let (received, sent) = testkit::tcp::transfer(&ns1.name, &ns2.name, "10.0.31.2", 5002, 8);
    assert_eq!(received, sent, "every byte arrived, in order");
    assert!(sent.starts_with("8388608 "), "{sent}");

    assert!(
        detail(&*a.0, "rx-gso-frames") > 0,
        "super-frames came in whole"
    );
    assert!(detail(&*a.0, "rx-checksum-partial") > 0);
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

    // Quiver's side closed: the devices go from the namespaces with it.
    drop(q);
    drop((a, b));
    for (ns, tap) in [(&ns1, &tap1), (&ns2, &tap2)] {
        let out = Command::new("ip")
            .args(["-n", &ns.name, "link", "show", tap])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{tap} is still in {}", ns.name);
    }
}
