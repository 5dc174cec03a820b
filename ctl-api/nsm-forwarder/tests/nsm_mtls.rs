//! The NSM forwarder service with SPIFFE identities: every hop mTLS with SVIDs from test
//! Workload APIs (the real `SpiffeWorkloadAPI` protocol, certificates from an rcgen CA), path
//! tokens checked on the way in and minted on the way out, certificate rotation without a
//! restart, and registration with a registry that expires entries, restarts, and sees Quiver
//! leave.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path as FsPath;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nsm_forwarder::dataplane::{KernelSpec, MemifSpec};
use nsm_forwarder::dial::dial_with;
use nsm_forwarder::path::timestamp;
use nsm_forwarder::server::{bind, bind_for};
use nsm_forwarder::{
    registration, Dataplane, DataplaneError, EndpointDiscovery, LinkEvents, NsmConfig, NsmHandle,
    NsmService, PortName, RegistryDiscovery, ServeError, StaticEndpoint,
};
use nsm_proto::connection::{Connection, Mechanism, Path, PathSegment, State};
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use nsm_proto::networkservice::network_service_server::{NetworkService, NetworkServiceServer};
use nsm_proto::networkservice::NetworkServiceRequest;
use nsm_proto::registry::network_service_endpoint_registry_server::{
    NetworkServiceEndpointRegistry, NetworkServiceEndpointRegistryServer,
};
use nsm_proto::registry::{
    NetworkServiceEndpoint, NetworkServiceEndpointQuery, NetworkServiceEndpointResponse,
};
use spiffe_identity::testing::{
    client_config_with, in_a_year, peer_of, workload, x509, FakeWorkloadApi, TestCa, TestSvid,
};
use spiffe_identity::tokens::{self, PathToken, TokenClaims};
use spiffe_identity::{
    self as spiffe, connect_tls, Identity, PeerChannel, PeerIdentity, SpiffeId, X509Identity,
};
use tokio::net::UnixListener;
use tonic::transport::Server;
use tonic::{Code, Request, Response, Status};

const TD: &str = "example.org";
const QUIVER_PATH: &str = "/ns/nsm-system/sa/quiver";
const NSC_PATH: &str = "/ns/default/sa/nsc";
const NSE_PATH: &str = "/ns/default/sa/nse";
const REGISTRY_PATH: &str = "/ns/nsm-system/sa/nsmgr";
const NS: &str = "file:///proc/self/ns/net";

// ---------------------------------------------------------------------------------------------
// A data path that only records ports per owner.

#[derive(Default)]
struct RecordingDp {
    ports: Mutex<BTreeMap<String, String>>,
}

impl RecordingDp {
    fn is_empty(&self) -> bool {
        self.ports.lock().unwrap().is_empty()
    }
    fn add(&self, owner: &str, name: &PortName) -> Result<(), DataplaneError> {
        let mut ports = self.ports.lock().unwrap();
        if ports.contains_key(&name.0) {
            return Err(DataplaneError::AlreadyExists(name.0.clone()));
        }
        ports.insert(name.0.clone(), owner.to_string());
        Ok(())
    }
}

impl Dataplane for RecordingDp {
    fn create_memif(&self, owner: &str, spec: &MemifSpec) -> Result<(), DataplaneError> {
        self.add(owner, &spec.name)
    }
    fn create_kernel(&self, owner: &str, spec: &KernelSpec) -> Result<(), DataplaneError> {
        self.add(owner, &spec.name)
    }
    fn remove_port(&self, _owner: &str, port: &PortName) -> Result<(), DataplaneError> {
        self.ports
            .lock()
            .unwrap()
            .remove(&port.0)
            .map(|_| ())
            .ok_or_else(|| DataplaneError::NotFound(port.0.clone()))
    }
    fn l2_cross_connect(&self, _: &str, _: &PortName, _: &PortName) -> Result<(), DataplaneError> {
        Ok(())
    }
    fn l3_cross_connect(
        &self,
        _: &str,
        _: &PortName,
        _: &PortName,
        _: Option<IpAddr>,
        _: Option<IpAddr>,
    ) -> Result<(), DataplaneError> {
        Ok(())
    }
    fn disconnect(&self, _: &str, _: &PortName) -> Result<(), DataplaneError> {
        Ok(())
    }
    fn remove_owned(&self, owner: &str) -> Result<(), DataplaneError> {
        self.ports.lock().unwrap().retain(|_, o| o != owner);
        Ok(())
    }
    fn owners(&self) -> Result<Vec<String>, DataplaneError> {
        let mut o: Vec<String> = self.ports.lock().unwrap().values().cloned().collect();
        o.dedup();
        Ok(o)
    }
    fn watch_links(&self, _: LinkEvents) {}
}

// ---------------------------------------------------------------------------------------------
// The endpoint (NSE), behind mTLS: checks Quiver's path token as nsmgr would.

#[derive(Default)]
struct NseLog {
    /// Each Request: Quiver's identity as the handshake showed it, the token's verdict, and
    /// the request.
    requests: Vec<(
        PeerIdentity,
        Result<PathToken, Status>,
        NetworkServiceRequest,
    )>,
    /// Each Close's token verdict.
    closes: Vec<Result<PathToken, Status>>,
}

#[derive(Clone)]
struct Nse {
    /// Its own SPIFFE ID: the audience Quiver's tokens must name.
    own: SpiffeId,
    log: Arc<Mutex<NseLog>>,
}

#[tonic::async_trait]
impl NetworkService for Nse {
    async fn request(
        &self,
        request: Request<NetworkServiceRequest>,
    ) -> Result<Response<Connection>, Status> {
        let peer = PeerIdentity::from_request(&request)
            .cloned()
            .ok_or_else(|| Status::unauthenticated("no TLS peer"))?;
        let verdict = tokens::verify_request(&request, &self.own);
        let req = request.into_inner();
        self.log
            .lock()
            .unwrap()
            .requests
            .push((peer, verdict.clone(), req.clone()));
        let token = verdict?;
        let mut conn = req.connection.unwrap();
        let path = conn.path.as_mut().unwrap();
        let index = path.index as usize;
        token.apply_to_segment(&mut path.path_segments[index]);
        path.path_segments.truncate(index + 1);
        path.path_segments.push(PathSegment {
            name: "nse".into(),
            id: format!("nse-{}", conn.id),
            ..Default::default()
        });
        conn.mechanism = Some(Mechanism {
            cls: "LOCAL".into(),
            r#type: "MEMIF".into(),
            parameters: HashMap::from([
                ("inodeURL".to_string(), NS.to_string()),
                ("socketfile".to_string(), format!("@nse/{}", conn.id)),
            ]),
        });
        Ok(Response::new(conn))
    }

    async fn close(&self, request: Request<Connection>) -> Result<Response<()>, Status> {
        let verdict = tokens::verify_request(&request, &self.own);
        self.log.lock().unwrap().closes.push(verdict.clone());
        verdict.map(|_| Response::new(()))
    }
}

// ---------------------------------------------------------------------------------------------
// The harness: a CA, a Workload API per workload, Quiver, the NSE, an NSC's channel.

struct Harness {
    _dir: tempfile::TempDir,
    ca: TestCa,
    quiver_api: FakeWorkloadApi,
    quiver_identity: Identity,
    nsc_svid: TestSvid,
    nsc_identity: Identity,
    _nsc_api: FakeWorkloadApi,
    nse_svid: TestSvid,
    _nse_api: FakeWorkloadApi,
    nse: Nse,
    dp: Arc<RecordingDp>,
    service: NsmService,
    listen_on: String,
    _stop: Vec<tokio::sync::oneshot::Sender<()>>,
}

async fn harness() -> Harness {
    harness_listening_on(None).await
}

/// [`harness`] with Quiver listening on `listen_on` (a `tcp://` address) instead of a unix
/// socket in the test's directory.
async fn harness_listening_on(listen_on: Option<&str>) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(TD);
    let quiver_svid = ca.issue(QUIVER_PATH, 1, in_a_year());
    let quiver_api = FakeWorkloadApi::start(dir.path(), "quiver-agent", ca.response(&quiver_svid));
    let nsc_svid = ca.issue(NSC_PATH, 2, in_a_year());
    let (nsc_api, nsc_identity) = workload(dir.path(), "nsc-agent", &ca, &nsc_svid).await;
    let nse_svid = ca.issue(NSE_PATH, 3, in_a_year());
    let (nse_api, nse_identity) = workload(dir.path(), "nse-agent", &ca, &nse_svid).await;
    let mut stop = Vec::new();

    // The endpoint, behind mTLS.
    let nse_sock = dir.path().join("nse.sock");
    let nse = Nse {
        own: nse_identity.spiffe_id(),
        log: Arc::default(),
    };
    let listener = UnixListener::bind(&nse_sock).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    stop.push(tx);
    let router = Server::builder().add_service(NetworkServiceServer::new(nse.clone()));
    tokio::spawn(async move {
        spiffe::serve(router, listener, Some(&nse_identity), async {
            let _ = rx.await;
        })
        .await
        .unwrap()
    });

    // Quiver, its identity from its Workload API as SPIFFE_ENDPOINT_SOCKET would give it.
    let listen_on = listen_on.map_or_else(
        || format!("unix://{}", dir.path().join("quiver.sock").display()),
        str::to_string,
    );
    let mut cfg = NsmConfig {
        name: "quiver".into(),
        listen_on: listen_on.clone(),
        spiffe_endpoint: Some(quiver_api.endpoint().to_string()),
        ..NsmConfig::default()
    };
    cfg.resolve_identity().await.unwrap();
    let quiver_identity = cfg
        .identity
        .clone()
        .expect("an identity from the Workload API");
    let dp = Arc::new(RecordingDp::default());
    let nse_url = format!("unix://{}", nse_sock.display());
    let service = NsmService::new(cfg.clone(), dp.clone(), Arc::new(StaticEndpoint(nse_url)));
    let listener = bind_for(&cfg).unwrap();
    // The address bound (the port, for tcp://…:0).
    let listen_on = listener.url().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    stop.push(tx);
    tokio::spawn(service.clone().serve_on(listener, async {
        let _ = rx.await;
    }));
    Harness {
        _dir: dir,
        ca,
        quiver_api,
        quiver_identity,
        nsc_svid,
        nsc_identity,
        _nsc_api: nsc_api,
        nse_svid,
        _nse_api: nse_api,
        nse,
        dp,
        service,
        listen_on,
        _stop: stop,
    }
}

impl Harness {
    /// The NSC's channel to Quiver, with the NSC's SVID.
    async fn nsc_channel(&self) -> PeerChannel {
        connect_tls(&self.listen_on, &self.nsc_identity)
            .await
            .unwrap()
    }

    /// Nothing is left: no port, no connection, nothing published, nothing sent on.
    fn assert_no_state(&self, what: &str) {
        assert!(self.dp.is_empty(), "{what}: ports left");
        assert_eq!(
            self.service.core().connection_count(),
            0,
            "{what}: connections left"
        );
        assert!(
            self.service.core().monitor.is_empty(),
            "{what}: connections published"
        );
        assert!(
            self.nse.log.lock().unwrap().requests.is_empty(),
            "{what}: the endpoint was asked"
        );
    }
}

fn memif_request(id: &str) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            id: id.into(),
            network_service: "icmp-responder".into(),
            network_service_endpoint_name: "nse-1".into(),
            payload: "ETHERNET".into(),
            path: Some(Path {
                index: 0,
                path_segments: vec![PathSegment {
                    name: "nsc".into(),
                    id: id.into(),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        mechanism_preferences: vec![Mechanism {
            cls: "LOCAL".into(),
            r#type: "MEMIF".into(),
            parameters: HashMap::from([("inodeURL".to_string(), NS.to_string())]),
        }],
    }
}

/// A Request carrying `token` as the NSC's (in the metadata and its segment).
fn with_token(mut req: NetworkServiceRequest, token: &PathToken) -> Request<NetworkServiceRequest> {
    let conn = req.connection.as_mut().unwrap();
    token.apply_to_segment(&mut conn.path.as_mut().unwrap().path_segments[0]);
    let mut request = Request::new(req);
    token.insert_into(request.metadata_mut()).unwrap();
    request
}

/// The NSC's token for Quiver, minted as NSM's client does.
fn nsc_token(h: &Harness, quiver: &PeerChannel) -> PathToken {
    tokens::mint(
        &h.nsc_identity.current(),
        &quiver.peer().unwrap(),
        Duration::from_secs(600),
    )
    .unwrap()
}

/// What [`request_up`] got: Quiver as the channel saw it, the NSC's token, Quiver's answer.
struct Answered {
    quiver: PeerIdentity,
    token: PathToken,
    answer: Connection,
}

/// A memif Request `id` on `channel` with a fresh NSC token: Quiver presented its SVID, and
/// answers UP with the path nsc → quiver → nse, the NSC's segment holding the token it checked.
async fn request_up(h: &Harness, channel: &PeerChannel, id: &str) -> Answered {
    let quiver = channel.peer().expect("Quiver presented an SVID");
    assert_eq!(quiver.spiffe_id(), &h.quiver_identity.spiffe_id());
    let token = nsc_token(h, channel);
    let answer = NetworkServiceClient::new(channel.channel())
        .request(with_token(memif_request(id), &token))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.state, State::Up as i32);
    let segments = &answer.path.as_ref().unwrap().path_segments;
    let names: Vec<&str> = segments.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["nsc", "quiver", "nse"]);
    assert_eq!(segments[0].token, token.token);
    Answered {
        quiver,
        token,
        answer,
    }
}

// ---------------------------------------------------------------------------------------------
// Requests over mTLS.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_mtls_returns_a_path_whose_tokens_verify() {
    let h = harness().await;
    let channel = h.nsc_channel().await;
    let Answered {
        quiver,
        token,
        answer,
    } = request_up(&h, &channel, "c1").await;
    let mut client = NetworkServiceClient::new(channel.channel());
    let segments = &answer.path.as_ref().unwrap().path_segments;

    // The NSC's segment: its token as Quiver checked it, signed by the NSC's key.
    let claims = tokens::verify(&segments[0].token, &peer_of(&h.nsc_svid)).unwrap();
    assert_eq!(claims.sub, h.nsc_svid.spiffe_id);
    assert_eq!(claims.aud, [quiver.spiffe_id().to_string()]);

    // Quiver's segment: its own token, signed with its SVID's key, for the endpoint.
    let own = &segments[1];
    assert_ne!(own.token, token.token, "Quiver minted its own token");
    let claims = tokens::verify(&own.token, &quiver).unwrap();
    assert_eq!(claims.sub, quiver.spiffe_id().as_str());
    assert_eq!(claims.aud, [h.nse_svid.spiffe_id.as_str()]);
    let expires = nsm_forwarder::path::system_time(own.expires.as_ref().unwrap()).unwrap();
    assert_eq!(
        expires.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64,
        claims.exp,
        "the segment's expiry is the token's"
    );
    {
        // The endpoint got it in the metadata too, from Quiver's TLS identity.
        let log = h.nse.log.lock().unwrap();
        let (peer, verdict, _) = &log.requests[0];
        assert_eq!(peer.spiffe_id(), quiver.spiffe_id());
        assert_eq!(verdict.as_ref().unwrap().token, own.token);
    }

    // Close goes through with tokens both ways too.
    let mut close = Request::new(answer.clone());
    nsc_token(&h, &channel)
        .insert_into(close.metadata_mut())
        .unwrap();
    client.close(close).await.unwrap();
    let log = h.nse.log.lock().unwrap();
    assert_eq!(log.closes.len(), 1);
    assert!(log.closes[0].is_ok(), "{:?}", log.closes[0]);
    drop(log);
    assert!(h.dp.is_empty());
}

/// grpcfd under TLS: the NSC passes its namespace's fd on the socket beneath the TLS and names
/// it `inode://dev/ino`; Quiver resolves it (an unknown one is refused before anything is
/// built), answers with the client's URL, holds the fd while the connection lives and closes
/// it at Close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_fd_passed_under_mtls_resolves_inode_urls_until_close() {
    let h = harness().await;
    let channel = h.nsc_channel().await;
    let mut client = NetworkServiceClient::new(channel.channel());
    let with_url = |url: &str| {
        let mut req = memif_request("fd1");
        req.mechanism_preferences[0]
            .parameters
            .insert("inodeURL".into(), url.into());
        with_token(req, &nsc_token(&h, &channel))
    };
    let key = channel
        .fds()
        .send_file(FsPath::new("/proc/self/ns/net"))
        .unwrap();
    let unknown = grpc_unix::InodeKey {
        dev: key.dev,
        ino: key.ino ^ 0x5a5a,
    };
    let err = client
        .request(with_url(&unknown.to_string()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message()
            .contains(&format!("no file descriptor was passed for {unknown}")),
        "{err:?}"
    );
    h.assert_no_state("an unknown inode:// URL");
    // The fd went with that call's bytes, under the TLS: the next call may name it.
    let answer = client
        .request(with_url(&key.to_string()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.state, State::Up as i32);
    assert_eq!(
        answer.mechanism.as_ref().unwrap().parameters["inodeURL"],
        key.to_string()
    );
    assert_eq!(h.service.held_fds().len(), 1, "held by the connection");
    let mut close = Request::new(answer);
    nsc_token(&h, &channel)
        .insert_into(close.metadata_mut())
        .unwrap();
    client.close(close).await.unwrap();
    assert!(
        h.service.held_fds().is_empty(),
        "closed with the connection"
    );
    assert!(h.dp.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_valid_svid_is_refused_at_the_handshake() {
    let h = harness().await;
    // An SVID from a CA of the same trust domain name that Quiver does not trust; the client
    // itself trusts Quiver's CA, so the refusal is Quiver's.
    let rogue_ca = TestCa::new(TD);
    let rogue_svid = rogue_ca.issue(NSC_PATH, 9, in_a_year());
    let rogue = Identity::fixed(
        X509Identity::from_der(
            &rogue_svid.spiffe_id,
            &rogue_svid.chain_der,
            &rogue_svid.key_der,
            &h.ca.bundle_der(),
            &Default::default(),
        )
        .unwrap(),
    );
    let refused = async {
        let channel = connect_tls(&h.listen_on, &rogue).await?;
        // TLS 1.3: the server's verdict on the client certificate may come after the client
        // finished; the first call then fails.
        NetworkServiceClient::new(channel.channel())
            .request(memif_request("r1"))
            .await
            .map_err(spiffe::SpiffeError::from)?;
        Ok::<_, spiffe::SpiffeError>(())
    };
    assert!(refused.await.is_err(), "a foreign SVID got through");
    // Without any certificate (plaintext over the same socket).
    let plain = dial_with(&h.listen_on, Duration::from_secs(10), None).await;
    let got_through = match plain {
        Ok(channel) => NetworkServiceClient::new(channel)
            .request(memif_request("p1"))
            .await
            .is_ok(),
        Err(_) => false,
    };
    assert!(!got_through, "a plaintext client got through");
    h.assert_no_state("refused clients");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_forged_replayed_or_missing_path_tokens_are_permission_denied_and_change_nothing() {
    let h = harness().await;
    let channel = h.nsc_channel().await;
    let quiver = channel.peer().unwrap();
    let mut client = NetworkServiceClient::new(channel.channel());
    let nsc = h.nsc_identity.current();

    // Expired: signed by the NSC, but its exp has passed.
    let past = SystemTime::now() - Duration::from_secs(120);
    let expired = PathToken {
        token: tokens::sign(
            &nsc,
            &TokenClaims {
                sub: nsc.spiffe_id().to_string(),
                aud: vec![quiver.spiffe_id().to_string()],
                exp: past.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64,
            },
        )
        .unwrap(),
        expires: past,
    };
    // Forged: well-formed, for Quiver, but signed by another workload's key.
    let other = x509(&h.ca, &h.ca.issue("/ns/default/sa/other", 7, in_a_year()));
    let forged = tokens::mint(&other, &quiver, Duration::from_secs(600)).unwrap();
    let forged_as_nsc = PathToken {
        token: tokens::sign(
            &other,
            &TokenClaims {
                sub: nsc.spiffe_id().to_string(),
                aud: vec![quiver.spiffe_id().to_string()],
                exp: forged.expires.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64,
            },
        )
        .unwrap(),
        expires: forged.expires,
    };
    // Replayed: the NSC's own, well signed, but minted for another workload (as a token taken
    // from another hop would be).
    let elsewhere = peer_of(
        &h.ca
            .issue("/ns/nsm-system/sa/another-forwarder", 8, in_a_year()),
    );
    let for_another = tokens::mint(&nsc, &elsewhere, Duration::from_secs(600)).unwrap();
    // The NSC's key and audience right, but another workload named as sub.
    let wrong_sub = PathToken {
        token: tokens::sign(
            &nsc,
            &TokenClaims {
                sub: elsewhere.spiffe_id().to_string(),
                aud: vec![quiver.spiffe_id().to_string()],
                exp: forged.expires.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64,
            },
        )
        .unwrap(),
        expires: forged.expires,
    };
    // Each refusal says which check failed.
    let not_for_quiver = format!("does not include {}", quiver.spiffe_id());
    for (what, token, says) in [
        ("expired", Some(&expired), "expired"),
        (
            "signed by another key",
            Some(&forged),
            "not signed by the TLS peer",
        ),
        (
            "another key, the NSC's sub",
            Some(&forged_as_nsc),
            "not signed by the TLS peer",
        ),
        (
            "minted for another audience",
            Some(&for_another),
            not_for_quiver.as_str(),
        ),
        ("another sub", Some(&wrong_sub), "is not the TLS peer"),
        ("missing", None, "nsm-client-token"),
    ] {
        let request = match token {
            Some(t) => with_token(memif_request("c1"), t),
            None => Request::new(memif_request("c1")),
        };
        let status = client.request(request).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{what}: {status:?}");
        assert!(status.message().contains(says), "{what}: {status:?}");
        h.assert_no_state(what);
    }
    // On Close too: a token minted for another workload closes nothing.
    let mut close = Request::new(memif_request("c1").connection.unwrap());
    for_another.insert_into(close.metadata_mut()).unwrap();
    let status = client.close(close).await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    // A bad token on Close is refused too (nothing to close, nothing sent on).
    let mut close = Request::new(memif_request("c1").connection.unwrap());
    expired.insert_into(close.metadata_mut()).unwrap();
    assert_eq!(
        client.close(close).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    assert!(h.nse.log.lock().unwrap().closes.is_empty());
    // The same channel still works with a good token: the refusals were the tokens'.
    client
        .request(with_token(memif_request("c1"), &nsc_token(&h, &channel)))
        .await
        .unwrap();
}

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

// ---------------------------------------------------------------------------------------------
// Registration.

/// What the registry saw.
#[derive(Default)]
struct RegistryLog {
    registrations: Vec<NetworkServiceEndpoint>,
    /// Registrations that came after the previous one had expired.
    lapsed: usize,
    /// When the current registration expires.
    expires: Option<Instant>,
    unregistered: Vec<String>,
    /// The SPIFFE ID of each caller.
    callers: Vec<String>,
    /// Each call (`register`, `find`, `unregister`) and the path token its metadata carried.
    calls: Vec<(&'static str, Option<PathToken>)>,
    /// The fds callers had passed on their connection (grpcfd), by file.
    passed: Vec<grpc_unix::InodeKey>,
}

/// nsmgr's registry: checks each call's path token as a hop does (signed by the TLS peer, for
/// the registry's own SPIFFE ID; `PermissionDenied` otherwise), grants `expiry`, notes a
/// registration that comes after its predecessor expired, answers a `Find` from what was
/// registered and keeps `Find` watches open until it goes down (then they fail, as a
/// restarting nsmgr's connections do).
#[derive(Clone)]
struct Registry {
    own: SpiffeId,
    expiry: Arc<Mutex<Duration>>,
    log: Arc<Mutex<RegistryLog>>,
    down: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Registry {
    fn new(expiry: Duration, identity: &Identity) -> Registry {
        Registry {
            own: identity.spiffe_id(),
            expiry: Arc::new(Mutex::new(expiry)),
            log: Arc::default(),
            down: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }

    /// Going down: watches fail, calls are refused.
    fn go_down(&self) {
        self.down.send_replace(true);
    }

    fn caller<T>(&self, method: &'static str, request: &Request<T>) -> Result<(), Status> {
        if *self.down.borrow() {
            return Err(Status::unavailable("nsmgr is going down"));
        }
        let peer = PeerIdentity::from_request(request)
            .ok_or_else(|| Status::unauthenticated("no TLS peer"))?;
        let verdict = tokens::verify_request(request, &self.own);
        let mut log = self.log.lock().unwrap();
        log.callers.push(peer.spiffe_id().to_string());
        log.calls
            .push((method, PathToken::from_metadata(request.metadata()).ok()));
        if let Some(info) = spiffe_identity::ConnectionInfo::from_request(request) {
            log.passed.extend(info.fds.keys());
        }
        verdict.map(|_| ())
    }
}

#[tonic::async_trait]
impl NetworkServiceEndpointRegistry for Registry {
    async fn register(
        &self,
        request: Request<NetworkServiceEndpoint>,
    ) -> Result<Response<NetworkServiceEndpoint>, Status> {
        self.caller("register", &request)?;
        let mut nse = request.into_inner();
        let mut log = self.log.lock().unwrap();
        let now = Instant::now();
        if log.expires.is_some_and(|e| e <= now) {
            log.lapsed += 1;
        }
        let expiry = *self.expiry.lock().unwrap();
        log.expires = Some(now + expiry);
        log.registrations.push(nse.clone());
        nse.expiration_time = Some(timestamp(SystemTime::now() + expiry));
        Ok(Response::new(nse))
    }

    type FindStream =
        tokio_stream::wrappers::ReceiverStream<Result<NetworkServiceEndpointResponse, Status>>;

    /// A lookup answers the latest registration of the name asked for; a watch stays open
    /// until the registry goes down, then fails.
    async fn find(
        &self,
        request: Request<NetworkServiceEndpointQuery>,
    ) -> Result<Response<Self::FindStream>, Status> {
        self.caller("find", &request)?;
        let query = request.into_inner();
        if !query.watch {
            let name = query.network_service_endpoint.unwrap_or_default().name;
            let found = self
                .log
                .lock()
                .unwrap()
                .registrations
                .iter()
                .rev()
                .find(|e| e.name == name)
                .cloned();
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            if let Some(nse) = found {
                let answer = NetworkServiceEndpointResponse {
                    network_service_endpoint: Some(nse),
                    deleted: false,
                };
                tx.try_send(Ok(answer)).unwrap();
            }
            return Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
                rx,
            )));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let mut down = self.down.subscribe();
        tokio::spawn(async move {
            let _ = down.wait_for(|d| *d).await;
            let _ = tx
                .send(Err(Status::unavailable("nsmgr is going down")))
                .await;
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }

    async fn unregister(
        &self,
        request: Request<NetworkServiceEndpoint>,
    ) -> Result<Response<()>, Status> {
        self.caller("unregister", &request)?;
        let name = request.into_inner().name;
        self.log.lock().unwrap().unregistered.push(name);
        Ok(Response::new(()))
    }
}

/// A registry serving on `socket` with mTLS until the sender is used or dropped.
fn start_registry(
    socket: &FsPath,
    identity: &Identity,
    registry: Registry,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let router = Server::builder().add_service(NetworkServiceEndpointRegistryServer::new(registry));
    let identity = identity.clone();
    let task = tokio::spawn(async move {
        spiffe::serve(router, listener, Some(&identity), async {
            let _ = rx.await;
        })
        .await
        .unwrap()
    });
    (tx, task)
}

/// Polls `cond` until it holds; fails the test after `within`.
async fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_find_and_unregister_carry_quivers_path_token_for_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(TD);
    let quiver_svid = ca.issue(QUIVER_PATH, 1, in_a_year());
    let (_quiver_api, quiver) = workload(dir.path(), "quiver-agent", &ca, &quiver_svid).await;
    let (_registry_api, registry_identity) = ca
        .workload(dir.path(), "nsmgr-agent", REGISTRY_PATH, 2)
        .await;
    let socket = dir.path().join("nsm.io.sock");
    let registry = Registry::new(Duration::from_secs(3600), &registry_identity);
    let (_stop, _task) = start_registry(&socket, &registry_identity, registry.clone());
    let cfg = NsmConfig {
        name: "quiver-node-1".into(),
        listen_on: "tcp://192.0.2.1:5001".into(),
        connect_to: format!("unix://{}", socket.display()),
        register: true,
        identity: Some(quiver.clone()),
        max_token_lifetime: Duration::from_secs(300),
        ..NsmConfig::default()
    };

    registration::register(&cfg).await.unwrap();
    let lookup = Connection {
        network_service_endpoint_name: "quiver-node-1".into(),
        ..Default::default()
    };
    let found = RegistryDiscovery::new(&cfg).find(&lookup).await.unwrap();
    assert_eq!(found, "tcp://192.0.2.1:5001");
    registration::unregister(&cfg).await;
    assert_eq!(
        registry.log.lock().unwrap().unregistered,
        ["quiver-node-1".to_string()]
    );

    let calls = registry.log.lock().unwrap().calls.clone();
    let methods: Vec<&str> = calls.iter().map(|(m, _)| *m).collect();
    assert_eq!(methods, ["register", "find", "unregister"]);
    let signer = peer_of(&quiver_svid);
    for (method, token) in &calls {
        let token = token
            .as_ref()
            .unwrap_or_else(|| panic!("{method}: no nsm-client-token"));
        // Signed with Quiver's SVID, for the registry, with nsm-client-token-expires its exp.
        let claims = tokens::verify(&token.token, &signer).unwrap();
        assert_eq!(claims.sub, quiver_svid.spiffe_id, "{method}");
        assert_eq!(
            claims.aud,
            [registry_identity.spiffe_id().to_string()],
            "{method}"
        );
        let expires = token.expires.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
        assert_eq!(expires, claims.exp, "{method}");
        let left = token.expires.duration_since(SystemTime::now()).unwrap();
        assert!(left <= Duration::from_secs(300), "{method}: {left:?}");
    }

    // Without an identity (plaintext), no token is minted for registry calls.
    let plain = nsm_forwarder::secure::sign_call(None, None, Duration::from_secs(60), ()).unwrap();
    assert!(plain.metadata().get(tokens::TOKEN_METADATA).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_is_refreshed_before_expiry_renewed_after_a_registry_restart_and_removed_on_shutdown(
) {
    const EXPIRY: Duration = Duration::from_secs(6);
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(TD);
    let (_quiver_api, quiver) = ca
        .workload(dir.path(), "quiver-agent", QUIVER_PATH, 1)
        .await;
    let (_registry_api, registry_identity) = ca
        .workload(dir.path(), "nsmgr-agent", REGISTRY_PATH, 2)
        .await;
    let socket = dir.path().join("nsm.io.sock");
    let first = Registry::new(EXPIRY, &registry_identity);
    let (stop_first, first_task) = start_registry(&socket, &registry_identity, first.clone());

    let listen_on = format!("unix://{}", dir.path().join("quiver.sock").display());
    let cfg = NsmConfig {
        name: "quiver-node-1".into(),
        listen_on: listen_on.clone(),
        connect_to: format!("unix://{}", socket.display()),
        register: true,
        identity: Some(quiver.clone()),
        ..NsmConfig::default()
    };
    let service = NsmService::new(
        cfg.clone(),
        Arc::new(RecordingDp::default()),
        Arc::new(StaticEndpoint("unix:///nowhere".into())),
    );
    let listener = bind(&listen_on).unwrap();
    let (stop_quiver, stopped) = tokio::sync::oneshot::channel::<()>();
    let quiver_task = tokio::spawn(service.serve_on(listener, async {
        let _ = stopped.await;
    }));

    // Registered, then refreshed before the first registration expired.
    let count = |r: &Registry| r.log.lock().unwrap().registrations.len();
    wait_for("a refresh", EXPIRY * 4, || count(&first) >= 2).await;
    {
        let log = first.log.lock().unwrap();
        assert_eq!(log.lapsed, 0, "a registration expired before its refresh");
        let nse = &log.registrations[0];
        assert_eq!(nse.name, "quiver-node-1");
        assert_eq!(nse.network_service_names, ["forwarder"]);
        assert_eq!(
            nse.network_service_labels["forwarder"].labels["p2p"],
            "true"
        );
        // Its socket, passed by fd (grpcfd) and named by inode.
        let socket = std::fs::metadata(listen_on.strip_prefix("unix://").unwrap()).unwrap();
        let key = grpc_unix::InodeKey {
            dev: std::os::unix::fs::MetadataExt::dev(&socket),
            ino: std::os::unix::fs::MetadataExt::ino(&socket),
        };
        assert_eq!(nse.url, key.to_string());
        assert!(
            log.passed.contains(&key),
            "the socket's fd came with the call"
        );
        assert!(log
            .callers
            .iter()
            .all(|c| *c == quiver.spiffe_id().as_str()));
        // Register and the watch (Find) of Quiver's entry carried its tokens (the registry
        // refuses calls without a good one).
        let methods: Vec<&str> = log.calls.iter().map(|(m, _)| *m).collect();
        assert!(
            methods.contains(&"register") && methods.contains(&"find"),
            "{methods:?}"
        );
        assert!(log.calls.iter().all(|(_, t)| t.is_some()));
    }

    // From now on registrations last long: the next refresh is far beyond this test's
    // deadlines, and only noticing the restart can explain a registration with the next nsmgr.
    *first.expiry.lock().unwrap() = Duration::from_secs(3600);
    let seen = count(&first);
    wait_for("a long registration", EXPIRY * 4, || count(&first) > seen).await;

    // nsmgr restarts on the same socket, knowing nothing: Quiver registers there again.
    first.go_down();
    stop_first.send(()).unwrap();
    first_task.await.unwrap();
    let second = Registry::new(Duration::from_secs(3600), &registry_identity);
    let (_stop_second, _second_task) = start_registry(&socket, &registry_identity, second.clone());
    wait_for(
        "a registration after the restart",
        Duration::from_secs(60),
        || count(&second) >= 1,
    )
    .await;
    assert_eq!(
        second.log.lock().unwrap().registrations[0].name,
        "quiver-node-1"
    );

    // Shutdown: Quiver leaves the registry.
    stop_quiver.send(()).unwrap();
    quiver_task.await.unwrap().unwrap();
    assert_eq!(
        second.log.lock().unwrap().unregistered,
        ["quiver-node-1".to_string()]
    );
}
