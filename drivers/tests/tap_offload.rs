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

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::*;
use drivers::tap::{TapConfig, TapPort};
use graph_nodes::names;

const PYTHON: &str = "/usr/bin/python3";

/// Receives one connection on `argv[1]`:5002; prints the bytes' count and SHA-256.
const SERVER: &str = r#"
import hashlib, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5002))
s.listen(1)
s.settimeout(60)
print("listening", flush=True)
c, _ = s.accept()
c.settimeout(60)
h, n = hashlib.sha256(), 0
while True:
    d = c.recv(1 << 20)
    if not d:
        break
    h.update(d)
    n += len(d)
print(n, h.hexdigest(), flush=True)
"#;

/// Sends `argv[2]` MiB of seeded pseudo-random bytes to `argv[1]`:5002; prints their count and
/// SHA-256.
const CLIENT: &str = r#"
import hashlib, random, socket, sys
data = random.Random(25).randbytes(int(sys.argv[2]) << 20)
s = socket.create_connection((sys.argv[1], 5002), timeout=30)
s.sendall(data)
s.shutdown(socket.SHUT_WR)
s.recv(1)
print(len(data), hashlib.sha256(data).hexdigest(), flush=True)
"#;

/// Opens a TAP port with offloads, moves its device into `ns` with `address`, up.
fn tap_in(fwd: &mut graph_nodes::Forwarding, ns: &Netns, address: &str) -> (PortAt, String) {
    let name = unique("qt");
    let port = TapPort::open(&TapConfig::new(&name, 1)).expect("TAP with offloads");
    run(&["ip", "link", "set", &name, "netns", &ns.name]);
    ns.ip(&["addr", "add", address, "dev", &name]);
    ns.ip(&["link", "set", &name, "up"]);
    let mtu = port.mtu() as u16;
    (add_port(fwd, Arc::new(port), mtu), name)
}

#[test]
fn tcp_crosses_a_cross_connect_of_taps_moved_into_namespaces_with_offloads() {
    let test = "tcp_crosses_a_cross_connect_of_taps_moved_into_namespaces_with_offloads";
    if !system_ready(test) {
        return;
    }
    if !std::path::Path::new(PYTHON).exists() {
        assert_ne!(
            std::env::var("QUIVER_REQUIRE_SYSTEM_TESTS").as_deref(),
            Ok("1"),
            "{test}: {PYTHON} is missing"
        );
        eprintln!("skipping {test}: {PYTHON} is missing");
        return;
    }
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let mut fwd = forwarding();
    let (a, tap1) = tap_in(&mut fwd, &ns1, "10.0.31.1/24");
    let (b, tap2) = tap_in(&mut fwd, &ns2, "10.0.31.2/24");
    fwd.cross_connect(a.1, b.1).unwrap();
    let q = Quiver::start(fwd, &[a.clone(), b.clone()], &[0]);

    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns2.name,
            PYTHON,
            "-c",
            SERVER,
            "10.0.31.2",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("server starts");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    assert_eq!(
        lines.next().and_then(Result::ok).as_deref(),
        Some("listening")
    );
    let client = ns1.exec(&[PYTHON, "-c", CLIENT, "10.0.31.2", "8"]);
    let sent = String::from_utf8_lossy(&client.stdout).trim().to_string();
    let received = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = server.wait();
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
