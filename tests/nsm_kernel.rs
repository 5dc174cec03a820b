//! NSM end to end with kernel interfaces, each test once per KERNEL backend (TAP, the default,
//! and veth): an NSC network namespace and an NSE network namespace, Quiver's NSM server over
//! the real forwarder, a test endpoint playing the NSE's gRPC side. After Request each pod has
//! its interface once (a TAP, or a veth's far end), and `ping` goes NSC → Quiver (L2
//! cross-connect) → NSE and back; after Close nothing of the connection remains in the pods,
//! in Quiver's namespace or in the forwarder, and once the forwarder stops every buffer is back
//! in the pool.

use nsm_forwarder::pod_watch::Pod;
use nsm_forwarder::testing::{BlockingClient, TestEndpoint};
use nsm_proto::connection::{Connection, State};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext};
use nsm_proto::networkservice::NetworkServiceRequest;
use testkit::wait_for;

mod nsm_support;

use nsm_support::kernel::{
    assert_built_once, assert_nothing_left, leftovers, per_backend, tag, KernelBackend,
};
use nsm_support::{kernel_mech, nsc_connection, KernelTest, IP, PING};

per_backend!(ping_crosses_quiver_between_nsc_and_nse_kernel_interfaces_and_close_leaves_nothing);
fn ping_crosses_quiver_between_nsc_and_nse_kernel_interfaces_and_close_leaves_nothing(
    backend: KernelBackend,
) {
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "ping_crosses_quiver_between_nsc_and_nse_kernel_interfaces",
        &[IP, PING],
        ["nsc", "nse", "nsm-e2e"],
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

    let id = format!("e2e-{}-{}", tag(backend), std::process::id());
    let request = NetworkServiceRequest {
        connection: Some(Connection {
            context: Some(ConnectionContext {
                ip_context: Some(IpContext {
                    src_ip_addrs: vec!["10.72.0.1/24".into()],
                    dst_ip_addrs: vec!["10.72.0.2/24".into()],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..nsc_connection(&id, "ping")
        }),
        mechanism_preferences: kernel_mech(&nsc.url(), "nsm0"),
    };
    let answer = client.request(request).unwrap();
    assert_eq!(answer.state, State::Up as i32);
    assert_eq!(answer.id, id);
    assert!(nsc.has_link("nsm0"), "the client's interface");
    assert!(nse.has_link("nse0"), "the endpoint's interface");
    assert_built_once(backend, &id, &nsc, &nse, &fwd);
    // The backend is fixed once a KERNEL interface was made with it (TAP: the default, never
    // set): a late change is refused.
    let other = match backend {
        KernelBackend::Tap => KernelBackend::Veth,
        KernelBackend::Veth => KernelBackend::Tap,
    };
    let late = dp.set_kernel_backend(other).unwrap_err();
    assert_eq!((late.chosen, late.asked), (backend, other));
    assert_eq!(dp.kernel_backend(), backend);
    // Unprivileged ICMP sockets allowed on both sides, as NSM's liveness check pings with one
    // (a new namespace allows no group).
    for ns in [&nsc, &nse] {
        assert_eq!(ns.ping_group_range(), "0 2147483647");
    }

    // The first echoes may go while the neighbours resolve.
    wait_for("a ping from the NSC to the NSE through Quiver", 30, || {
        nsc.ping("10.72.0.2")
    });
    let forwarded: u64 = fwd.view().tx_packets();
    assert!(
        forwarded >= 2,
        "Quiver carried the echo and its reply: {forwarded}"
    );

    client.close(answer).unwrap();
    assert_eq!(endpoint.log().closes.len(), 1, "closed toward the endpoint");
    assert!(!nsc.has_link("nsm0"), "the client's interface is gone");
    assert!(!nse.has_link("nse0"), "the endpoint's interface is gone");
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);
    assert!(!nsc.ping("10.72.0.2"));

    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}

per_backend!(a_dead_endpoint_pod_closes_its_connection);
/// A pod that dies takes its connection with it: the endpoint's namespace has a process (its
/// "pod"); once that process is gone (killed, as a pod is), Quiver closes the connection by
/// itself — toward the endpoint, in its data path and on its monitor — with no Close from the
/// client and long before expiry, as cmd-forwarder-vpp's namespace monitor does.
fn a_dead_endpoint_pod_closes_its_connection(backend: KernelBackend) {
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "a_dead_endpoint_pod_closes_its_connection",
        &[IP, "/usr/bin/sleep"],
        ["nsc-pod", "nse-pod", "nsm-pod"],
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
    // The endpoint's pod: one process in its namespace (once `ip netns exec` has entered it).
    let mut pod = nse.spawn(std::path::Path::new("/usr/bin/sleep"), &["600"]);
    let netns = std::path::PathBuf::from(nse.path());
    wait_for("the pod's process in its namespace", 10, || {
        Pod::find(&netns).is_some_and(|p| p.pid() == Some(pod.id()))
    });
    let listen = format!("unix://{}", dir.join("quiver.sock").display());
    let dp = quiver.dataplane();
    let next = format!("unix://{}", dir.join("nse.sock").display());
    let server = quiver.serve_with(dp.clone(), "quiver", &listen, None, next, |cfg| {
        cfg.watch_pods = true
    });
    let mut client = BlockingClient::connect(&listen).unwrap();
    let mut events = client
        .monitor(nsm_proto::connection::MonitorScopeSelector::default())
        .unwrap();
    let id = format!("pod-{}-{}", tag(backend), std::process::id());
    let answer = client
        .request(NetworkServiceRequest {
            connection: Some(nsc_connection(&id, "ping")),
            mechanism_preferences: kernel_mech(&nsc.url(), "nsm0"),
        })
        .unwrap();
    assert_eq!(answer.state, State::Up as i32);
    assert_built_once(backend, &id, &nsc, &nse, &fwd);
    assert!(endpoint.log().closes.is_empty());

    pod.kill().unwrap();
    pod.wait().unwrap();
    // Quiver's ports go first, the interfaces with them.
    wait_for(
        "the connection closed after its endpoint pod died",
        30,
        || leftovers(&id, &[&nsc, &nse], &fwd, &dp).is_empty(),
    );
    assert_eq!(endpoint.log().closes.len(), 1, "closed toward the endpoint");
    // The monitor: the initial transfer, the Request's UPDATE, then a DELETE.
    let mut deleted = false;
    while let Ok(Some(e)) = client.next_event(&mut events, std::time::Duration::from_secs(5)) {
        if e.r#type == nsm_proto::connection::ConnectionEventType::Delete as i32 {
            deleted = true;
            break;
        }
    }
    assert!(deleted, "no DELETE published");

    drop(events);
    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}

per_backend!(a_deleted_client_namespace_closes_its_connection);
/// A namespace deleted under a live connection (`ip netns del` of a namespace no process is in,
/// so it is followed by its name) closes the connection as a dead pod does: Quiver's ports and
/// the veths go, the endpoint gets its Close, with no Close from the client.
fn a_deleted_client_namespace_closes_its_connection(backend: KernelBackend) {
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "a_deleted_client_namespace_closes_its_connection",
        &[IP],
        ["nsc-del", "nse-del", "nsm-del"],
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
    let netns = std::path::PathBuf::from(nsc.path());
    assert_eq!(
        Pod::find(&netns).map(|p| p.pid()),
        Some(None),
        "no process in it: followed by its name"
    );
    let listen = format!("unix://{}", dir.join("quiver.sock").display());
    let dp = quiver.dataplane();
    let next = format!("unix://{}", dir.join("nse.sock").display());
    let server = quiver.serve_with(dp.clone(), "quiver", &listen, None, next, |cfg| {
        cfg.watch_pods = true
    });
    let mut client = BlockingClient::connect(&listen).unwrap();
    let id = format!("del-{}-{}", tag(backend), std::process::id());
    let answer = client
        .request(NetworkServiceRequest {
            connection: Some(nsc_connection(&id, "ping")),
            mechanism_preferences: kernel_mech(&nsc.url(), "nsm0"),
        })
        .unwrap();
    assert_eq!(answer.state, State::Up as i32);
    assert_built_once(backend, &id, &nsc, &nse, &fwd);

    let deleted = std::time::Instant::now();
    nsm_support::run(&[IP, "netns", "del", &nsc.0]);
    wait_for(
        "the connection closed after its client namespace was deleted",
        30,
        || leftovers(&id, &[&nsc, &nse], &fwd, &dp).is_empty(),
    );
    eprintln!(
        "closed {} ms after the namespace was deleted",
        deleted.elapsed().as_millis()
    );
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);
    assert_eq!(endpoint.log().closes.len(), 1, "closed toward the endpoint");

    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}
