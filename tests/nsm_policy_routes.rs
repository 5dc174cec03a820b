//! NSM's policy-based routing as its own examples shape it, applied by Quiver as NSM's kernel
//! forwarders apply it (sdk-kernel's `connectioncontextkernel`), each test once per KERNEL
//! backend, with the kernel's answers read back in the namespaces:
//!
//! - the IP context an NSE serving deployments-k8s' `apps/nse-kernel-pbr` file hands out: its
//!   IPAM's point-to-point pair (172.16.1.100/32 and 172.16.1.101/32, each side routed to the
//!   other) and the policies' `from` prefixes added to the NSC's addresses (sdk's
//!   `policyroute`), so the NSC has 172.16.2.201/24 and 2004::3/120 too;
//! - each side gets a route to the other side's addresses that its own prefixes do not hold
//!   (the api's `GetDstIPRoutes` / `GetSrcIPRoutes`, sdk-kernel's `routes`): the NSE answers
//!   pings from the NSC's `from` address, as NSM's liveness check (which pings from every
//!   address of the NSC) needs;
//! - a policy without routes gets a default route through the interface (sdk-kernel's
//!   `iprule`), so `ip route get` resolves there as NSM's examples check;
//! - a gateway is on-link (`RTNH_F_ONLINK`, as sdk-kernel sets it): one outside every subnet
//!   of the interface is accepted and reached.

use nsm_forwarder::testing::{BlockingClient, TestEndpoint};
use nsm_proto::connection::{Connection, State};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext, PolicyRoute, Route};
use nsm_proto::networkservice::NetworkServiceRequest;
use testkit::wait_for;

mod nsm_support;

use nsm_support::kernel::{
    assert_built_once, assert_nothing_left, per_backend, quiver_rules, tag, KernelBackend,
};
use nsm_support::{kernel_mech, nsc_connection, run, KernelTest, Netns, IP, PING};

/// `ip -n NS ARGS…`'s output (it must succeed).
fn ip_out(ns: &Netns, args: &[&str]) -> String {
    let mut all = vec![IP, "-n", &ns.0];
    all.extend_from_slice(args);
    String::from_utf8_lossy(&run(&all).stdout).to_string()
}

/// The first line of `ip -n NS route get ARGS…`, or its error.
fn route_get(ns: &Netns, args: &[&str]) -> String {
    let out = std::process::Command::new(IP)
        .args(["-n", &ns.0, "route", "get"])
        .args(args)
        .output()
        .expect("run ip route get");
    let text = [out.stdout, out.stderr].concat();
    let text = String::from_utf8_lossy(&text);
    text.lines().next().unwrap_or_default().trim().to_string()
}

/// Whether one echo from `ns` to `to`, sent from its address `from`, comes back.
fn ping_from(ns: &Netns, from: &str, to: &str) -> bool {
    std::process::Command::new(IP)
        .args([
            "netns", "exec", &ns.0, PING, "-n", "-c", "1", "-W", "1", "-I", from, to,
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

fn policy(
    from: &str,
    proto: &str,
    src_port: &str,
    dst_port: &str,
    routes: Vec<Route>,
) -> PolicyRoute {
    PolicyRoute {
        from: from.into(),
        proto: proto.into(),
        src_port: src_port.into(),
        dst_port: dst_port.into(),
        routes,
    }
}

/// The policies of deployments-k8s v1.18.0 `apps/nse-kernel-pbr/config-file-nse.yaml`, in its
/// order (NSM's examples expect them in tables 1 to 5).
fn nsm_pbr_policies() -> Vec<PolicyRoute> {
    vec![
        policy(
            "172.16.2.201/24",
            "6",
            "",
            "6666",
            vec![route("172.16.3.0/24", "172.16.2.200")],
        ),
        policy("172.16.2.201/24", "6", "5555", "", vec![]),
        policy("", "17", "", "6666", vec![]),
        policy("", "17", "", "6667-6670", vec![]),
        policy(
            "2004::3/120",
            "17",
            "",
            "5555",
            vec![route("2004::5/120", "2004::6")],
        ),
    ]
}

/// What the NSE of NSM's policy-based-routing example (`NSM_CIDR_PREFIX=172.16.1.100/31`)
/// answers: point2pointipam's pair, each side routed to the other's address, then
/// `policyroute`'s policies with their `from` prefixes appended to the NSC's addresses (once
/// per policy, so 172.16.2.201/24 twice). `src_routes` also has 10.200.0.0/16 via 172.16.9.1, a
/// gateway in no subnet of the NSC's interface, which only an on-link route reaches.
fn nsm_pbr_context() -> IpContext {
    let policies = nsm_pbr_policies();
    let mut src_ip_addrs = vec!["172.16.1.101/32".to_string()];
    src_ip_addrs.extend(
        policies
            .iter()
            .map(|p| p.from.clone())
            .filter(|f| !f.is_empty()),
    );
    IpContext {
        src_ip_addrs,
        dst_ip_addrs: vec!["172.16.1.100/32".into()],
        src_routes: vec![
            route("172.16.1.100/32", ""),
            route("10.200.0.0/16", "172.16.9.1"),
        ],
        dst_routes: vec![route("172.16.1.101/32", "")],
        policies,
        ..Default::default()
    }
}

fn request(id: &str, ns: &Netns, ip: IpContext, payload: &str) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            context: Some(ConnectionContext {
                ip_context: Some(ip),
                ..Default::default()
            }),
            payload: payload.into(),
            ..nsc_connection(id, "policy-based-routing")
        }),
        mechanism_preferences: kernel_mech(&ns.url(), "nsm0"),
    }
}

/// NSM's apps/nse-kernel-pbr context over a connection of `payload` (ETHERNET: L2
/// cross-connected; IP: L3): the routes each side gets to the other's addresses, pings both
/// ways from and to every IPv4 address of the NSC (the `from` one too), the policies as NSM's
/// examples ask the kernel (`ip route get`, tables 1 to 5, a default route where a policy has
/// none), the on-link gateway accepted and reached; Close leaves nothing.
fn nsm_pbr_context_routes_both_ways(backend: KernelBackend, payload: &str, tags: [&str; 3]) {
    let test = format!("nsm_pbr_context_routes_both_ways_{payload}");
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(backend, &test, &[IP, PING], tags)
    else {
        return;
    };
    // The gateway and the addresses behind it are the NSE's own, on its loopback: it answers
    // ARP for the gateway on its interface of the connection (the kernel's default), and the
    // pings to 10.200.0.1.
    for a in ["172.16.9.1/32", "10.200.0.1/32"] {
        run(&[IP, "-n", &nse.0, "addr", "add", a, "dev", "lo"]);
    }
    let fwd = quiver.fwd.clone();
    let endpoint = TestEndpoint::start(
        &dir.join("nse.sock"),
        "nse",
        kernel_mech(&nse.url(), "nse0"),
    )
    .unwrap();
    let (listen, dp, server) = quiver.serve_in(&dir);
    let mut client = BlockingClient::connect(&listen).unwrap();
    let id = format!("pbr-{payload}-{}-{}", tag(backend), std::process::id());

    let answer = client
        .request(request(&id, &nsc, nsm_pbr_context(), payload))
        .unwrap_or_else(|e| panic!("the Request with NSM's PBR context: {e}"));
    assert_eq!(answer.state, State::Up as i32);
    assert_built_once(backend, &id, &nsc, &nse, &fwd);

    // Each side is routed to the other's addresses that its own prefixes do not hold.
    let r = ip_out(&nse, &["route", "show", "172.16.2.0/24"]);
    assert!(
        r.contains("dev nse0"),
        "the NSE, to the NSC's `from` prefix: {r:?}"
    );
    let r = ip_out(&nse, &["route", "show", "172.16.1.101"]);
    assert!(
        r.contains("dev nse0"),
        "the NSE, to the NSC's IPAM address: {r:?}"
    );
    let r = ip_out(&nse, &["-6", "route", "show", "2004::/120"]);
    assert!(
        r.contains("dev nse0"),
        "the NSE, to the NSC's IPv6 prefix: {r:?}"
    );
    let r = ip_out(&nsc, &["route", "show", "172.16.1.100"]);
    assert!(
        r.contains("dev nsm0"),
        "the NSC, to the NSE's address: {r:?}"
    );

    // Pings both ways, from and to each IPv4 address of the NSC, as NSM's liveness check
    // (every source address of the NSC to every address of the NSE) and its examples do.
    wait_for("a ping NSC -> NSE through Quiver", 30, || {
        ping_from(&nsc, "172.16.1.101", "172.16.1.100")
    });
    assert!(
        ping_from(&nsc, "172.16.2.201", "172.16.1.100"),
        "NSC -> NSE from the policies' `from` address (NSM's liveness check)"
    );
    assert!(
        ping_from(&nse, "172.16.1.100", "172.16.1.101"),
        "NSE -> NSC's IPAM address"
    );
    assert!(
        ping_from(&nse, "172.16.1.100", "172.16.2.201"),
        "NSE -> NSC's `from` address"
    );

    // The policies, as NSM's examples ask the kernel (policy-based-routing, and every heal
    // example): a table each, 1 to 5 in order; the ones without routes, a default route.
    for (args, want) in [
        (
            &[
                "172.16.3.1",
                "from",
                "172.16.2.201",
                "ipproto",
                "tcp",
                "dport",
                "6666",
            ][..],
            "172.16.3.1 from 172.16.2.201 via 172.16.2.200 dev nsm0 table 1",
        ),
        (
            &[
                "172.16.3.1",
                "from",
                "172.16.2.201",
                "ipproto",
                "tcp",
                "sport",
                "5555",
            ],
            "172.16.3.1 from 172.16.2.201 dev nsm0 table 2",
        ),
        (
            &["172.16.4.1", "ipproto", "udp", "dport", "6666"],
            "172.16.4.1 dev nsm0 table 3 src 172.16.1.101",
        ),
        (
            &["172.16.4.1", "ipproto", "udp", "dport", "6668"],
            "172.16.4.1 dev nsm0 table 4 src 172.16.1.101",
        ),
        (
            &[
                "2004::5", "from", "2004::3", "ipproto", "udp", "dport", "5555",
            ],
            "via 2004::6 dev nsm0 table 5 src 2004::3",
        ),
    ] {
        let got = route_get(&nsc, args);
        assert!(
            got.contains(want),
            "ip route get {args:?}: {got:?}, not {want:?}"
        );
    }
    for table in ["2", "3", "4"] {
        let t = ip_out(&nsc, &["route", "show", "table", table]);
        assert_eq!(
            t.lines().map(str::trim).collect::<Vec<_>>(),
            ["default dev nsm0 scope link"],
            "table {table}: a policy without routes"
        );
    }
    let t = ip_out(&nsc, &["-6", "route", "show", "table", "5"]);
    assert!(
        t.contains("2004::/120 via 2004::6 dev nsm0") && t.contains("onlink"),
        "{t}"
    );
    assert_eq!(quiver_rules(&nsc).len(), 5, "one rule per policy");
    let other = route_get(&nsc, &["172.16.4.1", "ipproto", "tcp", "dport", "6666"]);
    assert!(
        other.contains("unreachable"),
        "traffic no policy selects has no route there: {other:?}"
    );

    // A gateway outside every subnet of the interface: accepted on-link, and reached.
    let r = ip_out(&nsc, &["route", "show", "10.200.0.0/16"]);
    assert!(
        r.contains("via 172.16.9.1 dev nsm0") && r.contains("onlink"),
        "{r:?}"
    );
    assert!(
        route_get(&nsc, &["172.16.9.1"]).contains("unreachable"),
        "the gateway is in no subnet or route of the NSC"
    );
    assert!(
        ping_from(&nsc, "172.16.1.101", "10.200.0.1"),
        "through the on-link gateway"
    );

    client.close(answer).unwrap();
    assert_eq!(endpoint.log().closes.len(), 1);
    for a in ["172.16.9.1/32", "10.200.0.1/32"] {
        run(&[IP, "-n", &nse.0, "addr", "del", a, "dev", "lo"]);
    }
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);

    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}

per_backend!(nsm_pbr_context_over_ethernet);
fn nsm_pbr_context_over_ethernet(backend: KernelBackend) {
    nsm_pbr_context_routes_both_ways(backend, "ETHERNET", ["nscpbr", "nsepbr", "nsm-pbr"]);
}

per_backend!(nsm_pbr_context_over_ip);
fn nsm_pbr_context_over_ip(backend: KernelBackend) {
    nsm_pbr_context_routes_both_ways(backend, "IP", ["nscpbr3", "nsepbr3", "nsm-pbr3"]);
}
