//! `quiver run --nsm` registers with nsmgr the way NSM's own registry clients do: each Register
//! and Unregister carries the registry path (gRPC metadata `path`) — the empty one first, then
//! the one nsmgr answered with — which nsmgr's authorization requires (without it, every
//! registration is refused with PermissionDenied and no NSC can reach Quiver).

mod support;

use std::time::Duration;

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

#[test]
fn register_refresh_and_unregister_continue_the_registry_path_nsmgr_answers() {
    let dir = Scratch::new("nsm-registry-path");
    let socket = dir.path("nsmgr.sock");
    // Registrations granted 1.5 s: Quiver registers again after 1 s.
    let registry = TestRegistry::start_granting(&socket, Duration::from_millis(1500)).unwrap();
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
    wait_for("two registrations", 30, || {
        registry
            .log()
            .iter()
            .filter(|l| l.starts_with("register"))
            .count()
            >= 2
    });
    q.stop();
    let log = registry.log();
    assert_eq!(log[0], format!("register quiver-path {FIRST}"), "{log:?}");
    assert_eq!(
        log[1],
        format!("register quiver-path {}", answered(0)),
        "{log:?}"
    );
    let last = log.last().unwrap();
    let registrations = log.iter().filter(|l| l.starts_with("register")).count() as u32;
    assert_eq!(
        *last,
        format!("unregister quiver-path {}", answered(registrations - 1)),
        "{log:?}"
    );
}
