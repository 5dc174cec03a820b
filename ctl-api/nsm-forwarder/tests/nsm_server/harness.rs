//! The harness: a Quiver NSM server over the fake data path, the endpoint, a client; requests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nsm_forwarder::dataplane::{MemifRole, MemifSpec};
use nsm_forwarder::dial::dial;
use nsm_forwarder::fds::HeldFds;
use nsm_forwarder::path::timestamp;
use nsm_forwarder::server::bind;
use nsm_forwarder::{
    Core, NsmConfig, NsmService, PortName, PortSpec, RegistryDiscovery, StaticEndpoint,
};
use nsm_proto::connection::monitor_connection_client::MonitorConnectionClient;
use nsm_proto::connection::monitor_connection_server::MonitorConnectionServer;
use nsm_proto::connection::{
    Connection, ConnectionEvent, Mechanism, MonitorScopeSelector, Path, PathSegment,
};
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use nsm_proto::networkservice::network_service_server::NetworkServiceServer;
use nsm_proto::networkservice::NetworkServiceRequest;
use nsm_proto::registry::network_service_endpoint_registry_server::NetworkServiceEndpointRegistryServer;
use nsm_proto::registry::NetworkServiceEndpoint;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};

use crate::fake_dataplane::*;
use crate::fake_endpoint::*;

pub(crate) struct Harness {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) client: NetworkServiceClient<Channel>,
    pub(crate) channel: Channel,
    pub(crate) dp: Arc<FakeDp>,
    pub(crate) nse: Arc<Mutex<NseLog>>,
    /// The endpoint's MonitorConnections.
    pub(crate) nse_monitor: NseMonitor,
    /// The endpoint's Requests' gate, with `Setup::gated`.
    pub(crate) gate: Option<Arc<tokio::sync::Semaphore>>,
    pub(crate) core: Arc<Core>,
    /// The fds clients passed that connections hold.
    pub(crate) fds: HeldFds,
    pub(crate) registrations: Option<tokio::sync::mpsc::UnboundedReceiver<NetworkServiceEndpoint>>,
    pub(crate) _stop: Vec<tokio::sync::oneshot::Sender<()>>,
}

pub(crate) struct Setup {
    pub(crate) endpoint_reachable: bool,
    pub(crate) refuse: Option<Code>,
    pub(crate) stale_owner: Option<&'static str>,
    /// Find the endpoint through a registry (which knows `nse-1`), and register there.
    pub(crate) registry: bool,
    /// The endpoint serves MonitorConnections.
    pub(crate) nse_monitor: bool,
    /// Each endpoint Request waits for a permit of `Harness::gate`.
    pub(crate) gated: bool,
}

pub(crate) const DEFAULT: Setup = Setup {
    endpoint_reachable: true,
    refuse: None,
    stale_owner: None,
    registry: false,
    nse_monitor: true,
    gated: false,
};

/// A Quiver NSM server as `setup` says, over the fake data path, with its endpoint and a client.
pub(crate) async fn harness(setup: Setup) -> Harness {
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
        stop.push(serve_endpoint(
            &nse_sock,
            nse,
            nse_monitor.clone(),
            setup.nse_monitor,
        ));
    }
    let dp = data_path(setup.stale_owner);
    let sock = dir.path().join("quiver.sock");
    let mut cfg = NsmConfig {
        name: "quiver".into(),
        listen_on: format!("unix://{}", sock.display()),
        ..NsmConfig::default()
    };
    let nse_url = format!("unix://{}", nse_sock.display());
    let mut registrations = None;
    let discovery: Arc<dyn nsm_forwarder::EndpointDiscovery> = if setup.registry {
        let (discovery, rx) = registry(dir.path(), nse_url, &mut cfg, &mut stop);
        registrations = Some(rx);
        discovery
    } else {
        Arc::new(StaticEndpoint(nse_url))
    };
    let service = NsmService::new(cfg.clone(), dp.clone(), discovery);
    let core = service.core().clone();
    let fds = service.held_fds().clone();
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
        fds,
        registrations,
        _stop: stop,
    }
}

/// Serves the endpoint `nse` (with its MonitorConnections when `monitor`) on `socket`, until
/// the returned sender goes.
fn serve_endpoint(
    socket: &std::path::Path,
    nse: FakeNse,
    nse_monitor: NseMonitor,
    monitor: bool,
) -> tokio::sync::oneshot::Sender<()> {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(NetworkServiceServer::new(nse))
            .add_optional_service(monitor.then(|| MonitorConnectionServer::new(nse_monitor)))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                async {
                    let _ = rx.await;
                },
            ),
    );
    tx
}

/// The data path, holding a port of `stale_owner` (a previous run's) if there is one.
fn data_path(stale_owner: Option<&str>) -> Arc<FakeDp> {
    let dp = Arc::new(FakeDp::default());
    if let Some(owner) = stale_owner {
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
    dp
}

/// A registry in `dir` that knows `nse-1` at `nse_url` (until a sender pushed on `stop` goes),
/// `cfg` set to register there; the discovery through it and what it sees registered.
fn registry(
    dir: &std::path::Path,
    nse_url: String,
    cfg: &mut NsmConfig,
    stop: &mut Vec<tokio::sync::oneshot::Sender<()>>,
) -> (
    Arc<dyn nsm_forwarder::EndpointDiscovery>,
    tokio::sync::mpsc::UnboundedReceiver<NetworkServiceEndpoint>,
) {
    let reg_sock = dir.join("registry.sock");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
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
    let discovery = Arc::new(RegistryDiscovery {
        registry: cfg.connect_to.clone(),
        timeout: Duration::from_secs(10),
        identity: None,
        max_token_lifetime: spiffe_identity::tokens::DEFAULT_MAX_TOKEN_LIFETIME,
    });
    (discovery, rx)
}

impl Harness {
    pub(crate) async fn request(&self, req: NetworkServiceRequest) -> Result<Connection, Status> {
        self.client
            .clone()
            .request(req)
            .await
            .map(|r| r.into_inner())
    }
    pub(crate) async fn close(&self, conn: Connection) -> Result<(), Status> {
        self.client
            .clone()
            .close(conn)
            .await
            .map(|r| r.into_inner())
    }
    pub(crate) async fn monitor(
        &self,
        selector: MonitorScopeSelector,
    ) -> Streaming<ConnectionEvent> {
        MonitorConnectionClient::new(self.channel.clone())
            .monitor_connections(selector)
            .await
            .unwrap()
            .into_inner()
    }
    pub(crate) fn nse_requests(&self) -> usize {
        self.nse.lock().unwrap().requests.len()
    }
    pub(crate) fn nse_order(&self) -> Vec<String> {
        self.nse.lock().unwrap().order.clone()
    }
    /// How many MonitorConnections streams the endpoint opened.
    pub(crate) fn nse_subscriptions(&self) -> usize {
        self.nse_monitor.subscribed.lock().unwrap().len()
    }
    /// Cuts every MonitorConnections stream of the endpoint (as a restart would).
    pub(crate) fn break_nse_streams(&self) {
        self.nse_monitor.breaks.send_modify(|n| *n += 1);
    }
    /// Nothing is left: no port, no cross-connect, no connection, nothing published.
    pub(crate) fn assert_no_state(&self, what: &str) {
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

pub(crate) async fn next_event(s: &mut Streaming<ConnectionEvent>) -> ConnectionEvent {
    // A deadline only so that a missing event fails the test instead of hanging it.
    tokio::time::timeout(Duration::from_secs(60), s.next())
        .await
        .expect("no event within 60 s")
        .expect("stream ended")
        .expect("stream error")
}

pub(crate) fn mech(ty: &str, params: &[(&str, &str)]) -> Mechanism {
    Mechanism {
        cls: "LOCAL".into(),
        r#type: ty.into(),
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

pub(crate) fn request(id: &str, payload: &str, prefs: Vec<Mechanism>) -> NetworkServiceRequest {
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

pub(crate) fn memif_request(id: &str) -> NetworkServiceRequest {
    request(id, "ETHERNET", vec![mech("MEMIF", &[("inodeURL", NS)])])
}

pub(crate) fn kernel_request(id: &str, name: &str) -> NetworkServiceRequest {
    request(
        id,
        "ETHERNET",
        vec![mech("KERNEL", &[("inodeURL", NS), ("name", name)])],
    )
}

/// The request nsmgr sends to refresh: the connection as answered, the same preferences.
pub(crate) fn refresh_of(answer: &Connection, prefs: &[Mechanism]) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(answer.clone()),
        mechanism_preferences: prefs.to_vec(),
    }
}

pub(crate) fn segments(c: &Connection) -> Vec<(String, String)> {
    c.path
        .as_ref()
        .unwrap()
        .path_segments
        .iter()
        .map(|s| (s.name.clone(), s.id.clone()))
        .collect()
}
