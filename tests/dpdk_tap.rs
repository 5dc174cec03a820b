//! End to end through a DPDK port: the `quiver` binary with a `quiver.toml` whose one port is
//! DPDK's `net_tap` (a kernel tap interface on the other side), an address on it, and the host's
//! own `ping` as the peer. Quiver must answer the kernel's ARP and pings, its interface counters
//! must match what the kernel saw cross the tap, and when it stops every buffer must be back in
//! the pool — the mbufs DPDK held included, and the mempool's own teardown taking none.

#![cfg(feature = "dpdk")]

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{interface_counters, Quiver, Scratch};
use testkit::{require, wait_for, Needs};

const IP: &str = "/usr/sbin/ip";
const PING: &str = "/usr/bin/ping";

fn ip(args: &[&str]) {
    let out = Command::new(IP).args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One `ping` run from the kernel's side of the tap: (requests sent, replies received, its
/// output).
fn ping(iface: &str, to: &str, count: u32) -> (u64, u64, String) {
    let out = Command::new(PING)
        .args(["-n", "-c", &count.to_string(), "-W", "1", "-I", iface, to])
        .output()
        .expect("run ping");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    // "3 packets transmitted, 3 received, 0% packet loss, time 2003ms"
    let summary = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no ping summary in:\n{text}"));
    let field = |i: usize| -> u64 {
        summary
            .split(", ")
            .nth(i)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("bad ping summary: {summary}"))
    };
    (field(0), field(1), text)
}

/// A counter of the kernel's side of the tap.
fn kernel_counter(iface: &str, name: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/statistics/{name}"))
        .unwrap_or_else(|e| panic!("{iface} {name}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// The count of `node`'s error `reason` in quiver's final errors table (0 if absent).
fn error_count(stdout: &str, node: &str, reason: &str) -> u64 {
    let summary = stdout
        .rsplit_once("=== quiver stopped")
        .map(|s| s.1)
        .unwrap_or_else(|| panic!("no final summary in:\n{stdout}"));
    summary
        .lines()
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() >= 3 && w[1] == node && w[2] == reason).then(|| w[0].parse().unwrap())
        })
        .unwrap_or(0)
}

#[test]
fn quiver_answers_the_kernels_ping_over_a_dpdk_tap_and_returns_every_buffer() {
    const TEST: &str = "quiver_answers_the_kernels_ping_over_a_dpdk_tap";
    let needs = Needs {
        root: true,
        hugepages: 64,
        tools: &[IP, PING],
    };
    if !require(TEST, &needs) {
        return;
    }
    // Names and addresses unique to this run: a tap per process, a /24 in the benchmarking
    // range (RFC 2544, 198.18.0.0/15) chosen from the pid.
    let pid = std::process::id();
    let iface = format!("qtap{}", pid % 100_000);
    let net = format!("198.{}.{}", 18 + (pid >> 8) % 2, pid % 256);
    let (kernel_ip, quiver_ip) = (format!("{net}.1"), format!("{net}.2"));
    let config = format!(
        r#"
[dataplane]
cores = [1]
idle = "adaptive"
[buffers]
count = 8192
hugepages = "never"
[dpdk]
vdevs = ["net_tap0,iface={iface}"]
[[port]]
name = "tap"
type = "dpdk"
device = "net_tap0"
[[address]]
port = "tap"
ip = "{quiver_ip}/24"
"#
    );
    let dir = Scratch::new("tap");
    let mut quiver = Quiver::run(&dir, "tap", &config);
    // No IPv6 on the tap: its neighbour discovery and MLD would cross it at random times and
    // blur the counts compared below. Its sysctl directory appears a little after the device.
    let ipv6 = Path::new("/proc/sys/net/ipv6").exists();
    let disable_ipv6 = format!("/proc/sys/net/ipv6/conf/{iface}/disable_ipv6");
    wait_for("the tap interface", 30, || {
        quiver.check_running();
        Path::new(&format!("/sys/class/net/{iface}")).exists()
            && (!ipv6 || Path::new(&disable_ipv6).exists())
    });
    if ipv6 {
        std::fs::write(&disable_ipv6, "1").unwrap();
    }
    ip(&["addr", "add", &format!("{kernel_ip}/24"), "dev", &iface]);
    ip(&["link", "set", &iface, "up"]);
    quiver.wait_log("forwarding");

    // Prime ARP both ways: the first echo may be lost while Quiver resolves the kernel's MAC.
    let (mut requests, mut replies) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        quiver.check_running();
        let (sent, got, text) = ping(&iface, &quiver_ip, 1);
        requests += sent;
        replies += got;
        if got == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "quiver never answered a ping; the last try:\n{text}"
        );
    }
    let (sent, got, text) = ping(&iface, &quiver_ip, 3);
    assert_eq!(
        (sent, got),
        (3, 3),
        "pings lost once ARP was resolved:\n{text}"
    );
    requests += sent;
    replies += got;

    // What crossed the tap, as the kernel counts it (nothing else crosses it from here on).
    let kernel_tx = (
        kernel_counter(&iface, "tx_packets"),
        kernel_counter(&iface, "tx_bytes"),
    );
    let kernel_rx = (
        kernel_counter(&iface, "rx_packets"),
        kernel_counter(&iface, "rx_bytes"),
    );
    let (stdout, stderr) = quiver.stop();
    let context = format!("{stdout}\n{stderr}");

    let [rx_packets, rx_bytes, tx_packets, tx_bytes, _rx_drops, tx_drops] =
        interface_counters(&stdout, "tap");
    // At least the ARP request and the pings each way.
    assert!(
        rx_packets > replies && tx_packets > replies,
        "tap counters too low for {replies} answered pings:\n{context}"
    );
    assert_eq!(
        (rx_packets, rx_bytes),
        kernel_tx,
        "quiver received what the kernel sent:\n{context}"
    );
    assert_eq!(
        (tx_packets, tx_bytes),
        kernel_rx,
        "quiver sent what the kernel received:\n{context}"
    );
    assert_eq!(tx_drops, 0, "{context}");
    // Quiver answers every echo request that reached it (all did: the counts above match);
    // an answer made while it still resolved the kernel's MAC is dropped there, and only then.
    let echo_replies = error_count(&stdout, "ip4-local", "echo-replies");
    assert_eq!(
        echo_replies, requests,
        "echo replies vs echo requests sent:\n{context}"
    );
    assert_eq!(
        echo_replies - error_count(&stdout, "ip4-arp", "resolving"),
        replies,
        "echo replies vs pings answered:\n{context}"
    );
    assert!(
        stdout.contains("buffers: 0 in use after stop"),
        "buffers still in use after stop:\n{context}"
    );
    assert!(
        !stderr.contains("ERROR"),
        "quiver logged errors:\n{context}"
    );
    wait_for("the tap interface gone with quiver", 10, || {
        !Path::new(&format!("/sys/class/net/{iface}")).exists()
    });
}
