//! SPIFFE identity end to end: SVIDs from a test Workload API (the real `SpiffeWorkloadAPI`
//! protocol on a unix socket, certificates from an rcgen CA), mTLS between a tonic client and
//! server over a unix socket, rotation, and NSM path tokens checked by the server.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use nsm_proto::connection::PathSegment;
use spiffe_identity::testing::{
    client_config_with, in_a_year, peer_of, workload, x509, FakeWorkloadApi, TestCa,
};
use spiffe_identity::tokens::{
    self, PathToken, TokenClaims, DEFAULT_MAX_TOKEN_LIFETIME, EXPIRES_METADATA, TOKEN_METADATA,
};
use spiffe_identity::workload_api::spiffe_workload_api_client::SpiffeWorkloadApiClient;
use spiffe_identity::workload_api::X509svidRequest;
use spiffe_identity::{
    self as spiffe, connect_tls, connect_tls_with_config, serve, serve_tls, Identity, PeerChannel,
    PeerIdentity,
};
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tonic::metadata::MetadataMap;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;
use tonic::{Code, Request, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const TD: &str = "example.org";
const SERVER_PATH: &str = "/ns/nsm-system/sa/forwarder";
const CLIENT_PATH: &str = "/ns/nsm-system/sa/nsmgr";

/// What the server saw of a call: the client's identity, and its path token's verdict.
struct Seen {
    peer: PeerIdentity,
    token: Option<Result<PathToken, Status>>,
}

/// A health server behind SPIFFE mTLS whose interceptor reports each call's peer and checks
/// its path token when it has one (refusing the call when the token is refused).
struct TestServer {
    uri: String,
    seen: mpsc::UnboundedReceiver<Seen>,
}

fn start_server(dir: &Path, identity: &Identity) -> TestServer {
    let path = dir.join("grpc.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let (tx, seen) = mpsc::unbounded_channel();
    let own = identity.spiffe_id();
    let interceptor = move |request: Request<()>| -> Result<Request<()>, Status> {
        let peer = PeerIdentity::from_request(&request)
            .cloned()
            .ok_or_else(|| Status::unauthenticated("no TLS peer in the request extensions"))?;
        let token = request
            .metadata()
            .get(TOKEN_METADATA)
            .map(|_| tokens::verify_request(&request, &own));
        let verdict = token.clone();
        let _ = tx.send(Seen { peer, token });
        match verdict {
            Some(Err(status)) => Err(status),
            _ => Ok(request),
        }
    };
    let router = Server::builder().add_service(InterceptedService::new(health, interceptor));
    let identity = identity.clone();
    tokio::spawn(async move { serve_tls(router, listener, &identity).await.unwrap() });
    TestServer {
        uri: format!("unix://{}", path.display()),
        seen,
    }
}

/// One health check on `channel`, with `token` in its metadata when given.
async fn check(channel: &PeerChannel, token: Option<&PathToken>) -> Result<(), Status> {
    let mut request = Request::new(HealthCheckRequest::default());
    if let Some(token) = token {
        token.insert_into(request.metadata_mut()).unwrap();
    }
    HealthClient::new(channel.channel())
        .check(request)
        .await
        .map(|_| ())
}

/// The server side and a connected client, both with SVIDs of one CA from the Workload API.
struct Pair {
    _dir: tempfile::TempDir,
    ca: TestCa,
    _apis: (FakeWorkloadApi, FakeWorkloadApi),
    server_identity: Identity,
    client_identity: Identity,
    server: TestServer,
    channel: PeerChannel,
}

async fn pair() -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(TD);
    let (server_api, server_identity) = ca
        .workload(dir.path(), "server-agent", SERVER_PATH, 1)
        .await;
    let (client_api, client_identity) = ca
        .workload(dir.path(), "client-agent", CLIENT_PATH, 2)
        .await;
    let server = start_server(dir.path(), &server_identity);
    let channel = connect_tls(&server.uri, &client_identity).await.unwrap();
    Pair {
        _dir: dir,
        ca,
        _apis: (server_api, client_api),
        server_identity,
        client_identity,
        server,
        channel,
    }
}

// ---------------------------------------------------------------------------------------------
// The Workload API client.

#[tokio::test]
async fn workload_api_client_fetches_the_svid_and_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(TD);
    let svid = ca.issue(SERVER_PATH, 7, in_a_year());
    let (_api, identity) = workload(dir.path(), "agent", &ca, &svid).await;
    let current = identity.current();
    assert_eq!(
        identity.spiffe_id().as_str(),
        "spiffe://example.org/ns/nsm-system/sa/forwarder"
    );
    assert_eq!(identity.spiffe_id().trust_domain(), TD);
    assert_eq!(
        current.certificates()[0].as_ref(),
        svid.chain_der.as_slice()
    );
    assert_eq!(current.serial(), [7]);
    let bundle = current.bundle(TD).expect("own trust domain bundle");
    assert_eq!(
        bundle.certificates()[0].as_ref(),
        ca.bundle_der().as_slice()
    );
    assert_eq!(current.trust_domains().collect::<Vec<_>>(), [TD]);
}

#[tokio::test]
async fn workload_api_refuses_calls_without_the_security_header() {
    // The test agent enforces `workload.spiffe.io: true` as SPIRE's does, so the fetch above
    // only succeeds because the client sends it.
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(TD);
    let api = FakeWorkloadApi::start(
        dir.path(),
        "agent",
        ca.response(&ca.issue(SERVER_PATH, 1, in_a_year())),
    );
    let path = api.endpoint().strip_prefix("unix://").unwrap().to_string();
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                tokio::net::UnixStream::connect(path)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .unwrap();
    let err = SpiffeWorkloadApiClient::new(channel)
        .fetch_x509svid(X509svidRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn without_an_endpoint_there_is_no_identity_and_plaintext_unix_serving_works() {
    assert!(Identity::from_endpoint(None).await.unwrap().is_none());
    assert!(Identity::from_endpoint(Some("")).await.unwrap().is_none());
    assert!(Identity::connect("tcp://127.0.0.1:1").await.is_err());

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let router = Server::builder().add_service(health);
    tokio::spawn(async move {
        serve(router, listener, None, std::future::pending())
            .await
            .unwrap()
    });
    let uri = format!("unix://{}", path.display());
    let channel = spiffe::connect(&uri, None).await.unwrap();
    check(&channel, None).await.unwrap();
    assert!(channel.peer().is_none());
    // Without an identity nothing is dialed off the host.
    let err = spiffe::connect("tcp://127.0.0.1:1", None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, spiffe::SpiffeError::InvalidEndpoint(_)),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// mTLS.

#[tokio::test]
async fn mtls_over_a_unix_socket_with_svids_from_the_workload_api() {
    let mut p = pair().await;
    check(&p.channel, None).await.unwrap();
    let seen = p.server.seen.recv().await.unwrap();
    assert_eq!(seen.peer.spiffe_id(), &p.client_identity.spiffe_id());
    assert_eq!(
        seen.peer.certificates()[0],
        p.client_identity.current().certificates()[0]
    );
    let server = p.channel.peer().expect("the client knows the server");
    assert_eq!(server.spiffe_id(), &p.server_identity.spiffe_id());
    assert_eq!(server.serial(), [1]);
}

#[tokio::test]
async fn a_client_with_a_certificate_from_another_ca_is_refused() {
    let mut p = pair().await;
    let dir = tempfile::tempdir().unwrap();
    // Same trust domain name, another CA: the server's bundle does not hold it.
    let rogue_ca = TestCa::new(TD);
    let rogue_svid = rogue_ca.issue(CLIENT_PATH, 9, in_a_year());
    // The rogue trusts the real CA, so only the server's check can stop it.
    let mut response = rogue_ca.response(&rogue_svid);
    response.svids[0].bundle = p
        .server_identity
        .current()
        .bundle(TD)
        .unwrap()
        .certificates()[0]
        .to_vec();
    let api = FakeWorkloadApi::start(dir.path(), "rogue-agent", response);
    let rogue = Identity::connect(api.endpoint()).await.unwrap();
    let refused = async {
        let channel = connect_tls(&p.server.uri, &rogue).await?;
        check(&channel, None)
            .await
            .map_err(spiffe::SpiffeError::from)
    }
    .await;
    assert!(refused.is_err(), "a client from another CA got through");
    // The legitimate client still gets in, and is the only one the server saw.
    check(&p.channel, None).await.unwrap();
    let seen = p.server.seen.recv().await.unwrap();
    assert_eq!(seen.peer.spiffe_id(), &p.client_identity.spiffe_id());
    assert!(p.server.seen.try_recv().is_err());
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    let mut p = pair().await;
    let config = client_config_with(&p.client_identity, rustls::DEFAULT_VERSIONS, false);
    let refused = async {
        let channel = connect_tls_with_config(&p.server.uri, config).await?;
        check(&channel, None)
            .await
            .map_err(spiffe::SpiffeError::from)
    }
    .await;
    assert!(
        refused.is_err(),
        "a client without a certificate got through"
    );
    check(&p.channel, None).await.unwrap();
    let seen = p.server.seen.recv().await.unwrap();
    assert_eq!(seen.peer.spiffe_id(), &p.client_identity.spiffe_id());
    assert!(p.server.seen.try_recv().is_err());
}

#[tokio::test]
async fn tls_1_2_is_accepted() {
    let mut p = pair().await;
    let config = client_config_with(&p.client_identity, &[&rustls::version::TLS12], true);
    let channel = connect_tls_with_config(&p.server.uri, config)
        .await
        .unwrap();
    check(&channel, None).await.unwrap();
    let seen = p.server.seen.recv().await.unwrap();
    assert_eq!(seen.peer.spiffe_id(), &p.client_identity.spiffe_id());
}

#[tokio::test]
async fn a_server_with_a_certificate_from_another_ca_is_refused_by_the_client() {
    let p = pair().await;
    let dir = tempfile::tempdir().unwrap();
    let rogue_ca = TestCa::new(TD);
    let (_api, rogue) = rogue_ca
        .workload(dir.path(), "rogue-agent", SERVER_PATH, 3)
        .await;
    let rogue_server = start_server(dir.path(), &rogue);
    let err = connect_tls(&rogue_server.uri, &p.client_identity)
        .await
        .unwrap_err();
    // The rogue CA has the real one's name, so webpki finds a candidate issuer whose key does
    // not verify the signature.
    let err = format!("{err:?}");
    assert!(
        err.contains("InvalidCertificate(BadSignature)")
            || err.contains("InvalidCertificate(UnknownIssuer)"),
        "unexpected error: {err}"
    );
}

#[tokio::test]
async fn a_rotated_certificate_is_presented_at_the_next_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(TD);
    let (server_api, mut server_identity) = ca
        .workload(dir.path(), "server-agent", SERVER_PATH, 1)
        .await;
    let (_client_api, client_identity) = ca
        .workload(dir.path(), "client-agent", CLIENT_PATH, 2)
        .await;
    let server = start_server(dir.path(), &server_identity);

    let before = connect_tls(&server.uri, &client_identity).await.unwrap();
    check(&before, None).await.unwrap();
    assert_eq!(before.peer().unwrap().serial(), [1]);

    // The agent streams a new SVID; the server is not restarted.
    server_api.push(ca.response(&ca.issue(SERVER_PATH, 0x42, in_a_year())));
    let rotated = server_identity.changed().await.unwrap();
    assert_eq!(rotated.serial(), [0x42]);

    let after = connect_tls(&server.uri, &client_identity).await.unwrap();
    check(&after, None).await.unwrap();
    let peer = after.peer().unwrap();
    assert_eq!(peer.serial(), [0x42]);
    assert_eq!(peer.spiffe_id(), &server_identity.spiffe_id());
}

// ---------------------------------------------------------------------------------------------
// Path tokens.

#[tokio::test]
async fn a_path_token_minted_by_the_client_verifies_on_the_server() {
    let mut p = pair().await;
    let server = p.channel.peer().unwrap();
    let token = tokens::mint(
        &p.client_identity.current(),
        &server,
        DEFAULT_MAX_TOKEN_LIFETIME,
    )
    .unwrap();
    check(&p.channel, Some(&token)).await.unwrap();
    let seen = p.server.seen.recv().await.unwrap();
    let verified = seen.token.expect("the call carried a token").unwrap();
    assert_eq!(verified, token);
    let claims = tokens::verify(&verified.token, &seen.peer).unwrap();
    assert_eq!(claims.sub, p.client_identity.spiffe_id().as_str());
    assert_eq!(claims.aud, [p.server_identity.spiffe_id().to_string()]);

    // And the other way: the server mints for its client, the client checks it.
    let back = tokens::mint(
        &p.server_identity.current(),
        &seen.peer,
        DEFAULT_MAX_TOKEN_LIFETIME,
    )
    .unwrap();
    let claims = tokens::verify(&back.token, &server).unwrap();
    assert_eq!(claims.sub, p.server_identity.spiffe_id().as_str());
    assert_eq!(claims.aud, [p.client_identity.spiffe_id().to_string()]);
}

fn assert_refused(result: Result<(), Status>, says: &str) {
    let status = result.expect_err("the token was accepted");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains(says), "{status:?}");
}

#[tokio::test]
async fn an_expired_path_token_is_refused() {
    let p = pair().await;
    let server = p.channel.peer().unwrap();
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let token = tokens::mint_at(
        &p.client_identity.current(),
        &server,
        DEFAULT_MAX_TOKEN_LIFETIME,
        an_hour_ago,
    )
    .unwrap();
    assert_refused(check(&p.channel, Some(&token)).await, "expired");
}

#[tokio::test]
async fn a_path_token_signed_by_another_key_is_refused() {
    let p = pair().await;
    let server = p.channel.peer().unwrap();
    // A valid SVID of the same CA with the client's very SPIFFE ID, but another key than the
    // one the client's TLS certificate holds: every claim is right, only the signature is not.
    let impostor = x509(&p.ca, &p.ca.issue(CLIENT_PATH, 5, in_a_year()));
    assert_eq!(impostor.spiffe_id(), &p.client_identity.spiffe_id());
    let token = tokens::mint(&impostor, &server, DEFAULT_MAX_TOKEN_LIFETIME).unwrap();
    assert_refused(
        check(&p.channel, Some(&token)).await,
        "not signed by the TLS peer",
    );
}

#[tokio::test]
async fn a_path_token_with_the_wrong_sub_is_refused() {
    let p = pair().await;
    let server = p.channel.peer().unwrap();
    let claims = TokenClaims {
        sub: format!("spiffe://{TD}/ns/default/sa/somebody-else"),
        aud: vec![server.spiffe_id().to_string()],
        exp: (SystemTime::now() + Duration::from_secs(600))
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64,
    };
    // Signed with the client's own key: only sub is wrong.
    let jwt = tokens::sign(&p.client_identity.current(), &claims).unwrap();
    let token = PathToken {
        token: jwt,
        expires: SystemTime::now() + Duration::from_secs(600),
    };
    assert_refused(check(&p.channel, Some(&token)).await, "is not the TLS peer");
}

#[tokio::test]
async fn a_path_token_minted_for_another_audience_is_refused() {
    let p = pair().await;
    // Signed by the client for another workload (a token taken from another hop and replayed
    // here): signature, sub and exp are right, only aud is not.
    let elsewhere = peer_of(
        &p.ca
            .issue("/ns/default/sa/another-forwarder", 9, in_a_year()),
    );
    let token = tokens::mint(
        &p.client_identity.current(),
        &elsewhere,
        DEFAULT_MAX_TOKEN_LIFETIME,
    )
    .unwrap();
    assert_refused(
        check(&p.channel, Some(&token)).await,
        &format!(
            "does not include {}",
            p.server_identity.spiffe_id().as_str()
        ),
    );
    // No audience at all is no better.
    let claims = TokenClaims {
        sub: p.client_identity.spiffe_id().to_string(),
        aud: vec![],
        exp: (SystemTime::now() + Duration::from_secs(600))
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64,
    };
    let token = PathToken {
        token: tokens::sign(&p.client_identity.current(), &claims).unwrap(),
        expires: SystemTime::now() + Duration::from_secs(600),
    };
    assert_refused(check(&p.channel, Some(&token)).await, "aud");
    // verify() alone reads such a token (it is well signed); verify_for() is the receiver's.
    let server = p.channel.peer().unwrap();
    let client = peer_of_identity(&p.client_identity);
    assert!(tokens::verify(&token.token, &client).is_ok());
    let err = tokens::verify_for(&token.token, &client, server.spiffe_id()).unwrap_err();
    assert!(
        matches!(err, tokens::TokenError::WrongAudience { .. }),
        "{err}"
    );
}

/// The peer a connection from `identity` shows.
fn peer_of_identity(identity: &Identity) -> PeerIdentity {
    PeerIdentity::from_certificates(identity.current().certificates().to_vec()).unwrap()
}

#[tokio::test]
async fn path_token_metadata_names_format_and_expiry() {
    let ca = TestCa::new(TD);
    let now = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
    let far = time::OffsetDateTime::from(now + Duration::from_secs(86_400));
    let soon = time::OffsetDateTime::from(now + Duration::from_secs(120));
    let sooner = time::OffsetDateTime::from(now + Duration::from_secs(60));
    let own_far = x509(&ca, &ca.issue(CLIENT_PATH, 1, far));
    let peer_far = peer_of(&ca.issue(SERVER_PATH, 2, far));

    // exp = now + lifetime when both certificates outlive it.
    let token = tokens::mint_at(&own_far, &peer_far, Duration::from_secs(600), now).unwrap();
    assert_eq!(token.expires, now + Duration::from_secs(600));
    let mut metadata = MetadataMap::new();
    token.insert_into(&mut metadata).unwrap();
    let mut keys: Vec<String> = metadata
        .keys()
        .map(|k| match k {
            tonic::metadata::KeyRef::Ascii(k) => k.as_str().to_string(),
            tonic::metadata::KeyRef::Binary(k) => k.as_str().to_string(),
        })
        .collect();
    keys.sort();
    assert_eq!(keys, ["nsm-client-token", "nsm-client-token-expires"]);
    assert_eq!(TOKEN_METADATA, "nsm-client-token");
    assert_eq!(EXPIRES_METADATA, "nsm-client-token-expires");
    assert_eq!(
        metadata.get("nsm-client-token-expires").unwrap(),
        "2023-11-14T22:23:20.123456789Z"
    );
    assert_eq!(
        metadata.get("nsm-client-token").unwrap(),
        token.token.as_str()
    );

    // The JWT itself: ES256, sub, aud as an array, exp in whole seconds.
    let parts: Vec<&str> = token.token.split('.').collect();
    assert_eq!(parts.len(), 3);
    let header: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["typ"], "JWT");
    let payload: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(payload["sub"], format!("spiffe://{TD}{CLIENT_PATH}"));
    assert_eq!(
        payload["aud"],
        serde_json::json!([format!("spiffe://{TD}{SERVER_PATH}")])
    );
    assert_eq!(payload["exp"], 1_700_000_600);
    assert_eq!(URL_SAFE_NO_PAD.decode(parts[2]).unwrap().len(), 64);

    // exp = the own certificate's end when it comes first, the peer's when that does.
    let own_soon = x509(&ca, &ca.issue(CLIENT_PATH, 3, soon));
    let token = tokens::mint_at(&own_soon, &peer_far, Duration::from_secs(600), now).unwrap();
    assert_eq!(token.expires, own_soon.not_after());
    assert_eq!(
        token.expires,
        SystemTime::from(soon.replace_nanosecond(0).unwrap())
    );
    let peer_sooner = peer_of(&ca.issue(SERVER_PATH, 4, sooner));
    let token = tokens::mint_at(&own_soon, &peer_sooner, Duration::from_secs(600), now).unwrap();
    assert_eq!(token.expires, peer_sooner.not_after());
    assert_eq!(token.expires_rfc3339(), "2023-11-14T22:14:20Z");
}

#[tokio::test]
async fn a_path_segment_is_stamped_from_incoming_metadata() {
    let mut metadata = MetadataMap::new();
    metadata.insert("nsm-client-token", "a.b.c".parse().unwrap());
    metadata.insert(
        "nsm-client-token-expires",
        "2023-11-14T22:13:20.5Z".parse().unwrap(),
    );
    let mut segment = PathSegment::default();
    tokens::stamp_segment(&mut segment, &metadata).unwrap();
    assert_eq!(segment.token, "a.b.c");
    assert_eq!(
        segment.expires,
        Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 500_000_000
        })
    );

    let mut no_expiry = MetadataMap::new();
    no_expiry.insert("nsm-client-token", "a.b.c".parse().unwrap());
    let status = tokens::stamp_segment(&mut segment, &no_expiry).unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    assert!(status.message().contains("nsm-client-token-expires"));
}
