//! pcap capture as an operator runs it: the real `quiver` binary with memif ports and memif CNFs
//! sending real traffic (pings Quiver answers, routed UDP), captures started and stopped with
//! `quiver ctl capture`, and the files read back by `tshark` (a reader we did not write), whose
//! decoded fields are checked.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::{cnfs, interface_mac, one, route, routed_config, udp, Cnf, Quiver, Scratch};
use testkit::{require, wait_for, Needs};

const TSHARK: &str = "/usr/bin/tshark";

/// The CNFs' MAC on memif0 (a static neighbour, so Quiver's replies need no ARP).
const CNF_A_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// memif0's CNF is a static neighbour; memif2 is an IP-mode port with its CNF's address.
fn config(memif_socket: &Path) -> String {
    routed_config(
        memif_socket,
        &format!(
            r#"
[[neighbor]]
port = "memif0"
ip = "10.0.0.2"
mac = "02:00:00:00:00:02"
[[port]]
name = "memif2"
type = "memif"
role = "master"
socket = "{s}"
id = 2
mode = "ip"
[[address]]
port = "memif2"
ip = "10.0.2.1/24"
[[neighbor]]
port = "memif2"
ip = "10.0.2.2"
mac = "02:00:00:00:02:02"
"#,
            s = memif_socket.display()
        ),
    )
}

fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 ICMP echo request from `src` to `dst` with sequence number `seq`.
fn echo_ip(src: [u8; 4], dst: [u8; 4], seq: u16) -> Vec<u8> {
    let mut icmp = vec![8, 0, 0, 0, 0x12, 0x34];
    icmp.extend_from_slice(&seq.to_be_bytes());
    icmp.extend_from_slice(&[0x5a; 32]);
    let c = checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, 1, 0, 0];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let total = (ip.len() + icmp.len()) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(&icmp);
    ip
}

/// [`echo_ip`] in an Ethernet frame from CNF a to `to`.
fn echo_frame(to: [u8; 6], seq: u16) -> Vec<u8> {
    let mut f = to.to_vec();
    f.extend_from_slice(&CNF_A_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&echo_ip([10, 0, 0, 2], [10, 0, 0, 1], seq));
    f
}

/// Sends one ping from `cnf` and waits for Quiver's reply.
fn ping(cnf: &mut Cnf, request: Vec<u8>) -> Vec<u8> {
    cnf.send(&[request]);
    let mut got = Vec::new();
    wait_for("quiver's echo reply", 30, || {
        cnf.receive(&mut got);
        !got.is_empty()
    });
    assert_eq!(got.len(), 1);
    got.pop().unwrap()
}

/// `tshark -r file -T fields -e …`: one row of fields per packet.
fn tshark(file: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new(TSHARK);
    cmd.arg("-r").arg(file).args(["-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark -r {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

fn row(fields: &[&str]) -> Vec<String> {
    fields.iter().map(|s| s.to_string()).collect()
}

fn capture_of<'a>(captures: &'a Value, interface: &str) -> &'a Value {
    one(captures, "interface", interface)
}

fn has_tshark(test: &str) -> bool {
    require(
        test,
        &Needs {
            tools: &[TSHARK],
            ..Needs::default()
        },
    )
}

#[test]
fn a_capture_of_pings_stops_at_its_packet_limit_and_tshark_decodes_it() {
    if !has_tshark("a_capture_of_pings_stops_at_its_packet_limit_and_tshark_decodes_it") {
        return;
    }
    let dir = Scratch::new("ping");
    let memif_socket = dir.path("memif.sock");
    let mut q = Quiver::start(&dir, &config(&memif_socket), &[]);
    let (mut a, _b) = cnfs(&mut q, &memif_socket);
    let mac = interface_mac(&q, "memif0");
    // Before the capture: not in the file.
    ping(&mut a, echo_frame(mac, 100));

    let file = dir.path("pings.pcap");
    let started = q.json(&[
        "capture",
        "start",
        "memif0",
        "--file",
        file.to_str().unwrap(),
        "--max-packets",
        "10",
    ]);
    assert_eq!(started["state"], "running");
    assert_eq!(started["direction"], "both");
    assert_eq!(started["linktype"], "ethernet");
    let shown = q.json(&["show", "captures"]);
    assert_eq!(
        capture_of(&shown, "memif0")["file"],
        file.display().to_string()
    );

    // One at a time: request in, reply out, so the first 10 packets are 5 of each.
    for seq in 1..=8u16 {
        let reply = ping(&mut a, echo_frame(mac, seq));
        assert_eq!(reply[34], 0, "an echo reply");
    }
    wait_for("the capture to reach its limit", 30, || {
        capture_of(&q.json(&["show", "captures"]), "memif0")["state"] == "done"
    });
    let shown = q.json(&["show", "captures"]);
    let c = capture_of(&shown, "memif0");
    assert_eq!(c["packets"], 10);
    assert_eq!(c["dropped"], 0);
    let size = std::fs::metadata(&file).unwrap().len();
    assert_eq!(c["bytes"], size, "the file is complete when done");

    let rows = tshark(
        &file,
        &["eth.src", "ip.src", "ip.dst", "icmp.type", "icmp.seq"],
    );
    let mut expected = Vec::new();
    for seq in 1..=5 {
        let s = seq.to_string();
        expected.push(row(&["02:00:00:00:00:02", "10.0.0.2", "10.0.0.1", "8", &s]));
        let quiver_mac = support::format_mac(mac);
        expected.push(row(&[&quiver_mac, "10.0.0.1", "10.0.0.2", "0", &s]));
    }
    assert_eq!(rows, expected);

    let stopped = q.json(&["capture", "stop", "memif0"]);
    assert_eq!(stopped["packets"], 10);
    assert_eq!(q.json(&["show", "captures"]), serde_json::json!([]));
    // After the capture nothing more is written.
    ping(&mut a, echo_frame(mac, 9));
    assert_eq!(std::fs::metadata(&file).unwrap().len(), size);
}

#[test]
fn rx_tx_and_byte_limits_capture_routed_traffic_until_stopped() {
    if !has_tshark("rx_tx_and_byte_limits_capture_routed_traffic_until_stopped") {
        return;
    }
    let dir = Scratch::new("routed");
    let memif_socket = dir.path("memif.sock");
    let mut q = Quiver::start(&dir, &config(&memif_socket), &[]);
    let (mut a, mut b) = cnfs(&mut q, &memif_socket);
    let mac = interface_mac(&q, "memif0");
    let (rx_file, tx_file) = (dir.path("rx.pcap"), dir.path("tx.pcap"));
    // memif0's received frames, the file at most 1000 bytes: 24 + 8 × (16 + 100).
    q.json(&[
        "capture",
        "start",
        "memif0",
        "--file",
        rx_file.to_str().unwrap(),
        "--direction",
        "rx",
        "--max-bytes",
        "1000",
    ]);
    // memif1's sent frames, no limit, the first 60 bytes of each.
    q.json(&[
        "capture",
        "start",
        "memif1",
        "--file",
        tx_file.to_str().unwrap(),
        "--direction",
        "tx",
        "--snaplen",
        "60",
    ]);

    const N: usize = 50;
    let frames: Vec<Vec<u8>> = (0..N as u16)
        .map(|i| udp(mac, [10, 9, 0, 5], 100, i))
        .collect();
    assert_eq!(route(&mut a, &mut b, &frames, N).len(), N);
    wait_for("both captures to have their packets", 30, || {
        let c = q.json(&["show", "captures"]);
        capture_of(&c, "memif0")["state"] == "done" && capture_of(&c, "memif1")["packets"] == N
    });
    let c = q.json(&["show", "captures"]);
    assert_eq!(capture_of(&c, "memif0")["packets"], 8);
    assert_eq!(capture_of(&c, "memif1")["state"], "running");

    let tx = q.json(&["capture", "stop", "memif1"]);
    assert_eq!(tx["state"], "stopped");
    assert_eq!(tx["packets"], N);
    q.json(&["capture", "stop", "memif0"]);

    assert!(std::fs::metadata(&rx_file).unwrap().len() <= 1000);
    let rows = tshark(&rx_file, &["ip.src", "ip.dst", "ip.ttl", "frame.len"]);
    assert_eq!(rows.len(), 8);
    for r in &rows {
        assert_eq!(
            *r,
            row(&["10.0.0.2", "10.9.0.5", "64", "100"]),
            "as received"
        );
    }
    let rows = tshark(
        &tx_file,
        &["eth.dst", "ip.dst", "ip.ttl", "frame.len", "frame.cap_len"],
    );
    assert_eq!(rows.len(), N);
    for r in &rows {
        assert_eq!(
            *r,
            row(&["02:00:00:00:01:02", "10.9.0.5", "63", "100", "60"]),
            "routed: to the neighbour, TTL decremented, cut at the snap length"
        );
    }
}

#[test]
fn an_ip_mode_memif_is_captured_as_raw_ip() {
    if !has_tshark("an_ip_mode_memif_is_captured_as_raw_ip") {
        return;
    }
    let dir = Scratch::new("raw");
    let memif_socket = dir.path("memif.sock");
    let mut q = Quiver::start(&dir, &config(&memif_socket), &[]);
    let mut c = Cnf::connect_ip(&memif_socket, 2);
    wait_for("the IP-mode CNF's link", 30, || c.is_up());
    q.wait_log("memif link up port=memif2");
    let file = dir.path("raw.pcap");
    let started = q.json(&[
        "capture",
        "start",
        "memif2",
        "--file",
        file.to_str().unwrap(),
        "--max-packets",
        "4",
    ]);
    assert_eq!(started["linktype"], "raw");
    for seq in 1..=2 {
        let reply = ping(&mut c, echo_ip([10, 0, 2, 2], [10, 0, 2, 1], seq));
        assert_eq!(reply[0] >> 4, 4, "a bare IPv4 packet back");
    }
    wait_for("the capture to reach its limit", 30, || {
        capture_of(&q.json(&["show", "captures"]), "memif2")["state"] == "done"
    });
    q.json(&["capture", "stop", "memif2"]);
    let rows = tshark(
        &file,
        &["frame.protocols", "ip.src", "icmp.type", "icmp.seq"],
    );
    assert_eq!(
        rows,
        vec![
            row(&["raw:ip:icmp:data", "10.0.2.2", "8", "1"]),
            row(&["raw:ip:icmp:data", "10.0.2.1", "0", "1"]),
            row(&["raw:ip:icmp:data", "10.0.2.2", "8", "2"]),
            row(&["raw:ip:icmp:data", "10.0.2.1", "0", "2"]),
        ]
    );
}

#[test]
fn bad_capture_requests_are_refused_and_change_nothing() {
    let dir = Scratch::new("refused");
    let memif_socket = dir.path("memif.sock");
    let q = Quiver::start(&dir, &config(&memif_socket), &[]);
    let file = dir.path("c.pcap");
    let f = file.to_str().unwrap();

    let err = q.refused(&["capture", "start", "nosuch", "--file", f]);
    assert!(err.contains("not found: no port named `nosuch`"), "{err}");
    assert!(!file.exists(), "no file for a refused capture");
    assert_eq!(q.json(&["show", "captures"]), serde_json::json!([]));
    let err = q.refused(&[
        "capture",
        "start",
        "memif0",
        "--file",
        f,
        "--direction",
        "up",
    ]);
    assert!(
        err.contains("invalid argument: capture direction `up`"),
        "{err}"
    );
    let err = q.refused(&[
        "capture",
        "start",
        "memif0",
        "--file",
        f,
        "--snaplen",
        "20000",
    ]);
    assert!(
        err.contains("invalid argument: snap length 20000: 1 to 16384"),
        "{err}"
    );
    assert!(!file.exists());
    let err = q.refused(&["capture", "stop", "memif0"]);
    assert!(err.contains("not found: no capture of `memif0`"), "{err}");
    let missing_dir = dir.path("no/such/dir/c.pcap");
    let err = q.refused(&[
        "capture",
        "start",
        "memif0",
        "--file",
        missing_dir.to_str().unwrap(),
    ]);
    assert!(err.contains("invalid argument: cannot create"), "{err}");
    assert_eq!(q.json(&["show", "captures"]), serde_json::json!([]));

    // A second capture of one port is refused; the first goes on, its file untouched.
    q.json(&["capture", "start", "memif0", "--file", f]);
    let other = dir.path("other.pcap");
    let err = q.refused(&[
        "capture",
        "start",
        "memif0",
        "--file",
        other.to_str().unwrap(),
    ]);
    assert!(
        err.contains("already exists: memif0 is being captured already")
            && err.contains("quiver ctl capture stop memif0"),
        "{err}"
    );
    assert!(!other.exists());
    // Another port into the same file is refused too.
    let err = q.refused(&["capture", "start", "memif1", "--file", f]);
    assert!(
        err.contains("is the file of the capture of memif0"),
        "{err}"
    );
    let shown = q.json(&["show", "captures"]);
    assert_eq!(shown.as_array().unwrap().len(), 1);
    assert_eq!(capture_of(&shown, "memif0")["state"], "running");
    // The capture-dropped counters exist, at zero.
    let errors = q.json(&["show", "errors", "--all"]);
    for node in ["port-input", "interface-output"] {
        let e: Vec<&Value> = errors
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["node"] == node && e["reason"] == "capture-dropped")
            .collect();
        assert_eq!(e.len(), 1, "{node}: {errors:#}");
        assert_eq!(e[0]["count"], 0);
    }
    // Removing the port ends its capture.
    q.json(&["interface", "del", "memif0"]);
    assert_eq!(q.json(&["show", "captures"]), serde_json::json!([]));
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        24,
        "the header only"
    );
}
