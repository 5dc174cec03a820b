//! Two tenants with the same addresses (IPv4 and IPv6) on two Quivers joined by WireGuard, a
//! tunnel each in the tenant's `[[table]]`: every tenant's namespace reaches its own peer and
//! never the other tenant's. Each `quiver run` has its tenants' ports and a `[[wireguard]]` tunnel per
//! tenant listed in that tenant's table (its routes point into the tunnel; what it decrypts
//! is routed there), over one underlay in the default table (a veth pair between the two
//! Quivers' AF_PACKET ports); the kernel's ping and its ICMP counters in each namespace are
//! the peers and the witnesses.

mod support;

use std::time::{Duration, Instant};

use support::side::{echoes6_received, echoes_received, run, Side, Underlay, IP, PING};
use support::{Quiver, Scratch};
use testkit::{require, Needs};
use wireguard::PrivateKey;

/// Pings `to` from `side` until one is answered (ARP on the tenant links and the first
/// handshake come first).
fn ping_until_answered(quivers: &mut [&mut Quiver], side: &Side, to: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !side.ping(to) {
        for q in quivers.iter_mut() {
            q.check_running();
        }
        assert!(Instant::now() < deadline, "{} never reached {to}", side.ns);
    }
}

/// Five pings from `side` to `to`: how many were answered.
fn pings(side: &Side, to: &str) -> usize {
    (0..5).filter(|_| side.ping(to)).count()
}

/// `ip4-lookup`'s no-route count at `q`.
fn no_route(q: &Quiver) -> u64 {
    q.json(&["show", "errors"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node"] == "ip4-lookup" && e["reason"] == "no-route")
        .map(|e| e["count"].as_u64().unwrap())
        .sum()
}

/// One Quiver's side of the tunnels: its underlay address and the far one's, and per tenant
/// (red, blue) its own key and the far tunnel's public key.
struct Tunnels<'a> {
    underlay_ip: &'a str,
    remote: &'a str,
    keys: [(&'a PrivateKey, &'a PrivateKey); 2],
}

/// One Quiver's configuration: tenant ports `red` and `blue` with `tenant_ips`, the underlay
/// port, a tunnel per tenant in its table (red on port 51830, blue 51831) whose peer may send
/// from `far_allowed` and is sent `routes` (either family), and what `more` adds.
fn config(
    core: u32,
    (red, blue, underlay): (&str, &str, &str),
    tunnels: &Tunnels<'_>,
    tenant_ips: &[&str],
    (far_allowed, routes): (&[&str], &[&str]),
    more: &str,
) -> String {
    let Tunnels {
        underlay_ip,
        remote,
        keys,
    } = tunnels;
    let mut c = format!(
        "[dataplane]\ncores = [{core}]\nidle = \"adaptive\"\n[buffers]\ncount = 4096\n\
         hugepages = \"never\"\n[stats]\ninterval_secs = 0\n\
         [[port]]\nname = \"red\"\ntype = \"af_packet\"\ninterface = \"{red}\"\n\
         [[port]]\nname = \"blue\"\ntype = \"af_packet\"\ninterface = \"{blue}\"\n\
         [[port]]\nname = \"underlay\"\ntype = \"af_packet\"\ninterface = \"{underlay}\"\n\
         [[address]]\nport = \"underlay\"\nip = \"{underlay_ip}/24\"\n"
    );
    let allowed: Vec<String> = far_allowed.iter().map(|a| format!("{a:?}")).collect();
    for ((tenant, port), (own, far)) in [("red", 51830), ("blue", 51831)].into_iter().zip(keys) {
        c += &format!(
            "[[wireguard]]\nname = \"wg-{tenant}\"\nprivate_key = \"{}\"\nlisten_port = {port}\n\
             address = \"{underlay_ip}\"\n\
             [[wireguard.peers]]\npublic_key = \"{}\"\nendpoint = \"{remote}:{port}\"\n\
             allowed_ips = [{}]\n\
             [[table]]\nname = \"{tenant}\"\ninterfaces = [\"{tenant}\", \"wg-{tenant}\"]\n",
            own.to_base64(),
            far.public_key().to_base64(),
            allowed.join(", "),
        );
        for ip in tenant_ips {
            c += &format!("[[address]]\nport = \"{tenant}\"\nip = \"{ip}\"\n");
        }
        for prefix in routes {
            // Any next hop of the prefix's family: the tunnel picks the peer.
            let hop = if prefix.contains(':') {
                "fd00::1"
            } else {
                "192.0.2.1"
            };
            c += &format!(
                "[[route]]\nprefix = \"{prefix}\"\ntable = \"{tenant}\"\n\
                 via = [\"{hop}@wg-{tenant}\"]\n"
            );
        }
    }
    c + more
}

#[test]
fn two_tenants_with_the_same_addresses_reach_only_their_own_peers_over_their_tunnels() {
    let test = "two_tenants_with_the_same_addresses_reach_only_their_own_peers_over_their_tunnels";
    if !require(
        test,
        &Needs {
            root: true,
            tools: &[IP, PING, "/usr/bin/nstat"],
            ..Needs::default()
        },
    ) {
        return;
    }
    // Node 1's tenants are 10.0.0.2 behind 10.0.0.1, node 2's 10.0.1.2 behind 10.0.1.1 — in
    // both tenants alike. Red's node-2 host also has 10.5.0.1, which only red's node 2
    // routes to; node 1 sends both tenants' packets for it into their tunnels.
    let red1 = Side::new("vw", "r1", "10.0.0.2/24");
    let blue1 = Side::new("vw", "b1", "10.0.0.2/24");
    let red2 = Side::new("vw", "r2", "10.0.1.2/24");
    let blue2 = Side::new("vw", "b2", "10.0.1.2/24");
    for (s, gw) in [
        (&red1, "10.0.0.1"),
        (&blue1, "10.0.0.1"),
        (&red2, "10.0.1.1"),
        (&blue2, "10.0.1.1"),
    ] {
        run(&[IP, "-n", &s.ns, "link", "set", "lo", "up"]);
        run(&[IP, "-n", &s.ns, "route", "add", "default", "via", gw]);
    }
    // IPv6 inside too: 2001:db8::2 behind 2001:db8::1, 2001:db8:1::2 behind 2001:db8:1::1.
    for (s, addr, gw) in [
        (&red1, "2001:db8::2/64", "2001:db8::1"),
        (&blue1, "2001:db8::2/64", "2001:db8::1"),
        (&red2, "2001:db8:1::2/64", "2001:db8:1::1"),
        (&blue2, "2001:db8:1::2/64", "2001:db8:1::1"),
    ] {
        run(&[
            IP,
            "netns",
            "exec",
            &s.ns,
            "sh",
            "-c",
            "echo 0 > /proc/sys/net/ipv6/conf/all/disable_ipv6; \
             echo 0 > /proc/sys/net/ipv6/conf/veth0/disable_ipv6",
        ]);
        let ns = s.ns.as_str();
        run(&[
            IP, "-n", ns, "-6", "addr", "add", addr, "dev", "veth0", "nodad",
        ]);
        run(&[IP, "-n", ns, "-6", "route", "add", "default", "via", gw]);
    }
    let lo = ["addr", "add", "10.5.0.1/32", "dev", "lo"];
    run(&[&[IP, "-n", red2.ns.as_str()][..], &lo].concat());
    let underlay = Underlay::pair();
    // A key per tunnel end: [node][tenant].
    let k: Vec<Vec<PrivateKey>> = (0..2)
        .map(|_| (0..2).map(|_| PrivateKey::random()).collect())
        .collect();

    let dir = Scratch::new("vrf-wireguard");
    let t1 = Tunnels {
        underlay_ip: "192.168.78.1",
        remote: "192.168.78.2",
        keys: [(&k[0][0], &k[1][0]), (&k[0][1], &k[1][1])],
    };
    let c1 = config(
        0,
        (&red1.root, &blue1.root, &underlay.a),
        &t1,
        &["10.0.0.1/24", "2001:db8::1/64"],
        (
            &["10.0.1.0/24", "10.5.0.0/16", "2001:db8:1::/64"],
            &["10.0.1.0/24", "10.5.0.0/16", "2001:db8:1::/64"],
        ),
        "",
    );
    let t2 = Tunnels {
        underlay_ip: "192.168.78.2",
        remote: "192.168.78.1",
        keys: [(&k[1][0], &k[0][0]), (&k[1][1], &k[0][1])],
    };
    let c2 = config(
        1,
        (&red2.root, &blue2.root, &underlay.b),
        &t2,
        &["10.0.1.1/24", "2001:db8:1::1/64"],
        (
            &["10.0.0.0/24", "2001:db8::/64"],
            &["10.0.0.0/24", "2001:db8::/64"],
        ),
        "[[route]]\nprefix = \"10.5.0.0/16\"\ntable = \"red\"\nvia = [\"10.0.1.2@red\"]\n",
    );
    let mut q1 = Quiver::start_at(&dir, "q1", &c1, &dir.path("q1.sock"));
    let mut q2 = Quiver::start_at(&dir, "q2", &c2, &dir.path("q2.sock"));

    // Each tenant reaches its own peer through its own tunnel...
    ping_until_answered(&mut [&mut q1, &mut q2], &red1, "10.0.1.2");
    ping_until_answered(&mut [&mut q1, &mut q2], &blue1, "10.0.1.2");
    // ...and only its own: red's pings are echoes at red's host, never blue's, and back.
    let (r0, b0) = (echoes_received(&red2), echoes_received(&blue2));
    assert_eq!(pings(&red1, "10.0.1.2"), 5);
    let (r1, b1) = (echoes_received(&red2), echoes_received(&blue2));
    assert!(
        r1 - r0 >= 5,
        "red's host answered red's pings ({r0} → {r1})"
    );
    assert_eq!(b1, b0, "blue's host saw none of red's pings");
    assert_eq!(pings(&blue1, "10.0.1.2"), 5);
    let (r2, b2) = (echoes_received(&red2), echoes_received(&blue2));
    assert_eq!(r2, r1, "red's host saw none of blue's pings");
    assert!(
        b2 - b1 >= 5,
        "blue's host answered blue's pings ({b1} → {b2})"
    );
    assert_eq!(pings(&blue2, "10.0.0.2"), 5, "and the other way");
    // IPv6 inside alike.
    ping_until_answered(&mut [&mut q1, &mut q2], &red1, "2001:db8:1::2");
    ping_until_answered(&mut [&mut q1, &mut q2], &blue1, "2001:db8:1::2");
    let (r0, b0) = (echoes6_received(&red2), echoes6_received(&blue2));
    assert_eq!(pings(&red1, "2001:db8:1::2"), 5);
    let (r1, b1) = (echoes6_received(&red2), echoes6_received(&blue2));
    assert!(r1 - r0 >= 5, "red's host answered red's IPv6 pings");
    assert_eq!(b1, b0, "blue's host saw none of red's IPv6 pings");
    assert_eq!(pings(&blue1, "2001:db8:1::2"), 5);
    assert_eq!(echoes6_received(&red2), r1, "red's host saw none of blue's");
    assert!(
        echoes6_received(&blue2) - b1 >= 5,
        "blue's host answered blue's"
    );
    assert_eq!(
        echoes_received(&red1),
        0,
        "red's node-1 host was never pinged"
    );

    // A prefix only red's node 2 routes: red reaches it; blue's packets for it cross blue's
    // tunnel and, decrypted, are looked up in node 2's blue table: no-route there (red's
    // table, which has the route, is never consulted).
    ping_until_answered(&mut [&mut q1, &mut q2], &red1, "10.5.0.1");
    let (before, red_echoes) = (no_route(&q2), echoes_received(&red2));
    assert_eq!(pings(&blue1, "10.5.0.1"), 0);
    assert!(
        no_route(&q2) >= before + 5,
        "blue's pings counted as no-route at node 2"
    );
    assert_eq!(echoes_received(&red2), red_echoes, "red's host saw none");

    // What the operator sees: each tunnel in its tenant's table, each route with its table.
    let tables = q2.json(&["show", "tables"]);
    let blue = support::one(&tables, "name", "blue");
    assert_eq!(
        blue["interfaces"],
        serde_json::json!(["blue", "wg-blue"]),
        "{tables}"
    );
    let fib = q1.json(&["show", "fib"]);
    let via = |table: &str, prefix: &str| {
        fib.as_array()
            .unwrap()
            .iter()
            .find(|r| r["table"] == table && r["prefix"] == prefix)
            .map(|r| r["paths"][0]["interface"].clone())
    };
    assert_eq!(via("red", "10.5.0.0/16"), Some("wg-red".into()), "{fib}");
    assert_eq!(via("blue", "10.5.0.0/16"), Some("wg-blue".into()), "{fib}");
    assert_eq!(via("default", "10.5.0.0/16"), None, "{fib}");
    q1.stop();
    q2.stop();
}
