//! NSM's KERNEL mechanism over TAP devices (the default backend, issue 24), and the same over
//! veths (`NSM_KERNEL_BACKEND=veth`), one run each: Quiver opens a TAP device as its port for
//! each side, created inside the pod's namespace under the requested name and configured there
//! from the IP context (or a veth pair, its far end there). With ETHERNET payload a TCP
//! transfer of a few MB crosses the L2 cross-connect checked for content, as super-frames both
//! ways (the namespaces keep every offload; nothing is segmented in software); with IP payload
//! `ping` crosses the L3 cross-connect with one hop. Each pod's interface is made once, a TAP
//! has nothing in Quiver's namespace (a veth only its two tagged ends), and after Close nothing
//! is left anywhere.

use nsm_forwarder::testing::{BlockingClient, TestEndpoint};
use nsm_proto::connection::{Connection, State};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext};
use nsm_proto::networkservice::NetworkServiceRequest;
use testkit::wait_for;

mod nsm_support;

use nsm_support::kernel::{
    assert_built_once, assert_nothing_left, per_backend, tag, KernelBackend,
};
use nsm_support::{kernel_mech, nsc_connection, run, KernelTest, Netns, IP, PING};

const PYTHON: &str = testkit::SYSTEM_PYTHON;

/// `ip -d link show` of `dev` in `ns`.
fn link_details(ns: &Netns, dev: &str) -> String {
    String::from_utf8_lossy(&run(&[IP, "-n", &ns.0, "-d", "link", "show", dev]).stdout).into_owned()
}

fn request(
    id: &str,
    nsc: &Netns,
    payload: &str,
    nsc_ip: &str,
    nse_ip: &str,
) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            payload: payload.into(),
            context: Some(ConnectionContext {
                ip_context: Some(IpContext {
                    src_ip_addrs: vec![format!("{nsc_ip}/24")],
                    dst_ip_addrs: vec![format!("{nse_ip}/24")],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..nsc_connection(id, "ping")
        }),
        mechanism_preferences: kernel_mech(&nsc.url(), "nsm0"),
    }
}

per_backend!(tcp_and_ping_cross_quiver_between_tap_devices_in_the_pods);
fn tcp_and_ping_cross_quiver_between_tap_devices_in_the_pods(backend: KernelBackend) {
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "tcp_and_ping_cross_quiver_between_tap_devices_in_the_pods",
        &[IP, PING, PYTHON],
        ["tnsc", "tnse", "nsm-tap"],
    )
    else {
        return;
    };
    let fwd = quiver.fwd.clone();
    let _endpoint = TestEndpoint::start(
        &dir.join("nse.sock"),
        "nse",
        kernel_mech(&nse.url(), "nse0"),
    )
    .unwrap();
    let listen = format!("unix://{}", dir.join("quiver.sock").display());
    let dp = quiver.dataplane();
    let server = quiver.serve(
        dp.clone(),
        "quiver",
        &listen,
        None,
        format!("unix://{}", dir.join("nse.sock").display()),
    );
    let mut client = BlockingClient::connect(&listen).unwrap();

    // ETHERNET payload: an L2 cross-connect between two TAP devices.
    let id = format!("kt-{}-{}", tag(backend), std::process::id());
    let answer = client
        .request(request(&id, &nsc, "ETHERNET", "10.73.0.1", "10.73.0.2"))
        .unwrap();
    assert_eq!(answer.state, State::Up as i32);
    let kind = match backend {
        KernelBackend::Tap => "tun type tap",
        KernelBackend::Veth => "veth",
    };
    for (ns, dev) in [(&nsc, "nsm0"), (&nse, "nse0")] {
        let d = link_details(ns, dev);
        assert!(d.contains(kind), "{dev} is a {backend:?} device: {d}");
        assert!(
            d.contains("mtu 9000"),
            "{dev} has the connection's MTU: {d}"
        );
    }
    // Each pod's device once; a TAP's never in Quiver's namespace.
    assert_built_once(backend, &id, &nsc, &nse, &fwd);
    wait_for("a ping from the NSC to the NSE through Quiver", 30, || {
        nsc.ping("10.73.0.2")
    });
    let (received, sent) = testkit::tcp::transfer(&nsc.0, &nse.0, "10.73.0.2", 5003, 8);
    assert_eq!(received, sent, "every byte arrived, in order");
    assert!(sent.starts_with("8388608 "), "{sent}");
    let port = |side: &str| {
        let name = format!("nsm-{id}-{side}");
        let view = fwd.view();
        let p = view.port(&name).unwrap_or_else(|| panic!("port {name}"));
        p.port.stats()
    };
    let detail = |s: &drivers::PortStats, name: &str| {
        s.detail
            .iter()
            .find(|(n, _)| n == name)
            .map_or_else(|| panic!("no counter {name}"), |(_, v)| *v)
    };
    let (c, e) = (port("client"), port("endpoint"));
    assert!(
        detail(&c, "rx-gso-frames") > 0,
        "super-frames came in whole"
    );
    assert!(detail(&e, "tx-gso-frames") > 0, "and left whole");
    assert_eq!(
        detail(&c, "rx-bad-vnet-hdr") + detail(&e, "rx-bad-vnet-hdr"),
        0
    );
    client.close(answer).unwrap();
    assert!(
        !nsc.has_link("nsm0") && !nse.has_link("nse0"),
        "gone at Close"
    );
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);

    // IP payload: an L3 cross-connect, one hop.
    let id = format!("kt-ip-{}-{}", tag(backend), std::process::id());
    let answer = client
        .request(request(&id, &nsc, "IP", "10.73.1.1", "10.73.1.2"))
        .unwrap();
    assert_built_once(backend, &id, &nsc, &nse, &fwd);
    let mut reply = None;
    wait_for("an IP-payload ping through Quiver", 30, || {
        reply = nsc.ping_reply("10.73.1.2", 64);
        reply.is_some()
    });
    let reply = reply.expect("waited for");
    assert!(reply.contains("ttl=63"), "one hop each way: {reply}");
    client.close(answer).unwrap();
    assert!(!nsc.has_link("nsm0") && !nse.has_link("nse0"));
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);

    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}
