//! The way to the endpoint: which endpoints may serve a connection and at which URLs, from the
//! registry or given (dialing them is [`crate::dial`]'s; trying them in turn, round robin, is
//! the core's, see [`crate::connect`]).
//!
//! In NSM v1.18 nsmgr selects only the forwarder: selecting the endpoint is the forwarder's job
//! (cmd-forwarder-vpp's sdk `discover` and `roundrobin` servers). [`RegistryDiscovery`] does
//! what `discover` does: a connection that names its endpoint goes there; one that does not is
//! served by the endpoints of its network service that the service's matches select
//! ([`matching`]), and takes the service's payload.

pub mod matching;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use nsm_proto::connection::Connection;
use nsm_proto::registry::network_service_endpoint_registry_client::NetworkServiceEndpointRegistryClient;
use nsm_proto::registry::network_service_registry_client::NetworkServiceRegistryClient;
use nsm_proto::registry::{
    NetworkService, NetworkServiceEndpoint, NetworkServiceEndpointQuery, NetworkServiceQuery,
};
use spiffe_identity::{Identity, PeerChannel};
use tokio_stream::StreamExt;
use tonic::{Status, Streaming};

use crate::config::NsmConfig;
use crate::dial::dial_peer;
use crate::fds::passed_socket_url;
use crate::path::system_time;
use crate::secure::sign_call;
use crate::validate::{self, Payload};

/// A boxed, sendable future (what [`EndpointDiscovery`] returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The most answers Quiver reads from one registry `Find`: more is refused as a registry
/// gone wrong (`ResourceExhausted`), not read forever.
pub const MAX_FIND_ANSWERS: usize = 4096;

/// An endpoint Quiver may Request a connection from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Its registered name: the `network_service_endpoint_name` of the Request Quiver sends it
    /// and of the answer (so that a refresh comes back to it). Empty when the way to it has no
    /// name (a [`StaticEndpoint`] for a connection that names none).
    pub name: String,
    /// Its URL (`unix:///path` or `tcp://host:port`).
    pub url: String,
}

/// What discovery found for a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// The endpoints that may serve it, in the registry's order: the core tries them in turn,
    /// starting one further along for each Request of the same network service (round robin).
    pub endpoints: Vec<Candidate>,
    /// The network service's payload, when its registration was read and names one: a
    /// Request without a payload takes it.
    pub payload: Option<Payload>,
}

impl Found {
    /// One endpoint, `name` at `url`, and no payload.
    pub fn one(name: impl Into<String>, url: impl Into<String>) -> Found {
        Found {
            endpoints: vec![Candidate {
                name: name.into(),
                url: url.into(),
            }],
            payload: None,
        }
    }
}

/// Finds the endpoints a connection may go to.
pub trait EndpointDiscovery: Send + Sync + 'static {
    /// The endpoints `conn` may go to: the one its `network_service_endpoint_name` names, or,
    /// when it names none, those its `network_service` offers (with the service's payload).
    /// None at all is an error (`NotFound` when nothing fits).
    fn find<'a>(&'a self, conn: &'a Connection) -> BoxFuture<'a, Result<Found, Status>>;
}

/// One URL for every connection: the test harness's endpoint, or nsmgr itself (which routes
/// the Request on to the endpoint, as NSM forwarders before v1.18 relied on). The endpoint
/// keeps the name the connection gives it.
#[derive(Debug, Clone)]
pub struct StaticEndpoint(pub String);

impl EndpointDiscovery for StaticEndpoint {
    fn find<'a>(&'a self, conn: &'a Connection) -> BoxFuture<'a, Result<Found, Status>> {
        let found = Found::one(conn.network_service_endpoint_name.clone(), self.0.clone());
        Box::pin(async move { Ok(found) })
    }
}

/// The endpoints from the registry on nsmgr (`NSM_CONNECT_TO`), as cmd-forwarder-vpp's
/// `discover` finds them: `Find` of the endpoint by `network_service_endpoint_name` when the
/// connection names one; otherwise `Find` of the network service (by name and the
/// connection's payload), then of its endpoints, those expired left out and the rest filtered
/// by the service's matches ([`matching::match_endpoints`]). With an identity every `Find`
/// carries Quiver's path token for the registry (see [`crate::secure::sign_call`]).
#[derive(Debug, Clone)]
pub struct RegistryDiscovery {
    /// The registry's URL.
    pub registry: String,
    /// How long dialing may take (the whole lookup: four times as long).
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

    async fn lookup(&self, conn: &Connection) -> Result<Found, Status> {
        let name = &conn.network_service_endpoint_name;
        if name.is_empty() && conn.network_service.is_empty() {
            return Err(Status::invalid_argument(
                "connection.network_service_endpoint_name and connection.network_service are \
                 both empty: no endpoint to find",
            ));
        }
        let peer = dial_peer(&self.registry, self.timeout, self.identity.as_ref()).await?;
        if !name.is_empty() {
            return self.by_name(&peer, name).await;
        }
        self.by_service(&peer, conn).await
    }

    /// The endpoint named `name`.
    async fn by_name(&self, peer: &PeerChannel, name: &str) -> Result<Found, Status> {
        let query = NetworkServiceEndpoint {
            name: name.to_string(),
            ..Default::default()
        };
        let nses = self.find_endpoints(peer, query).await?;
        let nse = nses
            .iter()
            .find(|n| n.name == name && !n.url.is_empty())
            .ok_or_else(|| {
                Status::not_found(format!(
                    "endpoint {name:?} is not in the registry at {}",
                    self.registry
                ))
            })?;
        // nsmgr may pass the endpoint's socket by fd (grpcfd).
        let url = passed_socket_url(&nse.url, peer.received())?;
        Ok(Found::one(name, url))
    }

    /// The endpoints of `conn`'s network service that fit it, and the service's payload.
    async fn by_service(&self, peer: &PeerChannel, conn: &Connection) -> Result<Found, Status> {
        let service = self.find_service(peer, conn).await?;
        let payload = service_payload(&service)?;
        let query = NetworkServiceEndpoint {
            network_service_names: vec![service.name.clone()],
            ..Default::default()
        };
        let nses = self.find_endpoints(peer, query).await?;
        let registered = nses.len();
        let now = SystemTime::now();
        let alive: Vec<NetworkServiceEndpoint> = nses
            .into_iter()
            .filter(|n| serves(n, &service.name) && !expired(n, now))
            .collect();
        let fit = matching::match_endpoints(&conn.labels, &service, &alive);
        if fit.is_empty() {
            return Err(Status::not_found(format!(
                "no endpoint of network service {:?} in the registry at {} fits the connection \
                 ({registered} registered, {} usable and alive, none selected by the service's \
                 matches for the labels {:?})",
                service.name,
                self.registry,
                alive.len(),
                conn.labels
            )));
        }
        let mut endpoints = Vec::with_capacity(fit.len());
        let mut unusable = Vec::new();
        for nse in fit {
            match passed_socket_url(&nse.url, peer.received()) {
                Ok(url) => endpoints.push(Candidate {
                    name: nse.name.clone(),
                    url,
                }),
                Err(e) => unusable.push(format!("{}: {}", nse.name, e.message())),
            }
        }
        if endpoints.is_empty() {
            return Err(Status::failed_precondition(format!(
                "no endpoint of network service {:?} can be reached: {}",
                service.name,
                unusable.join("; ")
            )));
        }
        Ok(Found { endpoints, payload })
    }

    /// The network service `conn` asks for, with a payload that fits the connection's (any,
    /// when it has none), as the registry matches services.
    async fn find_service(
        &self,
        peer: &PeerChannel,
        conn: &Connection,
    ) -> Result<NetworkService, Status> {
        let name = &conn.network_service;
        let query = NetworkServiceQuery {
            network_service: Some(NetworkService {
                name: name.clone(),
                payload: conn.payload.clone(),
                ..Default::default()
            }),
            watch: false,
        };
        let query = self.sign(peer, query)?;
        let mut client = NetworkServiceRegistryClient::new(peer.channel());
        let stream = client.find(query).await.map_err(|e| self.failed(e))?;
        let services = self
            .read_all(stream.into_inner(), |a| {
                a.network_service.filter(|_| !a.deleted)
            })
            .await?;
        let fits = |s: &NetworkService| {
            s.name == *name && (conn.payload.is_empty() || s.payload == conn.payload)
        };
        services.into_iter().find(fits).ok_or_else(|| {
            let payload = match conn.payload.as_str() {
                "" => String::new(),
                p => format!(" with payload {p}"),
            };
            Status::not_found(format!(
                "network service {name:?}{payload} is not in the registry at {}",
                self.registry
            ))
        })
    }

    /// The endpoints the registry has for `query`, deleted ones left out.
    async fn find_endpoints(
        &self,
        peer: &PeerChannel,
        query: NetworkServiceEndpoint,
    ) -> Result<Vec<NetworkServiceEndpoint>, Status> {
        let query = NetworkServiceEndpointQuery {
            network_service_endpoint: Some(query),
            watch: false,
        };
        let query = self.sign(peer, query)?;
        let mut client = NetworkServiceEndpointRegistryClient::new(peer.channel());
        let stream = client.find(query).await.map_err(|e| self.failed(e))?;
        self.read_all(stream.into_inner(), |a| {
            a.network_service_endpoint.filter(|_| !a.deleted)
        })
        .await
    }

    /// `msg` with Quiver's path token for the registry (with an identity).
    fn sign<T>(&self, peer: &PeerChannel, msg: T) -> Result<tonic::Request<T>, Status> {
        sign_call(
            self.identity.as_ref(),
            peer.peer().as_ref(),
            self.max_token_lifetime,
            msg,
        )
    }

    /// Every answer of a Find stream that `take` keeps, up to [`MAX_FIND_ANSWERS`] answers.
    async fn read_all<A, T>(
        &self,
        mut stream: Streaming<A>,
        take: impl Fn(A) -> Option<T>,
    ) -> Result<Vec<T>, Status> {
        let mut out = Vec::new();
        let mut read = 0usize;
        while let Some(answer) = stream.next().await {
            let answer = answer.map_err(|e| self.failed(e))?;
            read += 1;
            if read > MAX_FIND_ANSWERS {
                return Err(Status::resource_exhausted(format!(
                    "the registry at {} answered a Find with more than {MAX_FIND_ANSWERS} \
                     entries",
                    self.registry
                )));
            }
            out.extend(take(answer));
        }
        Ok(out)
    }

    /// A registry call's failure, saying which registry refused.
    fn failed(&self, e: Status) -> Status {
        Status::new(
            e.code(),
            format!("the registry at {}: {}", self.registry, e.message()),
        )
    }
}

impl EndpointDiscovery for RegistryDiscovery {
    fn find<'a>(&'a self, conn: &'a Connection) -> BoxFuture<'a, Result<Found, Status>> {
        Box::pin(async move {
            tokio::time::timeout(self.timeout * 4, self.lookup(conn))
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

/// The payload `service` is registered with: `None` when it names none; one Quiver does not
/// carry is `FailedPrecondition`.
fn service_payload(service: &NetworkService) -> Result<Option<Payload>, Status> {
    if service.payload.is_empty() {
        return Ok(None);
    }
    validate::payload(&service.payload).map(Some).map_err(|_| {
        Status::failed_precondition(format!(
            "network service {:?} is registered with payload {:?}: Quiver carries ETHERNET and IP",
            service.name, service.payload
        ))
    })
}

/// Whether `nse` says it serves `service`, and has a name and a URL to be Requested at.
fn serves(nse: &NetworkServiceEndpoint, service: &str) -> bool {
    !nse.name.is_empty()
        && !nse.url.is_empty()
        && nse.network_service_names.iter().any(|s| s == service)
}

/// Whether `nse`'s registration ran out by `now` (one without an expiration does not; one
/// whose expiration is not a time counts as run out).
fn expired(nse: &NetworkServiceEndpoint, now: SystemTime) -> bool {
    match &nse.expiration_time {
        None => false,
        Some(t) => system_time(t).is_none_or(|t| t <= now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::timestamp;

    #[test]
    fn expired_and_malformed_registrations_are_left_out() {
        let now = SystemTime::now();
        let at = |t: Option<prost_types::Timestamp>| NetworkServiceEndpoint {
            expiration_time: t,
            ..Default::default()
        };
        assert!(!expired(&at(None), now));
        assert!(!expired(
            &at(Some(timestamp(now + Duration::from_secs(5)))),
            now
        ));
        assert!(expired(
            &at(Some(timestamp(now - Duration::from_secs(5)))),
            now
        ));
        let hostile = prost_types::Timestamp {
            seconds: i64::MAX,
            nanos: -7,
        };
        assert!(expired(&at(Some(hostile)), now));
    }

    #[test]
    fn a_service_payload_quiver_does_not_carry_is_refused() {
        let svc = |p: &str| NetworkService {
            name: "s".into(),
            payload: p.into(),
            ..Default::default()
        };
        assert_eq!(service_payload(&svc("")).unwrap(), None);
        assert_eq!(service_payload(&svc("IP")).unwrap(), Some(Payload::Ip));
        let e = service_payload(&svc("MPLS")).unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        assert!(e.message().contains("MPLS"), "{}", e.message());
    }

    #[test]
    fn only_named_reachable_endpoints_of_the_service_serve_it() {
        let nse = |name: &str, url: &str, services: &[&str]| NetworkServiceEndpoint {
            name: name.into(),
            url: url.into(),
            network_service_names: services.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        assert!(serves(&nse("a", "unix:///a", &["s"]), "s"));
        assert!(!serves(&nse("a", "unix:///a", &["t"]), "s"));
        assert!(!serves(&nse("", "unix:///a", &["s"]), "s"));
        assert!(!serves(&nse("a", "", &["s"]), "s"));
    }
}
