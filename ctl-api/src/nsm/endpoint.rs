//! The way to the endpoint: finding its URL (from the registry, or given), and dialing a gRPC
//! channel to a `unix://` or `tcp://` URL.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::Status;

use crate::proto::connection::Connection;
use crate::proto::registry::network_service_endpoint_registry_client::NetworkServiceEndpointRegistryClient;
use crate::proto::registry::{NetworkServiceEndpoint, NetworkServiceEndpointQuery};

/// A boxed, sendable future (what [`EndpointDiscovery`] returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Finds the URL of the endpoint a connection goes to.
pub trait EndpointDiscovery: Send + Sync + 'static {
    /// The URL (`unix:///path` or `tcp://host:port`) to Request `conn` from.
    fn find<'a>(&'a self, conn: &'a Connection) -> BoxFuture<'a, Result<String, Status>>;
}

/// One URL for every connection: the test harness's endpoint, or nsmgr itself (which routes
/// the Request on to the endpoint, as NSM v1 forwarders do).
#[derive(Debug, Clone)]
pub struct StaticEndpoint(pub String);

impl EndpointDiscovery for StaticEndpoint {
    fn find<'a>(&'a self, _: &'a Connection) -> BoxFuture<'a, Result<String, Status>> {
        Box::pin(async move { Ok(self.0.clone()) })
    }
}

/// The endpoint's URL from the registry: `Find` of `network_service_endpoint_name` on nsmgr
/// (`NSM_CONNECT_TO`).
#[derive(Debug, Clone)]
pub struct RegistryDiscovery {
    /// The registry's URL.
    pub registry: String,
    /// How long dialing and the lookup may take.
    pub timeout: Duration,
}

impl EndpointDiscovery for RegistryDiscovery {
    fn find<'a>(&'a self, conn: &'a Connection) -> BoxFuture<'a, Result<String, Status>> {
        Box::pin(async move {
            let name = &conn.network_service_endpoint_name;
            if name.is_empty() {
                return Err(Status::invalid_argument(
                    "connection.network_service_endpoint_name is empty: no endpoint to find",
                ));
            }
            let lookup = async {
                let channel = dial(&self.registry, self.timeout).await?;
                let mut client = NetworkServiceEndpointRegistryClient::new(channel);
                let query = NetworkServiceEndpointQuery {
                    network_service_endpoint: Some(NetworkServiceEndpoint {
                        name: name.clone(),
                        ..Default::default()
                    }),
                    watch: false,
                };
                let mut stream = client.find(query).await?.into_inner();
                while let Some(answer) = stream.next().await {
                    let answer = answer?;
                    if answer.deleted {
                        continue;
                    }
                    if let Some(nse) = answer.network_service_endpoint {
                        if nse.name == *name && !nse.url.is_empty() {
                            return Ok(nse.url);
                        }
                    }
                }
                Err(Status::not_found(format!(
                    "endpoint {name:?} is not in the registry at {}",
                    self.registry
                )))
            };
            tokio::time::timeout(self.timeout * 4, lookup)
                .await
                .map_err(|_| {
                    Status::unavailable(format!(
                        "the registry at {} did not answer in time",
                        self.registry
                    ))
                })?
        })
    }
}

/// Dials `url` (`unix:///path` or `tcp://host:port`) within `timeout`; failure is
/// `Unavailable`.
pub async fn dial(url: &str, timeout: Duration) -> Result<Channel, Status> {
    let unavailable =
        |e: &dyn std::fmt::Display| Status::unavailable(format!("cannot reach {url}: {e}"));
    let connect = async {
        if let Some(path) = url.strip_prefix("unix://") {
            let path = path.to_string();
            // The URI is a placeholder: the connector ignores it and dials the socket.
            Endpoint::from_static("http://[::]:0")
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        let s = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                    }
                }))
                .await
                .map_err(|e| unavailable(&error_chain(&e)))
        } else if let Some(addr) = url.strip_prefix("tcp://") {
            Endpoint::from_shared(format!("http://{addr}"))
                .map_err(|e| Status::invalid_argument(format!("bad URL {url}: {e}")))?
                .connect()
                .await
                .map_err(|e| unavailable(&error_chain(&e)))
        } else {
            Err(Status::invalid_argument(format!(
                "URL {url:?} is neither unix:///path nor tcp://host:port"
            )))
        }
    };
    tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| unavailable(&format!("no connection within {timeout:?}")))?
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
