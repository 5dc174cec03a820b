//! Quiver routing IPv6 (and IPv4 beside it) between two network namespaces, as a user sets it
//! up: `quiver run` with two AF_PACKET ports on veths, each with an IPv4 and an IPv6 address
//! from `quiver.toml`, the namespaces' default routes through Quiver. The kernel's own tools
//! are the peers: neighbour discovery both ways (the kernel solicits Quiver's address, Quiver
//! solicits the hosts'), `ping -6` and `ping` across, `iperf3 -6` TCP across, the hop limit
//! (Time Exceeded from Quiver), the MTU (Packet Too Big from Quiver, which the kernel's path
//! MTU cache takes), and a route added with `quiver ctl` through a link-local next hop.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::side::{run, Side, IP, PING};
use support::{Quiver, Scratch};
use testkit::{require, Needs};

const IPERF3: &str = "/usr/bin/iperf3";

/// Runs `args` in `side`'s namespace; its output (success or not).
fn exec(side: &Side, args: &[&str]) -> std::process::Output {
    Command::new(IP)
        .args(["netns", "exec", &side.ns])
        .args(args)
        .output()
        .unwrap()
}

/// `ip` in `side`'s namespace, which must succeed.
fn ip_in(side: &Side, args: &[&str]) {
    let mut all = vec![IP, "-n", side.ns.as_str()];
    all.extend_from_slice(args);
    run(&all);
}

/// One ping (`-6` or `-4` as `to` is) from `side` with `extra` arguments: whether it was
/// answered, and what ping printed.
fn ping(side: &Side, to: &str, extra: &[&str]) -> (bool, String) {
    let mut args = vec![PING, "-n", "-c", "1", "-W", "1"];
    args.extend_from_slice(extra);
    args.push(to);
    let out = exec(side, &args);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Pings until one is answered (the first waits for neighbour discovery on both links).
fn ping_until_answered(q: &mut Quiver, side: &Side, to: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, text) = ping(side, to, &[]);
        if ok {
            return;
        }
        q.check_running();
        assert!(
            Instant::now() < deadline,
            "no ping from {} to {to} was answered: {text}\n{}",
            side.ns,
            q.log()
        );
    }
}

/// Quiver's error counter `name` of node `node`, from `show errors --json`.
fn error_count(q: &Quiver, node: &str, name: &str) -> u64 {
    let errors = q.json(&["show", "errors"]);
    errors
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node"] == node && e["reason"] == name)
        .map(|e| e["count"].as_u64().unwrap())
        .sum()
}

/// The namespace's neighbour entry for `ip` on veth0 (`ip -6 neigh show`), if any.
fn kernel_neighbour(side: &Side, ip: &str) -> String {
    let out = exec(side, &[IP, "-6", "neigh", "show", ip, "dev", "veth0"]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Port `name`'s link-local address, from `show interfaces --json`.
fn link_local(q: &Quiver, name: &str) -> String {
    let interfaces = q.json(&["show", "interfaces"]);
    let port = support::one(&interfaces, "name", name);
    port["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .find(|a| a.starts_with("fe80:"))
        .unwrap_or_else(|| panic!("{name} has no link-local address: {port}"))
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

/// A namespace's IPv6 stack set up as a host's: `addr` without duplicate address detection
/// (its delay is nothing the test checks), the default route via `gateway`.
fn host6(side: &Side, addr: &str, gateway: &str) {
    exec(
        side,
        &[
            "sh",
            "-c",
            "echo 0 > /proc/sys/net/ipv6/conf/all/disable_ipv6; \
             echo 0 > /proc/sys/net/ipv6/conf/veth0/disable_ipv6",
        ],
    );
    ip_in(side, &["-6", "addr", "add", addr, "dev", "veth0", "nodad"]);
    ip_in(side, &["link", "set", "lo", "up"]);
    ip_in(side, &["-6", "route", "add", "default", "via", gateway]);
}

#[test]
fn ipv6_is_routed_between_two_namespaces_beside_ipv4() {
    let test = "ipv6_is_routed_between_two_namespaces_beside_ipv4";
    if !require(
        test,
        &Needs {
            root: true,
            tools: &[IP, PING, IPERF3, "/usr/bin/ss"],
            ..Needs::default()
        },
    ) {
        return;
    }
    let a = Side::new("r6", "a", "10.76.1.2/24");
    let b = Side::new("r6", "b", "10.76.2.2/24");
    ip_in(&a, &["route", "add", "default", "via", "10.76.1.1"]);
    ip_in(&b, &["route", "add", "default", "via", "10.76.2.1"]);
    host6(&a, "2001:db8:76:1::2/64", "2001:db8:76:1::1");
    host6(&b, "2001:db8:76:2::2/64", "2001:db8:76:2::1");
    // b's link to Quiver carries at most 1280 bytes: the IPv6 minimum.
    run(&[IP, "link", "set", &b.root, "mtu", "1280"]);
    ip_in(&b, &["link", "set", "veth0", "mtu", "1280"]);

    let dir = Scratch::new("routed-ipv6");
    let config = format!(
        "[dataplane]\ncores = [1]\nidle = \"adaptive\"\n[buffers]\ncount = 4096\n\
         hugepages = \"never\"\n[stats]\ninterval_secs = 0\n\
         [[port]]\nname = \"a\"\ntype = \"af_packet\"\ninterface = \"{}\"\n\
         [[port]]\nname = \"b\"\ntype = \"af_packet\"\ninterface = \"{}\"\nmtu = 1280\n\
         [[address]]\nport = \"a\"\nip = \"10.76.1.1/24\"\n\
         [[address]]\nport = \"a\"\nip = \"2001:db8:76:1::1/64\"\n\
         [[address]]\nport = \"b\"\nip = \"10.76.2.1/24\"\n\
         [[address]]\nport = \"b\"\nip = \"2001:db8:76:2::1/64\"\n",
        a.root, b.root
    );
    let mut q = Quiver::start_at(&dir, "routed-ipv6", &config, &dir.path("admin.sock"));

    // Across, both families, both ways: each side's first ping waits for neighbour discovery
    // (the kernel's solicitation of Quiver's address, Quiver's of the host's).
    ping_until_answered(&mut q, &a, "2001:db8:76:2::2");
    ping_until_answered(&mut q, &b, "2001:db8:76:1::2");
    ping_until_answered(&mut q, &a, "10.76.2.2");
    // Quiver's own addresses answer, the global and the link-local one (on its link).
    assert!(ping(&a, "2001:db8:76:1::1", &[]).0);
    let ll_a = link_local(&q, "a");
    assert!(ping(&a, &format!("{ll_a}%veth0"), &[]).0, "{ll_a}");

    // Neighbour discovery both ways: the kernel knows Quiver's address at port a's MAC, and
    // Quiver has learned both hosts.
    let interfaces = q.json(&["show", "interfaces"]);
    let mac_a = support::one(&interfaces, "name", "a")["mac"]
        .as_str()
        .unwrap()
        .to_string();
    let kernel = kernel_neighbour(&a, "2001:db8:76:1::1");
    assert!(kernel.contains(&mac_a), "{kernel} (port a is {mac_a})");
    let neighbours = q.json(&["show", "neighbors"]);
    for (port, host) in [("a", "2001:db8:76:1::2"), ("b", "2001:db8:76:2::2")] {
        let n = support::one(&neighbours, "ip", host);
        assert_eq!(n["interface"], port, "{neighbours}");
        let state = n["state"].as_str().unwrap();
        assert!(
            state == "reachable" || state.starts_with("probing"),
            "learned, so aged (not static): {neighbours}"
        );
    }

    // The hop limit: a packet that arrives with one hop left is Quiver's to refuse, by an
    // ICMPv6 Time Exceeded from its address on a's link.
    let (ok, text) = ping(&a, "2001:db8:76:2::2", &["-t", "1"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("From 2001:db8:76:1::1") && text.contains("Time exceeded"),
        "{text}"
    );

    // The MTU: 1400 bytes do not fit b's 1280. Quiver answers Packet Too Big with b's MTU;
    // the kernel takes it (its route to b's host then carries mtu 1280) and fragments the next
    // ping itself, which then crosses.
    let (ok, text) = ping(&a, "2001:db8:76:2::2", &["-s", "1352", "-M", "do"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("Packet too big") && text.contains("mtu=1280"),
        "{text}"
    );
    let cached = exec(&a, &[IP, "-6", "route", "get", "2001:db8:76:2::2"]);
    let cached = String::from_utf8_lossy(&cached.stdout).to_string();
    assert!(cached.contains("mtu 1280"), "{cached}");
    assert!(ping(&a, "2001:db8:76:2::2", &["-s", "1352"]).0);
    assert!(error_count(&q, "ip6-rewrite", "packet-too-big") >= 1);
    assert!(error_count(&q, "ip6-rewrite", "hop-limit-exceeded") >= 1);

    // TCP across both ways of IPv6, as iperf3 measures it.
    let server = Command::new(IP)
        .args([
            "netns",
            "exec",
            &b.ns,
            IPERF3,
            "-s",
            "-1",
            "-B",
            "2001:db8:76:2::2",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut server = KillOnDrop(server);
    let out = iperf3_client(&mut server, &a, &b, "2001:db8:76:2::2");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let received = report["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    assert!(received > 1_000_000, "{report}");

    // A route through a link-local next hop, added while Quiver runs: b's host answers for
    // 2001:db8:77::1 on its loopback, and Quiver reaches it via b's link-local address.
    ip_in(
        &b,
        &["-6", "addr", "add", "2001:db8:77::1/128", "dev", "lo"],
    );
    let ll_b_host = {
        let out = exec(
            &b,
            &[
                IP, "-6", "-o", "addr", "show", "dev", "veth0", "scope", "link",
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.split_whitespace()
            .skip_while(|w| *w != "inet6")
            .nth(1)
            .unwrap_or_else(|| panic!("no link-local address on b's veth0: {text}"))
            .split('/')
            .next()
            .unwrap()
            .to_string()
    };
    let added = q.ctl(&[
        "route",
        "add",
        "2001:db8:77::/48",
        "--via",
        &format!("{ll_b_host}@b"),
    ]);
    assert!(added.status.success(), "{added:?}");
    ping_until_answered(&mut q, &a, "2001:db8:77::1");
    let fib = q.json(&["show", "fib"]);
    let route = support::one(&fib, "prefix", "2001:db8:77::/48");
    assert_eq!(route["paths"][0]["next_hop"], ll_b_host.as_str(), "{route}");
    assert_eq!(route["paths"][0]["kind"], "rewrite", "{route}");

    // An address added and removed with quiver ctl answers, then no longer does.
    let ok = q.ctl(&["address", "add", "a", "2001:db8:76:1::9/64"]);
    assert!(ok.status.success(), "{ok:?}");
    assert!(ping(&a, "2001:db8:76:1::9", &[]).0);
    let ok = q.ctl(&["address", "del", "a", "2001:db8:76:1::9/64"]);
    assert!(ok.status.success(), "{ok:?}");
    assert!(!ping(&a, "2001:db8:76:1::9", &[]).0);
    q.stop();
}

/// A child process killed when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `iperf3 -6 -c to -J` from `side` for a second, once `server`'s namespace listens on
/// iperf3's port.
fn iperf3_client(
    server: &mut KillOnDrop,
    side: &Side,
    server_side: &Side,
    to: &str,
) -> std::process::Output {
    testkit::wait_for("iperf3 -s to listen", 10, || {
        assert!(server.0.try_wait().unwrap().is_none(), "iperf3 -s exited");
        let out = exec(server_side, &["/usr/bin/ss", "-H", "-ltn", "sport = :5201"]);
        !out.stdout.is_empty()
    });
    let out = exec(side, &[IPERF3, "-6", "-c", to, "-t", "1", "-J"]);
    assert!(
        out.status.success(),
        "iperf3 failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    out
}
