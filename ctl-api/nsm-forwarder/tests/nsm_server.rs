//! The NSM forwarder server over a unix socket, driven by a tonic client, with an in-memory
//! data path (which refuses anything the real one would: duplicate ports, cross-connects of
//! unknown ports) and a tonic server playing the endpoint (NSE).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nsm_forwarder::dataplane::{KernelSpec, MemifRole, MemifSpec};
use nsm_forwarder::dial::dial;
use nsm_forwarder::monitor::{EventStream, Monitor};
use nsm_forwarder::path::timestamp;
use nsm_forwarder::server::bind;
use nsm_forwarder::{
    Core, Dataplane, DataplaneError, LinkEvent, LinkEvents, NsmConfig, NsmService, PortName,
    PortSpec, RegistryDiscovery, StaticEndpoint,
};
use nsm_proto::connection::monitor_connection_client::MonitorConnectionClient;
use nsm_proto::connection::monitor_connection_server::{
    MonitorConnection, MonitorConnectionServer,
};
use nsm_proto::connection::{
    Connection, ConnectionEvent, ConnectionEventType, Mechanism, MonitorScopeSelector, Path,
    PathSegment, State,
};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext, Route};
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use nsm_proto::networkservice::network_service_server::{NetworkService, NetworkServiceServer};
use nsm_proto::networkservice::NetworkServiceRequest;
use nsm_proto::registry::network_service_endpoint_registry_server::{
    NetworkServiceEndpointRegistry, NetworkServiceEndpointRegistryServer,
};
use nsm_proto::registry::{
    NetworkServiceEndpoint, NetworkServiceEndpointQuery, NetworkServiceEndpointResponse,
};
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status, Streaming};

// ---------------------------------------------------------------------------------------------
// The in-memory data path.

#[derive(Debug, Clone, PartialEq)]
enum Xc {
    L2(String),
    L3(String, Option<IpAddr>),
}

#[derive(Default, Debug)]
struct FakeState {
    ports: BTreeMap<String, (String, PortSpec)>,
    xcs: BTreeMap<String, (String, Xc)>,
    /// Every successful create, in order (port names).
    created: Vec<String>,
    /// Every successful remove_port or removal by remove_owned (port names).
    removed: Vec<String>,
    /// Creating this port fails.
    fail_create: Option<String>,
}

#[derive(Default)]
struct FakeDp {
    state: Mutex<FakeState>,
    links: Mutex<Option<LinkEvents>>,
}

impl FakeDp {
    fn st(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap()
    }
    fn is_empty(&self) -> bool {
        let s = self.st();
        s.ports.is_empty() && s.xcs.is_empty()
    }
    fn port(&self, name: &str) -> Option<PortSpec> {
        self.st().ports.get(name).map(|(_, p)| p.clone())
    }
    fn xc(&self, from: &str) -> Option<Xc> {
        self.st().xcs.get(from).map(|(_, x)| x.clone())
    }
    fn created(&self) -> Vec<String> {
        self.st().created.clone()
    }
    fn removed(&self) -> Vec<String> {
        self.st().removed.clone()
    }
    fn add(&self, owner: &str, spec: PortSpec) -> Result<(), DataplaneError> {
        let mut s = self.st();
        let name = spec.name().0.clone();
        if s.fail_create.as_ref() == Some(&name) {
            return Err(DataplaneError::Failed(format!("cannot create {name}")));
        }
        if s.ports.contains_key(&name) {
            return Err(DataplaneError::AlreadyExists(name));
        }
        s.ports.insert(name.clone(), (owner.into(), spec));
        s.created.push(name);
        Ok(())
    }
    fn link(&self, ev: LinkEvent) {
        self.links.lock().unwrap().as_ref().unwrap().send(ev);
    }
}

impl Dataplane for FakeDp {
    fn create_memif(&self, owner: &str, spec: &MemifSpec) -> Result<(), DataplaneError> {
        self.add(owner, PortSpec::Memif(spec.clone()))
    }
    fn create_kernel(&self, owner: &str, spec: &KernelSpec) -> Result<(), DataplaneError> {
        self.add(owner, PortSpec::Kernel(spec.clone()))
    }
    fn remove_port(&self, owner: &str, port: &PortName) -> Result<(), DataplaneError> {
        let mut s = self.st();
        match s.ports.get(&port.0) {
            Some((o, _)) if o == owner => {}
            _ => return Err(DataplaneError::NotFound(port.0.clone())),
        }
        if s.xcs.contains_key(&port.0)
            || s.xcs
                .values()
                .any(|(_, x)| matches!(x, Xc::L2(t) | Xc::L3(t, _) if *t == port.0))
        {
            return Err(DataplaneError::InvalidArgument(format!(
                "{port} is cross-connected"
            )));
        }
        s.ports.remove(&port.0);
        s.removed.push(port.0.clone());
        Ok(())
    }
    fn l2_cross_connect(
        &self,
        owner: &str,
        a: &PortName,
        b: &PortName,
    ) -> Result<(), DataplaneError> {
        let mut s = self.st();
        for p in [a, b] {
            if !s.ports.contains_key(&p.0) {
                return Err(DataplaneError::NotFound(p.0.clone()));
            }
            if s.xcs.contains_key(&p.0) {
                return Err(DataplaneError::AlreadyExists(format!(
                    "cross-connect from {p}"
                )));
            }
        }
        s.xcs
            .insert(a.0.clone(), (owner.into(), Xc::L2(b.0.clone())));
        s.xcs
            .insert(b.0.clone(), (owner.into(), Xc::L2(a.0.clone())));
        Ok(())
    }
    fn l3_cross_connect(
        &self,
        owner: &str,
        a: &PortName,
        b: &PortName,
        peer_b: Option<IpAddr>,
        peer_a: Option<IpAddr>,
    ) -> Result<(), DataplaneError> {
        let mut s = self.st();
        for p in [a, b] {
            if !s.ports.contains_key(&p.0) {
                return Err(DataplaneError::NotFound(p.0.clone()));
            }
            if s.xcs.contains_key(&p.0) {
                return Err(DataplaneError::AlreadyExists(format!(
                    "cross-connect from {p}"
                )));
            }
        }
        s.xcs
            .insert(a.0.clone(), (owner.into(), Xc::L3(b.0.clone(), peer_b)));
        s.xcs
            .insert(b.0.clone(), (owner.into(), Xc::L3(a.0.clone(), peer_a)));
        Ok(())
    }
    fn disconnect(&self, _owner: &str, port: &PortName) -> Result<(), DataplaneError> {
        let mut s = self.st();
        match s.xcs.remove(&port.0) {
            Some((_, Xc::L2(peer) | Xc::L3(peer, _))) => {
                s.xcs.remove(&peer);
                Ok(())
            }
            None => Err(DataplaneError::NotFound(format!(
                "no cross-connect from {port}"
            ))),
        }
    }
    fn remove_owned(&self, owner: &str) -> Result<(), DataplaneError> {
        let mut s = self.st();
        s.xcs.retain(|_, (o, _)| o != owner);
        let gone: Vec<String> = s
            .ports
            .iter()
            .filter(|(_, (o, _))| o == owner)
            .map(|(n, _)| n.clone())
            .collect();
        for n in gone {
            s.ports.remove(&n);
            s.removed.push(n);
        }
        Ok(())
    }
    fn owners(&self) -> Result<Vec<String>, DataplaneError> {
        let s = self.st();
        let mut o: Vec<String> = s.ports.values().map(|(o, _)| o.clone()).collect();
        o.dedup();
        Ok(o)
    }
    fn watch_links(&self, events: LinkEvents) {
        *self.links.lock().unwrap() = Some(events);
    }
}

// ---------------------------------------------------------------------------------------------
// The endpoint (NSE).

#[derive(Default, Debug)]
struct NseLog {
    requests: Vec<NetworkServiceRequest>,
    closes: Vec<Connection>,
    /// Every event in order: "request <id>" / "close <id>".
    order: Vec<String>,
    /// Requests that reached the gate (see `FakeNse::gate`).
    gated: usize,
}

#[derive(Clone, Default)]
struct FakeNse {
    log: Arc<Mutex<NseLog>>,
    refuse: Option<Code>,
    /// Each Request waits here for a permit first.
    gate: Option<Arc<tokio::sync::Semaphore>>,
    /// What the endpoint publishes on its MonitorConnections (see `NseMonitor`).
    monitor: Arc<Monitor>,
}

/// The endpoint's connection as it publishes it: its own segment's id and index.
fn nse_side(answer: &Connection) -> Connection {
    let mut c = answer.clone();
    let path = c.path.as_mut().unwrap();
    path.index += 1;
    c.id = path.path_segments[path.index as usize].id.clone();
    c
}

/// The endpoint's MonitorConnections: what `FakeNse` publishes, each stream cut (with an
/// error) whenever the test breaks them.
#[derive(Clone)]
struct NseMonitor {
    monitor: Arc<Monitor>,
    /// Every selector subscribed with, in order.
    subscribed: Arc<Mutex<Vec<MonitorScopeSelector>>>,
    breaks: Arc<tokio::sync::watch::Sender<u64>>,
    /// While set, each subscription waits for a permit first (counted in `waiting`).
    hold: Arc<Mutex<Option<Arc<tokio::sync::Semaphore>>>>,
    waiting: Arc<std::sync::atomic::AtomicUsize>,
}

#[tonic::async_trait]
impl MonitorConnection for NseMonitor {
    type MonitorConnectionsStream = EventStream;

    async fn monitor_connections(
        &self,
        request: Request<MonitorScopeSelector>,
    ) -> Result<Response<EventStream>, Status> {
        let selector = request.into_inner();
        let hold = self.hold.lock().unwrap().clone();
        if let Some(gate) = hold {
            self.waiting
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            gate.acquire().await.unwrap().forget();
        }
        let mut events = self.monitor.subscribe(selector.clone());
        let mut broken = self.breaks.subscribe();
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = broken.changed() => {
                        let _ = tx.send(Err(Status::unavailable("the endpoint restarted"))).await;
                        return;
                    }
                    ev = events.next() => {
                        let Some(ev) = ev else { return };
                        if tx.send(ev).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        self.subscribed.lock().unwrap().push(selector);
        Ok(Response::new(EventStream::new(rx)))
    }
}

const NS: &str = "file:///proc/self/ns/net";

#[tonic::async_trait]
impl NetworkService for FakeNse {
    async fn request(
        &self,
        request: Request<NetworkServiceRequest>,
    ) -> Result<Response<Connection>, Status> {
        if let Some(gate) = &self.gate {
            self.log.lock().unwrap().gated += 1;
            gate.acquire().await.unwrap().forget();
        }
        let req = request.into_inner();
        let mut log = self.log.lock().unwrap();
        let mut conn = req.connection.clone().unwrap();
        log.order.push(format!("request {}", conn.id));
        log.requests.push(req.clone());
        if let Some(code) = self.refuse {
            return Err(Status::new(code, "the endpoint refuses"));
        }
        let path = conn.path.as_mut().unwrap();
        let index = path.index as usize;
        assert_eq!(
            path.path_segments[index].id, conn.id,
            "the forwarder's segment id"
        );
        if path
            .path_segments
            .get(index + 1)
            .is_none_or(|s| s.name != "nse")
        {
            path.path_segments.truncate(index + 1);
            path.path_segments.push(PathSegment {
                name: "nse".into(),
                id: format!("nse-{}", conn.id),
                ..Default::default()
            });
        }
        let offered = req.mechanism_preferences[0].clone();
        let mut params = HashMap::from([("inodeURL".to_string(), NS.to_string())]);
        if offered.r#type == "MEMIF" {
            params.insert("socketfile".into(), format!("@nse/{}", conn.id));
        } else {
            params.insert("name".into(), offered.parameters["name"].clone());
        }
        conn.mechanism = Some(Mechanism {
            cls: "LOCAL".into(),
            r#type: offered.r#type,
            parameters: params,
        });
        if conn.payload == "IP" {
            let ctx = conn.context.get_or_insert_with(Default::default);
            let ip = ctx.ip_context.get_or_insert_with(Default::default);
            if ip.src_ip_addrs.is_empty() {
                ip.src_ip_addrs = vec!["172.16.0.2/31".into()];
                ip.dst_ip_addrs = vec!["172.16.0.3/31".into()];
            }
        }
        self.monitor.update(&nse_side(&conn));
        Ok(Response::new(conn))
    }

    async fn close(&self, request: Request<Connection>) -> Result<Response<()>, Status> {
        let conn = request.into_inner();
        let mut log = self.log.lock().unwrap();
        log.order.push(format!("close {}", conn.id));
        if conn.path.is_some() {
            self.monitor.delete(&nse_side(&conn));
        }
        log.closes.push(conn);
        Ok(Response::new(()))
    }
}

// ---------------------------------------------------------------------------------------------
// The harness.

struct Harness {
    _dir: tempfile::TempDir,
    client: NetworkServiceClient<Channel>,
    channel: Channel,
    dp: Arc<FakeDp>,
    nse: Arc<Mutex<NseLog>>,
    /// The endpoint's MonitorConnections.
    nse_monitor: NseMonitor,
    /// The endpoint's Requests' gate, with `Setup::gated`.
    gate: Option<Arc<tokio::sync::Semaphore>>,
    core: Arc<Core>,
    registrations: Option<tokio::sync::mpsc::UnboundedReceiver<NetworkServiceEndpoint>>,
    _stop: Vec<tokio::sync::oneshot::Sender<()>>,
}

struct Setup {
    endpoint_reachable: bool,
    refuse: Option<Code>,
    stale_owner: Option<&'static str>,
    /// Find the endpoint through a registry (which knows `nse-1`), and register there.
    registry: bool,
    /// The endpoint serves MonitorConnections.
    nse_monitor: bool,
    /// Each endpoint Request waits for a permit of `Harness::gate`.
    gated: bool,
}

const DEFAULT: Setup = Setup {
    endpoint_reachable: true,
    refuse: None,
    stale_owner: None,
    registry: false,
    nse_monitor: true,
    gated: false,
};

// ---------------------------------------------------------------------------------------------
// The registry (nsmgr's side of it).

#[derive(Clone)]
struct FakeRegistry {
    known: HashMap<String, String>,
    registered: tokio::sync::mpsc::UnboundedSender<NetworkServiceEndpoint>,
}

#[tonic::async_trait]
impl NetworkServiceEndpointRegistry for FakeRegistry {
    async fn register(
        &self,
        request: Request<NetworkServiceEndpoint>,
    ) -> Result<Response<NetworkServiceEndpoint>, Status> {
        let mut nse = request.into_inner();
        let _ = self.registered.send(nse.clone());
        nse.expiration_time = Some(timestamp(SystemTime::now() + Duration::from_secs(60)));
        Ok(Response::new(nse))
    }

    type FindStream =
        tokio_stream::Iter<std::vec::IntoIter<Result<NetworkServiceEndpointResponse, Status>>>;

    async fn find(
        &self,
        request: Request<NetworkServiceEndpointQuery>,
    ) -> Result<Response<Self::FindStream>, Status> {
        let name = request
            .into_inner()
            .network_service_endpoint
            .map(|e| e.name)
            .unwrap_or_default();
        let answers: Vec<_> = self
            .known
            .get(&name)
            .map(|url| {
                Ok(NetworkServiceEndpointResponse {
                    network_service_endpoint: Some(NetworkServiceEndpoint {
                        name: name.clone(),
                        url: url.clone(),
                        ..Default::default()
                    }),
                    deleted: false,
                })
            })
            .into_iter()
            .collect();
        Ok(Response::new(tokio_stream::iter(answers)))
    }

    async fn unregister(&self, _: Request<NetworkServiceEndpoint>) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }
}

async fn harness(setup: Setup) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let nse_sock = dir.path().join("nse.sock");
    let mut stop = Vec::new();
    let gate = setup
        .gated
        .then(|| Arc::new(tokio::sync::Semaphore::new(0)));
    let nse = FakeNse {
        refuse: setup.refuse,
        gate: gate.clone(),
        ..Default::default()
    };
    let log = nse.log.clone();
    let nse_monitor = NseMonitor {
        monitor: nse.monitor.clone(),
        subscribed: Arc::default(),
        breaks: Arc::new(tokio::sync::watch::Sender::new(0)),
        hold: Arc::default(),
        waiting: Arc::default(),
    };
    if setup.endpoint_reachable {
        let listener = tokio::net::UnixListener::bind(&nse_sock).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        stop.push(tx);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(NetworkServiceServer::new(nse))
                .add_optional_service(
                    setup
                        .nse_monitor
                        .then(|| MonitorConnectionServer::new(nse_monitor.clone())),
                )
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::UnixListenerStream::new(listener),
                    async {
                        let _ = rx.await;
                    },
                ),
        );
    }
    let dp = Arc::new(FakeDp::default());
    if let Some(owner) = setup.stale_owner {
        dp.add(
            owner,
            PortSpec::Memif(MemifSpec {
                name: PortName(format!("nsm-{owner}-client")),
                role: MemifRole::Master,
                socket: "@stale".into(),
                netns: None,
                mode: nsm_forwarder::dataplane::FrameMode::Ethernet,
                mtu: None,
            }),
        )
        .unwrap();
    }
    let sock = dir.path().join("quiver.sock");
    let mut cfg = NsmConfig {
        name: "quiver".into(),
        listen_on: format!("unix://{}", sock.display()),
        ..NsmConfig::default()
    };
    let nse_url = format!("unix://{}", nse_sock.display());
    let mut registrations = None;
    let discovery: Arc<dyn nsm_forwarder::EndpointDiscovery> = if setup.registry {
        let reg_sock = dir.path().join("registry.sock");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        registrations = Some(rx);
        let registry = FakeRegistry {
            known: HashMap::from([("nse-1".to_string(), nse_url)]),
            registered: tx,
        };
        let listener = tokio::net::UnixListener::bind(&reg_sock).unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        stop.push(stop_tx);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(NetworkServiceEndpointRegistryServer::new(registry))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::UnixListenerStream::new(listener),
                    async {
                        let _ = stop_rx.await;
                    },
                ),
        );
        cfg.connect_to = format!("unix://{}", reg_sock.display());
        cfg.register = true;
        Arc::new(RegistryDiscovery {
            registry: cfg.connect_to.clone(),
            timeout: Duration::from_secs(10),
            identity: None,
            max_token_lifetime: spiffe_identity::tokens::DEFAULT_MAX_TOKEN_LIFETIME,
        })
    } else {
        Arc::new(StaticEndpoint(nse_url))
    };
    let service = NsmService::new(cfg.clone(), dp.clone(), discovery);
    let core = service.core().clone();
    let listener = bind(&cfg.listen_on).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    stop.push(tx);
    tokio::spawn(service.serve_on(listener, async {
        let _ = rx.await;
    }));
    let channel = dial(&cfg.listen_on, Duration::from_secs(10)).await.unwrap();
    Harness {
        _dir: dir,
        client: NetworkServiceClient::new(channel.clone()),
        channel,
        dp,
        nse: log,
        nse_monitor,
        gate,
        core,
        registrations,
        _stop: stop,
    }
}

impl Harness {
    async fn request(&self, req: NetworkServiceRequest) -> Result<Connection, Status> {
        self.client
            .clone()
            .request(req)
            .await
            .map(|r| r.into_inner())
    }
    async fn close(&self, conn: Connection) -> Result<(), Status> {
        self.client
            .clone()
            .close(conn)
            .await
            .map(|r| r.into_inner())
    }
    async fn monitor(&self, selector: MonitorScopeSelector) -> Streaming<ConnectionEvent> {
        MonitorConnectionClient::new(self.channel.clone())
            .monitor_connections(selector)
            .await
            .unwrap()
            .into_inner()
    }
    fn nse_requests(&self) -> usize {
        self.nse.lock().unwrap().requests.len()
    }
    fn nse_order(&self) -> Vec<String> {
        self.nse.lock().unwrap().order.clone()
    }
    /// How many MonitorConnections streams the endpoint opened.
    fn nse_subscriptions(&self) -> usize {
        self.nse_monitor.subscribed.lock().unwrap().len()
    }
    /// Cuts every MonitorConnections stream of the endpoint (as a restart would).
    fn break_nse_streams(&self) {
        self.nse_monitor.breaks.send_modify(|n| *n += 1);
    }
    /// Nothing is left: no port, no cross-connect, no connection, nothing published.
    fn assert_no_state(&self, what: &str) {
        assert!(
            self.dp.is_empty(),
            "{what}: data path holds {:?}",
            self.dp.st()
        );
        assert_eq!(self.core.connection_count(), 0, "{what}: connections left");
        assert!(
            self.core.monitor.is_empty(),
            "{what}: connections published"
        );
    }
}

async fn next_event(s: &mut Streaming<ConnectionEvent>) -> ConnectionEvent {
    // A deadline only so that a missing event fails the test instead of hanging it.
    tokio::time::timeout(Duration::from_secs(60), s.next())
        .await
        .expect("no event within 60 s")
        .expect("stream ended")
        .expect("stream error")
}

fn mech(ty: &str, params: &[(&str, &str)]) -> Mechanism {
    Mechanism {
        cls: "LOCAL".into(),
        r#type: ty.into(),
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn request(id: &str, payload: &str, prefs: Vec<Mechanism>) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            id: id.into(),
            network_service: "icmp-responder".into(),
            network_service_endpoint_name: "nse-1".into(),
            payload: payload.into(),
            path: Some(Path {
                index: 0,
                path_segments: vec![PathSegment {
                    name: "nsc".into(),
                    id: id.into(),
                    token: "nsc-token".into(),
                    expires: Some(timestamp(SystemTime::now() + Duration::from_secs(3600))),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        mechanism_preferences: prefs,
    }
}

fn memif_request(id: &str) -> NetworkServiceRequest {
    request(id, "ETHERNET", vec![mech("MEMIF", &[("inodeURL", NS)])])
}

fn kernel_request(id: &str, name: &str) -> NetworkServiceRequest {
    request(
        id,
        "ETHERNET",
        vec![mech("KERNEL", &[("inodeURL", NS), ("name", name)])],
    )
}

/// The request nsmgr sends to refresh: the connection as answered, the same preferences.
fn refresh_of(answer: &Connection, prefs: &[Mechanism]) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(answer.clone()),
        mechanism_preferences: prefs.to_vec(),
    }
}

fn segments(c: &Connection) -> Vec<(String, String)> {
    c.path
        .as_ref()
        .unwrap()
        .path_segments
        .iter()
        .map(|s| (s.name.clone(), s.id.clone()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memif_request_builds_both_sides_and_an_l2_cross_connect() {
    let h = harness(DEFAULT).await;
    let answer = h.request(memif_request("c1")).await.unwrap();

    // The caller's id and index come back, UP, with Quiver's and the endpoint's segments.
    assert_eq!(answer.id, "c1");
    assert_eq!(answer.state, State::Up as i32);
    let path = answer.path.as_ref().unwrap();
    assert_eq!(path.index, 0);
    let segs = segments(&answer);
    assert_eq!(segs.len(), 3);
    assert_eq!(segs[1].0, "quiver");
    let own_id = segs[1].1.clone();
    assert_eq!(segs[2], ("nse".to_string(), format!("nse-{own_id}")));
    // Quiver's segment carries the caller's token and its own expiry.
    assert_eq!(path.path_segments[1].token, "nsc-token");
    let expires = path.path_segments[1].expires.as_ref().unwrap();
    assert!(expires.seconds > timestamp(SystemTime::now()).seconds);
    // The client mechanism: MEMIF with the socket Quiver listens on.
    let m = answer.mechanism.as_ref().unwrap();
    assert_eq!(m.r#type, "MEMIF");
    assert_eq!(m.parameters["socketfile"], "@quiver/c1/memif.socket");

    // Toward the endpoint: Quiver's segment id and index, MEMIF offered first.
    {
        let log = h.nse.lock().unwrap();
        let sent = log.requests[0].connection.as_ref().unwrap();
        assert_eq!(sent.id, own_id);
        assert_eq!(sent.path.as_ref().unwrap().index, 1);
        let offered: Vec<&str> = log.requests[0]
            .mechanism_preferences
            .iter()
            .map(|m| m.r#type.as_str())
            .collect();
        assert_eq!(offered, ["MEMIF", "KERNEL"]);
    }

    // The data path: master toward the client, slave toward the endpoint, L2 both ways.
    let PortSpec::Memif(c) = h.dp.port("nsm-c1-client").unwrap() else {
        panic!()
    };
    assert_eq!(c.role, MemifRole::Master);
    assert_eq!(c.socket, "@quiver/c1/memif.socket");
    assert_eq!(
        c.netns.as_deref(),
        Some(std::path::Path::new("/proc/self/ns/net"))
    );
    let PortSpec::Memif(e) = h.dp.port("nsm-c1-endpoint").unwrap() else {
        panic!()
    };
    assert_eq!(e.role, MemifRole::Slave);
    assert_eq!(e.socket, format!("@nse/{own_id}"));
    assert_eq!(
        h.dp.xc("nsm-c1-client"),
        Some(Xc::L2("nsm-c1-endpoint".into()))
    );
    assert_eq!(
        h.dp.xc("nsm-c1-endpoint"),
        Some(Xc::L2("nsm-c1-client".into()))
    );
    assert_eq!(h.dp.owners().unwrap(), ["c1"]);

    // What `quiver ctl show connections` lists.
    let listed = h.core.summaries();
    assert_eq!(listed.len(), 1);
    let c = &listed[0];
    assert_eq!((c.id.as_str(), c.owner.as_str()), (own_id.as_str(), "c1"));
    assert!(c.up);
    assert_eq!(c.client, ("MEMIF".to_string(), "nsm-c1-client".to_string()));
    assert_eq!(
        c.endpoint,
        ("MEMIF".to_string(), "nsm-c1-endpoint".to_string())
    );
    assert!(c.expires.is_some_and(|t| t > SystemTime::now()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_with_the_same_request_changes_nothing() {
    let h = harness(DEFAULT).await;
    let req = memif_request("c1");
    let first = h.request(req.clone()).await.unwrap();
    let created = h.dp.created();
    assert_eq!(created.len(), 2);
    let second = h
        .request(refresh_of(&first, &req.mechanism_preferences))
        .await
        .unwrap();
    // Nothing built or removed again; the same segments; the endpoint was refreshed too.
    assert_eq!(h.dp.created(), created);
    assert!(h.dp.removed().is_empty());
    assert_eq!(segments(&second), segments(&first));
    assert_eq!(second.mechanism, first.mechanism);
    assert_eq!(h.nse_requests(), 2);
    let log = h.nse.lock().unwrap();
    // The refresh toward the endpoint keeps the mechanism it chose.
    assert_eq!(
        log.requests[1]
            .connection
            .as_ref()
            .unwrap()
            .mechanism
            .as_ref()
            .unwrap()
            .r#type,
        "MEMIF"
    );
    drop(log);
    assert_eq!(h.core.connection_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_with_a_changed_interface_name_rebuilds_the_client_side() {
    let h = harness(DEFAULT).await;
    let req = kernel_request("c1", "nsc0");
    let first = h.request(req.clone()).await.unwrap();
    let PortSpec::Kernel(k) = h.dp.port("nsm-c1-client").unwrap() else {
        panic!()
    };
    assert_eq!(k.ifname, "nsc0");
    // The endpoint was offered KERNEL first, and named the interface Quiver suggested.
    let PortSpec::Kernel(e) = h.dp.port("nsm-c1-endpoint").unwrap() else {
        panic!()
    };
    assert!(e.ifname.starts_with("nse-"), "{}", e.ifname);

    let mut changed = first.clone();
    changed
        .mechanism
        .as_mut()
        .unwrap()
        .parameters
        .insert("name".into(), "nsc1".into());
    h.request(refresh_of(&changed, &req.mechanism_preferences))
        .await
        .unwrap();
    let PortSpec::Kernel(k) = h.dp.port("nsm-c1-client").unwrap() else {
        panic!()
    };
    assert_eq!(k.ifname, "nsc1");
    // Only the client side was rebuilt, and the cross-connect restored.
    assert_eq!(h.dp.removed(), ["nsm-c1-client"]);
    assert_eq!(
        h.dp.created(),
        ["nsm-c1-client", "nsm-c1-endpoint", "nsm-c1-client"]
    );
    assert_eq!(
        h.dp.xc("nsm-c1-client"),
        Some(Xc::L2("nsm-c1-endpoint".into()))
    );
    assert_eq!(
        h.dp.xc("nsm-c1-endpoint"),
        Some(Xc::L2("nsm-c1-client".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_removes_everything_and_twice_is_fine() {
    let h = harness(DEFAULT).await;
    let answer = h.request(memif_request("c1")).await.unwrap();
    let own_id = segments(&answer)[1].1.clone();
    h.close(answer.clone()).await.unwrap();
    h.assert_no_state("after Close");
    assert!(h.core.summaries().is_empty(), "still listed after Close");
    assert_eq!(
        h.nse_order(),
        [format!("request {own_id}"), format!("close {own_id}")]
    );
    // Again: Quiver no longer knows it, succeeds, and still closes toward the endpoint.
    h.close(answer).await.unwrap();
    h.assert_no_state("after the second Close");
    assert_eq!(h.nse_order().len(), 3);
    assert_eq!(h.nse_order()[2], format!("close {own_id}"));
    // A Close of an id never seen, whose path does not reach Quiver: Ok, nothing sent on.
    let never = memif_request("never").connection.unwrap();
    h.close(never).await.unwrap();
    assert_eq!(h.nse_order().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_closes_the_connection() {
    let h = harness(DEFAULT).await;
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    assert_eq!(
        next_event(&mut events).await.r#type,
        ConnectionEventType::InitialStateTransfer as i32
    );
    let mut req = memif_request("c1");
    // The caller's segment expires very soon: Quiver must close the connection by itself.
    req.connection
        .as_mut()
        .unwrap()
        .path
        .as_mut()
        .unwrap()
        .path_segments[0]
        .expires = Some(timestamp(SystemTime::now() + Duration::from_millis(300)));
    let answer = h.request(req).await.unwrap();
    let own_id = segments(&answer)[1].1.clone();
    assert_eq!(
        next_event(&mut events).await.r#type,
        ConnectionEventType::Update as i32
    );
    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Delete as i32);
    assert!(ev.connections.contains_key(&own_id));
    h.assert_no_state("after expiry");
    assert_eq!(h.nse_order().last().unwrap(), &format!("close {own_id}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_sees_initial_state_update_delete_in_order() {
    let h = harness(DEFAULT).await;
    let a = h.request(memif_request("a")).await.unwrap();
    let a_own = segments(&a)[1].1.clone();
    // Only connections whose path runs through the segment of "a"'s client.
    let selector = MonitorScopeSelector {
        path_segments: vec![PathSegment {
            name: "nsc".into(),
            id: "a".into(),
            ..Default::default()
        }],
        network_services: vec![],
    };
    let mut only_a = h.monitor(selector).await;
    let mut all = h.monitor(MonitorScopeSelector::default()).await;
    let ev = next_event(&mut only_a).await;
    assert_eq!(ev.r#type, ConnectionEventType::InitialStateTransfer as i32);
    assert_eq!(ev.connections.keys().collect::<Vec<_>>(), [&a_own]);
    let published = &ev.connections[&a_own];
    assert_eq!(
        published.path.as_ref().unwrap().index,
        1,
        "Quiver's own index"
    );
    assert_eq!(next_event(&mut all).await.connections.len(), 1);

    let b = h.request(memif_request("b")).await.unwrap();
    let b_own = segments(&b)[1].1.clone();
    h.request(refresh_of(&a, &memif_request("a").mechanism_preferences))
        .await
        .unwrap();
    h.close(a).await.unwrap();

    let mut seen = Vec::new();
    for _ in 0..2 {
        let ev = next_event(&mut only_a).await;
        seen.push((ev.r#type, ev.connections.keys().next().unwrap().clone()));
    }
    assert_eq!(
        seen,
        [
            (ConnectionEventType::Update as i32, a_own.clone()),
            (ConnectionEventType::Delete as i32, a_own.clone()),
        ]
    );
    let mut seen_all = Vec::new();
    for _ in 0..3 {
        let ev = next_event(&mut all).await;
        seen_all.push((ev.r#type, ev.connections.keys().next().unwrap().clone()));
    }
    assert_eq!(
        seen_all,
        [
            (ConnectionEventType::Update as i32, b_own),
            (ConnectionEventType::Update as i32, a_own.clone()),
            (ConnectionEventType::Delete as i32, a_own),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_down_is_published_as_an_update_with_state_down() {
    let h = harness(DEFAULT).await;
    let answer = h.request(memif_request("c1")).await.unwrap();
    let own_id = segments(&answer)[1].1.clone();
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    next_event(&mut events).await;
    h.dp.link(LinkEvent {
        owner: "c1".into(),
        port: PortName("nsm-c1-endpoint".into()),
        up: false,
        reason: "peer disconnected".into(),
    });
    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Update as i32);
    assert_eq!(ev.connections[&own_id].state, State::Down as i32);
    h.dp.link(LinkEvent {
        owner: "c1".into(),
        port: PortName("nsm-c1-endpoint".into()),
        up: true,
        reason: "peer connected".into(),
    });
    let ev = next_event(&mut events).await;
    assert_eq!(ev.connections[&own_id].state, State::Up as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_payload_gets_an_l3_cross_connect_each_way() {
    let h = harness(DEFAULT).await;
    let answer = h
        .request(request(
            "c1",
            "IP",
            vec![mech("KERNEL", &[("inodeURL", NS), ("name", "nsc0")])],
        ))
        .await
        .unwrap();
    // The endpoint filled the addresses: the client's interface carries its own.
    let ip = answer
        .context
        .as_ref()
        .unwrap()
        .ip_context
        .as_ref()
        .unwrap();
    assert_eq!(ip.src_ip_addrs, ["172.16.0.2/31"]);
    let PortSpec::Kernel(k) = h.dp.port("nsm-c1-client").unwrap() else {
        panic!()
    };
    assert_eq!(k.ip.addresses[0].to_string(), "172.16.0.2/31");
    let PortSpec::Kernel(e) = h.dp.port("nsm-c1-endpoint").unwrap() else {
        panic!()
    };
    assert_eq!(e.ip.addresses[0].to_string(), "172.16.0.3/31");
    assert_eq!(
        h.dp.xc("nsm-c1-client"),
        Some(Xc::L3(
            "nsm-c1-endpoint".into(),
            Some("172.16.0.3".parse().unwrap())
        ))
    );
    assert_eq!(
        h.dp.xc("nsm-c1-endpoint"),
        Some(Xc::L3(
            "nsm-c1-client".into(),
            Some("172.16.0.2".parse().unwrap())
        ))
    );
    // A refresh with the answered context rebuilds nothing.
    let created = h.dp.created();
    h.request(refresh_of(&answer, &[])).await.unwrap();
    assert_eq!(h.dp.created(), created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reselect_closes_the_old_connection_first() {
    let h = harness(DEFAULT).await;
    let req = memif_request("c1");
    let answer = h.request(req.clone()).await.unwrap();
    let own_id = segments(&answer)[1].1.clone();
    let mut again = answer.clone();
    again.state = State::ReselectRequested as i32;
    h.request(refresh_of(&again, &req.mechanism_preferences))
        .await
        .unwrap();
    assert_eq!(
        h.nse_order(),
        [
            format!("request {own_id}"),
            format!("close {own_id}"),
            format!("request {own_id}")
        ]
    );
    // Everything was removed and built again.
    assert_eq!(h.dp.created().len(), 4);
    assert_eq!(
        h.dp.xc("nsm-c1-client"),
        Some(Xc::L2("nsm-c1-endpoint".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_endpoint_is_unavailable_and_the_client_side_is_rolled_back() {
    let h = harness(Setup {
        endpoint_reachable: false,
        ..DEFAULT
    })
    .await;
    let err = h.request(memif_request("c1")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    // The client side had been built, and is gone again.
    assert_eq!(h.dp.created(), ["nsm-c1-client"]);
    assert_eq!(h.dp.removed(), ["nsm-c1-client"]);
    h.assert_no_state("after an unreachable endpoint");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_refusal_is_passed_on_and_rolled_back() {
    let h = harness(Setup {
        refuse: Some(Code::PermissionDenied),
        ..DEFAULT
    })
    .await;
    let err = h.request(memif_request("c1")).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    h.assert_no_state("after a refusal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_refresh_removes_the_connection() {
    let h = harness(DEFAULT).await;
    let req = kernel_request("c1", "nsc0");
    let answer = h.request(req.clone()).await.unwrap();
    let own_id = segments(&answer)[1].1.clone();
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    next_event(&mut events).await;
    // The refresh changes the interface name, and the data path cannot build the new one.
    h.dp.st().fail_create = Some("nsm-c1-client".into());
    let mut changed = answer.clone();
    changed
        .mechanism
        .as_mut()
        .unwrap()
        .parameters
        .insert("name".into(), "nsc1".into());
    let err = h
        .request(refresh_of(&changed, &req.mechanism_preferences))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err:?}");
    h.assert_no_state("after a failed refresh");
    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Delete as i32);
    assert!(ev.connections.contains_key(&own_id));
    assert_eq!(h.nse_order().last().unwrap(), &format!("close {own_id}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_clear_status_and_leave_no_state() {
    let h = harness(DEFAULT).await;
    type Edit = Box<dyn Fn(&mut NetworkServiceRequest)>;
    let ip_ctx = |ip: IpContext| {
        Box::new(move |r: &mut NetworkServiceRequest| {
            r.connection.as_mut().unwrap().context = Some(ConnectionContext {
                ip_context: Some(ip.clone()),
                ..Default::default()
            });
        }) as Edit
    };
    let prefs = |m: Vec<Mechanism>| {
        Box::new(move |r: &mut NetworkServiceRequest| r.mechanism_preferences = m.clone()) as Edit
    };
    let cases: Vec<(&str, Edit, Code)> = vec![
        (
            "no connection",
            Box::new(|r| r.connection = None),
            Code::InvalidArgument,
        ),
        (
            "no path",
            Box::new(|r| r.connection.as_mut().unwrap().path = None),
            Code::InvalidArgument,
        ),
        (
            "path index out of range",
            Box::new(|r| r.connection.as_mut().unwrap().path.as_mut().unwrap().index = 1),
            Code::InvalidArgument,
        ),
        (
            "segment id mismatch",
            Box::new(|r| {
                r.connection
                    .as_mut()
                    .unwrap()
                    .path
                    .as_mut()
                    .unwrap()
                    .path_segments[0]
                    .id = "other".into()
            }),
            Code::InvalidArgument,
        ),
        (
            "empty id",
            Box::new(|r| r.connection.as_mut().unwrap().id.clear()),
            Code::InvalidArgument,
        ),
        (
            "unknown mechanism type",
            prefs(vec![mech("TELEPATHY", &[])]),
            Code::InvalidArgument,
        ),
        (
            "no acceptable mechanism",
            prefs(vec![Mechanism {
                cls: "REMOTE".into(),
                ..mech("VXLAN", &[("vni", "7")])
            }]),
            Code::InvalidArgument,
        ),
        (
            "bad IP",
            ip_ctx(IpContext {
                src_ip_addrs: vec!["10.0.0.300/24".into()],
                ..Default::default()
            }),
            Code::InvalidArgument,
        ),
        (
            "bad prefix",
            ip_ctx(IpContext {
                src_routes: vec![Route {
                    prefix: "10.0.0.0/33".into(),
                    next_hop: String::new(),
                }],
                ..Default::default()
            }),
            Code::InvalidArgument,
        ),
        (
            "VNI out of range",
            prefs(vec![
                Mechanism {
                    cls: "REMOTE".into(),
                    ..mech("VXLAN", &[("vni", "16777216")])
                },
                mech("MEMIF", &[("inodeURL", NS)]),
            ]),
            Code::InvalidArgument,
        ),
        (
            "interface name longer than 15",
            prefs(vec![mech(
                "KERNEL",
                &[("inodeURL", NS), ("name", "nsm-0123456789ab")],
            )]),
            Code::InvalidArgument,
        ),
        (
            "namespace that does not exist",
            prefs(vec![mech(
                "KERNEL",
                &[("inodeURL", "file:///proc/0/ns/net")],
            )]),
            Code::NotFound,
        ),
        (
            "namespace URL that is not a file URL",
            prefs(vec![mech("MEMIF", &[("inodeURL", "/proc/self/ns/net")])]),
            Code::InvalidArgument,
        ),
        (
            "id longer than 48 bytes",
            Box::new(|r| {
                let id = "x".repeat(49);
                let c = r.connection.as_mut().unwrap();
                c.id = id.clone();
                c.path.as_mut().unwrap().path_segments[0].id = id;
            }),
            Code::InvalidArgument,
        ),
        (
            "unknown payload",
            Box::new(|r| r.connection.as_mut().unwrap().payload = "MPLS".into()),
            Code::InvalidArgument,
        ),
    ];
    for (what, edit, code) in cases {
        let mut req = memif_request("c1");
        edit(&mut req);
        let err = h.request(req).await.expect_err(what);
        assert_eq!(err.code(), code, "{what}: {err:?}");
        assert!(!err.message().is_empty(), "{what}");
        h.assert_no_state(what);
        assert_eq!(h.nse_requests(), 0, "{what}: the endpoint was asked");
    }
    // A bad refresh leaves the existing connection as it was.
    let answer = h.request(memif_request("c1")).await.unwrap();
    let created = h.dp.created();
    let mut bad = refresh_of(&answer, &[]);
    bad.connection.as_mut().unwrap().payload = "MPLS".into();
    assert_eq!(
        h.request(bad).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(h.dp.created(), created);
    assert_eq!(h.core.connection_count(), 1);
    assert!(h.dp.xc("nsm-c1-client").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_both_services_serving() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let h = harness(DEFAULT).await;
    let mut health = HealthClient::new(h.channel.clone());
    for service in [
        "networkservice.NetworkService",
        "connection.MonitorConnection",
    ] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "nope.Nope".into(),
        })
        .await;
    assert_eq!(unknown.unwrap_err().code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_removes_what_no_connection_owns() {
    let h = harness(Setup {
        stale_owner: Some("stale"),
        ..DEFAULT
    })
    .await;
    // The server reconciles before it serves: once a call is answered, it has.
    h.close(memif_request("x").connection.unwrap())
        .await
        .unwrap();
    assert!(h.dp.is_empty(), "{:?}", h.dp.st());
    assert_eq!(h.dp.removed(), ["nsm-stale-client"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_in_parallel_each_get_their_own_ports() {
    let h = Arc::new(harness(DEFAULT).await);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("p{i}");
            // Two Requests for one id at once: serialised, the second a refresh.
            let (a, b) = tokio::join!(h.request(memif_request(&id)), h.request(memif_request(&id)));
            let (a, b) = (a.unwrap(), b.unwrap());
            assert_eq!(
                segments(&a)[1],
                segments(&b)[1],
                "one Quiver segment per id"
            );
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(h.core.connection_count(), 16);
    assert_eq!(h.dp.st().ports.len(), 32);
    assert_eq!(h.dp.created().len(), 32, "a refresh rebuilt something");
}

// ---------------------------------------------------------------------------------------------
// The same Request/Close from an independent client: Python grpcio, with stubs generated from
// our .proto files by grpcio-tools at test time.

const PYTHON_CLIENT: &str = r#"
import importlib.resources, os, sys
out, protodir, sock = sys.argv[1:4]
from grpc_tools import protoc
include = str(importlib.resources.files("grpc_tools") / "_proto")
protos = [os.path.join(protodir, p) for p in
          ("connection.proto", "connectioncontext.proto", "networkservice.proto", "registry.proto")]
rc = protoc.main(["protoc", "-I" + protodir, "-I" + include, "--python_out=" + out,
                  "--grpc_python_out=" + out] + protos)
assert rc == 0, "protoc failed"
sys.path.insert(0, out)
import grpc
import connection_pb2, connection_pb2_grpc, networkservice_pb2, networkservice_pb2_grpc

# grpcio's defaults, as a user has them: it puts the (percent-encoded) socket path in
# :authority, which Quiver accepts on a unix socket.
channel = grpc.insecure_channel("unix://" + sock)
ns = networkservice_pb2_grpc.NetworkServiceStub(channel)
monitor = connection_pb2_grpc.MonitorConnectionStub(channel)

request = networkservice_pb2.NetworkServiceRequest(
    connection=connection_pb2.Connection(
        id="py-1", network_service="icmp", network_service_endpoint_name="nse-1",
        payload="ETHERNET",
        path=connection_pb2.Path(index=0, path_segments=[
            connection_pb2.PathSegment(name="nsc", id="py-1", token="py-token")])),
    mechanism_preferences=[connection_pb2.Mechanism(
        cls="LOCAL", type="MEMIF", parameters={"inodeURL": "file:///proc/self/ns/net"})])
conn = ns.Request(request, timeout=30)
assert conn.id == "py-1", conn
assert conn.state == connection_pb2.UP, conn
assert conn.path.index == 0, conn
names = [s.name for s in conn.path.path_segments]
assert names == ["nsc", "quiver", "nse"], names
assert conn.path.path_segments[1].token == "py-token", conn
assert conn.path.path_segments[1].expires.seconds > 0, conn
assert conn.mechanism.type == "MEMIF", conn
assert conn.mechanism.parameters["socketfile"] == "@quiver/py-1/memif.socket", conn

events = monitor.MonitorConnections(connection_pb2.MonitorScopeSelector(), timeout=30)
first = next(events)
assert first.type == connection_pb2.INITIAL_STATE_TRANSFER, first
own = conn.path.path_segments[1].id
assert list(first.connections.keys()) == [own], first

try:
    ns.Request(networkservice_pb2.NetworkServiceRequest(
        connection=connection_pb2.Connection(id="py-2")), timeout=30)
    sys.exit("a Request without a path was accepted")
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    assert "path" in e.details(), e.details()

ns.Close(conn, timeout=30)
deleted = next(events)
assert deleted.type == connection_pb2.DELETE and own in deleted.connections, deleted
ns.Close(conn, timeout=30)
events.cancel()
print("python client: ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpcio_client_requests_and_closes() {
    let venv = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("grpcio-venv");
    let python = match testkit::python_venv(&venv, &["grpcio", "grpcio-tools"]) {
        Ok(python) => python,
        Err(why) => {
            testkit::unavailable("python_grpcio_client_requests_and_closes", &why);
            return;
        }
    };
    let h = harness(DEFAULT).await;
    let stubs = tempfile::tempdir().unwrap();
    let script = stubs.path().join("client.py");
    std::fs::write(&script, PYTHON_CLIENT).unwrap();
    let proto = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto");
    let sock = h._dir.path().join("quiver.sock");
    let out = {
        let args = [
            script.display().to_string(),
            stubs.path().display().to_string(),
            proto.display().to_string(),
            sock.display().to_string(),
        ];
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(python)
                .args(args)
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    assert!(
        out.status.success(),
        "the Python client failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python client: ok"));
    // What Python asked for was built, then removed; the endpoint saw it all.
    assert_eq!(h.dp.created(), ["nsm-py-1-client", "nsm-py-1-endpoint"]);
    h.assert_no_state("after the Python client's Close");
    let order = h.nse_order();
    assert_eq!(order.len(), 3, "{order:?}");
    assert!(order[0].starts_with("request ") && order[1].starts_with("close "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_is_found_in_the_registry_and_quiver_registers_there() {
    let mut h = harness(Setup {
        registry: true,
        ..DEFAULT
    })
    .await;
    // Quiver registered itself: a p2p forwarder at its own socket.
    let mut registrations = h.registrations.take().unwrap();
    let me = tokio::time::timeout(Duration::from_secs(60), registrations.recv())
        .await
        .expect("no registration within 60 s")
        .unwrap();
    assert_eq!(me.name, "quiver");
    assert_eq!(me.network_service_names, ["forwarder"]);
    assert_eq!(me.network_service_labels["forwarder"].labels["p2p"], "true");
    // By fd (grpcfd): the inode of Quiver's socket.
    let socket = std::fs::metadata(h._dir.path().join("quiver.sock")).unwrap();
    let key = grpc_unix::InodeKey {
        dev: std::os::unix::fs::MetadataExt::dev(&socket),
        ino: std::os::unix::fs::MetadataExt::ino(&socket),
    };
    assert_eq!(me.url, key.to_string());

    // `nse-1` is in the registry: the Request reaches it.
    let answer = h.request(memif_request("c1")).await.unwrap();
    assert_eq!(segments(&answer)[2].0, "nse");
    assert_eq!(h.nse_requests(), 1);
    // An endpoint the registry does not know: NotFound, and the client side rolled back.
    let mut req = memif_request("c2");
    req.connection
        .as_mut()
        .unwrap()
        .network_service_endpoint_name = "nse-unknown".into();
    let err = h.request(req).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(h.dp.port("nsm-c2-client").is_none());
    assert_eq!(h.core.connection_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// Watching the next hop (the endpoint's MonitorConnections).

/// Polls `cond` until it holds; fails after 60 s (a deadline only so that a broken test fails
/// instead of hanging).
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Requests `id` (MEMIF) and waits until Quiver watches the endpoint for it: Quiver's answer
/// and its own segment id.
async fn watched(h: &Harness, id: &str) -> (Connection, String) {
    let before = h.nse_subscriptions();
    let answer = h.request(memif_request(id)).await.unwrap();
    until("Quiver watches the endpoint", || {
        h.nse_subscriptions() > before
    })
    .await;
    let own_id = segments(&answer)[1].1.clone();
    (answer, own_id)
}

/// The endpoint's side of Quiver's connection `own_id`, as the endpoint publishes it.
fn published_by_nse(h: &Harness, own_id: &str) -> Connection {
    h.nse_monitor
        .monitor
        .get(&format!("nse-{own_id}"))
        .expect("the endpoint published the connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_hop_closing_closes_the_connection_here_and_publishes_delete() {
    let h = harness(DEFAULT).await;
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    next_event(&mut events).await;
    let (_, own_id) = watched(&h, "c1").await;
    assert_eq!(
        next_event(&mut events).await.r#type,
        ConnectionEventType::Update as i32
    );
    // Quiver watches only its own connection: its segment, by name and id.
    assert_eq!(
        h.nse_monitor.subscribed.lock().unwrap()[0].path_segments,
        [PathSegment {
            name: "quiver".into(),
            id: own_id.clone(),
            ..Default::default()
        }]
    );
    assert_eq!(h.core.next_hop_stats().watches, 1);

    // The endpoint closes its side (it went away, or its own caller closed it).
    let gone = published_by_nse(&h, &own_id);
    h.nse_monitor.monitor.delete(&gone);

    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Delete as i32);
    assert!(ev.connections.contains_key(&own_id), "{ev:?}");
    h.assert_no_state("after the endpoint closed");
    assert!(h.dp.removed().contains(&"nsm-c1-client".to_string()));
    assert!(
        h.nse.lock().unwrap().closes.is_empty(),
        "no Close is sent to a next hop that closed already"
    );
    until("the watch ends", || h.core.next_hop_stats().watches == 0).await;
    assert_eq!(h.core.next_hop_stats().deletes, 1);
    // The connection can be Requested again.
    h.request(memif_request("c1")).await.unwrap();
    assert_eq!(h.core.connection_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_hop_down_is_published_down_and_nothing_is_torn_down() {
    let h = harness(DEFAULT).await;
    let (_, own_id) = watched(&h, "c1").await;
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    next_event(&mut events).await;
    let created = h.dp.created();

    let mut down = published_by_nse(&h, &own_id);
    down.state = State::Down as i32;
    h.nse_monitor.monitor.update(&down);
    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Update as i32);
    assert_eq!(ev.connections[&own_id].state, State::Down as i32);
    assert!(!h.core.summaries()[0].up);
    // Nothing was torn down or closed.
    assert_eq!(h.dp.created(), created);
    assert!(h.dp.removed().is_empty());
    assert_eq!(
        h.dp.xc("nsm-c1-client"),
        Some(Xc::L2("nsm-c1-endpoint".into()))
    );
    assert!(h.nse.lock().unwrap().closes.is_empty());

    // UP again from the next hop: UP again here.
    down.state = State::Up as i32;
    h.nse_monitor.monitor.update(&down);
    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Update as i32);
    assert_eq!(ev.connections[&own_id].state, State::Up as i32);
    assert_eq!(h.core.connection_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_next_hop_stream_tears_nothing_down_and_is_watched_again() {
    let h = harness(DEFAULT).await;
    let (_, own_id) = watched(&h, "c1").await;
    h.break_nse_streams();
    until("Quiver watches the endpoint again", || {
        h.nse_subscriptions() == 2
    })
    .await;
    assert!(h.core.next_hop_stats().retries >= 1);
    // Nothing torn down, nothing closed, still published UP.
    assert!(h.core.holds("c1").await);
    assert!(h.dp.removed().is_empty());
    assert_eq!(h.dp.owners().unwrap(), ["c1"]);
    assert!(h.nse.lock().unwrap().closes.is_empty());
    assert_eq!(
        h.core.monitor.get(&own_id).map(|c| c.state),
        Some(State::Up as i32)
    );
    assert_eq!(h.core.next_hop_stats().watches, 1);
    // The new stream is watched: a DELETE on it closes the connection.
    h.nse_monitor.monitor.delete(&published_by_nse(&h, &own_id));
    until("the connection is closed", || {
        h.core.connection_count() == 0
    })
    .await;
    h.assert_no_state("after the endpoint closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_connection_is_watched_until_it_is_closed() {
    let h = harness(DEFAULT).await;
    let (a, _) = watched(&h, "a").await;
    let (b, _) = watched(&h, "b").await;
    assert_eq!(h.core.next_hop_stats().watches, 2);
    // A refresh watches anew (one watch per generation): still one per connection.
    h.request(refresh_of(&a, &memif_request("a").mechanism_preferences))
        .await
        .unwrap();
    until("the refreshed connection is watched anew", || {
        h.nse_subscriptions() == 3 && h.core.next_hop_stats().watches == 2
    })
    .await;
    h.close(a).await.unwrap();
    until("a's watch ends", || h.core.next_hop_stats().watches == 1).await;
    h.close(b).await.unwrap();
    until("every watch ends", || h.core.next_hop_stats().watches == 0).await;
    h.assert_no_state("after both Closes");
    // One Close each toward the endpoint: its DELETEs that followed changed nothing.
    assert_eq!(h.nse.lock().unwrap().closes.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_of_an_older_generation_does_not_close_the_refreshed_connection() {
    let h = Arc::new(
        harness(Setup {
            gated: true,
            ..DEFAULT
        })
        .await,
    );
    let gate = h.gate.clone().unwrap();
    gate.add_permits(1);
    let (answer, own_id) = watched(&h, "c1").await;

    // A refresh, held at the endpoint: Quiver holds the connection's lock meanwhile.
    let refresh = {
        let h = h.clone();
        let req = refresh_of(&answer, &memif_request("c1").mechanism_preferences);
        tokio::spawn(async move { h.request(req).await })
    };
    until("the refresh reaches the endpoint", || {
        h.nse.lock().unwrap().gated == 2
    })
    .await;
    // The endpoint had closed the connection just before (the refresh makes it again): the
    // first generation's watch sees the DELETE and waits for the connection's lock.
    h.nse_monitor.monitor.delete(&published_by_nse(&h, &own_id));
    until("the old watch saw the DELETE", || {
        h.core.next_hop_stats().deletes == 1
    })
    .await;
    gate.add_permits(1);
    let again = refresh.await.unwrap().unwrap();
    assert_eq!(segments(&again), segments(&answer));
    // The old watch ends once it has had the lock and found a newer generation.
    until("the old watch ends", || {
        h.core.next_hop_stats().watches == 1
    })
    .await;
    assert!(
        h.core.holds("c1").await,
        "the refreshed connection was closed"
    );
    assert!(h.dp.removed().is_empty());
    assert_eq!(h.dp.owners().unwrap(), ["c1"]);
    assert_eq!(
        h.core.monitor.get(&own_id).map(|c| c.state),
        Some(State::Up as i32)
    );
    // The new generation is watched: a DELETE now closes it.
    until("the refreshed connection is watched", || {
        h.nse_subscriptions() == 2
    })
    .await;
    h.nse_monitor.monitor.delete(&published_by_nse(&h, &own_id));
    until("the connection is closed", || {
        h.core.connection_count() == 0
    })
    .await;
    h.assert_no_state("after the endpoint closed");
}

/// The next hop closes the connection after answering a refresh and before Quiver's watch of
/// the refreshed generation is subscribed: no DELETE reaches a watch, but the new stream's
/// first event lacks the connection, and that closes it here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_between_a_refresh_and_its_watch_still_closes_the_connection() {
    let h = harness(DEFAULT).await;
    let (answer, own_id) = watched(&h, "c1").await;
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    next_event(&mut events).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *h.nse_monitor.hold.lock().unwrap() = Some(gate.clone());
    h.request(refresh_of(
        &answer,
        &memif_request("c1").mechanism_preferences,
    ))
    .await
    .unwrap();
    assert_eq!(
        next_event(&mut events).await.r#type,
        ConnectionEventType::Update as i32
    );
    until("the refreshed generation's watch is subscribing", || {
        h.nse_monitor
            .waiting
            .load(std::sync::atomic::Ordering::SeqCst)
            == 1
    })
    .await;
    // The previous generation's watch has stopped; the endpoint closes its side now.
    until("one watch left", || h.core.next_hop_stats().watches == 1).await;
    h.nse_monitor.monitor.delete(&published_by_nse(&h, &own_id));
    assert!(h.core.holds("c1").await);
    gate.add_permits(1);

    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Delete as i32);
    assert!(ev.connections.contains_key(&own_id), "{ev:?}");
    until("the watch ends", || h.core.next_hop_stats().watches == 0).await;
    assert_eq!(h.core.next_hop_stats().deletes, 1);
    h.assert_no_state("after the endpoint closed");
    assert!(
        h.nse.lock().unwrap().closes.is_empty(),
        "no Close is sent to a next hop that closed already"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_hop_without_monitor_connections_is_not_watched() {
    let h = harness(Setup {
        nse_monitor: false,
        ..DEFAULT
    })
    .await;
    h.request(memif_request("c1")).await.unwrap();
    until("the watch gives up", || {
        h.core.next_hop_stats().watches == 0
    })
    .await;
    assert_eq!(h.core.next_hop_stats().retries, 0);
    assert_eq!(h.core.connection_count(), 1);
    assert!(h.dp.removed().is_empty());
}
