//! NSM end to end with kernel interfaces: an NSC network namespace and an NSE network
//! namespace, Quiver's NSM server over the real forwarder, a test endpoint playing the NSE's
//! gRPC side. After Request, `ping` goes NSC → veth → Quiver (L2 cross-connect) → veth → NSE
//! and back; after Close no interface, veth, port or cross-connect remains, and once the
//! forwarder stops every buffer is back in the pool.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ctl_api::nsm::path::timestamp;
use ctl_api::nsm::testing::{BlockingClient, TestEndpoint};
use ctl_api::nsm::{Dataplane, NsmConfig, NsmHandle, StaticEndpoint};
use ctl_api::proto::connection::{Connection, Path, PathSegment, State};
use ctl_api::proto::connectioncontext::{ConnectionContext, IpContext};
use ctl_api::proto::networkservice::NetworkServiceRequest;
use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, IdlePolicy, WorkerConfig};
use quiver::control::nsm::ForwarderDataplane;
use quiver::{Config, Forwarder, Housekeeping};
use testkit::{require, wait_for, Needs};

mod nsm_support;

use nsm_support::{mech, Netns, TempDir, IP, PING};

#[test]
fn ping_crosses_quiver_between_nsc_and_nse_kernel_interfaces_and_close_leaves_nothing() {
    if !require(
        "ping_crosses_quiver_between_nsc_and_nse_kernel_interfaces",
        &Needs {
            root: true,
            tools: &[IP, PING],
            ..Needs::default()
        },
    ) {
        return;
    }
    let nsc = Netns::new("nsc");
    let nse = Netns::new("nse");
    let dir = TempDir::new("nsm-e2e");

    let cfg = Config::parse("[buffers]\nhugepages = \"never\"\n").unwrap();
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 8192,
        hugepages: HugepagePolicy::Never,
        ..BufferPoolConfig::default()
    })
    .unwrap();
    let start_free = pool.free_count();
    let workers = WorkerConfig {
        cores: vec![0],
        idle: IdlePolicy::ADAPTIVE,
    };
    let fwd = Arc::new(Mutex::new(
        Forwarder::start(&cfg, &workers, pool.clone()).unwrap(),
    ));
    // The control plane's housekeeping runs beside the API calls, as in the daemon.
    let housekeeping = Housekeeping::spawn(fwd.clone(), Duration::from_millis(1));

    let nse_sock = dir.path().join("nse.sock");
    let endpoint = TestEndpoint::start(
        &nse_sock,
        "nse",
        vec![mech(
            "KERNEL",
            &[("inodeURL", &nse.url()), ("name", "nse0")],
        )],
    )
    .unwrap();
    let listen = format!("unix://{}", dir.path().join("quiver.sock").display());
    let dp = ForwarderDataplane::new(fwd.clone());
    let server = NsmHandle::spawn(
        NsmConfig {
            name: "quiver".into(),
            listen_on: listen.clone(),
            // Other Quivers' tagged veths may share this host: leave them alone.
            reconcile_at_start: false,
            ..NsmConfig::default()
        },
        dp.clone(),
        Arc::new(StaticEndpoint(format!("unix://{}", nse_sock.display()))),
        1,
    )
    .unwrap();
    let mut client = BlockingClient::connect(&listen).unwrap();

    let id = format!("e2e-{}", std::process::id());
    let request = NetworkServiceRequest {
        connection: Some(Connection {
            id: id.clone(),
            network_service: "ping".into(),
            network_service_endpoint_name: "nse".into(),
            payload: "ETHERNET".into(),
            context: Some(ConnectionContext {
                ip_context: Some(IpContext {
                    src_ip_addrs: vec!["10.72.0.1/24".into()],
                    dst_ip_addrs: vec!["10.72.0.2/24".into()],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            path: Some(Path {
                index: 0,
                path_segments: vec![PathSegment {
                    name: "nsc".into(),
                    id: id.clone(),
                    expires: Some(timestamp(SystemTime::now() + Duration::from_secs(600))),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        mechanism_preferences: vec![mech(
            "KERNEL",
            &[("inodeURL", &nsc.url()), ("name", "nsm0")],
        )],
    };
    let answer = client.request(request).unwrap();
    assert_eq!(answer.state, State::Up as i32);
    assert_eq!(answer.id, id);
    assert!(nsc.has_link("nsm0"), "the client's interface");
    assert!(nse.has_link("nse0"), "the endpoint's interface");
    assert_eq!(fwd.lock().unwrap().ports().len(), 2);

    // The first echoes may go while the neighbours resolve.
    wait_for("a ping from the NSC to the NSE through Quiver", 30, || {
        nsc.ping("10.72.0.2")
    });
    let forwarded: u64 = fwd.lock().unwrap().tx_packets();
    assert!(
        forwarded >= 2,
        "Quiver carried the echo and its reply: {forwarded}"
    );

    client.close(answer).unwrap();
    assert_eq!(endpoint.log().closes.len(), 1, "closed toward the endpoint");
    assert!(!nsc.has_link("nsm0"), "the client's interface is gone");
    assert!(!nse.has_link("nse0"), "the endpoint's interface is gone");
    assert!(fwd.lock().unwrap().ports().is_empty(), "no port left");
    assert!(
        fwd.lock().unwrap().owned_by(&id).is_empty(),
        "no object left"
    );
    assert!(!dp.owners().unwrap().contains(&id), "no tagged veth left");
    assert!(!nsc.ping("10.72.0.2"));

    drop(client);
    drop(server);
    drop(dp);
    housekeeping.stop().unwrap();
    // The link watcher lets go of the forwarder at its next look.
    wait_for("the forwarder to be no longer shared", 10, || {
        Arc::strong_count(&fwd) == 1
    });
    let fwd = Arc::try_unwrap(fwd)
        .ok()
        .expect("the forwarder is no longer shared")
        .into_inner()
        .unwrap();
    fwd.stop();
    assert_eq!(pool.free_count(), start_free, "every buffer is back");
}
