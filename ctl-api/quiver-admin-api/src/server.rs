//! The admin service on its unix socket, on a tokio runtime of its own thread.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use grpc_unix::MessageLimit;
use tokio_stream::StreamExt;
use tonic::codegen::InterceptedService;

use crate::backend::AdminBackend;
use crate::peer::{check_peer, PeerPolicy, PeerStream};
use crate::proto::admin_server::AdminServer as AdminService;
use crate::service::Service;
use crate::socket::{bind_socket, SocketError};

/// The running admin service. Dropping it (or [`AdminServer::stop`]) stops the service, waits
/// for calls in progress, and removes the socket.
pub struct AdminServer {
    path: PathBuf,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl AdminServer {
    /// Binds `path` (see [`bind_socket`]) and serves `backend` on it from a new thread
    /// (`quiver-admin`) running a tokio runtime.
    pub fn start(backend: Arc<dyn AdminBackend>, path: &Path) -> Result<AdminServer, StartError> {
        let listener = bind_socket(path)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("quiver-admin")
            .build()
            .map_err(StartError::Runtime)?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let shown = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("quiver-admin".into())
            .spawn(move || {
                runtime.block_on(async move {
                    if let Err(e) = serve(backend, listener, async {
                        let _ = rx.await;
                    })
                    .await
                    {
                        tracing::error!(socket = %shown.display(), "admin service failed: {e}");
                    }
                });
                // Dropping the runtime waits for blocking calls still running.
            })
            .map_err(StartError::Thread)?;
        tracing::info!(socket = %path.display(), "admin API listening");
        Ok(AdminServer {
            path: path.to_path_buf(),
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops serving, waits for calls in progress, removes the socket.
    pub fn stop(mut self) {
        self.shutdown_now();
    }

    fn shutdown_now(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.shutdown_now();
    }
}

/// Serves `backend` on `listener` (non-blocking, from [`bind_socket`]) until `shutdown`
/// completes, to the peers the socket's owner and group say (see [`PeerPolicy`]; any other
/// peer's calls are `PERMISSION_DENIED`), requests of at most [`MAX_REQUEST_SIZE`]. Must run
/// inside a tokio runtime.
pub async fn serve(
    backend: Arc<dyn AdminBackend>,
    listener: UnixListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    // Who is served: those the socket's mode lets connect (see `peer`), by its owner and
    // group when each peer connects (as they were at the start if the file is gone).
    let (path, at_start) = PeerPolicy::of_listener(&listener)?;
    let listener = tokio::net::UnixListener::from_std(listener)?;
    // Clients of any gRPC stack: grpcio and grpc-java put the socket path in :authority.
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener).map(move |s| {
        let policy = PeerPolicy::of_path(&path).unwrap_or(at_start);
        s.map(|s| PeerStream::new(s, policy))
    });
    let service = AdminService::new(Service::new(backend))
        .max_decoding_message_size(MAX_REQUEST_SIZE)
        .max_encoding_message_size(MAX_REPLY_SIZE);
    tonic::transport::Server::builder()
        .add_service(MessageLimit(InterceptedService::new(service, check_peer)))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await?;
    Ok(())
}

/// The largest request the admin service decodes (1 MiB: its largest, a WireGuard interface
/// with its peers, is a few kilobytes); a larger one is `RESOURCE_EXHAUSTED`.
pub const MAX_REQUEST_SIZE: usize = 1 << 20;

/// The largest reply the admin service sends (1 GiB, what [`crate::AdminClient`] accepts: a
/// FIB of a million routes is tens of megabytes).
pub const MAX_REPLY_SIZE: usize = 1 << 30;

/// Why [`AdminServer::start`] could not start the service.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The socket could not be set up.
    #[error("admin socket: {0}")]
    Socket(#[from] SocketError),
    /// No tokio runtime could be made.
    #[error("admin service: cannot start a tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// No thread could be started.
    #[error("admin service: cannot start its thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Why [`serve`] stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener could not be registered with the runtime.
    #[error(transparent)]
    Listener(#[from] std::io::Error),
    /// The gRPC server failed.
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
}
