//! NSM's IP context on KERNEL mechanisms, complete, as sdk-kernel applies it, each test once
//! per KERNEL backend (TAP, the default, and veth): IPv4 and IPv6 addresses (IPv6 without
//! duplicate address detection), routes, neighbours and policy routes (an `ip rule` with a table
//! of its own each), and the connection's MTU on the pods' interfaces and, with veths, on
//! Quiver's ends (NSM's 9000 when the Request names none). Read back with `ip` inside the
//! namespaces; IPv4 and IPv6 pings cross Quiver's L2 cross-connect; Close leaves nothing behind,
//! no rule either; bad contexts are refused with the field named and nothing made.

use nsm_forwarder::testing::{BlockingClient, TestEndpoint};
use nsm_proto::connection::{Connection, State};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext, PolicyRoute, Route};
use nsm_proto::networkservice::NetworkServiceRequest;
use testkit::wait_for;

mod nsm_support;

use nsm_support::kernel::{
    assert_built_once, assert_nothing_left, in_quivers_namespace, per_backend, tag, KernelBackend,
};
use nsm_support::{kernel_mech, nsc_connection, run, KernelTest, Netns, IP, PING};

fn ip_out(ns: &Netns, args: &[&str]) -> String {
    let mut all = vec![IP, "-n", &ns.0];
    all.extend_from_slice(args);
    String::from_utf8_lossy(&run(&all).stdout).to_string()
}

fn mtu_of(ns: &Netns, dev: &str) -> u32 {
    let out = ip_out(ns, &["-o", "link", "show", dev]);
    let words: Vec<&str> = out.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "mtu").expect("an mtu");
    words[at + 1].parse().unwrap()
}

fn ping6(ns: &Netns, to: &str) -> bool {
    std::process::Command::new(IP)
        .args([
            "netns", "exec", &ns.0, PING, "-6", "-n", "-c", "1", "-W", "1", to,
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn route(prefix: &str, next_hop: &str) -> Route {
    Route {
        prefix: prefix.into(),
        next_hop: next_hop.into(),
    }
}

fn dual_stack() -> IpContext {
    IpContext {
        src_ip_addrs: vec!["10.76.0.1/24".into(), "fd00:76::1/64".into()],
        dst_ip_addrs: vec!["10.76.0.2/24".into(), "fd00:76::2/64".into()],
        src_routes: vec![
            route("10.77.0.0/16", "10.76.0.2"),
            route("fd00:77::/48", "fd00:76::2"),
        ],
        policies: vec![
            PolicyRoute {
                from: "10.76.0.1/32".into(),
                proto: "tcp".into(),
                dst_port: "6666".into(),
                routes: vec![route("10.99.0.0/16", "10.76.0.2")],
                ..Default::default()
            },
            PolicyRoute {
                from: "fd00:76::1/128".into(),
                proto: "udp".into(),
                src_port: "5000-5010".into(),
                routes: vec![route("fd00:99::/48", "fd00:76::2")],
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

fn request(id: &str, ns: &Netns, ip: IpContext, mtu: u32) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            context: Some(ConnectionContext {
                ip_context: Some(ip),
                mtu,
                ..Default::default()
            }),
            ..nsc_connection(id, "dual")
        }),
        mechanism_preferences: kernel_mech(&ns.url(), "nsm0"),
    }
}

/// The table number of the rule whose line contains `selects`.
fn table_of_rule(rules: &str, selects: &str) -> String {
    let line = rules
        .lines()
        .find(|l| l.contains(selects))
        .unwrap_or_else(|| panic!("no rule with {selects:?} in:\n{rules}"));
    line.split_whitespace()
        .skip_while(|w| *w != "lookup")
        .nth(1)
        .expect("a table")
        .to_string()
}

per_backend!(a_dual_stack_context_with_policies_is_applied_pings_both_ways_and_leaves_nothing);
fn a_dual_stack_context_with_policies_is_applied_pings_both_ways_and_leaves_nothing(
    backend: KernelBackend,
) {
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "a_dual_stack_context_with_policies_is_applied",
        &[IP, PING],
        ["nsc6", "nse6", "nsm-ipctx"],
    )
    else {
        return;
    };
    let fwd = quiver.fwd.clone();
    let endpoint = TestEndpoint::start(
        &dir.join("nse.sock"),
        "nse",
        kernel_mech(&nse.url(), "nse0"),
    )
    .unwrap();
    let (listen, dp, server) = quiver.serve_in(&dir);
    let mut client = BlockingClient::connect(&listen).unwrap();
    let id = format!("ipctx-{}-{}", tag(backend), std::process::id());

    let answer = client.request(request(&id, &nsc, dual_stack(), 0)).unwrap();
    assert_eq!(answer.state, State::Up as i32);
    assert_eq!(
        answer.context.as_ref().map(|c| c.mtu),
        Some(9000),
        "NSM's default MTU, answered"
    );
    assert_built_once(backend, &id, &nsc, &nse, &fwd);

    // Addresses of both families, IPv6 usable at once (no DAD: never "tentative").
    let addrs = ip_out(&nsc, &["addr", "show", "dev", "nsm0"]);
    assert!(addrs.contains("inet 10.76.0.1/24"), "{addrs}");
    let v6 = addrs
        .lines()
        .find(|l| l.contains("inet6 fd00:76::1/64"))
        .unwrap_or_else(|| panic!("no IPv6 address: {addrs}"));
    assert!(v6.contains("nodad") && !v6.contains("tentative"), "{v6}");
    let addrs = ip_out(&nse, &["addr", "show", "dev", "nse0"]);
    assert!(addrs.contains("inet6 fd00:76::2/64"), "{addrs}");
    // Routes of both families.
    let r4 = ip_out(&nsc, &["route", "show", "10.77.0.0/16"]);
    assert!(r4.contains("via 10.76.0.2 dev nsm0"), "{r4}");
    let r6 = ip_out(&nsc, &["-6", "route", "show", "fd00:77::/48"]);
    assert!(r6.contains("via fd00:76::2 dev nsm0"), "{r6}");
    // Policies: a rule each, with a table of its own holding the policy's routes.
    let rules4 = ip_out(&nsc, &["rule", "show"]);
    let t4 = table_of_rule(&rules4, "from 10.76.0.1 ipproto tcp dport 6666");
    let table = ip_out(&nsc, &["route", "show", "table", &t4]);
    assert!(
        table.contains("10.99.0.0/16 via 10.76.0.2 dev nsm0"),
        "{table}"
    );
    let rules6 = ip_out(&nsc, &["-6", "rule", "show"]);
    let t6 = table_of_rule(&rules6, "from fd00:76::1 ipproto udp sport 5000-5010");
    assert_ne!(t4, t6, "one table per policy");
    let table = ip_out(&nsc, &["-6", "route", "show", "table", &t6]);
    assert!(
        table.contains("fd00:99::/48 via fd00:76::2 dev nsm0"),
        "{table}"
    );
    // The aliases NSM's tools look for.
    let link = ip_out(&nsc, &["-d", "link", "show", "nsm0"]);
    assert!(link.contains(&format!("alias client-{id}")), "{link}");
    let link = ip_out(&nse, &["-d", "link", "show", "nse0"]);
    assert!(link.contains(&format!("alias server-{id}")), "{link}");
    // The MTU, on both pods' interfaces.
    assert_eq!(mtu_of(&nsc, "nsm0"), 9000);
    assert_eq!(mtu_of(&nse, "nse0"), 9000);

    // IPv4 and IPv6 cross Quiver's L2 cross-connect.
    wait_for("an IPv4 ping through Quiver", 30, || nsc.ping("10.76.0.2"));
    wait_for("an IPv6 ping through Quiver", 30, || {
        ping6(&nsc, "fd00:76::2")
    });
    assert!(ping6(&nse, "fd00:76::1"), "and back the other way");

    // A refresh whose policies changed: the rules follow (the IPv6 one gone, the IPv4 one on).
    let mut fewer = dual_stack();
    fewer.policies.truncate(1);
    let answer = client.request(request(&id, &nsc, fewer, 0)).unwrap();
    assert_eq!(answer.state, State::Up as i32);
    let rules6 = ip_out(&nsc, &["-6", "rule", "show"]);
    assert!(
        !rules6.contains("fd00:76::1"),
        "the removed policy's rule is gone: {rules6}"
    );
    let rules4 = ip_out(&nsc, &["rule", "show"]);
    let t4 = table_of_rule(&rules4, "from 10.76.0.1 ipproto tcp dport 6666");
    let table = ip_out(&nsc, &["route", "show", "table", &t4]);
    assert!(
        table.contains("10.99.0.0/16 via 10.76.0.2 dev nsm0"),
        "{table}"
    );
    wait_for("IPv6 still crosses after the refresh", 30, || {
        ping6(&nsc, "fd00:76::2")
    });
    assert_built_once(backend, &id, &nsc, &nse, &fwd);

    client.close(answer).unwrap();
    assert_eq!(endpoint.log().closes.len(), 1);
    assert!(!nsc.has_link("nsm0"));
    let rules4 = ip_out(&nsc, &["rule", "show"]);
    assert!(
        !rules4.contains("10.76.0.1"),
        "the rule went with Close: {rules4}"
    );
    let rules6 = ip_out(&nsc, &["-6", "rule", "show"]);
    assert!(!rules6.contains("fd00:76::1"), "{rules6}");
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);

    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}

per_backend!(the_requested_mtu_reaches_both_ends_and_bad_contexts_make_nothing);
fn the_requested_mtu_reaches_both_ends_and_bad_contexts_make_nothing(backend: KernelBackend) {
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "the_requested_mtu_reaches_both_ends_and_bad_contexts_make_nothing",
        &[IP, PING],
        ["nscm", "nsem", "nsm-mtu"],
    )
    else {
        return;
    };
    let fwd = quiver.fwd.clone();
    let endpoint = TestEndpoint::start(
        &dir.join("nse.sock"),
        "nse",
        kernel_mech(&nse.url(), "nse0"),
    )
    .unwrap();
    let (listen, dp, server) = quiver.serve_in(&dir);
    let mut client = BlockingClient::connect(&listen).unwrap();
    let id = format!("mtu-{}-{}", tag(backend), std::process::id());
    let rules_before = ip_out(&nsc, &["rule", "show"]);

    // Each bad context is refused, naming its field, with nothing made anywhere.
    let mut wrong_family = dual_stack();
    wrong_family.src_routes = vec![route("10.77.0.0/16", "fd00:76::2")];
    let mut twice = dual_stack();
    twice.policies.push(twice.policies[0].clone());
    let mut bad_from = dual_stack();
    bad_from.policies[0].from = "10.76.0.1/40".into();
    let mut bad_port = dual_stack();
    bad_port.policies[0].dst_port = "0-3".into();
    let mut bad_prefix = dual_stack();
    bad_prefix.src_ip_addrs.push("fd00:76::/129".into());
    let cases = [
        (dual_stack(), 500, "MTU"),
        (dual_stack(), 65000, "MTU"),
        (wrong_family, 0, "src_routes.nextHop"),
        (twice, 0, "policies[2]"),
        (bad_from, 0, "policies[0].from"),
        (bad_port, 0, "policies[0].dst_port"),
        (bad_prefix, 0, "src_ip_addrs"),
    ];
    for (ip, mtu, field) in cases {
        let e = client
            .request(request(&id, &nsc, ip, mtu))
            .expect_err("a bad context");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{field}: {e}");
        assert!(e.message().contains(field), "{field}: {}", e.message());
        assert!(!nsc.has_link("nsm0"), "{field}: nothing made in the NSC");
        assert!(!nse.has_link("nse0"), "{field}: nothing made in the NSE");
        assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);
        assert_eq!(ip_out(&nsc, &["rule", "show"]), rules_before, "{field}");
    }
    assert!(
        endpoint.log().requests.is_empty(),
        "none reached the endpoint"
    );

    // A Request's own MTU is applied to both pods' interfaces, and to Quiver's veth ends (a
    // TAP has none: assert_built_once checks that nothing is in Quiver's namespace).
    let answer = client
        .request(request(&id, &nsc, dual_stack(), 1400))
        .unwrap();
    assert_eq!(answer.context.as_ref().map(|c| c.mtu), Some(1400));
    assert_built_once(backend, &id, &nsc, &nse, &fwd);
    assert_eq!(mtu_of(&nsc, "nsm0"), 1400);
    assert_eq!(mtu_of(&nse, "nse0"), 1400);
    let ends = in_quivers_namespace(&id);
    assert_eq!(
        ends.len(),
        match backend {
            KernelBackend::Tap => 0,
            KernelBackend::Veth => 2,
        },
        "{ends:?}"
    );
    for end in &ends {
        let out = String::from_utf8_lossy(&run(&[IP, "-o", "link", "show", &end.name]).stdout)
            .to_string();
        assert!(out.contains(" mtu 1400 "), "{}: {out}", end.name);
    }
    let req = endpoint.log().requests.last().cloned().expect("a request");
    assert_eq!(
        req.connection.and_then(|c| c.context).map(|c| c.mtu),
        Some(1400),
        "the endpoint is asked for the same MTU"
    );
    client.close(answer).unwrap();
    assert!(!nsc.has_link("nsm0"));
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);

    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}

/// One echo of `ping -6` to `to` with hop limit `hops`: its reply line when it came back.
fn ping6_reply(ns: &Netns, to: &str, hops: u8) -> Option<String> {
    let hops = hops.to_string();
    let out = std::process::Command::new(IP)
        .args([
            "netns", "exec", &ns.0, PING, "-6", "-n", "-c", "1", "-W", "1", "-t", &hops, to,
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("bytes from"))
        .map(str::to_string)
}

per_backend!(a_dual_stack_ip_payload_connection_carries_ipv6_with_the_hop_limit_decremented);
fn a_dual_stack_ip_payload_connection_carries_ipv6_with_the_hop_limit_decremented(
    backend: KernelBackend,
) {
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "a_dual_stack_ip_payload_connection_carries_ipv6",
        &[IP, PING],
        ["nscip6", "nseip6", "nsm-ip6"],
    )
    else {
        return;
    };
    let fwd = quiver.fwd.clone();
    let endpoint = TestEndpoint::start(
        &dir.join("nse.sock"),
        "nse",
        kernel_mech(&nse.url(), "nse0"),
    )
    .unwrap();
    let (listen, dp, server) = quiver.serve_in(&dir);
    let mut client = BlockingClient::connect(&listen).unwrap();
    let id = format!("ip6-{}-{}", tag(backend), std::process::id());
    // The endpoint lists its IPv6 address first: the cross-connect's next hop is still its
    // IPv4 one (Quiver resolves next hops with ARP).
    let ip = IpContext {
        src_ip_addrs: vec!["10.78.0.1/24".into(), "fd00:78::1/64".into()],
        dst_ip_addrs: vec!["fd00:78::2/64".into(), "10.78.0.2/24".into()],
        ..Default::default()
    };
    let mut req = request(&id, &nsc, ip, 0);
    req.connection.as_mut().unwrap().payload = "IP".into();
    let answer = client.request(req).unwrap();
    assert_eq!(answer.state, State::Up as i32);
    assert_built_once(backend, &id, &nsc, &nse, &fwd);

    // Inside each namespace the other side's IPv6 address is Quiver's port, permanently:
    // nothing answers neighbour discovery across an L3 cross-connect.
    for (ns, dev, peer) in [(&nsc, "nsm0", "fd00:78::2"), (&nse, "nse0", "fd00:78::1")] {
        let entry = ip_out(ns, &["-6", "neigh", "show", peer, "dev", dev]);
        assert!(entry.contains("PERMANENT"), "{peer} in {}: {entry:?}", ns.0);
    }
    wait_for("an IPv4 ping across the L3 cross-connect", 30, || {
        nsc.ping("10.78.0.2")
    });
    let mut reply = None;
    wait_for("an IPv6 ping across the L3 cross-connect", 30, || {
        reply = ping6_reply(&nsc, "fd00:78::2", 64);
        reply.is_some()
    });
    let reply = reply.expect("waited for");
    assert!(reply.contains("ttl=63"), "one hop each way: {reply}");
    assert!(ping6_reply(&nse, "fd00:78::1", 64).is_some(), "and back");
    assert_eq!(
        ping6_reply(&nsc, "fd00:78::2", 1),
        None,
        "hop limit 1 does not cross Quiver"
    );
    let runtime = fwd.dataplane().runtime();
    let expired: u64 = runtime
        .workers
        .iter()
        .map(|w| w.error("ip6-l3xc", "hop-limit-exceeded"))
        .sum();
    assert!(expired >= 1, "counted where it expired");

    client.close(answer).unwrap();
    assert_eq!(endpoint.log().closes.len(), 1);
    assert!(!nsc.has_link("nsm0"));
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);

    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}
