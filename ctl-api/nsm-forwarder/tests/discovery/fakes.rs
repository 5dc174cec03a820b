//! What the discovery tests run against: nsmgr's registry (network services and endpoints, as
//! NSM's registry matches Find queries), endpoints that accept or refuse, an in-memory data
//! path, and Quiver's NSM server over them, finding endpoints through that registry.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nsm_forwarder::dataplane::{KernelSpec, MemifSpec};
use nsm_forwarder::dial::dial;
use nsm_forwarder::path::timestamp;
use nsm_forwarder::server::bind;
use nsm_forwarder::{
    BackendError, Core, LinkEvents, NsmBackend, NsmConfig, NsmService, PortName, PortSpec,
    RegistryDiscovery,
};
use nsm_proto::connection::{Connection, Mechanism, Path, PathSegment};
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use nsm_proto::networkservice::network_service_server::{NetworkService, NetworkServiceServer};
use nsm_proto::networkservice::NetworkServiceRequest;
use nsm_proto::registry::network_service_endpoint_registry_server::{
    NetworkServiceEndpointRegistry, NetworkServiceEndpointRegistryServer,
};
use nsm_proto::registry::network_service_registry_server::{
    NetworkServiceRegistry, NetworkServiceRegistryServer,
};
use nsm_proto::registry::{
    NetworkServiceEndpoint, NetworkServiceEndpointQuery, NetworkServiceEndpointResponse,
    NetworkServiceLabels, NetworkServiceQuery, NetworkServiceResponse,
};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// The client's (and endpoints') namespace.
pub const NS: &str = "file:///proc/self/ns/net";

type Answers<T> = tokio_stream::Iter<std::vec::IntoIter<Result<T, Status>>>;

/// What the registry holds and was asked: `ns <name>` / `nse name=<n> services=<s,…>`.
#[derive(Default)]
pub struct RegistryState {
    pub services: Vec<nsm_proto::registry::NetworkService>,
    pub endpoints: Vec<NetworkServiceEndpoint>,
    /// Answers sent after the entries: a registry gone wrong.
    pub extra_endpoint_answers: Vec<Result<NetworkServiceEndpointResponse, Status>>,
    pub finds: Vec<String>,
}

/// nsmgr's registry: serves Find of services and endpoints as NSM's registry matches them
/// (sdk `matchutils.MatchNetworkServices` / `MatchNetworkServiceEndpoints`: empty query fields
/// match anything).
#[derive(Clone, Default)]
pub struct Registry(pub Arc<Mutex<RegistryState>>);

impl Registry {
    pub fn state(&self) -> std::sync::MutexGuard<'_, RegistryState> {
        self.0.lock().unwrap()
    }
    pub fn finds(&self) -> Vec<String> {
        self.state().finds.clone()
    }
}

#[tonic::async_trait]
impl NetworkServiceRegistry for Registry {
    async fn register(
        &self,
        r: Request<nsm_proto::registry::NetworkService>,
    ) -> Result<Response<nsm_proto::registry::NetworkService>, Status> {
        Ok(Response::new(r.into_inner()))
    }

    type FindStream = Answers<NetworkServiceResponse>;

    async fn find(
        &self,
        r: Request<NetworkServiceQuery>,
    ) -> Result<Response<Self::FindStream>, Status> {
        let q = r.into_inner().network_service.unwrap_or_default();
        let mut st = self.state();
        st.finds.push(format!("ns {}", q.name));
        let answers: Vec<_> = st
            .services
            .iter()
            .filter(|s| q.name.is_empty() || s.name == q.name)
            .filter(|s| q.payload.is_empty() || s.payload == q.payload)
            .map(|s| {
                Ok(NetworkServiceResponse {
                    network_service: Some(s.clone()),
                    deleted: false,
                })
            })
            .collect();
        Ok(Response::new(tokio_stream::iter(answers)))
    }

    async fn unregister(
        &self,
        _: Request<nsm_proto::registry::NetworkService>,
    ) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }
}

#[tonic::async_trait]
impl NetworkServiceEndpointRegistry for Registry {
    async fn register(
        &self,
        r: Request<NetworkServiceEndpoint>,
    ) -> Result<Response<NetworkServiceEndpoint>, Status> {
        Ok(Response::new(r.into_inner()))
    }

    type FindStream = Answers<NetworkServiceEndpointResponse>;

    async fn find(
        &self,
        r: Request<NetworkServiceEndpointQuery>,
    ) -> Result<Response<Self::FindStream>, Status> {
        let q = r.into_inner().network_service_endpoint.unwrap_or_default();
        let mut st = self.state();
        st.finds.push(format!(
            "nse name={} services={}",
            q.name,
            q.network_service_names.join(",")
        ));
        let mut answers: Vec<_> = st
            .endpoints
            .iter()
            .filter(|e| q.name.is_empty() || e.name == q.name)
            .filter(|e| {
                q.network_service_names
                    .iter()
                    .all(|s| e.network_service_names.contains(s))
            })
            .map(|e| {
                Ok(NetworkServiceEndpointResponse {
                    network_service_endpoint: Some(e.clone()),
                    deleted: false,
                })
            })
            .collect();
        answers.append(&mut st.extra_endpoint_answers);
        Ok(Response::new(tokio_stream::iter(answers)))
    }

    async fn unregister(&self, _: Request<NetworkServiceEndpoint>) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }
}

/// An endpoint `name` of `service` at `url` with `labels` for it, registered for a minute.
pub fn nse(
    name: &str,
    service: &str,
    url: &str,
    labels: &[(&str, &str)],
) -> NetworkServiceEndpoint {
    NetworkServiceEndpoint {
        name: name.into(),
        network_service_names: vec![service.into()],
        network_service_labels: HashMap::from([(
            service.to_string(),
            NetworkServiceLabels {
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
        )]),
        url: url.into(),
        expiration_time: Some(timestamp(SystemTime::now() + Duration::from_secs(60))),
        ..Default::default()
    }
}

/// What an endpoint saw: `request <conn id> name=<endpoint name> payload=<payload>` and
/// `close <conn id>`.
pub type NseLog = Arc<Mutex<Vec<String>>>;

/// An endpoint that answers with a memif, its name left out (or refuses every Request).
#[derive(Clone)]
pub struct Nse {
    pub name: String,
    pub refuse: bool,
    pub log: NseLog,
}

#[tonic::async_trait]
impl NetworkService for Nse {
    async fn request(
        &self,
        r: Request<NetworkServiceRequest>,
    ) -> Result<Response<Connection>, Status> {
        let mut conn = r.into_inner().connection.unwrap_or_default();
        self.log.lock().unwrap().push(format!(
            "request {} name={} payload={}",
            conn.id, conn.network_service_endpoint_name, conn.payload
        ));
        if self.refuse {
            return Err(Status::resource_exhausted(format!("{} is full", self.name)));
        }
        let path = conn.path.get_or_insert_with(Default::default);
        path.path_segments.truncate(path.index as usize + 1);
        path.path_segments.push(PathSegment {
            name: self.name.clone(),
            id: format!("{}-{}", self.name, conn.id),
            ..Default::default()
        });
        // An answer that does not repeat the endpoint's name: Quiver's answer must have it.
        conn.network_service_endpoint_name.clear();
        conn.mechanism = Some(Mechanism {
            cls: "LOCAL".into(),
            r#type: "MEMIF".into(),
            parameters: HashMap::from([
                ("inodeURL".to_string(), NS.to_string()),
                (
                    "socketfile".to_string(),
                    format!("@{}/{}", self.name, conn.id),
                ),
            ]),
        });
        Ok(Response::new(conn))
    }

    async fn close(&self, r: Request<Connection>) -> Result<Response<()>, Status> {
        let conn = r.into_inner();
        self.log.lock().unwrap().push(format!("close {}", conn.id));
        Ok(Response::new(()))
    }
}

/// The in-memory data path: ports and cross-connects by name, each with its owner.
#[derive(Default)]
pub struct FakeDp {
    pub ports: Mutex<BTreeMap<String, (String, PortSpec)>>,
    /// `l2` or `l3`, by the port it starts from.
    pub xcs: Mutex<BTreeMap<String, (String, &'static str)>>,
}

impl FakeDp {
    fn add(&self, owner: &str, spec: PortSpec) -> Result<(), BackendError> {
        let name = spec.name().0.clone();
        let mut ports = self.ports.lock().unwrap();
        if ports.contains_key(&name) {
            return Err(BackendError::Failed(format!("{name} exists")));
        }
        ports.insert(name, (owner.to_string(), spec));
        Ok(())
    }

    fn connect(&self, owner: &str, a: &PortName, b: &PortName, kind: &'static str) {
        let mut xcs = self.xcs.lock().unwrap();
        for p in [a, b] {
            xcs.insert(p.0.clone(), (owner.to_string(), kind));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ports.lock().unwrap().is_empty() && self.xcs.lock().unwrap().is_empty()
    }
}

impl NsmBackend for FakeDp {
    fn create_memif(&self, owner: &str, spec: &MemifSpec) -> Result<(), BackendError> {
        self.add(owner, PortSpec::Memif(spec.clone()))
    }
    fn create_kernel(&self, owner: &str, spec: &KernelSpec) -> Result<(), BackendError> {
        self.add(owner, PortSpec::Kernel(spec.clone()))
    }
    fn remove_port(&self, _: &str, port: &PortName) -> Result<(), BackendError> {
        self.xcs.lock().unwrap().remove(&port.0);
        self.ports.lock().unwrap().remove(&port.0);
        Ok(())
    }
    fn l2_cross_connect(&self, o: &str, a: &PortName, b: &PortName) -> Result<(), BackendError> {
        self.connect(o, a, b, "l2");
        Ok(())
    }
    fn l3_cross_connect(
        &self,
        o: &str,
        a: &PortName,
        b: &PortName,
        _: nsm_forwarder::L3NextHops,
        _: nsm_forwarder::L3NextHops,
    ) -> Result<(), BackendError> {
        self.connect(o, a, b, "l3");
        Ok(())
    }
    fn disconnect(&self, _: &str, port: &PortName) -> Result<(), BackendError> {
        self.xcs.lock().unwrap().remove(&port.0);
        Ok(())
    }
    fn remove_owned(&self, owner: &str) -> Result<(), BackendError> {
        self.ports.lock().unwrap().retain(|_, (o, _)| o != owner);
        self.xcs.lock().unwrap().retain(|_, (o, _)| o != owner);
        Ok(())
    }
    fn owners(&self) -> Result<Vec<String>, BackendError> {
        let mut owners: Vec<String> = self
            .ports
            .lock()
            .unwrap()
            .values()
            .map(|(o, _)| o.clone())
            .collect();
        owners.dedup();
        Ok(owners)
    }
    fn watch_links(&self, _: LinkEvents) {}
}

/// Quiver's NSM server over a [`FakeDp`], finding endpoints through a [`Registry`], with the
/// endpoints it knows.
pub struct World {
    pub dir: tempfile::TempDir,
    pub client: NetworkServiceClient<Channel>,
    pub core: Arc<Core>,
    pub dp: Arc<FakeDp>,
    pub registry: Registry,
    pub discovery: RegistryDiscovery,
    /// What each endpoint saw, by name.
    pub nses: HashMap<String, NseLog>,
    _stop: Vec<tokio::sync::oneshot::Sender<()>>,
}

/// Serves `router` on the unix socket `path` until the returned sender goes.
fn serve(
    path: &std::path::Path,
    router: tonic::transport::server::Router,
) -> tokio::sync::oneshot::Sender<()> {
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(router.serve_with_incoming_shutdown(
        tokio_stream::wrappers::UnixListenerStream::new(listener),
        async {
            let _ = rx.await;
        },
    ));
    tx
}

impl World {
    /// Quiver and an empty registry.
    pub async fn start() -> World {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::default();
        let reg_sock = dir.path().join("registry.sock");
        let router = tonic::transport::Server::builder()
            .add_service(NetworkServiceRegistryServer::new(registry.clone()))
            .add_service(NetworkServiceEndpointRegistryServer::new(registry.clone()));
        let mut stop = vec![serve(&reg_sock, router)];
        let sock = dir.path().join("quiver.sock");
        let cfg = NsmConfig {
            name: "quiver".into(),
            listen_on: format!("unix://{}", sock.display()),
            connect_to: format!("unix://{}", reg_sock.display()),
            ..NsmConfig::default()
        };
        let discovery = RegistryDiscovery {
            registry: cfg.connect_to.clone(),
            timeout: Duration::from_secs(10),
            identity: None,
            max_token_lifetime: Duration::from_secs(600),
        };
        let dp = Arc::new(FakeDp::default());
        let service = NsmService::new(cfg.clone(), dp.clone(), Arc::new(discovery.clone()));
        let core = service.core().clone();
        let listener = bind(&cfg.listen_on).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        stop.push(tx);
        tokio::spawn(service.serve_on(listener, async {
            let _ = rx.await;
        }));
        let channel = dial(&cfg.listen_on, Duration::from_secs(10)).await.unwrap();
        World {
            dir,
            client: NetworkServiceClient::new(channel),
            core,
            dp,
            registry,
            discovery,
            nses: HashMap::new(),
            _stop: stop,
        }
    }

    /// Starts endpoint `name` (refusing every Request if `refuse`); its URL.
    pub fn endpoint(&mut self, name: &str, refuse: bool) -> String {
        let path = self.dir.path().join(format!("{name}.sock"));
        let log = NseLog::default();
        let nse = Nse {
            name: name.into(),
            refuse,
            log: log.clone(),
        };
        let router =
            tonic::transport::Server::builder().add_service(NetworkServiceServer::new(nse));
        self._stop.push(serve(&path, router));
        self.nses.insert(name.into(), log);
        format!("unix://{}", path.display())
    }

    /// What endpoint `name` saw.
    pub fn seen(&self, name: &str) -> Vec<String> {
        self.nses[name].lock().unwrap().clone()
    }

    pub async fn request(&self, req: NetworkServiceRequest) -> Result<Connection, Status> {
        self.client
            .clone()
            .request(req)
            .await
            .map(|r| r.into_inner())
    }

    pub async fn close(&self, conn: Connection) -> Result<(), Status> {
        self.client
            .clone()
            .close(conn)
            .await
            .map(|r| r.into_inner())
    }

    /// Nothing is left: no port, no cross-connect, no connection, nothing published.
    pub fn assert_no_state(&self, what: &str) {
        assert!(
            self.dp.is_empty(),
            "{what}: the data path holds {:?}",
            self.dp.ports.lock().unwrap()
        );
        assert_eq!(self.core.connection_count(), 0, "{what}: connections left");
        assert!(
            self.core.monitor.is_empty(),
            "{what}: connections published"
        );
    }
}

/// A memif Request of connection `id` for network service `service`, naming no endpoint and
/// no payload (as nsmgr v1.18 sends it), with the connection's `labels`.
pub fn request(id: &str, service: &str, labels: &[(&str, &str)]) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            id: id.into(),
            network_service: service.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            path: Some(Path {
                index: 0,
                path_segments: vec![PathSegment {
                    name: "nsmgr".into(),
                    id: id.into(),
                    expires: Some(timestamp(SystemTime::now() + Duration::from_secs(3600))),
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

/// The request nsmgr sends to refresh: the connection as answered, the same preferences.
pub fn refresh_of(answer: &Connection, first: &NetworkServiceRequest) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(answer.clone()),
        mechanism_preferences: first.mechanism_preferences.clone(),
    }
}
