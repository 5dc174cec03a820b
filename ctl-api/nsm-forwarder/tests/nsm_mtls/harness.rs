//! The harness: a CA, a Workload API per workload, Quiver over a data path that records ports per
//! owner, the NSE behind mTLS (it checks Quiver's path token as nsmgr would), an NSC's channel.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nsm_forwarder::dataplane::{KernelSpec, MemifSpec};
use nsm_forwarder::server::bind_for;
use nsm_forwarder::{
    BackendError, LinkEvents, NsmBackend, NsmConfig, NsmService, PortName, StaticEndpoint,
};
use nsm_proto::connection::{Connection, Mechanism, Path, PathSegment, State};
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use nsm_proto::networkservice::network_service_server::{NetworkService, NetworkServiceServer};
use nsm_proto::networkservice::NetworkServiceRequest;
use spiffe_identity::testing::{in_a_year, workload, FakeWorkloadApi, TestCa, TestSvid};
use spiffe_identity::tokens::{self, PathToken};
use spiffe_identity::{self as spiffe, connect_tls, Identity, PeerChannel, PeerIdentity, SpiffeId};
use tokio::net::UnixListener;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

pub(crate) const TD: &str = "example.org";
pub(crate) const QUIVER_PATH: &str = "/ns/nsm-system/sa/quiver";
pub(crate) const NSC_PATH: &str = "/ns/default/sa/nsc";
pub(crate) const NSE_PATH: &str = "/ns/default/sa/nse";
pub(crate) const REGISTRY_PATH: &str = "/ns/nsm-system/sa/nsmgr";
pub(crate) const NS: &str = "file:///proc/self/ns/net";
#[derive(Default)]
pub(crate) struct RecordingDp {
    pub(crate) ports: Mutex<BTreeMap<String, String>>,
}

impl RecordingDp {
    pub(crate) fn is_empty(&self) -> bool {
        self.ports.lock().unwrap().is_empty()
    }
    pub(crate) fn add(&self, owner: &str, name: &PortName) -> Result<(), BackendError> {
        let mut ports = self.ports.lock().unwrap();
        if ports.contains_key(&name.0) {
            return Err(BackendError::AlreadyExists(name.0.clone()));
        }
        ports.insert(name.0.clone(), owner.to_string());
        Ok(())
    }
}

impl NsmBackend for RecordingDp {
    fn create_memif(&self, owner: &str, spec: &MemifSpec) -> Result<(), BackendError> {
        self.add(owner, &spec.name)
    }
    fn create_kernel(&self, owner: &str, spec: &KernelSpec) -> Result<(), BackendError> {
        self.add(owner, &spec.name)
    }
    fn remove_port(&self, _owner: &str, port: &PortName) -> Result<(), BackendError> {
        self.ports
            .lock()
            .unwrap()
            .remove(&port.0)
            .map(|_| ())
            .ok_or_else(|| BackendError::NotFound(port.0.clone()))
    }
    fn l2_cross_connect(&self, _: &str, _: &PortName, _: &PortName) -> Result<(), BackendError> {
        Ok(())
    }
    fn l3_cross_connect(
        &self,
        _: &str,
        _: &PortName,
        _: &PortName,
        _: nsm_forwarder::L3NextHops,
        _: nsm_forwarder::L3NextHops,
    ) -> Result<(), BackendError> {
        Ok(())
    }
    fn disconnect(&self, _: &str, _: &PortName) -> Result<(), BackendError> {
        Ok(())
    }
    fn remove_owned(&self, owner: &str) -> Result<(), BackendError> {
        self.ports.lock().unwrap().retain(|_, o| o != owner);
        Ok(())
    }
    fn owners(&self) -> Result<Vec<String>, BackendError> {
        let mut o: Vec<String> = self.ports.lock().unwrap().values().cloned().collect();
        o.dedup();
        Ok(o)
    }
    fn watch_links(&self, _: LinkEvents) {}
}
#[derive(Default)]
pub(crate) struct NseLog {
    /// Each Request: Quiver's identity as the handshake showed it, the token's verdict, and
    /// the request.
    pub(crate) requests: Vec<(
        PeerIdentity,
        Result<PathToken, Status>,
        NetworkServiceRequest,
    )>,
    /// Each Close's token verdict.
    pub(crate) closes: Vec<Result<PathToken, Status>>,
}

#[derive(Clone)]
pub(crate) struct Nse {
    /// Its own SPIFFE ID: the audience Quiver's tokens must name.
    pub(crate) own: SpiffeId,
    pub(crate) log: Arc<Mutex<NseLog>>,
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

pub(crate) struct Harness {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) ca: TestCa,
    pub(crate) quiver_api: FakeWorkloadApi,
    pub(crate) quiver_identity: Identity,
    pub(crate) nsc_svid: TestSvid,
    pub(crate) nsc_identity: Identity,
    pub(crate) _nsc_api: FakeWorkloadApi,
    pub(crate) nse_svid: TestSvid,
    pub(crate) _nse_api: FakeWorkloadApi,
    pub(crate) nse: Nse,
    pub(crate) dp: Arc<RecordingDp>,
    pub(crate) service: NsmService,
    pub(crate) listen_on: String,
    pub(crate) _stop: Vec<tokio::sync::oneshot::Sender<()>>,
}

pub(crate) async fn harness() -> Harness {
    harness_listening_on(None).await
}

/// [`harness`] with Quiver listening on `listen_on` (a `tcp://` address) instead of a unix
/// socket in the test's directory.
pub(crate) async fn harness_listening_on(listen_on: Option<&str>) -> Harness {
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
    pub(crate) async fn nsc_channel(&self) -> PeerChannel {
        connect_tls(&self.listen_on, &self.nsc_identity)
            .await
            .unwrap()
    }

    /// Nothing is left: no port, no connection, nothing published, nothing sent on.
    pub(crate) fn assert_no_state(&self, what: &str) {
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

pub(crate) fn memif_request(id: &str) -> NetworkServiceRequest {
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
pub(crate) fn with_token(
    mut req: NetworkServiceRequest,
    token: &PathToken,
) -> Request<NetworkServiceRequest> {
    let conn = req.connection.as_mut().unwrap();
    token.apply_to_segment(&mut conn.path.as_mut().unwrap().path_segments[0]);
    let mut request = Request::new(req);
    token.insert_into(request.metadata_mut()).unwrap();
    request
}

/// The NSC's token for Quiver, minted as NSM's client does.
pub(crate) fn nsc_token(h: &Harness, quiver: &PeerChannel) -> PathToken {
    tokens::mint(
        &h.nsc_identity.current(),
        &quiver.peer().unwrap(),
        Duration::from_secs(600),
    )
    .unwrap()
}

/// What [`request_up`] got: Quiver as the channel saw it, the NSC's token, Quiver's answer.
pub(crate) struct Answered {
    pub(crate) quiver: PeerIdentity,
    pub(crate) token: PathToken,
    pub(crate) answer: Connection,
}

/// A memif Request `id` on `channel` with a fresh NSC token: Quiver presented its SVID, and
/// answers UP with the path nsc → quiver → nse, the NSC's segment holding the token it checked.
pub(crate) async fn request_up(h: &Harness, channel: &PeerChannel, id: &str) -> Answered {
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
