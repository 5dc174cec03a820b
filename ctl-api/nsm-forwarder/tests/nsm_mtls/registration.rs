//! Registration with nsmgr's registry: Quiver's token on every call, refresh, restart, Unregister.

use std::path::Path as FsPath;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nsm_forwarder::path::timestamp;
use nsm_forwarder::server::bind;
use nsm_forwarder::{
    registration, EndpointDiscovery, NsmConfig, NsmService, RegistryDiscovery, StaticEndpoint,
};
use nsm_proto::connection::Connection;
use nsm_proto::registry::network_service_endpoint_registry_server::{
    NetworkServiceEndpointRegistry, NetworkServiceEndpointRegistryServer,
};
use nsm_proto::registry::{
    NetworkServiceEndpoint, NetworkServiceEndpointQuery, NetworkServiceEndpointResponse,
};
use spiffe_identity::testing::{in_a_year, peer_of, workload, TestCa};
use spiffe_identity::tokens::{self, PathToken};
use spiffe_identity::{self as spiffe, Identity, PeerIdentity, SpiffeId};
use tokio::net::UnixListener;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

use crate::harness::*;

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
/// restarting nsmgr's connections do) or until [`Registry::end_watches`] (then they end
/// cleanly, as nsmgr ends them when the registry behind it restarts).
#[derive(Clone)]
struct Registry {
    own: SpiffeId,
    expiry: Arc<Mutex<Duration>>,
    log: Arc<Mutex<RegistryLog>>,
    down: Arc<tokio::sync::watch::Sender<bool>>,
    /// Bumped to end every open watch cleanly.
    ended: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Registry {
    fn new(expiry: Duration, identity: &Identity) -> Registry {
        Registry {
            own: identity.spiffe_id(),
            expiry: Arc::new(Mutex::new(expiry)),
            log: Arc::default(),
            down: Arc::new(tokio::sync::watch::channel(false).0),
            ended: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    /// Ends every open watch cleanly (the stream closes with no error).
    fn end_watches(&self) {
        self.ended.send_modify(|n| *n += 1);
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
        let mut ended = self.ended.subscribe();
        let generation = *ended.borrow();
        tokio::spawn(async move {
            let going_down = async {
                let _ = down.wait_for(|d| *d).await;
            };
            let ending = async {
                let _ = ended.wait_for(|n| *n != generation).await;
            };
            tokio::select! {
                () = going_down => {
                    let _ = tx
                        .send(Err(Status::unavailable("nsmgr is going down")))
                        .await;
                }
                // The stream ends with no error: `tx` is dropped.
                () = ending => {}
            }
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

    let path = registration::RegistryPath::default();
    registration::register(&cfg, &path).await.unwrap();
    let lookup = Connection {
        network_service_endpoint_name: "quiver-node-1".into(),
        ..Default::default()
    };
    let found = RegistryDiscovery::new(&cfg).find(&lookup).await.unwrap();
    assert_eq!(
        found,
        nsm_forwarder::endpoint::Found::one("quiver-node-1", "tcp://192.0.2.1:5001")
    );
    registration::unregister(&cfg, &path).await;
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

/// What `first` saw of Quiver (listening on `listen_on`, with identity `quiver`) registering:
/// its entry, its socket passed by fd, its tokens on every call.
fn the_first_registrations_are_quivers(first: &Registry, listen_on: &str, quiver: &Identity) {
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
    the_first_registrations_are_quivers(&first, &listen_on, &quiver);

    // From now on registrations last long: the next refresh is far beyond this test's
    // deadlines, and only noticing the restart can explain a registration with the next nsmgr.
    *first.expiry.lock().unwrap() = Duration::from_secs(3600);
    let seen = count(&first);
    wait_for("a long registration", EXPIRY * 4, || count(&first) > seen).await;

    // The registry behind nsmgr restarts: nsmgr ends the watch cleanly. Quiver registers
    // again at once (its next refresh is an hour away).
    let seen = count(&first);
    first.end_watches();
    wait_for(
        "a registration after the watch ended cleanly",
        Duration::from_secs(10),
        || count(&first) > seen,
    )
    .await;

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
