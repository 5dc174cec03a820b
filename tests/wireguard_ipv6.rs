//! IPv6 inside WireGuard against wireguard-go and boringtun: namespace A (a host) —veth— Quiver
//! —veth underlay— namespace B, where the peer runs on a TUN with both families
//! (`wireguard_support`). Quiver's tunnel allows both families toward the peer and is L3
//! cross-connected to A's port, as NSM's IP connections are (Quiver carries IPv6 through L3
//! cross-connects): A pings B's IPv6 tunnel address (Quiver initiates), the peer is restarted
//! and B pings A over IPv6 (the peer initiates), a TCP transfer over IPv6 is checked for
//! content, and each hop decrements the hop limit once. An IPv6 source the peer is not allowed
//! is refused by name. Needs root, ip, ping, wg, python3, Go.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use quiver::control::owner::{Change, Control};
use quiver::Config;
use testkit::wg_peers::Peer;
use testkit::{require, wait_for, Needs};

mod wireguard_support;

use wireguard_support::{
    errors, genkey, say, start_forwarder, PeerProcess, Side, IP, ONE_AT_A_TIME, PING, PYTHON,
    TCP_CHECK, WG,
};

#[test]
fn ipv6_through_a_tunnel_to_wireguard_go() {
    ipv6_end_to_end(Peer::WireguardGo, "6g");
}

#[test]
fn ipv6_through_a_tunnel_to_boringtun() {
    ipv6_end_to_end(Peer::Boringtun, "6b");
}

/// One ping over IPv6 from `side` to `to`: its reply line, if one came.
fn ping6(side: &Side, to: &str) -> Option<String> {
    let out = Command::new(IP)
        .args([
            "netns", "exec", &side.ns, PING, "-6", "-n", "-c", "1", "-W", "2", to,
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("bytes from"))
        .map(str::to_string)
}

fn ipv6_end_to_end(peer: Peer, tag: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let test = format!("wireguard_ipv6_{}", peer.name());
    if !require(
        &test,
        &Needs {
            root: true,
            tools: &[IP, PING, WG, PYTHON],
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
    let a = Side::new(&format!("a{tag}"), "10.81.1.1/24", None);
    let b = Side::new(&format!("b{tag}"), "192.168.81.2/24", None);
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
port = "pb"
ip = "192.168.81.1/24"
[[wireguard]]
name = "wg0"
private_key = "{quiver_private}"
listen_port = 51821
address = "192.168.81.1"
[[wireguard.peers]]
public_key = "{peer_public}"
endpoint = "192.168.81.2:51820"
allowed_ips = ["10.81.9.0/24", "fd00:81:9::/64"]
"#,
        a = a.root,
        b = b.root,
    ))
    .unwrap();
    let owner = start_forwarder(&cfg);
    let f = owner.control();
    let status = |f: &Control| f.inspect(|fw| fw.wireguard_status()).unwrap().remove(0);
    let shown = &status(&f).peers[0].allowed_ips;
    assert_eq!(
        shown,
        &["10.81.9.0/24", "fd00:81:9::/64"],
        "both families shown"
    );
    // B reaches Quiver on the underlay (so Quiver knows its MAC).
    wait_for("B pings Quiver", 20, || b.ping("192.168.81.1"));

    // A's port and the tunnel L3 cross-connected: A's IPv6 goes into the tunnel whatever its
    // destination, and what the tunnel opens goes to A's address (resolved by ARP).
    f.apply(Change::L3CrossConnect {
        a: "pa".into(),
        b: "wg0".into(),
        peer_b: "10.81.9.2".parse::<Ipv4Addr>().unwrap().into(),
        peer_a: "10.81.1.1".parse::<Ipv4Addr>().unwrap().into(),
        owner: None,
    })
    .unwrap();
    // A: an IPv6 address, its route to B's tunnel subnet through Quiver's port (a static
    // neighbour: Quiver does not answer neighbour discovery through a cross-connect).
    let quiver_mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", a.root))
        .expect("the port's MAC")
        .trim()
        .to_string();
    a.ip(&["addr", "add", "fd00:81:1::1/64", "dev", "veth0", "nodad"]);
    a.ip(&["route", "add", "fd00:81:9::/64", "via", "fd00:81:1::fe"]);
    a.ip(&[
        "neigh",
        "add",
        "fd00:81:1::fe",
        "lladdr",
        &quiver_mac,
        "dev",
        "veth0",
        "nud",
        "permanent",
    ]);

    // 1. Quiver initiates: A's IPv6 ping finds no session.
    let go = PeerProcess::start(peer, &bin, &b, &ifname, &key_file, &quiver_public);
    let mut reply = None;
    wait_for(
        "A pings B's IPv6 tunnel address (Quiver initiates)",
        30,
        || {
            reply = ping6(&a, "fd00:81:9::2");
            reply.is_some()
        },
    );
    let reply = reply.expect("waited for");
    // B's TUN is the host: its reply left with 64 and crossed Quiver once.
    assert!(reply.contains("ttl=63"), "one hop each way: {reply}");
    let s = status(&f);
    assert!(s.peers[0].handshakes >= 1 && s.peers[0].initiations_sent >= 1);

    // 2. The peer initiates: restarted, it has no session; B's IPv6 ping makes it handshake.
    drop(go);
    let sent_before = status(&f).peers[0].initiations_sent;
    let handshakes_before = status(&f).peers[0].handshakes;
    let _go = PeerProcess::start(peer, &bin, &b, &ifname, &key_file, &quiver_public);
    wait_for("B pings A over IPv6 (the peer initiates)", 30, || {
        ping6(&b, "fd00:81:1::1").is_some()
    });
    let s = status(&f);
    say(&format!("after {}'s initiation: {s:?}", peer.name()));
    assert!(s.peers[0].handshakes > handshakes_before);
    assert_eq!(
        s.peers[0].initiations_sent, sent_before,
        "the peer initiated, not Quiver"
    );

    // 3. TCP over IPv6 from A to B, checked for content. A's link MTU is the tunnel's.
    a.ip(&["link", "set", "veth0", "mtu", "1440"]);
    let mut server = Command::new(IP)
        .args([
            "netns",
            "exec",
            &b.ns,
            PYTHON,
            TCP_CHECK,
            "server",
            "fd00:81:9::2",
            "5202",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    wait_for("B's TCP server to listen", 10, || {
        let tcp = b.exec(&["cat", "/proc/net/tcp6"]);
        // Port 5202 (0x1452) in the LISTEN state (0A).
        String::from_utf8_lossy(&tcp.stdout)
            .lines()
            .any(|l| l.contains(":1452 ") && l.split_whitespace().nth(3) == Some("0A"))
    });
    let client = a.exec(&[
        PYTHON,
        TCP_CHECK,
        "client",
        "fd00:81:9::2",
        "5202",
        &(4u32 << 20).to_string(),
    ]);
    say(&format!(
        "TCP over IPv6: {}",
        String::from_utf8_lossy(&client.stdout).trim()
    ));
    assert!(String::from_utf8_lossy(&client.stdout).contains("content checked"));
    let _ = server.wait();

    // 4. An inner IPv6 source the peer is not allowed (outside A's fd00:81:1::/64 on its side,
    // so B's TUN sends it; Quiver's allowed IPs for the peer are fd00:81:9::/64) is refused.
    let before = errors(&f, "wg4-decrypt", "source-not-allowed");
    b.ip(&["addr", "add", "fd00:81:1::99/128", "dev", &ifname, "nodad"]);
    let _ = Command::new(IP)
        .args([
            "netns",
            "exec",
            &b.ns,
            PING,
            "-6",
            "-n",
            "-c",
            "1",
            "-W",
            "1",
            "-I",
            "fd00:81:1::99",
            "fd00:81:1::1",
        ])
        .output();
    wait_for("the spoofed IPv6 source counted", 10, || {
        errors(&f, "wg4-decrypt", "source-not-allowed") > before
    });
    assert!(
        ping6(&a, "fd00:81:9::2").is_some(),
        "the tunnel still works"
    );
    drop(owner);
}
