//! Two tenants with the same addresses on two Quivers joined by VXLAN, a VNI each: every
//! tenant's namespaces reach their own peer and never the other tenant's. Each `quiver run`
//! has its tenants' ports and a routed `[[vxlan]]` tunnel per tenant in that tenant's
//! `[[table]]`, over one underlay (a veth pair between the two Quivers' AF_PACKET ports); the
//! kernel's ping and its ICMP counters in each namespace are the peers and the witnesses.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::side::{echoes_received, run, Side, Underlay, IP, PING};
use support::{Quiver, Scratch};
use testkit::{require, Needs};

/// Pings `to` from `side` until one is answered (ARP on both tenant links and across the
/// tunnel comes first).
fn ping_until_answered(quivers: &mut [&mut Quiver], side: &Side, to: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
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

/// One Quiver's configuration: tenant ports `red` and `blue` on the sides' veths with
/// `tenant_ip`, the underlay port with `underlay_ip`, a routed tunnel per tenant to `remote`
/// (VNI 100 red, 200 blue) with `tunnel_ip` in 172.31.0.0/30, routes to `far_subnet` through
/// each tunnel, and what `more` adds.
fn config(
    core: u32,
    (red, blue, underlay): (&str, &str, &str),
    (tenant_ip, underlay_ip, remote, tunnel_ip, far_tunnel_ip, far_subnet): (
        &str,
        &str,
        &str,
        &str,
        &str,
        &str,
    ),
    more: &str,
) -> String {
    let mut c = format!(
        "[dataplane]\ncores = [{core}]\nidle = \"adaptive\"\n[buffers]\ncount = 4096\n\
         hugepages = \"never\"\n[stats]\ninterval_secs = 0\n\
         [[port]]\nname = \"red\"\ntype = \"af_packet\"\ninterface = \"{red}\"\n\
         [[port]]\nname = \"blue\"\ntype = \"af_packet\"\ninterface = \"{blue}\"\n\
         [[port]]\nname = \"underlay\"\ntype = \"af_packet\"\ninterface = \"{underlay}\"\n\
         [[address]]\nport = \"underlay\"\nip = \"{underlay_ip}/24\"\n"
    );
    for (tenant, vni) in [("red", 100), ("blue", 200)] {
        c += &format!(
            "[[vxlan]]\nname = \"vx-{tenant}\"\nlocal = \"{underlay_ip}\"\nremote = \"{remote}\"\n\
             vni = {vni}\nrouted = true\n\
             [[table]]\nname = \"{tenant}\"\ninterfaces = [\"{tenant}\", \"vx-{tenant}\"]\n\
             [[address]]\nport = \"{tenant}\"\nip = \"{tenant_ip}\"\n\
             [[address]]\nport = \"vx-{tenant}\"\nip = \"{tunnel_ip}/30\"\n\
             [[route]]\nprefix = \"{far_subnet}\"\ntable = \"{tenant}\"\n\
             via = [\"{far_tunnel_ip}@vx-{tenant}\"]\n"
        );
    }
    c + more
}

#[test]
fn two_tenants_with_the_same_addresses_reach_only_their_own_peers_over_their_vni() {
    let test = "two_tenants_with_the_same_addresses_reach_only_their_own_peers_over_their_vni";
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
    // both tenants alike. Red's node-2 host also has 10.5.0.1, which only red routes to.
    let red1 = Side::new("vv", "r1", "10.0.0.2/24");
    let blue1 = Side::new("vv", "b1", "10.0.0.2/24");
    let red2 = Side::new("vv", "r2", "10.0.1.2/24");
    let blue2 = Side::new("vv", "b2", "10.0.1.2/24");
    for (s, gw) in [
        (&red1, "10.0.0.1"),
        (&blue1, "10.0.0.1"),
        (&red2, "10.0.1.1"),
        (&blue2, "10.0.1.1"),
    ] {
        run(&[IP, "-n", &s.ns, "link", "set", "lo", "up"]);
        run(&[IP, "-n", &s.ns, "route", "add", "default", "via", gw]);
    }
    run(&[
        IP,
        "-n",
        &red2.ns,
        "addr",
        "add",
        "10.5.0.1/32",
        "dev",
        "lo",
    ]);
    let underlay = Underlay::pair();

    let dir = Scratch::new("vrf-vxlan");
    let c1 = config(
        0,
        (&red1.root, &blue1.root, &underlay.a),
        (
            "10.0.0.1/24",
            "192.168.77.1",
            "192.168.77.2",
            "172.31.0.1",
            "172.31.0.2",
            "10.0.1.0/24",
        ),
        "[[route]]\nprefix = \"10.5.0.0/16\"\ntable = \"red\"\nvia = [\"172.31.0.2@vx-red\"]\n",
    );
    let c2 = config(
        1,
        (&red2.root, &blue2.root, &underlay.b),
        (
            "10.0.1.1/24",
            "192.168.77.2",
            "192.168.77.1",
            "172.31.0.2",
            "172.31.0.1",
            "10.0.0.0/24",
        ),
        "[[route]]\nprefix = \"10.5.0.0/16\"\ntable = \"red\"\nvia = [\"10.0.1.2@red\"]\n",
    );
    let mut q1 = Quiver::start_at(&dir, "q1", &c1, &dir.path("q1.sock"));
    let mut q2 = Quiver::start_at(&dir, "q2", &c2, &dir.path("q2.sock"));

    // Each tenant reaches its own peer across its own VNI...
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
    assert_eq!(
        echoes_received(&red1),
        0,
        "red's node-1 host was never pinged"
    );

    // A prefix only red routes: red reaches it, blue's packets for it are no-route at its
    // Quiver (its table has no such route; the default table is not consulted).
    let no_route = |q: &Quiver| -> u64 {
        q.json(&["show", "errors"])
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["node"] == "ip4-lookup" && e["reason"] == "no-route")
            .map(|e| e["count"].as_u64().unwrap())
            .sum()
    };
    ping_until_answered(&mut [&mut q1, &mut q2], &red1, "10.5.0.1");
    let before = no_route(&q1);
    assert_eq!(pings(&blue1, "10.5.0.1"), 0);
    assert!(
        no_route(&q1) >= before + 5,
        "blue's pings counted as no-route"
    );

    // What the operator sees: the tables with their interfaces, each route with its table.
    let tables = q1.json(&["show", "tables"]);
    let red = support::one(&tables, "name", "red");
    assert_eq!(
        red["interfaces"],
        serde_json::json!(["red", "vx-red"]),
        "{tables}"
    );
    let fib = q1.json(&["show", "fib"]);
    let in_table = |table: &str, prefix: &str| {
        fib.as_array()
            .unwrap()
            .iter()
            .any(|r: &Value| r["table"] == table && r["prefix"] == prefix)
    };
    assert!(in_table("red", "10.5.0.0/16"), "{fib}");
    assert!(!in_table("blue", "10.5.0.0/16"), "{fib}");
    assert!(in_table("blue", "10.0.1.0/24"), "{fib}");
    q1.stop();
    q2.stop();
}
