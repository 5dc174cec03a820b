//! The gRPC side: `networkservice.NetworkService`, `connection.MonitorConnection` and
//! `grpc.health.v1.Health` on a unix socket or a TCP address (`NSM_LISTEN_ON`): with SPIFFE
//! mTLS when the configuration has an identity (each Request/Close's path token checked against
//! the TLS peer first, see [`crate::secure`]), in plaintext otherwise, which only a unix socket
//! is served in (a `tcp://` address without an identity refuses to start).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use grpc_unix::MessageLimit;
use nsm_proto::connection::monitor_connection_server::{
    MonitorConnection, MonitorConnectionServer,
};
use nsm_proto::connection::{Connection, ConnectionEventType, MonitorScopeSelector};
use nsm_proto::networkservice::network_service_server::{NetworkService, NetworkServiceServer};
use nsm_proto::networkservice::NetworkServiceRequest;
use spiffe_identity::{Listener, SpiffeError};
use tokio::net::{TcpListener, UnixListener};
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

use crate::config::NsmConfig;
use crate::connect::Core;
use crate::dataplane::{LinkEvents, NsmBackend};
use crate::endpoint::{EndpointDiscovery, RegistryDiscovery};
use crate::fds::HeldFds;
use crate::limits::{self, MAX_MESSAGE_SIZE};
use crate::monitor::EventStream;
use crate::telemetry::{self, Telemetry};
use crate::{registration, secure, validate};

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// `NSM_LISTEN_ON` is neither `unix:///path` nor `tcp://host:port`.
    #[error("cannot listen on {0:?}: expected unix:///path or tcp://host:port")]
    BadListenUrl(String),
    /// `NSM_LISTEN_ON` is a TCP address and there is no SPIFFE identity: Quiver does not serve
    /// plaintext off the host.
    #[error(
        "refusing to listen on {0:?} without TLS: plaintext is only for unix sockets; a tcp:// \
         NSM_LISTEN_ON needs a SPIFFE identity (set SPIFFE_ENDPOINT_SOCKET) and is served with \
         mTLS"
    )]
    PlaintextTcp(String),
    /// The SPIFFE identity could not be had, or TLS could not be set up with it.
    #[error("SPIFFE: {0}")]
    Spiffe(#[from] SpiffeError),
    /// The socket could not be bound.
    #[error("cannot listen on {path}: {source}")]
    Bind {
        /// The socket path, or TCP address.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Startup reconciliation failed.
    #[error("cannot remove what a previous run left: {0}")]
    Reconcile(Status),
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// The NSM forwarder's gRPC services, over a [`Core`].
#[derive(Clone)]
pub struct NsmService {
    core: Arc<Core>,
    /// The fds clients passed that connections use (grpcfd).
    fds: HeldFds,
    /// Spans of Request and Close (`TELEMETRY=true`); `None` costs one branch per call.
    telemetry: Option<Arc<Telemetry>>,
}

impl NsmService {
    /// The services over a new core; starts watching the data path's link events, and with
    /// `TELEMETRY` the exporter of spans and of the path segment's metrics (call within a
    /// tokio runtime; telemetry that cannot start is logged and left off).
    pub fn new(
        cfg: NsmConfig,
        dp: Arc<dyn NsmBackend>,
        discovery: Arc<dyn EndpointDiscovery>,
    ) -> NsmService {
        let core = Arc::new(Core::new(cfg, dp.clone(), discovery));
        let telemetry = core.cfg.telemetry.then(|| start_telemetry(&core)).flatten();
        let (events, mut rx) = LinkEvents::channel();
        dp.watch_links(events);
        let weak = Arc::downgrade(&core);
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let Some(core) = weak.upgrade() else { break };
                core.link_changed(ev).await;
            }
        });
        let fds = HeldFds::default();
        sweep_after_deletes(&fds, Arc::downgrade(&core));
        NsmService {
            core,
            fds,
            telemetry,
        }
    }

    /// The passed fds connections hold (grpcfd; for tests).
    pub fn held_fds(&self) -> &HeldFds {
        &self.fds
    }

    /// The state behind the services (for tests and the admin API).
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Removes what no connection owns, registers with nsmgr (when configured), then serves on
    /// `listener` (a unix socket, or a TCP address, which needs an identity) until `shutdown`
    /// completes.
    pub async fn serve_on(
        self,
        listener: impl Into<Listener>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let listener = listener.into();
        if let (Listener::Tcp(_), None) = (&listener, &self.core.cfg.identity) {
            let url = listener.url().unwrap_or_else(|_| "tcp://".into());
            return Err(ServeError::PlaintextTcp(url));
        }
        if self.core.cfg.register {
            let cfg = self.core.cfg.clone();
            let path = registration::RegistryPath::default();
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let mut registration = tokio::spawn(registration::keep_registered(
                cfg.clone(),
                path.clone(),
                stopped,
            ));
            // Stops with the server, even when this future is dropped.
            let abort = AbortOnDrop(registration.abort_handle());
            let served = self.serve_inner(listener, shutdown).await;
            // Nothing should be sent here any more: leave the registry, after a Register in
            // flight (bounded by its own deadline) so that the Unregister comes after it.
            tracing::info!(
                registry = cfg.connect_to,
                "leaving nsmgr's registry (after a Register in flight)"
            );
            let _ = stop.send(true);
            let registering = cfg.dial_timeout * 5;
            if tokio::time::timeout(registering, &mut registration)
                .await
                .is_err()
            {
                tracing::warn!(
                    registry = cfg.connect_to,
                    "a Register did not end: unregistering anyway"
                );
            }
            drop(abort);
            registration::unregister(&cfg, &path).await;
            return served;
        }
        self.serve_inner(listener, shutdown).await
    }

    async fn serve_inner(
        self,
        listener: Listener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        if self.core.cfg.reconcile_at_start {
            let removed = self.core.reconcile().await.map_err(ServeError::Reconcile)?;
            if removed > 0 {
                tracing::info!(
                    removed,
                    "removed the objects of connections a previous run left"
                );
            }
        }
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_serving::<NetworkServiceServer<NsmService>>()
            .await;
        health
            .set_serving::<MonitorConnectionServer<NsmService>>()
            .await;
        let identity = self.core.cfg.identity.clone();
        match &identity {
            Some(identity) => tracing::info!(
                spiffe_id = %identity.spiffe_id(),
                "NSM services use SPIFFE mTLS: clients must present an SVID, path tokens are \
                 checked and minted"
            ),
            None => tracing::warn!(
                "NSM services run in PLAINTEXT (no SPIFFE identity, SPIFFE_ENDPOINT_SOCKET not \
                 set): unix sockets only, path tokens passed on unchecked"
            ),
        }
        let every = self.core.cfg.metrics_export_interval;
        // Stops with the server, even when this future is dropped.
        let _metrics = (!every.is_zero()).then(|| {
            let task = tokio::spawn(crate::connect::metrics::refresh_every(
                Arc::downgrade(&self.core),
                every,
            ));
            AbortOnDrop(task.abort_handle())
        });
        let core = self.core.clone();
        let telemetry = self.telemetry.clone();
        // Explicit message limits (see `limits`): a request over them is RESOURCE_EXHAUSTED.
        let network_service = NetworkServiceServer::new(self.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        let monitor = MonitorConnectionServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        let router = tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(MessageLimit(network_service))
            .add_service(MessageLimit(monitor));
        // At the stop: MonitorConnections streams end (nsmgr keeps one open for good), calls
        // in progress get STOP_GRACE to finish, then the server is dropped with them.
        let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
        let signal = async move {
            shutdown.await;
            core.monitor.close();
            let _ = stopping.send(());
        };
        let serve = spiffe_identity::serve(router, listener, identity.as_ref(), signal);
        tokio::pin!(serve);
        let deadline = async move {
            match stopped.await {
                Ok(()) => tokio::time::sleep(STOP_GRACE).await,
                Err(_) => std::future::pending().await,
            }
        };
        let served = tokio::select! {
            served = &mut serve => served.map_err(ServeError::from),
            () = deadline => {
                tracing::warn!(
                    grace = ?STOP_GRACE,
                    "NSM calls still open after the stop's grace period: closing them"
                );
                Ok(())
            }
        };
        // The last calls' spans, while the runtime that carries their export still runs.
        if let Some(t) = telemetry {
            let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
        }
        served
    }

    /// Binds `NSM_LISTEN_ON` (replacing a stale socket file) and serves until `shutdown`.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), ServeError> {
        let listener = bind_for(&self.core.cfg)?;
        let url = listener
            .url()
            .unwrap_or_else(|_| self.core.cfg.listen_on.clone());
        tracing::info!(
            url,
            name = self.core.cfg.name,
            "NSM forwarder services listening"
        );
        self.serve_on(listener, shutdown).await
    }
}

/// Starts exporting spans and `core`'s path segment metrics (`TELEMETRY=true`); `None`, logged,
/// when it cannot.
fn start_telemetry(core: &Arc<Core>) -> Option<Arc<Telemetry>> {
    let cfg = &core.cfg;
    let segments = telemetry::SegmentExport {
        every: cfg.metrics_export_interval,
        keys: crate::connect::metrics::metric_names(),
        source: Arc::new(telemetry::metrics::PublishedSegments(Arc::downgrade(core))),
    };
    match Telemetry::start(&cfg.open_telemetry_endpoint, &cfg.name, Some(segments)) {
        Ok(t) => {
            tracing::info!(
                endpoint = cfg.open_telemetry_endpoint,
                metrics_every = ?cfg.metrics_export_interval,
                "OpenTelemetry spans of Request and Close exported, and the path segment's metrics"
            );
            Some(Arc::new(t))
        }
        Err(e) => {
            tracing::error!(error = %e, "no OpenTelemetry export");
            None
        }
    }
}

/// The NSM server running on its own thread and tokio runtime (for a caller that has no
/// runtime, like `quiver run`). Dropping it stops the server and waits for it.
pub struct NsmHandle {
    core: Arc<Core>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NsmHandle {
    /// Starts a runtime with `threads` workers on a new thread, fetches the SPIFFE identity
    /// (when `cfg.spiffe_endpoint` is set and `cfg.identity` is not), binds `NSM_LISTEN_ON`
    /// (a `tcp://` address only with an identity: [`ServeError::PlaintextTcp`] otherwise), and
    /// serves there; returns once the socket is bound (or that failed). With `tcp://…:0`,
    /// [`Core::cfg`]'s `listen_on` becomes the port bound (and is what Quiver registers).
    pub fn spawn(
        cfg: NsmConfig,
        dp: Arc<dyn NsmBackend>,
        discovery: Arc<dyn EndpointDiscovery>,
        threads: usize,
    ) -> Result<NsmHandle, ServeError> {
        Self::spawn_with(cfg, dp, move |_| discovery, threads)
    }

    /// [`NsmHandle::spawn`] as NSM deploys a forwarder: endpoints are found through the
    /// registry at `NSM_CONNECT_TO`, dialed with the same identity.
    pub fn spawn_with_registry(
        cfg: NsmConfig,
        dp: Arc<dyn NsmBackend>,
        threads: usize,
    ) -> Result<NsmHandle, ServeError> {
        Self::spawn_with(
            cfg,
            dp,
            |cfg| Arc::new(RegistryDiscovery::new(cfg)),
            threads,
        )
    }

    fn spawn_with(
        mut cfg: NsmConfig,
        dp: Arc<dyn NsmBackend>,
        discovery: impl FnOnce(&NsmConfig) -> Arc<dyn EndpointDiscovery>,
        threads: usize,
    ) -> Result<NsmHandle, ServeError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("quiver-nsm")
            // Data-path calls run on the blocking pool; an idle pool thread ends after 1 s
            // rather than tokio's 10 s, so the periodic metrics reads (every 10 s) do not keep
            // one alive for good, and a thread count settles soon after the work stops.
            .thread_keep_alive(std::time::Duration::from_secs(1))
            .enable_all()
            .build()
            .map_err(|source| ServeError::Bind {
                path: PathBuf::from("(tokio runtime)"),
                source,
            })?;
        let (service, listener) = runtime.block_on(async {
            cfg.resolve_identity().await?;
            let listener = bind_for(&cfg)?;
            if let Listener::Tcp(_) = listener {
                cfg.listen_on = listener.url().map_err(|source| ServeError::Bind {
                    path: PathBuf::from(&cfg.listen_on),
                    source,
                })?;
            }
            let discovery = discovery(&cfg);
            Ok::<_, ServeError>((NsmService::new(cfg, dp, discovery), listener))
        })?;
        let core = service.core.clone();
        let url = core.cfg.listen_on.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("quiver-nsm".into())
            .spawn(move || {
                tracing::info!(url, "NSM forwarder services listening");
                let served = runtime.block_on(service.serve_on(listener, async {
                    let _ = rx.await;
                }));
                if let Err(e) = served {
                    tracing::error!(error = %e, "the NSM server stopped");
                }
            })
            .map_err(|source| ServeError::Bind {
                path: PathBuf::from("(server thread)"),
                source,
            })?;
        Ok(NsmHandle {
            core,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The state behind the services.
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }
}

impl Drop for NsmHandle {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How long calls in progress may take to finish once the server is told to stop.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Binds `cfg.listen_on`: a `unix:///path` URL (see [`bind`]), or a `tcp://host:port` one when
/// `cfg` has an identity to serve mTLS with (without one: [`ServeError::PlaintextTcp`]; see
/// [`bind_tcp`]). Call within a tokio runtime.
pub fn bind_for(cfg: &NsmConfig) -> Result<Listener, ServeError> {
    let url = &cfg.listen_on;
    match url.strip_prefix("tcp://") {
        Some(_) if cfg.identity.is_none() => Err(ServeError::PlaintextTcp(url.clone())),
        Some(_) => bind_tcp(url).map(Listener::Tcp),
        None => bind(url).map(Listener::Unix),
    }
}

/// Binds a `tcp://host:port` URL (`host` an address, or a name resolved here; port 0: one the
/// system picks, see [`Listener::url`]). Call within a tokio runtime.
pub fn bind_tcp(url: &str) -> Result<TcpListener, ServeError> {
    let addr = url
        .strip_prefix("tcp://")
        .filter(|a| !a.is_empty() && !a.contains('/'))
        .ok_or_else(|| ServeError::BadListenUrl(url.to_string()))?;
    let err = |source| ServeError::Bind {
        path: PathBuf::from(url),
        source,
    };
    let listener = std::net::TcpListener::bind(addr).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    TcpListener::from_std(listener).map_err(err)
}

/// Binds a `unix:///path` URL: creates the directory, removes a stale socket first.
pub fn bind(url: &str) -> Result<UnixListener, ServeError> {
    let path = url
        .strip_prefix("unix://")
        .filter(|p| p.starts_with('/'))
        .ok_or_else(|| ServeError::BadListenUrl(url.to_string()))?;
    let path = Path::new(path);
    let err = |source| ServeError::Bind {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    UnixListener::bind(path).map_err(err)
}

/// Closes the fds connection `id` held if Quiver no longer holds that connection (waits for a
/// Request, Close or expiry of it in progress to finish first).
async fn release_if_gone(fds: &HeldFds, core: &Core, id: &str) {
    if !fds.holds(id) || core.holds(id).await {
        return;
    }
    fds.release_closed(id);
}

/// [`release_if_gone`] for every connection holding fds.
async fn sweep(fds: &HeldFds, core: &Core) {
    for id in fds.ids() {
        release_if_gone(fds, core, &id).await;
    }
}

/// Sweeps `fds` after every connection the monitor sees deleted (expiries included), until
/// `core` goes. Call within a tokio runtime.
fn sweep_after_deletes(fds: &HeldFds, core: Weak<Core>) {
    let held = fds.clone();
    tokio::spawn(async move {
        loop {
            let Some(mut events) = core
                .upgrade()
                .map(|c| c.monitor.subscribe(MonitorScopeSelector::default()))
            else {
                return;
            };
            while let Some(Ok(ev)) = events.next().await {
                if ev.r#type != ConnectionEventType::Delete as i32 || held.is_empty() {
                    continue;
                }
                let Some(core) = core.upgrade() else { return };
                sweep(&held, &core).await;
            }
            // Cut off (fell behind): subscribe again, and catch up.
            let Some(c) = core.upgrade() else { return };
            sweep(&held, &c).await;
        }
    });
}

#[tonic::async_trait]
impl NetworkService for NsmService {
    async fn request(
        &self,
        request: Request<NetworkServiceRequest>,
    ) -> Result<Response<Connection>, Status> {
        let Some(telemetry) = &self.telemetry else {
            return self.handle_request(request).await;
        };
        let id = request.get_ref().connection.as_ref().map(|c| c.id.as_str());
        let span = telemetry.span(telemetry::REQUEST, id.unwrap_or_default());
        let answer = self.handle_request(request).await;
        span.end(&answer);
        answer
    }

    async fn close(&self, request: Request<Connection>) -> Result<Response<()>, Status> {
        let Some(telemetry) = &self.telemetry else {
            return self.handle_close(request).await;
        };
        let span = telemetry.span(telemetry::CLOSE, &request.get_ref().id);
        let closed = self.handle_close(request).await;
        span.end(&closed);
        closed
    }
}

impl NsmService {
    async fn handle_request(
        &self,
        request: Request<NetworkServiceRequest>,
    ) -> Result<Response<Connection>, Status> {
        let received =
            spiffe_identity::ConnectionInfo::from_request(&request).map(|c| c.fds.clone());
        // Its sizes first, then the path token: a refused call changes nothing.
        limits::request(request.get_ref())?;
        let mut req = secure::accept(self.core.cfg.identity.as_ref(), request)?;
        // Files of Quiver's own named by path, memif socket files: before fds are resolved.
        validate::caller_mechanisms(&req)?;
        // inode:// URLs name fds passed on this connection (grpcfd).
        let resolved = self.fds.resolve(received.as_ref(), &mut req)?;
        let id = req
            .connection
            .as_ref()
            .map(|c| c.id.clone())
            .unwrap_or_default();
        // On its own task: a caller that goes away must not cancel a Request half-way.
        let (core, fds) = (self.core.clone(), self.fds.clone());
        tokio::spawn(async move {
            let answer = core.request(req).await;
            match &answer {
                Ok(_) => fds.keep_only(&id, &resolved),
                Err(_) => release_if_gone(&fds, &core, &id).await,
            }
            answer.map(|mut a| {
                resolved.restore(&mut a);
                Response::new(a)
            })
        })
        .await
        .map_err(|e| Status::internal(format!("Request task failed: {e}")))?
    }

    async fn handle_close(&self, request: Request<Connection>) -> Result<Response<()>, Status> {
        limits::connection(request.get_ref())?;
        let conn = secure::accept(self.core.cfg.identity.as_ref(), request)?;
        let (core, fds) = (self.core.clone(), self.fds.clone());
        tokio::spawn(async move {
            let id = conn.id.clone();
            let closed = core.close(conn).await;
            // The fds the connection used close with it.
            release_if_gone(&fds, &core, &id).await;
            closed
        })
        .await
        .map_err(|e| Status::internal(format!("Close task failed: {e}")))?
        .map(Response::new)
    }
}

#[tonic::async_trait]
impl MonitorConnection for NsmService {
    type MonitorConnectionsStream = EventStream;

    async fn monitor_connections(
        &self,
        request: Request<MonitorScopeSelector>,
    ) -> Result<Response<EventStream>, Status> {
        Ok(Response::new(
            self.core.monitor.subscribe(request.into_inner()),
        ))
    }
}
