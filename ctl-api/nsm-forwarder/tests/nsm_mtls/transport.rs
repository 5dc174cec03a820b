//! SVID rotation, the health probe, TCP with mTLS only, plaintext on unix sockets only.

use std::sync::Arc;
use std::time::Duration;

use nsm_forwarder::dial::dial_with;
use nsm_forwarder::server::bind_for;
use nsm_forwarder::{NsmConfig, NsmHandle, NsmService, ServeError, StaticEndpoint};
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use spiffe_identity::testing::{
    client_config_with, in_a_year, peer_of, workload, FakeWorkloadApi, TestCa,
};
use spiffe_identity::tokens::{self};
use spiffe_identity::{self as spiffe};
use tonic::transport::Server;
use tonic::{Code, Request};

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_svid_is_presented_at_the_next_handshake_without_a_restart() {
    let h = harness().await;
    let before = h.nsc_channel().await;
    assert_eq!(before.peer().unwrap().serial(), [1]);

    let mut watch = h.quiver_identity.clone();
    h.quiver_api
        .push(h.ca.response(&h.ca.issue(QUIVER_PATH, 0x77, in_a_year())));
    assert_eq!(watch.changed().await.unwrap().serial(), [0x77]);

    let after = h.nsc_channel().await;
    let quiver = after.peer().unwrap();
    assert_eq!(quiver.serial(), [0x77], "the new SVID is served");
    assert_eq!(quiver.spiffe_id(), &h.quiver_identity.spiffe_id());
    // And Quiver signs with the new key: its token verifies against the new certificate.
    let answer = NetworkServiceClient::new(after.channel())
        .request(with_token(memif_request("c2"), &nsc_token(&h, &after)))
        .await
        .unwrap()
        .into_inner();
    let own = &answer.path.as_ref().unwrap().path_segments[1];
    tokens::verify(&own.token, &quiver).unwrap();
    assert!(tokens::verify(&own.token, &before.peer().unwrap()).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_probe_needs_an_svid_too() {
    let h = harness().await;
    let t = Duration::from_secs(10);
    let serving = nsm_forwarder::health::check_with(&h.listen_on, t, Some(&h.nsc_identity)).await;
    assert_eq!(serving.unwrap().len(), 2);
    assert!(nsm_forwarder::health::check_with(&h.listen_on, t, None)
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nsm_is_served_over_mtls_on_tcp_to_clients_with_an_svid_only() {
    let h = harness_listening_on(Some("tcp://127.0.0.1:0")).await;
    let addr = h.listen_on.strip_prefix("tcp://").unwrap().to_string();
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );

    // No client certificate: refused at the handshake (or the first call, under TLS 1.3).
    let refused = async {
        let no_svid = client_config_with(&h.nsc_identity, rustls::DEFAULT_VERSIONS, false);
        let channel = spiffe::connect_tls_with_config(&h.listen_on, no_svid).await?;
        NetworkServiceClient::new(channel.channel())
            .request(memif_request("t0"))
            .await
            .map_err(spiffe::SpiffeError::from)?;
        Ok::<_, spiffe::SpiffeError>(())
    };
    assert!(
        refused.await.is_err(),
        "a client without a certificate got through"
    );
    // Plaintext HTTP/2 to the TLS port: nothing is served.
    let plain = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await;
    if let Ok(channel) = plain {
        let answered = NetworkServiceClient::new(channel)
            .request(memif_request("t0"))
            .await;
        assert!(answered.is_err(), "a plaintext client got through");
    }
    h.assert_no_state("refused clients on TCP");

    // A client with an SVID: Request and Close, the path tokens checked as on a unix socket.
    let channel = h.nsc_channel().await;
    let answer = request_up(&h, &channel, "t1").await.answer;
    assert_eq!(h.service.core().connection_count(), 1);
    let mut client = NetworkServiceClient::new(channel.channel());
    // A token for another workload is refused over TCP as well.
    let elsewhere = peer_of(&h.ca.issue("/ns/default/sa/elsewhere", 9, in_a_year()));
    let replayed = tokens::mint(
        &h.nsc_identity.current(),
        &elsewhere,
        Duration::from_secs(600),
    )
    .unwrap();
    let status = client
        .request(with_token(memif_request("t2"), &replayed))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(h.service.core().connection_count(), 1);

    let mut close = Request::new(answer);
    nsc_token(&h, &channel)
        .insert_into(close.metadata_mut())
        .unwrap();
    client.close(close).await.unwrap();
    assert!(h.dp.is_empty());
    assert_eq!(h.service.core().connection_count(), 0);
}

/// As `quiver run` starts it (its own runtime, the identity from `SPIFFE_ENDPOINT_SOCKET`):
/// `NSM_LISTEN_ON=tcp://127.0.0.1:0` is served with mTLS on the port bound, which the
/// configuration then names, and the health probe works over it with an SVID.
#[test]
fn the_nsm_handle_serves_tcp_with_an_identity() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(TD);
    let (quiver_api, (_nsc_api, nsc_identity)) = runtime.block_on(async {
        let quiver_svid = ca.issue(QUIVER_PATH, 1, in_a_year());
        let quiver_api =
            FakeWorkloadApi::start(dir.path(), "quiver-agent", ca.response(&quiver_svid));
        let nsc_svid = ca.issue(NSC_PATH, 2, in_a_year());
        (
            quiver_api,
            workload(dir.path(), "nsc-agent", &ca, &nsc_svid).await,
        )
    });
    let cfg = NsmConfig {
        listen_on: "tcp://127.0.0.1:0".into(),
        spiffe_endpoint: Some(quiver_api.endpoint().to_string()),
        ..NsmConfig::default()
    };
    let handle = NsmHandle::spawn(
        cfg,
        Arc::new(RecordingDp::default()),
        Arc::new(StaticEndpoint("unix:///nowhere".into())),
        1,
    )
    .unwrap();
    let url = handle.core().cfg.listen_on.clone();
    assert!(
        url.starts_with("tcp://127.0.0.1:") && !url.ends_with(":0"),
        "{url}"
    );
    let t = Duration::from_secs(10);
    let serving = runtime
        .block_on(nsm_forwarder::health::check_with(
            &url,
            t,
            Some(&nsc_identity),
        ))
        .unwrap();
    assert_eq!(serving.len(), 2);
    drop(handle);
}

#[test]
fn plaintext_is_for_unix_sockets_only() {
    let cfg = NsmConfig {
        listen_on: "tcp://127.0.0.1:0".into(),
        ..NsmConfig::default()
    };
    let says_why = |err: &dyn std::fmt::Display| {
        let err = err.to_string();
        assert!(err.contains("plaintext is only for unix sockets"), "{err}");
        assert!(err.contains("SPIFFE_ENDPOINT_SOCKET"), "{err}");
    };
    let err = bind_for(&cfg).unwrap_err();
    assert!(matches!(err, ServeError::PlaintextTcp(_)), "{err}");
    says_why(&err);
    // Starting as `quiver run` does fails the same way, before anything listens.
    let started = NsmHandle::spawn(
        cfg.clone(),
        Arc::new(RecordingDp::default()),
        Arc::new(StaticEndpoint("unix:///nowhere".into())),
        1,
    );
    let err = started
        .err()
        .expect("started on tcp:// without an identity");
    assert!(matches!(err, ServeError::PlaintextTcp(_)), "{err}");
    says_why(&err);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // A TCP listener handed to the service or to the transport without an identity.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let service = NsmService::new(
            cfg.clone(),
            Arc::new(RecordingDp::default()),
            Arc::new(StaticEndpoint("unix:///nowhere".into())),
        );
        let err = service.serve_on(listener, async {}).await.unwrap_err();
        assert!(matches!(err, ServeError::PlaintextTcp(_)), "{err}");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (_reporter, health) = tonic_health::server::health_reporter();
        let router = Server::builder().add_service(health);
        let err = spiffe::serve(router, listener, None, async {})
            .await
            .unwrap_err();
        assert!(matches!(err, spiffe::SpiffeError::PlaintextTcp(_)), "{err}");
    });
    let dialed = runtime.block_on(dial_with(
        "tcp://127.0.0.1:5001",
        Duration::from_secs(1),
        None,
    ));
    assert_eq!(dialed.unwrap_err().code(), Code::FailedPrecondition);
}
