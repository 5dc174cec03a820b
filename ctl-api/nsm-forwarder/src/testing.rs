//! Helpers for tests and benchmarks that have no tokio runtime of their own: an endpoint (NSE)
//! that answers Requests with the mechanisms it is given, the nsmgrs between two nodes' forwarders
//! (a relay, MonitorConnections included), nsmgr's registry as a forwarder registers with, and a
//! blocking client of the forwarder. Each runs its own runtime on its own thread.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nsm_proto::connection::monitor_connection_client::MonitorConnectionClient;
use nsm_proto::connection::monitor_connection_server::{
    MonitorConnection, MonitorConnectionServer,
};
use nsm_proto::connection::{
    Connection, ConnectionEvent, Mechanism, MonitorScopeSelector, PathSegment,
};
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use nsm_proto::networkservice::network_service_server::{NetworkService, NetworkServiceServer};
use nsm_proto::networkservice::NetworkServiceRequest;
use nsm_proto::registry::network_service_endpoint_registry_server::{
    NetworkServiceEndpointRegistry, NetworkServiceEndpointRegistryServer,
};
use nsm_proto::registry::{
    NetworkServiceEndpoint, NetworkServiceEndpointQuery, NetworkServiceEndpointResponse,
};
use tonic::service::Routes;
use tonic::{Request, Response, Status, Streaming};

use crate::dial::dial;

/// What a [`TestEndpoint`] saw, in order.
#[derive(Debug, Default, Clone)]
pub struct EndpointLog {
    /// Every Request.
    pub requests: Vec<NetworkServiceRequest>,
    /// Every Close.
    pub closes: Vec<Connection>,
    /// Every MonitorConnections selector (a relay's).
    pub monitors: Vec<MonitorScopeSelector>,
}

/// How a [`TestEndpoint`] answers Requests: see [`TestEndpoint::set_behaviour`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EndpointBehaviour {
    /// With the first of its answers whose type was offered.
    #[default]
    Answer,
    /// Refuses every Request (`Unavailable`), as an endpoint going away does.
    Refuse,
    /// Waits this long, then answers: past the caller's deadline, an endpoint that times out.
    Stall(Duration),
}

#[derive(Clone)]
struct Nse {
    name: String,
    answers: Vec<Mechanism>,
    log: Arc<Mutex<EndpointLog>>,
    behaviour: Arc<Mutex<EndpointBehaviour>>,
    /// Pass the files of `file://` parameters by fd, named `inode://` (grpcfd).
    pass_fds: bool,
}

#[tonic::async_trait]
impl NetworkService for Nse {
    async fn request(
        &self,
        request: Request<NetworkServiceRequest>,
    ) -> Result<Response<Connection>, Status> {
        let sender =
            spiffe_identity::ConnectionInfo::from_request(&request).map(|c| c.sender.clone());
        let req = request.into_inner();
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .requests
            .push(req.clone());
        let behaviour = *self.behaviour.lock().unwrap_or_else(|e| e.into_inner());
        match behaviour {
            EndpointBehaviour::Answer => {}
            EndpointBehaviour::Refuse => {
                return Err(Status::unavailable(format!("{} refuses", self.name)))
            }
            EndpointBehaviour::Stall(d) => tokio::time::sleep(d).await,
        }
        let mut conn = req
            .connection
            .ok_or_else(|| Status::invalid_argument("no connection"))?;
        let path = conn
            .path
            .as_mut()
            .ok_or_else(|| Status::invalid_argument("no path"))?;
        let index = path.index as usize;
        if path
            .path_segments
            .get(index + 1)
            .is_none_or(|s| s.name != self.name)
        {
            path.path_segments.truncate(index + 1);
            path.path_segments.push(PathSegment {
                name: self.name.clone(),
                id: super::path::new_id(),
                ..Default::default()
            });
        }
        // The first offer this endpoint has an answer for.
        let answer = req
            .mechanism_preferences
            .iter()
            .find_map(|offer| self.answers.iter().find(|a| a.r#type == offer.r#type))
            .ok_or_else(|| Status::invalid_argument("no mechanism this endpoint serves"))?;
        let mut answer = answer.clone();
        if self.pass_fds {
            let sender = sender.ok_or_else(|| Status::internal("no fd-passing connection"))?;
            sender
                .rewrite_file_urls(&mut answer.parameters)
                .map_err(|e| Status::internal(format!("cannot pass a file: {e}")))?;
        }
        conn.mechanism = Some(answer);
        Ok(Response::new(conn))
    }

    async fn close(&self, request: Request<Connection>) -> Result<Response<()>, Status> {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closes
            .push(request.into_inner());
        Ok(Response::new(()))
    }
}

/// gRPC services served on a unix socket by a thread of its own, until dropped.
struct Served {
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    fn start(socket: &Path, routes: Routes) -> std::io::Result<Served> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let _ = std::fs::remove_file(socket);
        let listener = runtime.block_on(async { tokio::net::UnixListener::bind(socket) })?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            // Plaintext over fd-passing streams (grpcfd): handlers get the ConnectionInfo.
            let router = tonic::transport::Server::builder().add_routes(routes);
            let served = runtime.block_on(spiffe_identity::serve(router, listener, None, async {
                let _ = rx.await;
            }));
            if let Err(e) = served {
                tracing::error!(error = %e, "test service stopped");
            }
        });
        Ok(Served {
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An endpoint (NSE) on a unix socket: appends its segment named `name`, answers with the
/// first of `answers` whose type Quiver offered, records every call. Stops when dropped.
pub struct TestEndpoint {
    log: Arc<Mutex<EndpointLog>>,
    behaviour: Arc<Mutex<EndpointBehaviour>>,
    _served: Served,
}

impl TestEndpoint {
    /// Listens on `socket` (a path) and serves.
    pub fn start(socket: &Path, name: &str, answers: Vec<Mechanism>) -> std::io::Result<Self> {
        Self::start_with(socket, name, answers, false)
    }

    /// [`Self::start`], answering as NSM's grpcfd does: each `file:///path` parameter of the
    /// answer goes as the file's `inode://<dev>/<ino>`, its fd passed with the answer
    /// (`SCM_RIGHTS` on Quiver's connection). An `inode://` URL in `answers` goes as it is,
    /// with no fd.
    pub fn start_passing_fds(
        socket: &Path,
        name: &str,
        answers: Vec<Mechanism>,
    ) -> std::io::Result<Self> {
        Self::start_with(socket, name, answers, true)
    }

    fn start_with(
        socket: &Path,
        name: &str,
        answers: Vec<Mechanism>,
        pass_fds: bool,
    ) -> std::io::Result<Self> {
        let log = Arc::new(Mutex::new(EndpointLog::default()));
        let behaviour = Arc::new(Mutex::new(EndpointBehaviour::Answer));
        let nse = Nse {
            name: name.into(),
            answers,
            log: log.clone(),
            behaviour: behaviour.clone(),
            pass_fds,
        };
        Ok(TestEndpoint {
            log,
            behaviour,
            _served: Served::start(socket, Routes::new(NetworkServiceServer::new(nse)))?,
        })
    }

    /// What it saw so far.
    pub fn log(&self) -> EndpointLog {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What it saw since the last call (or since it started), the log emptied: a long run
    /// reads it as it goes instead of keeping every call.
    pub fn take_log(&self) -> EndpointLog {
        std::mem::take(&mut *self.log.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// How it answers the Requests that come from now on (ones already waiting keep theirs).
    pub fn set_behaviour(&self, behaviour: EndpointBehaviour) {
        *self.behaviour.lock().unwrap_or_else(|e| e.into_inner()) = behaviour;
    }
}

#[derive(Clone)]
struct Relay {
    next: String,
    log: Arc<Mutex<EndpointLog>>,
}

impl Relay {
    async fn client(&self) -> Result<NetworkServiceClient<tonic::transport::Channel>, Status> {
        Ok(NetworkServiceClient::new(
            dial(&self.next, Duration::from_secs(5)).await?,
        ))
    }
}

#[tonic::async_trait]
impl NetworkService for Relay {
    async fn request(
        &self,
        request: Request<NetworkServiceRequest>,
    ) -> Result<Response<Connection>, Status> {
        let mut req = request.into_inner();
        // The endpoint is behind another nsmgr: only mechanisms between nodes go on.
        req.mechanism_preferences
            .retain(|m| m.cls == super::mechanism::REMOTE);
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .requests
            .push(req.clone());
        self.client().await?.request(req).await
    }

    async fn close(&self, request: Request<Connection>) -> Result<Response<()>, Status> {
        let conn = request.into_inner();
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closes
            .push(conn.clone());
        self.client().await?.close(conn).await
    }
}

#[tonic::async_trait]
impl MonitorConnection for Relay {
    type MonitorConnectionsStream = Streaming<ConnectionEvent>;

    async fn monitor_connections(
        &self,
        request: Request<MonitorScopeSelector>,
    ) -> Result<Response<Self::MonitorConnectionsStream>, Status> {
        let selector = request.into_inner();
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .monitors
            .push(selector.clone());
        let channel = dial(&self.next, Duration::from_secs(5)).await?;
        MonitorConnectionClient::new(channel)
            .monitor_connections(selector)
            .await
    }
}

/// The nsmgrs between two forwarders on different nodes, for tests: relays Request, Close and
/// MonitorConnections to `next` (the other node's forwarder), keeping only the REMOTE mechanism
/// preferences, as nsmgr does for an endpoint registered behind another nsmgr. Records what it
/// relayed. Stops when dropped.
pub struct TestNsmgr {
    log: Arc<Mutex<EndpointLog>>,
    _served: Served,
}

impl TestNsmgr {
    /// Listens on `socket` (a path) and relays to `next` (`unix:///path`).
    pub fn start(socket: &Path, next: &str) -> std::io::Result<Self> {
        let log = Arc::new(Mutex::new(EndpointLog::default()));
        let relay = Relay {
            next: next.into(),
            log: log.clone(),
        };
        let routes = Routes::new(NetworkServiceServer::new(relay.clone()))
            .add_service(MonitorConnectionServer::new(relay));
        Ok(TestNsmgr {
            log,
            _served: Served::start(socket, routes)?,
        })
    }

    /// What it relayed so far.
    pub fn log(&self) -> EndpointLog {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A blocking client of the forwarder's NetworkService.
pub struct BlockingClient {
    runtime: tokio::runtime::Runtime,
    channel: tonic::transport::Channel,
    client: NetworkServiceClient<tonic::transport::Channel>,
}

impl BlockingClient {
    /// Dials `url` (`unix:///path`).
    pub fn connect(url: &str) -> Result<BlockingClient, Status> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Status::internal(e.to_string()))?;
        let channel = runtime.block_on(dial(url, Duration::from_secs(10)))?;
        Ok(BlockingClient {
            runtime,
            client: NetworkServiceClient::new(channel.clone()),
            channel,
        })
    }

    /// `Request`.
    pub fn request(&mut self, req: NetworkServiceRequest) -> Result<Connection, Status> {
        let mut c = self.client.clone();
        self.runtime
            .block_on(c.request(req))
            .map(|r| r.into_inner())
    }

    /// `Request` with a deadline (`grpc-timeout`, as NSM's clients send their Requests):
    /// `DeadlineExceeded` when no answer came `within` it.
    pub fn request_within(
        &mut self,
        req: NetworkServiceRequest,
        within: Duration,
    ) -> Result<Connection, Status> {
        let mut c = self.client.clone();
        let mut req = Request::new(req);
        req.set_timeout(within);
        self.runtime
            .block_on(async { tokio::time::timeout(within, c.request(req)).await })
            .map_err(|_| Status::deadline_exceeded(format!("no answer within {within:?}")))?
            .map(|r| r.into_inner())
    }

    /// `Close`.
    pub fn close(&mut self, conn: Connection) -> Result<(), Status> {
        let mut c = self.client.clone();
        self.runtime.block_on(c.close(conn)).map(|r| r.into_inner())
    }

    /// `MonitorConnections` of the forwarder: read it with [`BlockingClient::next_event`].
    pub fn monitor(
        &mut self,
        selector: MonitorScopeSelector,
    ) -> Result<Streaming<ConnectionEvent>, Status> {
        let mut m = MonitorConnectionClient::new(self.channel.clone());
        self.runtime
            .block_on(m.monitor_connections(selector))
            .map(|r| r.into_inner())
    }

    /// The next event of `events`, waiting at most `within`; `None` if none came or the
    /// stream ended.
    pub fn next_event(
        &mut self,
        events: &mut Streaming<ConnectionEvent>,
        within: Duration,
    ) -> Result<Option<ConnectionEvent>, Status> {
        // The timer is made inside the runtime.
        match self
            .runtime
            .block_on(async { tokio::time::timeout(within, events.message()).await })
        {
            Ok(r) => r,
            Err(_) => Ok(None),
        }
    }
}

/// What a [`TestRegistry`] was asked, in order: `register <name> path=<path>` and
/// `unregister <name> path=<path>`, the registry path (gRPC metadata `path`) as it came.
pub type RegistryLog = Arc<Mutex<Vec<String>>>;

/// The endpoints a [`TestRegistry`] finds by name: name → URL.
type EndpointTable = Arc<Mutex<std::collections::HashMap<String, String>>>;

#[derive(Clone)]
struct Registry {
    log: RegistryLog,
    endpoints: EndpointTable,
    expiry: Duration,
    /// Registrations answered so far: each answer's path has a new token, as nsmgr's has.
    answered: Arc<std::sync::atomic::AtomicU32>,
    /// The registration (counted from 0) whose answer waits for [`TestRegistry::release`].
    held: Option<u32>,
    release: Arc<tokio::sync::Notify>,
}

/// The registry path a call carried, or why nsmgr would refuse the call.
fn path_of<T>(request: &Request<T>) -> Result<String, Status> {
    let refused = || Status::permission_denied("no sufficient privileges (no registry path)");
    let path = request
        .metadata()
        .get("path")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(refused)?;
    // As nsmgr's grpcmetadata reads it: JSON with Index and PathSegments.
    let ok =
        path.starts_with('{') && path.contains("\"Index\"") && path.contains("\"PathSegments\"");
    ok.then(|| path.to_string()).ok_or_else(refused)
}

#[tonic::async_trait]
impl NetworkServiceEndpointRegistry for Registry {
    async fn register(
        &self,
        request: Request<NetworkServiceEndpoint>,
    ) -> Result<Response<NetworkServiceEndpoint>, Status> {
        let path = path_of(&request)?;
        let mut nse = request.into_inner();
        self.note(format!("register {} path={path}", nse.name));
        let expires = std::time::SystemTime::now() + self.expiry;
        nse.expiration_time = Some(prost_types::Timestamp::from(expires));
        // The path as nsmgr sends it back: the caller's segment and nsmgr's.
        let n = self
            .answered
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.held == Some(n) {
            self.release.notified().await;
        }
        let back = format!(
            r#"{{"Index":1,"PathSegments":[{{"token":"caller-{n}"}},{{"token":"nsmgr-{n}"}}]}}"#
        );
        let mut answer = Response::new(nse);
        if let Ok(v) = tonic::metadata::MetadataValue::try_from(back) {
            answer.metadata_mut().insert("path", v);
        }
        Ok(answer)
    }

    type FindStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<NetworkServiceEndpointResponse, Status>> + Send>,
    >;

    async fn find(
        &self,
        request: Request<NetworkServiceEndpointQuery>,
    ) -> Result<Response<Self::FindStream>, Status> {
        let query = request.into_inner();
        let watch = query.watch;
        let name = query
            .network_service_endpoint
            .map(|e| e.name)
            .unwrap_or_default();
        let url = self
            .endpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&name)
            .cloned();
        // An endpoint added by name is found by name; a watch gets it, then stays open, as
        // nsmgr's does (nsmgr ends a watch only when the registry behind it goes).
        let found: Vec<_> = url
            .filter(|_| !name.is_empty())
            .map(|url| {
                Ok(NetworkServiceEndpointResponse {
                    network_service_endpoint: Some(NetworkServiceEndpoint {
                        name: name.clone(),
                        url,
                        ..Default::default()
                    }),
                    deleted: false,
                })
            })
            .into_iter()
            .collect();
        let found = tokio_stream::iter(found);
        Ok(Response::new(if watch {
            Box::pin(tokio_stream::StreamExt::chain(
                found,
                tokio_stream::pending(),
            ))
        } else {
            Box::pin(found)
        }))
    }

    async fn unregister(
        &self,
        request: Request<NetworkServiceEndpoint>,
    ) -> Result<Response<()>, Status> {
        let path = path_of(&request)?;
        self.note(format!(
            "unregister {} path={path}",
            request.into_inner().name
        ));
        Ok(Response::new(()))
    }
}

impl Registry {
    fn note(&self, what: String) {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
    }
}

/// nsmgr's registry as a forwarder sees it, for tests: refuses a Register or Unregister that
/// carries no registry path (`PermissionDenied`, as nsmgr's authorization does), answers a
/// registration with an expiry and with a new path in its `path` header, records each call,
/// finds by name the endpoints given to [`TestRegistry::add_endpoint`] and nothing else, and
/// keeps a watch open.
/// Stops when dropped.
pub struct TestRegistry {
    log: RegistryLog,
    endpoints: EndpointTable,
    release: Arc<tokio::sync::Notify>,
    _served: Served,
}

impl TestRegistry {
    /// Listens on `socket` (a path) and serves, granting registrations a minute.
    pub fn start(socket: &Path) -> std::io::Result<Self> {
        Self::start_granting(socket, Duration::from_secs(60))
    }

    /// [`TestRegistry::start`], granting registrations `expiry` (a forwarder registers again
    /// at 2/3 of it).
    pub fn start_granting(socket: &Path, expiry: Duration) -> std::io::Result<Self> {
        Self::serve(socket, expiry, None)
    }

    /// [`TestRegistry::start_granting`], holding the answer to registration `held` (counted
    /// from 0; it is logged when it comes) until [`TestRegistry::release`]: a Register in flight
    /// for as long as a test needs.
    pub fn start_holding(socket: &Path, expiry: Duration, held: u32) -> std::io::Result<Self> {
        Self::serve(socket, expiry, Some(held))
    }

    /// Lets the held registration be answered.
    pub fn release(&self) {
        self.release.notify_one();
    }

    fn serve(socket: &Path, expiry: Duration, held: Option<u32>) -> std::io::Result<Self> {
        let log = RegistryLog::default();
        let release = Arc::new(tokio::sync::Notify::new());
        let endpoints = EndpointTable::default();
        let registry = Registry {
            log: log.clone(),
            endpoints: endpoints.clone(),
            expiry,
            answered: Arc::default(),
            held,
            release: release.clone(),
        };
        Ok(TestRegistry {
            log,
            endpoints,
            release,
            _served: Served::start(
                socket,
                Routes::new(NetworkServiceEndpointRegistryServer::new(registry)),
            )?,
        })
    }

    /// What it was asked so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// From now on a `Find` of the endpoint `name` answers it at `url` (`unix:///path`), as
    /// nsmgr's registry does for a registered endpoint.
    pub fn add_endpoint(&self, name: &str, url: &str) {
        self.endpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.into(), url.into());
    }
}
