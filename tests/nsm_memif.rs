//! NSM end to end with memif: an NSC network namespace and an NSE network namespace, each
//! running the memif example CNF `traffic` (the NSC's sends, the NSE's counts), Quiver's NSM
//! server over the real forwarder, a test endpoint playing the NSE's gRPC side. After Request,
//! Quiver is memif master on an abstract socket inside the NSC's namespace and slave to the
//! NSE's socket inside the NSE's; every frame the NSC sends reaches the NSE once, in order and
//! intact. After Close no port, socket or cross-connect remains, and once the forwarder stops
//! every buffer is back in the pool.

use nsm_forwarder::testing::BlockingClient;
use nsm_proto::connection::State;
use nsm_proto::networkservice::NetworkServiceRequest;
use testkit::{require, wait_for, Needs};

mod nsm_support;

use nsm_support::{
    link_up, mech, memif_endpoint, memif_sink, memif_source, nsc_connection, traffic_example,
    traffic_report, Netns, TestForwarder, IP,
};

/// Frames the NSC sends.
const FRAMES: u64 = 20_000;

#[test]
fn every_frame_crosses_quiver_between_nsc_and_nse_memif_cnfs_and_close_leaves_nothing() {
    if !require(
        "every_frame_crosses_quiver_between_nsc_and_nse_memif_cnfs",
        &Needs {
            root: true,
            tools: &[IP],
            ..Needs::default()
        },
    ) {
        return;
    }
    let traffic = traffic_example();
    let nsc = Netns::new("mnsc");
    let nse = Netns::new("mnse");
    let dir = std::env::temp_dir().join(format!("quiver-nsm-memif-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let quiver = TestForwarder::start("");
    let fwd = quiver.fwd.clone();

    // The NSE's CNF: memif master on an abstract socket of its namespace, counting frames.
    let nse_socket = format!("@quiver-test-nse-{}", std::process::id());
    let sink = memif_sink(&traffic, &nse, &nse_socket, FRAMES);

    let nse_sock = dir.join("nse.sock");
    let endpoint = memif_endpoint(&nse_sock, &nse, &nse_socket);
    let listen = format!("unix://{}", dir.join("quiver.sock").display());
    let server = quiver.serve(
        quiver.dataplane(),
        "quiver",
        &listen,
        None,
        format!("unix://{}", nse_sock.display()),
    );
    let mut client = BlockingClient::connect(&listen).unwrap();

    let id = format!("memif-{}", std::process::id());
    let request = NetworkServiceRequest {
        connection: Some(nsc_connection(&id, "traffic")),
        mechanism_preferences: vec![mech("MEMIF", &[("inodeURL", &nsc.url())])],
    };
    let answer = client.request(request).unwrap();
    assert_eq!(answer.state, State::Up as i32);
    let socket = answer.mechanism.as_ref().unwrap().parameters["socketfile"].clone();
    assert_eq!(socket, format!("@quiver/{id}/memif.socket"));
    let endpoint_port = format!("nsm-{id}-endpoint");
    wait_for("Quiver's memif to the NSE to come up", 60, || {
        link_up(&fwd, &endpoint_port)
    });

    // The NSC's CNF: slave on the socket Quiver answered with, inside its own namespace.
    let source = memif_source(&traffic, &nsc, &socket, FRAMES, "50k");
    let sent = source.wait();
    assert!(sent.status.success(), "the NSC's traffic failed: {sent:?}");
    let received = sink.wait();
    let (tx, rx) = (traffic_report(&sent), traffic_report(&received));
    let stats = |port: &str| {
        let f = fwd.view();
        let e = f.ports().iter().find(|e| e.name == port).unwrap();
        (e.port.stats(), f.format_interfaces())
    };
    let (client_stats, table) = stats(&format!("nsm-{id}-client"));
    let (endpoint_stats, _) = stats(&endpoint_port);
    let why = format!("NSC: {tx}\nNSE: {rx}\nQuiver:\n{table}");
    // Every frame is counted: the NSC sent them all; Quiver received every one of them; every
    // frame Quiver put on the NSE's ring reached the NSE once, in order and intact (on a
    // loaded machine Quiver may drop some when that ring is full: those it counts).
    assert_eq!(tx["sent"], FRAMES, "{why}");
    assert_eq!(client_stats.rx_packets, FRAMES, "{why}");
    assert_eq!(rx["unique"], endpoint_stats.tx_packets, "{why}");
    assert_eq!(rx["received"], rx["unique"], "{why}");
    for k in ["duplicated", "reordered", "corrupted", "foreign"] {
        assert_eq!(rx[k], 0, "{k}: {why}");
    }
    assert!(endpoint_stats.tx_packets > FRAMES / 2, "{why}");

    client.close(answer).unwrap();
    assert_eq!(endpoint.log().closes.len(), 1, "closed toward the endpoint");
    assert!(fwd.view().ports().is_empty(), "no port left");
    assert!(fwd.view().owned_by(&id).is_empty(), "no object left");

    drop(client);
    drop(server);
    drop(fwd);
    quiver.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
