//! `quiver run` with `NSM_LISTEN_ON=tcp://host:port`: NSM over TCP is served with SPIFFE mTLS
//! only, so without `SPIFFE_ENDPOINT_SOCKET` Quiver refuses to start and says why. (Serving it
//! with an identity is tested in `ctl-api/nsm-forwarder/tests/nsm_mtls/`, with a test CA and Workload API.)

mod support;

use support::{memif_pair_config, Quiver, Scratch};

#[test]
fn a_tcp_nsm_listen_address_without_a_spiffe_identity_refuses_to_start() {
    let dir = Scratch::new("nsm-tcp-plaintext");
    let config = memif_pair_config(&dir.path("memif.sock"), "");
    let q = Quiver::spawn_with(&dir, "quiver", &config, &dir.path("admin.sock"), |c| {
        c.arg("--nsm")
            .env("NSM_LISTEN_ON", "tcp://127.0.0.1:0")
            .env_remove("SPIFFE_ENDPOINT_SOCKET")
            .env_remove("NSM_CONNECT_TO");
    });
    let (status, log) = q.wait_exit();
    assert!(!status.success(), "quiver started:\n{log}");
    assert!(
        log.contains("plaintext is only for unix sockets"),
        "the reason is not said:\n{log}"
    );
    assert!(log.contains("SPIFFE_ENDPOINT_SOCKET"), "{log}");
}
