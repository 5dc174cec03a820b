//! `quiver run --nsm` stops the way a DaemonSet pod must: on SIGINT or SIGTERM it withdraws its
//! registration from nsmgr, stops its workers, finds every buffer back in the pool and exits 0
//! (Kubernetes records any other exit as a failure).

mod support;

use std::time::Duration;

use nix::sys::signal::Signal;
use nsm_forwarder::testing::{BlockingClient, TestRegistry};
use nsm_proto::connection::MonitorScopeSelector;
use support::{memif_pair_config, Quiver, Scratch};
use testkit::wait_for;

/// Stops on `signal` with a MonitorConnections stream open (nsmgr keeps one to each forwarder
/// for good): the stream ends and Quiver exits 0.
fn stops_cleanly_on(signal: Signal) {
    let name = format!("stop-{}", signal.as_str().to_lowercase());
    let dir = Scratch::new(&name);
    let registry_socket = dir.path("nsmgr.sock");
    let registry = TestRegistry::start(&registry_socket).unwrap();
    let config = memif_pair_config(&dir.path("memif.sock"), "[stats]\ninterval_secs = 0");
    let nsm = format!("unix://{}", dir.path("nsm.sock").display());
    let registry_url = format!("unix://{}", registry_socket.display());
    let q = Quiver::spawn_with(&dir, &name, &config, &dir.path("admin.sock"), |c| {
        c.arg("--nsm")
            .env("NSM_LISTEN_ON", &nsm)
            .env("NSM_CONNECT_TO", &registry_url)
            .env("NSM_NAME", &name)
            .env_remove("SPIFFE_ENDPOINT_SOCKET");
    });
    let registered = format!("register {name} path=");
    wait_for("the forwarder's registration", 30, || {
        registry.log().iter().any(|l| l.starts_with(&registered))
    });
    // Serving too: a show over the admin socket answers.
    let ifs = q.json(&["show", "interfaces"]);
    support::one(&ifs, "name", "memif0");

    // nsmgr's watch: a stream that stays open until Quiver ends it.
    let mut watcher = BlockingClient::connect(&nsm).unwrap();
    let mut events = watcher.monitor(MonitorScopeSelector::default()).unwrap();
    let first = watcher.next_event(&mut events, Duration::from_secs(10));
    assert!(matches!(first, Ok(Some(_))), "{first:?}");

    let pid = nix::unistd::Pid::from_raw(q.child.id() as i32);
    nix::sys::signal::kill(pid, signal).unwrap();
    // The stream ends with the server (the watcher answers while it waits, as nsmgr would).
    let after = watcher.next_event(&mut events, Duration::from_secs(20));
    assert!(!matches!(after, Ok(Some(_))), "{after:?}");
    // Unlike nsmgr, this client answers nothing while not called: it leaves instead.
    drop(events);
    drop(watcher);
    let stdout = q.stdout.clone();
    let (status, log) = q.wait_exit();
    assert_eq!(
        status.code(),
        Some(0),
        "quiver exited {status} on {signal}:\n{log}"
    );
    assert!(
        !log.contains("still open after the stop"),
        "the open stream held the stop until its grace period ran out:\n{log}"
    );
    let printed = stdout.lock().unwrap().clone();
    assert!(
        printed.contains("buffers: 0 in use after stop"),
        "the stop's summary is missing or counts buffers in use:\n{printed}\n{log}"
    );
    let log = registry.log();
    assert!(
        log.last()
            .is_some_and(|l| l.starts_with(&format!("unregister {name} path="))),
        "the registration was not withdrawn last: {log:?}"
    );
}

#[test]
fn sigint_stops_an_nsm_forwarder_with_exit_status_0() {
    stops_cleanly_on(Signal::SIGINT);
}

#[test]
fn sigterm_stops_an_nsm_forwarder_with_exit_status_0() {
    stops_cleanly_on(Signal::SIGTERM);
}
