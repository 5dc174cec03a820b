//! A `net_tap` port answering the kernel's ARP and ping (needs `ip` and `ping`); the kernel's
//! interface goes with the port.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use drivers::dpdk::{DpdkMempool, DpdkPort, DpdkPortConfig};
use drivers::{LinkStatus, Port};
use graph_nodes::names;
use testkit::wait_for;

use crate::eal::{eal, every_buffer_back, pool};
use crate::graph::{forwarding, start};

fn have_tool(tool: &str, test: &str) -> bool {
    let found = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| std::path::Path::new(d).join(tool).exists());
    if !found {
        testkit::unavailable(test, &format!("`{tool}` is not installed"));
    }
    found
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn tap_port_answers_the_kernels_arp_and_ping() {
    const TEST: &str = "tap_port_answers_the_kernels_arp_and_ping";
    let Some((eal, _serial)) = eal(TEST) else {
        return;
    };
    if !have_tool("ip", TEST) || !have_tool("ping", TEST) {
        return;
    }
    let iface = format!("qdtap{}", std::process::id() % 100_000);
    let pool = pool(4096);
    let mempool = DpdkMempool::new(eal, pool.clone()).unwrap();
    eal.create_vdev("net_tap_t0", &format!("iface={iface}"))
        .unwrap();
    let tap = Arc::new(DpdkPort::open(&mempool, &DpdkPortConfig::new("net_tap_t0", 1)).unwrap());
    // The kernel's side: an address in the benchmarking range (RFC 2544), nothing else routed.
    ip(&["addr", "add", "198.18.77.1/24", "dev", &iface]);
    ip(&["link", "set", &iface, "up"]);
    let kernel_mac = std::fs::read_to_string(format!("/sys/class/net/{iface}/address")).unwrap();
    let kernel_mac: Vec<u8> = kernel_mac
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    let mut fwd = forwarding();
    let t = fwd.add_port("tap", tap.mac(), 1500).unwrap();
    fwd.add_address(t, u32::from_be_bytes([198, 18, 77, 2]), 24)
        .unwrap();
    fwd.add_neighbor(
        t,
        u32::from_be_bytes([198, 18, 77, 1]),
        kernel_mac.try_into().unwrap(),
    )
    .unwrap();
    let (dp, _xc) = start(&pool, &mut fwd, vec![(tap.clone(), t)]);
    wait_for("the tap link up", 30, || tap.link() == LinkStatus::Up);
    // The kernel asks for Quiver's MAC (ARP), then pings: each try waits at most a second for
    // its reply; the loop ends at the first answered one.
    let mut answered = false;
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !answered && Instant::now() < deadline {
        let out = Command::new("ping")
            .args(["-c", "1", "-W", "1", "-n", "-I", &iface, "198.18.77.2"])
            .output()
            .expect("run ping");
        answered = out.status.success();
        last = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
    }
    let rt = dp.runtime().summed();
    let stats = tap.stats();
    dp.stop();
    assert!(
        answered,
        "the kernel's ping was never answered; the last try:\n{last}"
    );
    assert!(rt.error(names::IP4_LOCAL, "echo-replies") >= 1);
    assert!(rt.error(names::ARP_INPUT, "requests-answered") >= 1);
    assert!(stats.rx_packets >= 2 && stats.tx_packets >= 2, "{stats:?}");
    drop(tap);
    wait_for("the tap interface gone with its port", 10, || {
        !std::path::Path::new(&format!("/sys/class/net/{iface}")).exists()
    });
    every_buffer_back(&pool, mempool);
}
