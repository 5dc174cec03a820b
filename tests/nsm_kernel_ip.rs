//! NSM end to end with kernel interfaces and IP payload, once per KERNEL backend (TAP, the
//! default, and veth): an NSC network namespace and an NSE network namespace, Quiver's NSM
//! server over the real forwarder, a test endpoint playing the NSE's gRPC side. After Request,
//! `ping` goes NSC → Quiver (L3 cross-connect, TTL decremented) → NSE and back, with nothing
//! answering ARP: inside each namespace the other side's address (and the client's route's next
//! hop) resolves to Quiver's port. Each pod has its interface once, through refreshes and
//! payload changes; after Close nothing of the connection remains in the pods, in Quiver's
//! namespace or in the forwarder, and once the forwarder stops every buffer is back in the pool.

use nsm_forwarder::testing::{BlockingClient, TestEndpoint};
use nsm_proto::connection::{Connection, State};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext, Route};
use nsm_proto::networkservice::NetworkServiceRequest;
use testkit::wait_for;

/// The client's address, the endpoint's two (the first is the L3 cross-connect's next hop),
/// and the gateway of the client's route to the second: nobody has that one.
const NSC_ADDR: &str = "10.74.0.1";
const NSE_ADDR: &str = "10.74.0.2";
const NSE_BEHIND: &str = "10.99.0.1";
const GATEWAY: &str = "10.74.0.254";

mod nsm_support;

use nsm_support::kernel::{
    assert_built_once, assert_nothing_left, per_backend, tag, KernelBackend,
};
use nsm_support::{kernel_mech, nsc_connection, KernelTest, IP, PING};

fn mac_string(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

per_backend!(ip_payload_pings_through_quiver_between_kernel_interfaces_and_close_leaves_nothing);
fn ip_payload_pings_through_quiver_between_kernel_interfaces_and_close_leaves_nothing(
    backend: KernelBackend,
) {
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "ip_payload_pings_through_quiver_between_kernel_interfaces",
        &[IP, PING],
        ["nsc", "nse", "nsmip-e2e"],
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

    let id = format!("e2e-ip-{}-{}", tag(backend), std::process::id());
    let request = NetworkServiceRequest {
        connection: Some(Connection {
            payload: "IP".into(),
            context: Some(ConnectionContext {
                ip_context: Some(IpContext {
                    // NSM's convention: the client's addresses are the source ones.
                    src_ip_addrs: vec![format!("{NSC_ADDR}/24")],
                    dst_ip_addrs: vec![format!("{NSE_ADDR}/24"), format!("{NSE_BEHIND}/32")],
                    src_routes: vec![Route {
                        prefix: "10.99.0.0/16".into(),
                        next_hop: GATEWAY.into(),
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..nsc_connection(&id, "ping")
        }),
        mechanism_preferences: kernel_mech(&nsc.url(), "nsm0"),
    };
    let answer = client.request(request.clone()).unwrap();
    assert_eq!(answer.state, State::Up as i32);
    assert_eq!(answer.id, id);
    assert!(nsc.has_link("nsm0"), "the client's interface");
    assert!(nse.has_link("nse0"), "the endpoint's interface");
    assert_built_once(backend, &id, &nsc, &nse, &fwd);
    let port_mac = |side: &str| {
        let name = format!("nsm-{id}-{side}");
        let f = fwd.view();
        let p = f.port(&name).unwrap_or_else(|| panic!("port {name}"));
        mac_string(p.port.mac())
    };
    let (client_mac, endpoint_mac) = (port_mac("client"), port_mac("endpoint"));
    assert_ne!(client_mac, endpoint_mac);

    // Nothing answers ARP: the next hops inside each namespace are Quiver's end, permanently.
    for (ns, dev, ip, mac) in [
        (&nsc, "nsm0", NSE_ADDR, &client_mac),
        (&nsc, "nsm0", GATEWAY, &client_mac),
        (&nse, "nse0", NSC_ADDR, &endpoint_mac),
    ] {
        let entry = ns.neighbor(dev, ip);
        assert!(
            entry.contains(mac.as_str()) && entry.contains("PERMANENT"),
            "{ip} on {dev} in {}: {entry:?}, not Quiver's end {mac}",
            ns.0
        );
    }

    // Each way Quiver decrements the TTL: the NSE's reply (64) arrives with 63.
    let mut reply = None;
    wait_for("a ping from the NSC to the NSE through Quiver", 30, || {
        reply = nsc.ping_reply(NSE_ADDR, 64);
        reply.is_some()
    });
    let reply = reply.expect("waited for");
    assert!(reply.contains("ttl=63"), "one hop each way: {reply}");
    // Through the client's route, whose gateway nobody has: Quiver's L3 cross-connect
    // carries whatever the client sends toward the endpoint.
    let behind = nsc
        .ping_reply(NSE_BEHIND, 64)
        .expect("a ping through the route");
    assert!(behind.contains("ttl=63"), "one hop each way: {behind}");
    // An echo with TTL 1 expires in Quiver instead of reaching the NSE.
    assert_eq!(
        nsc.ping_reply(NSE_ADDR, 1),
        None,
        "TTL 1 does not cross Quiver"
    );
    let forwarded: u64 = fwd.view().tx_packets();
    assert!(
        forwarded >= 4,
        "Quiver carried the echoes and their replies: {forwarded}"
    );

    // A refresh that changes nothing keeps the path working.
    let again = client.request(request.clone()).unwrap();
    assert_eq!(again.state, State::Up as i32);
    assert!(nsc.neighbor("nsm0", NSE_ADDR).contains(client_mac.as_str()));
    assert!(
        nsc.ping_reply(NSE_ADDR, 64).is_some(),
        "ping after the refresh"
    );

    // A refresh to ETHERNET payload keeps the interfaces and swaps the cross-connect: the
    // neighbours toward Quiver's end go with the L3 one (else the NSC's frames would reach the
    // NSE addressed to Quiver's MAC), ARP crosses Quiver, and the TTL is left alone.
    let mut ethernet = request.clone();
    ethernet.connection.as_mut().unwrap().payload = "ETHERNET".into();
    let l2 = client.request(ethernet).unwrap();
    assert_eq!(l2.state, State::Up as i32);
    for (ns, dev, ip) in [
        (&nsc, "nsm0", NSE_ADDR),
        (&nsc, "nsm0", GATEWAY),
        (&nse, "nse0", NSC_ADDR),
    ] {
        let entry = ns.neighbor(dev, ip);
        assert!(!entry.contains("PERMANENT"), "{ip} on {dev}: {entry:?}");
    }
    let mut reply = None;
    wait_for("a ping across the L2 cross-connect", 30, || {
        reply = nsc.ping_reply(NSE_ADDR, 64);
        reply.is_some()
    });
    let reply = reply.expect("waited for");
    assert!(reply.contains("ttl=64"), "no hop at layer 2: {reply}");

    // And back to IP payload: the neighbours toward Quiver's end are back.
    let again = client.request(request).unwrap();
    assert_eq!(again.state, State::Up as i32);
    assert!(nsc.neighbor("nsm0", NSE_ADDR).contains(client_mac.as_str()));
    assert!(nse
        .neighbor("nse0", NSC_ADDR)
        .contains(endpoint_mac.as_str()));
    let reply = nsc
        .ping_reply(NSE_ADDR, 64)
        .expect("ping after going back to IP");
    assert!(reply.contains("ttl=63"), "one hop each way again: {reply}");
    // Refreshes and payload changes made nothing twice.
    assert_built_once(backend, &id, &nsc, &nse, &fwd);

    client.close(again).unwrap();
    assert_eq!(endpoint.log().closes.len(), 1, "closed toward the endpoint");
    assert!(!nsc.has_link("nsm0"), "the client's interface is gone");
    assert!(!nse.has_link("nse0"), "the endpoint's interface is gone");
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);
    assert_eq!(nsc.ping_reply(NSE_ADDR, 64), None);

    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}

/// IPv6 only, as NSM's Kernel2IP2Kernel_ipv6 (NSM_CIDR_PREFIX=2001:db8::/116): the NSE's
/// first address, the NSC's the next.
const NSE_ADDR6: &str = "2001:db8::";
const NSC_ADDR6: &str = "2001:db8::1";

per_backend!(ipv6_only_ip_payload_pings_both_ways_through_quiver_and_close_leaves_nothing);
fn ipv6_only_ip_payload_pings_both_ways_through_quiver_and_close_leaves_nothing(
    backend: KernelBackend,
) {
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "ipv6_only_ip_payload_pings_both_ways_through_quiver",
        &[IP, PING],
        ["nsc6", "nse6", "nsmip6-e2e"],
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
    let id = format!("e2e-ip6-{}-{}", tag(backend), std::process::id());
    let request = NetworkServiceRequest {
        connection: Some(Connection {
            payload: "IP".into(),
            context: Some(ConnectionContext {
                ip_context: Some(IpContext {
                    src_ip_addrs: vec![format!("{NSC_ADDR6}/116")],
                    dst_ip_addrs: vec![format!("{NSE_ADDR6}/116")],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..nsc_connection(&id, "ping")
        }),
        mechanism_preferences: kernel_mech(&nsc.url(), "nsm0"),
    };
    // Accepted: no IPv4 next hop is needed any more.
    let answer = client.request(request).unwrap();
    assert_eq!(answer.state, State::Up as i32);
    assert_built_once(backend, &id, &nsc, &nse, &fwd);
    let (client_port, endpoint_port) = (format!("nsm-{id}-client"), format!("nsm-{id}-endpoint"));
    let port_mac = |name: &str| {
        let f = fwd.view();
        let p = f.port(name).unwrap_or_else(|| panic!("port {name}"));
        mac_string(p.port.mac())
    };
    let (client_mac, endpoint_mac) = (port_mac(&client_port), port_mac(&endpoint_port));
    // Nothing answers neighbour solicitations inside the namespaces: the other side's address
    // is Quiver's end there, permanently.
    for (ns, dev, ip, mac) in [
        (&nsc, "nsm0", NSE_ADDR6, &client_mac),
        (&nse, "nse0", NSC_ADDR6, &endpoint_mac),
    ] {
        let entry = ns.neighbor(dev, ip);
        assert!(
            entry.contains(mac.as_str()) && entry.contains("PERMANENT"),
            "{ip} on {dev} in {}: {entry:?}, not Quiver's end {mac}",
            ns.0
        );
    }
    // At Quiver's end each peer's IPv6 next hop is a neighbour at its interface's MAC.
    let view = fwd.view();
    for (port, ip) in [(&endpoint_port, NSE_ADDR6), (&client_port, NSC_ADDR6)] {
        let i = view.port(port).unwrap().interface;
        let want = u128::from(ip.parse::<std::net::Ipv6Addr>().unwrap());
        assert!(
            view.neighbors6
                .iter()
                .any(|n| n.interface == i && n.ip == want),
            "{ip} on {port}: {:?}",
            view.neighbors6
        );
    }
    drop(view);

    // Both ways, the hop limit decremented once each way (the kernel's replies leave at 64).
    for (from, to) in [(&nsc, NSE_ADDR6), (&nse, NSC_ADDR6)] {
        let mut reply = None;
        // The addresses are tentative until the kernel's duplicate address detection is done.
        wait_for(
            &format!("ping -6 {} -> {to} through Quiver", from.0),
            30,
            || {
                reply = from.ping_reply(to, 64);
                reply.is_some()
            },
        );
        let reply = reply.expect("waited for");
        assert!(reply.contains("ttl=63"), "one hop each way: {reply}");
    }
    assert_eq!(
        nsc.ping_reply(NSE_ADDR6, 1),
        None,
        "hop limit 1 does not cross Quiver"
    );

    client.close(answer).unwrap();
    assert_eq!(endpoint.log().closes.len(), 1, "closed toward the endpoint");
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);
    assert_eq!(nsc.ping_reply(NSE_ADDR6, 64), None);
    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}
