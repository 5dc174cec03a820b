//! Next-table routes as a user drives them: a tenant table `red` whose default route leads
//! into the default table reaches a host behind a default-table port, in both families;
//! without it red's packets are counted as no-route. `quiver run` with two AF_PACKET ports
//! on veths into namespaces (the tenant's in red, the host's in the default table); the way
//! back is the default table's next-table route for red's subnet, from `quiver.toml`; red's
//! default route comes and goes with `quiver ctl route add|del`. What configuration refuses
//! (a route naming its own table, a table that does not exist, a loop) is refused with its
//! reason and changes nothing, from `quiver ctl` and from `quiver.toml`.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::side::{run, Side, IP, PING};
use support::{Quiver, Scratch};
use testkit::{require, wait_for, Needs};

/// `ip` in `side`'s namespace, which must succeed.
fn ip_in(side: &Side, args: &[&str]) {
    let mut all = vec![IP, "-n", side.ns.as_str()];
    all.extend_from_slice(args);
    run(&all);
}

/// A host in a namespace: `v4` and `v6` (no duplicate address detection) on its veth, its
/// default routes through `gw4` and `gw6`.
fn host(tag: &str, v4: &str, v6: &str, gw4: &str, gw6: &str) -> Side {
    let side = Side::new("nt", tag, v4);
    run(&[
        IP,
        "netns",
        "exec",
        &side.ns,
        "sh",
        "-c",
        "echo 0 > /proc/sys/net/ipv6/conf/all/disable_ipv6; \
         echo 0 > /proc/sys/net/ipv6/conf/veth0/disable_ipv6",
    ]);
    ip_in(&side, &["-6", "addr", "add", v6, "dev", "veth0", "nodad"]);
    ip_in(&side, &["link", "set", "lo", "up"]);
    ip_in(&side, &["route", "add", "default", "via", gw4]);
    ip_in(&side, &["-6", "route", "add", "default", "via", gw6]);
    side
}

/// Pings `to` from `side` until one is answered (neighbour resolution on both links first).
fn ping_until_answered(q: &mut Quiver, side: &Side, to: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !side.ping(to) {
        q.check_running();
        assert!(
            Instant::now() < deadline,
            "{} never reached {to}:\n{}",
            side.ns,
            q.log()
        );
    }
}

/// `node`'s count of `reason` (`show errors`).
fn error_count(q: &Quiver, node: &str, reason: &str) -> u64 {
    q.json(&["show", "errors"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node"] == node && e["reason"] == reason)
        .map(|e| e["count"].as_u64().unwrap())
        .sum()
}

/// Pings `to` from `side`, none answered, until `node` has counted more `no-route` drops
/// than `before` (each ping is one more try; the first may wait for ARP or ND).
fn pings_until_no_route(q: &mut Quiver, side: &Side, to: &str, node: &str) {
    let before = error_count(q, node, "no-route");
    wait_for(&format!("{to} counted as no-route by {node}"), 20, || {
        assert!(!side.ping(to), "{to} answered from {}", side.ns);
        q.check_running();
        error_count(q, node, "no-route") > before
    });
}

/// The `show fib` entry of `prefix` in `table`, if any.
fn fib_entry(fib: &Value, table: &str, prefix: &str) -> Option<Value> {
    fib.as_array()
        .unwrap()
        .iter()
        .find(|r| r["table"] == table && r["prefix"] == prefix)
        .cloned()
}

/// The configured routes of `show fib` (learned neighbours' host routes come and go).
fn static_routes(fib: &Value) -> Vec<Value> {
    fib.as_array()
        .unwrap()
        .iter()
        .filter(|r| r["source"] == "static")
        .cloned()
        .collect()
}

fn config(tenant: &str, uplink: &str) -> String {
    format!(
        "[dataplane]\ncores = [0]\nidle = \"adaptive\"\n[buffers]\ncount = 4096\n\
         hugepages = \"never\"\n[stats]\ninterval_secs = 0\n\
         [[port]]\nname = \"tenant\"\ntype = \"af_packet\"\ninterface = \"{tenant}\"\n\
         [[port]]\nname = \"uplink\"\ntype = \"af_packet\"\ninterface = \"{uplink}\"\n\
         [[table]]\nname = \"red\"\ninterfaces = [\"tenant\"]\n\
         [[address]]\nport = \"tenant\"\nip = \"10.1.0.1/24\"\n\
         [[address]]\nport = \"tenant\"\nip = \"2001:db8:100::1/64\"\n\
         [[address]]\nport = \"uplink\"\nip = \"10.0.1.1/24\"\n\
         [[address]]\nport = \"uplink\"\nip = \"2001:db8:1::1/64\"\n\
         [[route]]\nprefix = \"10.1.0.0/24\"\nnext_table = \"red\"\n\
         [[route]]\nprefix = \"2001:db8:100::/64\"\nnext_table = \"red\"\n"
    )
}

#[test]
fn a_tenant_reaches_the_default_table_through_its_next_table_route_in_both_families() {
    let test = "a_tenant_reaches_the_default_table_through_its_next_table_route_in_both_families";
    if !require(
        test,
        &Needs {
            root: true,
            tools: &[IP, PING],
            ..Needs::default()
        },
    ) {
        return;
    }
    let red = host(
        "r",
        "10.1.0.2/24",
        "2001:db8:100::2/64",
        "10.1.0.1",
        "2001:db8:100::1",
    );
    let far = host(
        "h",
        "10.0.1.2/24",
        "2001:db8:1::2/64",
        "10.0.1.1",
        "2001:db8:1::1",
    );
    let dir = Scratch::new("vrf-next-table");
    let mut q = Quiver::start_at(
        &dir,
        "q",
        &config(&red.root, &far.root),
        &dir.path("q.sock"),
    );

    // Red has no route to the host: its pings are no-route in ip4-lookup and ip6-lookup
    // (red's only port is the tenant's: its packets are red's).
    pings_until_no_route(&mut q, &red, "10.0.1.2", "ip4-lookup");
    pings_until_no_route(&mut q, &red, "2001:db8:1::2", "ip6-lookup");

    // A table that a next-table route names stays until the route goes (the default table's
    // route into blue is no chain: red sends the default table nothing yet).
    for args in [
        &["table", "add", "blue"][..],
        &["route", "add", "10.9.0.0/16", "--next-table", "blue"],
    ] {
        assert!(q.ctl(args).status.success(), "{args:?}");
    }
    let e = q.refused_quietly(&["table", "del", "blue"]);
    assert!(e.contains("next table of routes in table `default`"), "{e}");
    for args in [
        &["route", "del", "10.9.0.0/16"][..],
        &["table", "del", "blue"],
    ] {
        assert!(q.ctl(args).status.success(), "{args:?}");
    }
    // Red's default routes into the default table: the host answers, both families.
    for prefix in ["0.0.0.0/0", "::/0"] {
        let out = q.ctl(&[
            "route",
            "add",
            prefix,
            "--table",
            "red",
            "--next-table",
            "default",
        ]);
        assert!(out.status.success(), "{out:?}");
    }
    ping_until_answered(&mut q, &red, "10.0.1.2");
    ping_until_answered(&mut q, &red, "2001:db8:1::2");
    // Quiver's own addresses in the default table answer too: the replies go back through
    // red, where the requests came from.
    ping_until_answered(&mut q, &red, "10.0.1.1");
    ping_until_answered(&mut q, &red, "2001:db8:1::1");
    let fib = q.json(&["show", "fib"]);
    for (table, prefix, next) in [
        ("red", "0.0.0.0/0", "default"),
        ("red", "::/0", "default"),
        ("default", "10.1.0.0/24", "red"),
        ("default", "2001:db8:100::/64", "red"),
    ] {
        let r = fib_entry(&fib, table, prefix).unwrap_or_else(|| panic!("{prefix}: {fib}"));
        assert_eq!(r["paths"][0]["kind"], "next-table", "{r}");
        assert_eq!(r["paths"][0]["next_table"], next, "{r}");
    }
    let text = q.ctl(&["show", "fib"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("lookup in table default"), "{text}");

    // Refused, with the reason, nothing changed: its own table, a table that does not exist,
    // a loop (the default table's default route back to red, whose own leads here).
    let refusals = [
        (
            vec!["0.0.0.0/0", "--table", "red", "--next-table", "red"],
            "own table",
        ),
        (
            vec!["0.0.0.0/0", "--table", "red", "--next-table", "green"],
            "no table named `green`",
        ),
        (vec!["0.0.0.0/0", "--next-table", "red"], "(a loop)"),
        (vec!["::/0", "--next-table", "red"], "(a loop)"),
        (
            vec!["10.0.0.0/8", "--next-table", "red"],
            "leads back to `default` (a loop)",
        ),
    ];
    for (args, reason) in refusals {
        let mut all = vec!["route", "add"];
        all.extend_from_slice(&args);
        let e = q.refused_quietly(&all);
        assert!(e.contains(reason), "{args:?}: {e}");
    }
    assert_eq!(
        static_routes(&q.json(&["show", "fib"])),
        static_routes(&fib),
        "the refusals changed nothing"
    );
    // Still forwarding after all that.
    ping_until_answered(&mut q, &red, "10.0.1.2");

    // Without red's default routes again: no-route in red.
    for prefix in ["0.0.0.0/0", "::/0"] {
        let out = q.ctl(&["route", "del", prefix, "--table", "red"]);
        assert!(out.status.success(), "{out:?}");
    }
    pings_until_no_route(&mut q, &red, "10.0.1.2", "ip4-lookup");
    pings_until_no_route(&mut q, &red, "2001:db8:1::2", "ip6-lookup");
    assert_eq!(error_count(&q, "ip4-lookup", "next-table-loop"), 0);
    q.stop();
}

#[test]
fn a_quiver_toml_with_a_next_table_loop_or_a_bad_table_does_not_start() {
    let test = "a_quiver_toml_with_a_next_table_loop_or_a_bad_table_does_not_start";
    if !require(
        test,
        &Needs {
            root: true,
            ..Needs::default()
        },
    ) {
        return;
    }
    let dir = Scratch::new("vrf-next-table-refused");
    // A port, so that Quiver runs what the file says (without, it runs its demo).
    let base = format!(
        "[dataplane]\ncores = [0]\n[buffers]\ncount = 1024\nhugepages = \"never\"\n\
         [[port]]\nname = \"qvnt{}\"\ntype = \"tap\"\n[[table]]\nname = \"red\"\n",
        std::process::id() % 100_000
    );
    let cases = [
        (
            "[[route]]\nprefix = \"0.0.0.0/0\"\ntable = \"red\"\nnext_table = \"default\"\n\
             [[route]]\nprefix = \"0.0.0.0/0\"\nnext_table = \"red\"\n",
            "route 0.0.0.0/0 of table `default` to table `red` refused: `red`'s route \
             0.0.0.0/0 leads back to `default` (a loop)",
        ),
        (
            "[[route]]\nprefix = \"::/0\"\ntable = \"red\"\nnext_table = \"red\"\n",
            "route[0].next_table",
        ),
        (
            "[[route]]\nprefix = \"::/0\"\ntable = \"red\"\nnext_table = \"green\"\n",
            "green",
        ),
    ];
    for (i, (routes, reason)) in cases.into_iter().enumerate() {
        let q = Quiver::run(&dir, &format!("q{i}"), &format!("{base}{routes}"));
        let (status, log) = q.wait_exit();
        assert!(!status.success(), "{routes}: started");
        assert!(log.contains(reason), "{routes}: {log}");
    }
}
