//! `quiver run --nsm` registers with nsmgr the way NSM's own registry clients do: each Register
//! and Unregister carries the registry path (gRPC metadata `path`) — the empty one first, then
//! the one nsmgr answered with — which nsmgr's authorization requires (without it, every
//! registration is refused with PermissionDenied and no NSC can reach Quiver).

mod support;

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use nsm_forwarder::testing::TestRegistry;
use support::{memif_pair_config, Quiver, Scratch};
use testkit::wait_for;

const FIRST: &str = r#"path={"Index":0,"PathSegments":null}"#;

/// The path the test registry answers its `n`th registration with.
fn answered(n: u32) -> String {
    format!(
        r#"path={{"Index":1,"PathSegments":[{{"token":"caller-{n}"}},{{"token":"nsmgr-{n}"}}]}}"#
    )
}

/// Quiver registers, refreshes, and is stopped while its second Register is in flight (the
/// registry holds the answer): it finishes that Register, then unregisters continuing the path
/// nsmgr answered it with — after it, never before, and never with the path before it.
#[test]
fn register_refresh_and_unregister_continue_the_registry_path_nsmgr_answers() {
    let dir = Scratch::new("nsm-registry-path");
    let socket = dir.path("nsmgr.sock");
    // Registrations granted 1.5 s: Quiver registers again after 1 s; that answer is held.
    let registry = TestRegistry::start_holding(&socket, Duration::from_millis(1500), 1).unwrap();
    let config = memif_pair_config(&dir.path("memif.sock"), "[stats]\ninterval_secs = 0");
    let mut q = Quiver::spawn_with(&dir, "q", &config, &dir.path("admin.sock"), |c| {
        c.arg("--nsm")
            .env(
                "NSM_LISTEN_ON",
                format!("unix://{}", dir.path("nsm.sock").display()),
            )
            .env("NSM_CONNECT_TO", format!("unix://{}", socket.display()))
            .env("NSM_NAME", "quiver-path")
            .env_remove("SPIFFE_ENDPOINT_SOCKET");
    });
    wait_for("the refresh", 30, || registry.log().len() >= 2);
    let pid = Pid::from_raw(q.child.id() as i32);
    kill(pid, Signal::SIGINT).unwrap();
    q.wait_log("leaving nsmgr's registry");
    registry.release();
    q.stop();
    assert_eq!(
        registry.log(),
        [
            format!("register quiver-path {FIRST}"),
            format!("register quiver-path {}", answered(0)),
            format!("unregister quiver-path {}", answered(1)),
        ]
    );
}
