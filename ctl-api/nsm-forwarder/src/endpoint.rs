//! The way to the endpoint: finding its URL, from the registry or given (dialing it is
//! [`crate::dial`]'s).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use nsm_proto::connection::Connection;
use nsm_proto::registry::network_service_endpoint_registry_client::NetworkServiceEndpointRegistryClient;
use nsm_proto::registry::{NetworkServiceEndpoint, NetworkServiceEndpointQuery};
use spiffe_identity::Identity;
use tokio_stream::StreamExt;
use tonic::Status;

use crate::config::NsmConfig;
use crate::dial::dial_peer;
use crate::fds::passed_socket_url;
use crate::secure::sign_call;

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
/// (`NSM_CONNECT_TO`); with an identity the Find carries Quiver's path token for the registry
/// (see [`crate::secure::sign_call`]).
#[derive(Debug, Clone)]
pub struct RegistryDiscovery {
    /// The registry's URL.
    pub registry: String,
    /// How long dialing and the lookup may take.
    pub timeout: Duration,
    /// Quiver's identity: the registry is dialed with mTLS when there is one.
    pub identity: Option<Identity>,
    /// How long the path token of a Find is valid (`NSM_MAX_TOKEN_LIFETIME`).
    pub max_token_lifetime: Duration,
}

impl RegistryDiscovery {
    /// Finds endpoints through `cfg`'s registry (`NSM_CONNECT_TO`), with `cfg`'s identity.
    pub fn new(cfg: &NsmConfig) -> RegistryDiscovery {
        RegistryDiscovery {
            registry: cfg.connect_to.clone(),
            timeout: cfg.dial_timeout,
            identity: cfg.identity.clone(),
            max_token_lifetime: cfg.max_token_lifetime,
        }
    }
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
                let peer = dial_peer(&self.registry, self.timeout, self.identity.as_ref()).await?;
                let mut client = NetworkServiceEndpointRegistryClient::new(peer.channel());
                let query = NetworkServiceEndpointQuery {
                    network_service_endpoint: Some(NetworkServiceEndpoint {
                        name: name.clone(),
                        ..Default::default()
                    }),
                    watch: false,
                };
                let query = sign_call(
                    self.identity.as_ref(),
                    peer.peer().as_ref(),
                    self.max_token_lifetime,
                    query,
                )?;
                let mut stream = client.find(query).await?.into_inner();
                while let Some(answer) = stream.next().await {
                    let answer = answer?;
                    if answer.deleted {
                        continue;
                    }
                    if let Some(nse) = answer.network_service_endpoint {
                        if nse.name == *name && !nse.url.is_empty() {
                            // nsmgr may pass the endpoint's socket by fd (grpcfd).
                            return passed_socket_url(&nse.url, peer.received());
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
