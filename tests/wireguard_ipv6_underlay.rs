//! WireGuard over an IPv6 underlay against wireguard-go and boringtun: namespace A (a host
//! with both families) —veth— Quiver —veth underlay, IPv6 only— namespace B, where the peer
//! runs on a TUN (`wireguard_support`) and knows Quiver as `[2001:db8:81::1]:51821`. Quiver
//! routes A's IPv4 and IPv6 into the tunnel. Quiver initiates (A pings), then the restarted
//! peer does (B pings); both inner families cross, each hop once; a full-size inner packet
//! (the tunnel's MTU: the underlay's 1500 less WireGuard over IPv6's 80) crosses with DF set
//! (padding to 16 stops at the MTU, as the protocol says, or it would not fit); the outer
//! traffic is IPv6 only (`wg6-encrypt`/`wg6-decrypt` count it, the IPv4 nodes
//! nothing) and the peer sees Quiver's IPv6 endpoint. Needs root, ip, ping, wg, Go.

use std::process::Command;

use quiver::control::owner::Control;
use quiver::Config;
use testkit::wg_peers::Peer;
use testkit::{require, wait_for, Needs};

// Shared with the other WireGuard tests, which use what this one does not.
#[allow(dead_code)]
mod wireguard_support;

use wireguard_support::{
    genkey, node_packets, say, start_forwarder, PeerProcess, Side, IP, ONE_AT_A_TIME, PING, WG,
};

#[test]
fn both_families_through_a_tunnel_over_ipv6_to_wireguard_go() {
    over_ipv6_underlay(Peer::WireguardGo, "ug");
}

#[test]
fn both_families_through_a_tunnel_over_ipv6_to_boringtun() {
    over_ipv6_underlay(Peer::Boringtun, "ub");
}

/// One ping from `side` to `to` (`extra` before the address): its reply line, if one came.
fn ping(side: &Side, extra: &[&str], to: &str) -> Option<String> {
    let out = Command::new(IP)
        .args(["netns", "exec", &side.ns, PING, "-n", "-c", "1", "-W", "2"])
        .args(extra)
        .arg(to)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("bytes from"))
        .map(str::to_string)
}

fn over_ipv6_underlay(peer: Peer, tag: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let test = format!("wireguard_ipv6_underlay_{}", peer.name());
    if !require(
        &test,
        &Needs {
            root: true,
            tools: &[IP, PING, WG],
            ..Needs::default()
        },
    ) {
        return;
    }
    let bin = match peer.binary() {
        Ok(b) => b,
        Err(why) => {
            testkit::unavailable(&test, &format!("cannot build {}: {why}", peer.name()));
            return;
        }
    };
    let a = Side::new(&format!("a{tag}"), "10.81.1.1/24", Some("10.81.1.254"));
    a.ip(&["addr", "add", "fd00:81:1::1/64", "dev", "veth0", "nodad"]);
    a.ip(&["route", "add", "default", "via", "fd00:81:1::fe"]);
    // B's underlay is IPv6 only (the IPv4 address Side wants is on lo, out of the way).
    let b = Side::new(&format!("b{tag}"), "127.0.0.2/8", None);
    b.ip(&["addr", "add", "2001:db8:81::2/64", "dev", "veth0", "nodad"]);
    let (quiver_private, quiver_public) = genkey();
    let (peer_private, peer_public) = genkey();
    let ifname = format!("wq{tag}{}", std::process::id() % 100_000);
    let key_file = format!("/tmp/{ifname}.key");
    std::fs::write(&key_file, format!("{peer_private}\n")).expect("key file");

    let cfg = Config::parse(&format!(
        r#"
[buffers]
hugepages = "never"
[[port]]
name = "pa"
type = "af_packet"
interface = "{a}"
[[port]]
name = "pb"
type = "af_packet"
interface = "{b}"
[[address]]
port = "pa"
ip = "10.81.1.254/24"
[[address]]
port = "pa"
ip = "fd00:81:1::fe/64"
[[address]]
port = "pb"
ip = "2001:db8:81::1/64"
[[wireguard]]
name = "wg0"
private_key = "{quiver_private}"
listen_port = 51821
address = "2001:db8:81::1"
[[wireguard.peers]]
public_key = "{peer_public}"
endpoint = "[2001:db8:81::2]:51820"
allowed_ips = ["10.81.9.0/24", "fd00:81:9::/64"]
[[route]]
prefix = "10.81.9.0/24"
via = ["10.81.9.2@wg0"]
[[route]]
prefix = "fd00:81:9::/64"
via = ["fd00:81:9::2@wg0"]
"#,
        a = a.root,
        b = b.root,
    ))
    .unwrap();
    let owner = start_forwarder(&cfg);
    let f = owner.control();
    let status = |f: &Control| f.inspect(|fw| fw.wireguard_status()).unwrap().remove(0);
    let s = status(&f);
    assert_eq!(s.listen, "[2001:db8:81::1]:51821".parse().unwrap());
    assert_eq!(
        s.peers[0].endpoint,
        Some("[2001:db8:81::2]:51820".parse().unwrap())
    );
    // Both namespaces reach Quiver (neighbour discovery and ARP both ways).
    wait_for("A pings Quiver", 20, || {
        ping(&a, &[], "10.81.1.254").is_some()
    });
    wait_for("A pings Quiver over IPv6", 20, || {
        ping(&a, &["-6"], "fd00:81:1::fe").is_some()
    });
    wait_for("B pings Quiver over IPv6", 20, || {
        ping(&b, &["-6"], "2001:db8:81::1").is_some()
    });

    // 1. Quiver initiates: A's ping finds no session; both families then cross.
    let go = PeerProcess::start_to(
        peer,
        &bin,
        &b,
        &ifname,
        (&key_file, &quiver_public),
        "[2001:db8:81::1]:51821",
    );
    let mut reply = None;
    wait_for("A pings B's tunnel address (Quiver initiates)", 30, || {
        reply = ping(&a, &[], "10.81.9.2");
        reply.is_some()
    });
    let reply = reply.expect("waited for");
    assert!(reply.contains("ttl=63"), "one hop: {reply}");
    let reply6 = ping(&a, &["-6"], "fd00:81:9::2").expect("IPv6 through the same session");
    assert!(reply6.contains("ttl=63"), "one hop: {reply6}");
    let s = status(&f);
    assert!(s.peers[0].handshakes >= 1 && s.peers[0].initiations_sent >= 1);
    let endpoints = b.exec(&[WG, "show", &ifname, "endpoints"]);
    let endpoints = String::from_utf8_lossy(&endpoints.stdout);
    assert!(
        endpoints.contains("[2001:db8:81::1]:51821"),
        "the peer's view of Quiver: {endpoints}"
    );

    // 2. The peer initiates: restarted, it has no session; B's pings make it handshake.
    drop(go);
    let sent_before = status(&f).peers[0].initiations_sent;
    let handshakes_before = status(&f).peers[0].handshakes;
    let _go = PeerProcess::start_to(
        peer,
        &bin,
        &b,
        &ifname,
        (&key_file, &quiver_public),
        "[2001:db8:81::1]:51821",
    );
    wait_for("B pings A over IPv6 (the peer initiates)", 30, || {
        ping(&b, &["-6"], "fd00:81:1::1").is_some()
    });
    assert!(ping(&b, &[], "10.81.1.1").is_some(), "and over IPv4");
    let s = status(&f);
    say(&format!("after {}'s initiation: {s:?}", peer.name()));
    assert!(s.peers[0].handshakes > handshakes_before);
    assert_eq!(
        s.peers[0].initiations_sent, sent_before,
        "the peer initiated, not Quiver"
    );

    // 3. A full-size inner packet with DF: the tunnel's MTU is 1500 - 80 = 1420, so a
    // 1420-byte IPv4 packet (1392 bytes of ICMP data) fits the 1500-byte underlay.
    b.ip(&["link", "set", &ifname, "mtu", "1420"]);
    let big = ping(&a, &["-M", "do", "-s", "1392"], "10.81.9.2");
    assert!(big.is_some(), "a 1420-byte packet crosses with DF");

    // 4. The outer traffic was IPv6 only.
    let (enc6, dec6) = (
        node_packets(&f, "wg6-encrypt"),
        node_packets(&f, "wg6-decrypt"),
    );
    let (enc4, dec4) = (
        node_packets(&f, "wg4-encrypt"),
        node_packets(&f, "wg4-decrypt"),
    );
    say(&format!(
        "wg6-encrypt {enc6}, wg6-decrypt {dec6}, wg4-encrypt {enc4}, wg4-decrypt {dec4}"
    ));
    assert!(enc6 >= 4 && dec6 >= 4, "over IPv6: {enc6} {dec6}");
    assert_eq!((enc4, dec4), (0, 0), "nothing over IPv4");
    drop(owner);
}
