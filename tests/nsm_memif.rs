//! NSM end to end with memif: an NSC network namespace and an NSE network namespace, each
//! running the memif example CNF `traffic` (the NSC's sends, the NSE's counts), Quiver's NSM
//! server over the real forwarder, a test endpoint playing the NSE's gRPC side. After Request,
//! Quiver is memif master on an abstract socket inside the NSC's namespace and slave to the
//! NSE's socket inside the NSE's; every frame the NSC sends reaches the NSE once, in order and
//! intact. After Close no port, socket or cross-connect remains, and once the forwarder stops
//! every buffer is back in the pool.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ctl_api::nsm::path::timestamp;
use ctl_api::nsm::testing::{BlockingClient, TestEndpoint};
use ctl_api::nsm::{NsmConfig, NsmHandle, StaticEndpoint};
use ctl_api::proto::connection::{Connection, Mechanism, Path, PathSegment, State};
use ctl_api::proto::networkservice::NetworkServiceRequest;
use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, IdlePolicy, WorkerConfig};
use drivers::LinkStatus;
use quiver::control::nsm::ForwarderDataplane;
use quiver::{Config, Forwarder, Housekeeping};
use testkit::{require, wait_for, Needs};

const IP: &str = "/usr/sbin/ip";
/// Frames the NSC sends.
const FRAMES: u64 = 20_000;

/// A named network namespace, deleted on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let ns = Netns(format!("quiver-nsm-{tag}-{}", std::process::id()));
        let out = Command::new(IP)
            .args(["netns", "add", &ns.0])
            .output()
            .unwrap();
        assert!(out.status.success(), "ip netns add: {out:?}");
        ns
    }
    fn url(&self) -> String {
        format!("file:///var/run/netns/{}", self.0)
    }
    /// Starts `exe args…` inside the namespace.
    fn spawn(&self, exe: &std::path::Path, args: &[&str]) -> Child {
        Command::new(IP)
            .args(["netns", "exec", &self.0])
            .arg(exe)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new(IP).args(["netns", "del", &self.0]).output();
    }
}

/// Kills a child left running when the test fails.
struct Killed(Option<Child>);

impl Killed {
    fn wait(mut self) -> std::process::Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Builds the memif examples (same profile as this test) and returns `traffic`'s path.
fn traffic_example() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "-p",
        "memif",
        "--example",
        "traffic",
        "--message-format=json-render-diagnostics",
    ])
    .current_dir(env!("CARGO_MANIFEST_DIR"))
    .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd.output().expect("run cargo build --example traffic");
    assert!(out.status.success(), "cargo build --example traffic failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| {
            (v["reason"] == "compiler-artifact" && v["target"]["name"] == "traffic")
                .then(|| v["executable"].as_str().map(PathBuf::from))
                .flatten()
        })
        .expect("cargo said where traffic is")
}

fn mech(ty: &str, params: &[(&str, &str)]) -> Mechanism {
    Mechanism {
        cls: "LOCAL".into(),
        r#type: ty.into(),
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
    }
}

fn link_up(fwd: &Mutex<Forwarder>, port: &str) -> bool {
    fwd.lock()
        .unwrap()
        .ports()
        .iter()
        .any(|e| e.name == port && e.port.link() == LinkStatus::Up)
}

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

    let cfg = Config::parse("[buffers]\nhugepages = \"never\"\n").unwrap();
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 16384,
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

    // The NSE's CNF: memif master on an abstract socket of its namespace, counting frames.
    let nse_socket = format!("@quiver-test-nse-{}", std::process::id());
    let count = FRAMES.to_string();
    let sink = Killed(Some(nse.spawn(
        &traffic,
        &[
            "--rx",
            &nse_socket,
            "--rx-role",
            "master",
            "--count",
            &count,
            // Ends early when every frame came; otherwise bounds the wait.
            "--duration",
            "30s",
            "--connect-timeout",
            "60s",
            "--json",
        ],
    )));

    let nse_sock = dir.join("nse.sock");
    let endpoint = TestEndpoint::start(
        &nse_sock,
        "nse",
        vec![mech(
            "MEMIF",
            &[("inodeURL", &nse.url()), ("socketfile", &nse_socket)],
        )],
    )
    .unwrap();
    let listen = format!("unix://{}", dir.join("quiver.sock").display());
    let dp = ForwarderDataplane::new(fwd.clone());
    let server = NsmHandle::spawn(
        NsmConfig {
            name: "quiver".into(),
            listen_on: listen.clone(),
            reconcile_at_start: false,
            ..NsmConfig::default()
        },
        dp.clone(),
        Arc::new(StaticEndpoint(format!("unix://{}", nse_sock.display()))),
        1,
    )
    .unwrap();
    let mut client = BlockingClient::connect(&listen).unwrap();

    let id = format!("memif-{}", std::process::id());
    let request = NetworkServiceRequest {
        connection: Some(Connection {
            id: id.clone(),
            network_service: "traffic".into(),
            network_service_endpoint_name: "nse".into(),
            payload: "ETHERNET".into(),
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
    let source = Killed(Some(nsc.spawn(
        &traffic,
        &[
            "--tx",
            &socket,
            "--tx-role",
            "slave",
            "--count",
            &count,
            // Slow enough that no ring on the way fills (a full ring drops, by design).
            "--rate",
            "50k",
            "--connect-timeout",
            "60s",
            "--json",
        ],
    )));
    let sent = source.wait();
    assert!(sent.status.success(), "the NSC's traffic failed: {sent:?}");
    let received = sink.wait();
    let report = |o: &std::process::Output| -> serde_json::Value {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no JSON report: {o:?}"))
    };
    let (tx, rx) = (report(&sent), report(&received));
    let stats = |port: &str| {
        let f = fwd.lock().unwrap();
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
    assert!(fwd.lock().unwrap().ports().is_empty(), "no port left");
    assert!(
        fwd.lock().unwrap().owned_by(&id).is_empty(),
        "no object left"
    );

    drop(client);
    drop(server);
    drop(dp);
    housekeeping.stop().unwrap();
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
    let _ = std::fs::remove_dir_all(&dir);
}
