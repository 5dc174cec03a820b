//! Malformed IPv6 from a peer on Quiver's link, as `quiver run` meets it on an AF_PACKET port:
//! namespace a's host sends, with scapy (`support/ipv6_bad_input.py`, frames built by an IPv6
//! implementation that is not Quiver's), truncated headers, payload lengths that lie (longer
//! than the frame: refused; shorter: the packet is its payload length's, and the echo reply to
//! it carries none of the bytes after), an extension-header chain past the bound of 8, a
//! hop-by-hop header not first, extension headers cut short, a link-local source to be routed
//! off its link, neighbour discovery with options of length 0 and past the end, a
//! solicitation for a multicast target, duplicate address detection with a link-layer
//! address, a solicitation with hop limit 64, bad ICMPv6 checksums (neighbour discovery's and
//! an echo request's to our address). Afterwards each is counted under its reason by name in
//! `quiver ctl --json show errors`, exactly as many as were sent; forwarding goes on (ping -6
//! across both ways and to Quiver); and no buffer is lost (none in use after stop).

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::side::{run, Side, IP, PING};
use support::{Quiver, Scratch};
use testkit::{require, unavailable, wait_for, Needs, SYSTEM_PYTHON};

/// The scapy peer.
const PEER_PY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/support/ipv6_bad_input.py"
);

/// Quiver's and the hosts' addresses.
const QUIVER_A: &str = "2001:db8:78:1::1";
const HOST_A: &str = "2001:db8:78:1::2";
const QUIVER_B: &str = "2001:db8:78:2::1";
const HOST_B: &str = "2001:db8:78:2::2";

/// Each case the peer sends once, with the node and reason Quiver must count it under.
const REFUSED: &[(&str, &str, &str)] = &[
    ("truncated-header", "ip6-input", "too-short"),
    ("bad-version", "ip6-input", "bad-version"),
    ("payload-length-longer", "ip6-input", "truncated"),
    ("multicast-source", "ip6-input", "bad-source"),
    (
        "nine-extension-headers",
        "ip6-input",
        "extension-headers-past-bound",
    ),
    (
        "hop-by-hop-not-first",
        "ip6-input",
        "extension-headers-past-bound",
    ),
    (
        "extension-header-cut",
        "ip6-input",
        "extension-header-truncated",
    ),
    (
        "extension-header-past-packet",
        "ip6-input",
        "extension-header-truncated",
    ),
    (
        "link-local-source-routed",
        "ip6-rewrite",
        "link-local-source",
    ),
    ("ns-option-length-zero", "ip6-nd", "malformed"),
    ("ns-option-past-end", "ip6-nd", "malformed"),
    ("na-option-length-zero", "ip6-nd", "malformed"),
    ("ns-multicast-target", "ip6-nd", "malformed"),
    ("dad-ns-with-link-layer-address", "ip6-nd", "malformed"),
    ("ns-hop-limit-64", "ip6-nd", "bad-hop-limit"),
    ("ns-bad-checksum", "ip6-nd", "bad-checksum"),
    ("echo-bad-checksum", "ip6-local", "bad-icmp"),
];

/// The case that is answered: an echo request with 32 bytes after its packet.
const SHORTER: &str = "payload-length-shorter";

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

/// Whether one ping -6 from `side` to `to` is answered within a second; what ping printed.
fn ping(side: &Side, to: &str) -> (bool, String) {
    let out = exec(side, &[PING, "-6", "-n", "-c", "1", "-W", "1", to]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Pings until one is answered (the first waits for neighbour discovery).
fn ping_until_answered(q: &mut Quiver, side: &Side, to: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, text) = ping(side, to);
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

/// Every error counter of `show errors --json`: (node, reason) and its count.
fn errors(q: &Quiver) -> Vec<((String, String), u64)> {
    let errors = q.json(&["show", "errors"]);
    errors
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let name = |k: &str| e[k].as_str().unwrap().to_string();
            ((name("node"), name("reason")), e["count"].as_u64().unwrap())
        })
        .collect()
}

/// The count of `node`'s `reason` in `errors` (summed over workers; 0 when absent).
fn count(errors: &[((String, String), u64)], node: &str, reason: &str) -> u64 {
    errors
        .iter()
        .filter(|((n, r), _)| n == node && r == reason)
        .map(|(_, c)| c)
        .sum()
}

/// A namespace's IPv6 stack set up as a host's: `addr` without duplicate address detection,
/// the default route via `gateway`.
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

/// The MAC of `ifname` in `side`'s namespace.
fn mac_in(side: &Side, ifname: &str) -> String {
    let out = exec(side, &["cat", &format!("/sys/class/net/{ifname}/address")]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn malformed_ipv6_from_the_link_is_counted_by_name_and_forwarding_goes_on() {
    let test = "malformed_ipv6_from_the_link_is_counted_by_name_and_forwarding_goes_on";
    if !require(
        test,
        &Needs {
            root: true,
            tools: &[IP, PING, SYSTEM_PYTHON],
            ..Needs::default()
        },
    ) {
        return;
    }
    let scapy = Command::new(SYSTEM_PYTHON)
        .args(["-c", "import scapy.all"])
        .output()
        .unwrap();
    if !scapy.status.success() {
        unavailable(test, "scapy is not installed (Debian's python3-scapy)");
        return;
    }
    let a = Side::new("r6x", "a", "10.78.1.2/24");
    let b = Side::new("r6x", "b", "10.78.2.2/24");
    host6(&a, &format!("{HOST_A}/64"), QUIVER_A);
    host6(&b, &format!("{HOST_B}/64"), QUIVER_B);

    let dir = Scratch::new("routed-ipv6-bad-input");
    let config = format!(
        "[dataplane]\ncores = [1]\nidle = \"adaptive\"\n[buffers]\ncount = 4096\n\
         hugepages = \"never\"\n[stats]\ninterval_secs = 0\n\
         [[port]]\nname = \"a\"\ntype = \"af_packet\"\ninterface = \"{}\"\n\
         [[port]]\nname = \"b\"\ntype = \"af_packet\"\ninterface = \"{}\"\n\
         [[address]]\nport = \"a\"\nip = \"{QUIVER_A}/64\"\n\
         [[address]]\nport = \"b\"\nip = \"{QUIVER_B}/64\"\n",
        a.root, b.root
    );
    let mut q = Quiver::start_at(&dir, "bad-input", &config, &dir.path("admin.sock"));

    // Forwarding works before, and Quiver knows a's host (its echo reply needs no discovery).
    ping_until_answered(&mut q, &a, HOST_B);
    ping_until_answered(&mut q, &a, QUIVER_A);
    let interfaces = q.json(&["show", "interfaces"]);
    let quiver_mac = support::one(&interfaces, "name", "a")["mac"]
        .as_str()
        .unwrap()
        .to_string();
    let host_mac = mac_in(&a, "veth0");
    let before = errors(&q);

    let mut args = vec![
        PEER_PY,
        "veth0",
        &host_mac,
        &quiver_mac,
        HOST_A,
        QUIVER_A,
        HOST_B,
    ];
    args.extend(REFUSED.iter().map(|&(case, _, _)| case));
    args.push(SHORTER);
    let mut all = vec![SYSTEM_PYTHON];
    all.extend_from_slice(&args);
    let out = exec(&a, &all);
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "the scapy peer failed: {printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for &(case, _, _) in REFUSED.iter().chain([&(SHORTER, "", "")]) {
        assert!(
            printed
                .lines()
                .any(|l| l.starts_with(&format!("sent {case} "))),
            "{case} not sent: {printed}"
        );
    }

    // The payload length that is shorter than the frame: the packet is what it says (its
    // checksum verifies over that), answered by an echo reply of the same 24 bytes of ICMPv6
    // and nothing after them.
    let reply = printed
        .lines()
        .find(|l| l.starts_with("reply "))
        .unwrap_or_default();
    assert_eq!(reply, "reply 78 24 ok", "{printed}");

    // Each refused frame counted under its reason, exactly once; the shorter one answered.
    let mut want: Vec<((&str, &str), u64)> = Vec::new();
    for &(_, node, reason) in REFUSED {
        match want.iter_mut().find(|(k, _)| *k == (node, reason)) {
            Some((_, n)) => *n += 1,
            None => want.push(((node, reason), 1)),
        }
    }
    want.push((("ip6-local", "echo-replies"), 1));
    let delta = |now: &[((String, String), u64)], node: &str, reason: &str| {
        count(now, node, reason) - count(&before, node, reason)
    };
    let total: u64 = want.iter().map(|(_, n)| n).sum();
    let mut now = Vec::new();
    wait_for("every bad frame to be counted", 10, || {
        now = errors(&q);
        want.iter()
            .map(|((n, r), _)| delta(&now, n, r))
            .sum::<u64>()
            >= total
    });
    for ((node, reason), n) in &want {
        assert_eq!(delta(&now, node, reason), *n, "{node} {reason}: {now:?}");
    }
    // Nothing was learned from what was refused: Quiver's only IPv6 neighbours are the hosts.
    let neighbours = q.json(&["show", "neighbors"]);
    for n in neighbours.as_array().unwrap() {
        let ip = n["ip"].as_str().unwrap();
        assert!(
            !ip.contains(':') || ip == HOST_A || ip == HOST_B || ip.starts_with("fe80:"),
            "{neighbours}"
        );
    }

    // Forwarding goes on, both ways, and Quiver still answers.
    assert!(ping(&a, HOST_B).0, "a to b after the bad frames");
    assert!(ping(&b, HOST_A).0, "b to a after the bad frames");
    assert!(ping(&a, QUIVER_A).0, "a to Quiver after the bad frames");

    let (stdout, _) = q.stop();
    assert!(
        stdout.contains("buffers: 0 in use after stop"),
        "buffers lost:\n{stdout}"
    );
}
