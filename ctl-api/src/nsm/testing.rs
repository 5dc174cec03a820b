//! Helpers for tests and benchmarks that have no tokio runtime of their own: an endpoint (NSE)
//! that answers Requests with the mechanisms it is given, and a blocking client of the
//! forwarder. Each runs its own runtime on its own thread.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::endpoint::dial;
use crate::proto::connection::{Connection, Mechanism, PathSegment};
use crate::proto::networkservice::network_service_client::NetworkServiceClient;
use crate::proto::networkservice::network_service_server::{NetworkService, NetworkServiceServer};
use crate::proto::networkservice::NetworkServiceRequest;

/// What a [`TestEndpoint`] saw, in order.
#[derive(Debug, Default, Clone)]
pub struct EndpointLog {
    /// Every Request.
    pub requests: Vec<NetworkServiceRequest>,
    /// Every Close.
    pub closes: Vec<Connection>,
}

#[derive(Clone)]
struct Nse {
    name: String,
    answers: Vec<Mechanism>,
    log: Arc<Mutex<EndpointLog>>,
}

#[tonic::async_trait]
impl NetworkService for Nse {
    async fn request(
        &self,
        request: Request<NetworkServiceRequest>,
    ) -> Result<Response<Connection>, Status> {
        let req = request.into_inner();
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .requests
            .push(req.clone());
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
        conn.mechanism = Some(answer.clone());
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

/// An endpoint (NSE) on a unix socket: appends its segment named `name`, answers with the
/// first of `answers` whose type Quiver offered, records every call. Stops when dropped.
pub struct TestEndpoint {
    log: Arc<Mutex<EndpointLog>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestEndpoint {
    /// Listens on `socket` (a path) and serves.
    pub fn start(socket: &Path, name: &str, answers: Vec<Mechanism>) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let _ = std::fs::remove_file(socket);
        let listener = runtime.block_on(async { tokio::net::UnixListener::bind(socket) })?;
        let log = Arc::new(Mutex::new(EndpointLog::default()));
        let nse = Nse {
            name: name.into(),
            answers,
            log: log.clone(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let served = runtime.block_on(
                tonic::transport::Server::builder()
                    .add_service(NetworkServiceServer::new(nse))
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::UnixListenerStream::new(listener),
                        async {
                            let _ = rx.await;
                        },
                    ),
            );
            if let Err(e) = served {
                tracing::error!(error = %e, "test endpoint stopped");
            }
        });
        Ok(TestEndpoint {
            log,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// What it saw so far.
    pub fn log(&self) -> EndpointLog {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for TestEndpoint {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A blocking client of the forwarder's NetworkService.
pub struct BlockingClient {
    runtime: tokio::runtime::Runtime,
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
            client: NetworkServiceClient::new(channel),
        })
    }

    /// `Request`.
    pub fn request(&mut self, req: NetworkServiceRequest) -> Result<Connection, Status> {
        let mut c = self.client.clone();
        self.runtime
            .block_on(c.request(req))
            .map(|r| r.into_inner())
    }

    /// `Close`.
    pub fn close(&mut self, conn: Connection) -> Result<(), Status> {
        let mut c = self.client.clone();
        self.runtime.block_on(c.close(conn)).map(|r| r.into_inner())
    }
}
