//! The NSM v1 forwarder: `networkservice.NetworkService` (Request, Close),
//! `connection.MonitorConnection` and health, served on a unix socket (or TCP, with mTLS), as
//! cmd-forwarder-vpp serves them (see `specs/nsm.md`). The data path is the caller's: Quiver
//! implements [`NsmBackend`] for its forwarder.
//!
//! - [`limits`]: the sizes Quiver takes from a caller (message, path, mechanisms, IP context),
//!   checked before anything else of a call;
//! - [`addr`], [`validate`], [`mechanism`], [`path`]: everything a Request is checked against
//!   before anything is built, the choice of mechanism, Quiver's path segment, the monitor's
//!   selector.
//! - [`device_selector`]: `NSM_DEVICE_SELECTOR_FILE`, the host interfaces of VLAN connections.
//! - [`dataplane`]: the [`NsmBackend`] trait the forwarder implements (ports, cross-connects,
//!   everything tagged with the owning connection id).
//! - [`dial`]: dialing a peer (mTLS with an identity, plaintext on unix sockets without);
//!   [`endpoint`]: finding the endpoints a connection may go to (the one it names, or those of
//!   its network service that the service's matches select, from the registry; or a given
//!   URL); [`channels`]: one channel per endpoint URL; [`registration`]: registering Quiver
//!   with nsmgr; [`secure`]: path tokens on the calls Quiver receives and makes (mTLS itself
//!   is [`spiffe_identity`]'s).
//! - [`table`], [`monitor`], [`connect`]: the connections (one lock per id), their events, and
//!   the Request/Close/expiry state machine ([`Core`]); `next_hop`: the watch of each
//!   connection's next hop.
//! - [`fds`]: `inode://` URLs resolved to the fds clients pass on the socket, and those
//!   endpoints and the registry pass back to Quiver (grpcfd, over [`grpc_unix`]).
//! - [`server`]: the gRPC services; [`config`]: the `NSM_*` environment; [`health`]: the
//!   probe's check of a running server; [`telemetry`]: OpenTelemetry spans of its calls and
//!   metrics of its path segment.
//! - [`testing`]: a test endpoint (NSE) and a blocking client, for tests and benchmarks.
//!
//! No module imports one that imports it back: the order above (values, then calls to peers,
//! then the connections, then the server) is the order of their dependencies.

pub mod addr;
pub mod channels;
pub mod config;
pub mod connect;
pub mod dataplane;
pub mod device_selector;
pub mod dial;
pub mod endpoint;
pub mod fds;
pub mod health;
pub mod limits;
pub mod mechanism;
pub mod monitor;
pub mod mtu;
mod next_hop;
pub mod path;
pub mod pod_watch;
pub mod registration;
pub mod secure;
pub mod server;
pub mod table;
pub mod telemetry;
pub mod testing;
pub mod validate;
pub mod vni;
pub mod wg_ports;

pub use config::NsmConfig;
pub use connect::{ConnectionSummary, Core};
pub use dataplane::{
    BackendError, L3NextHops, LinkEvent, LinkEvents, NsmBackend, PortCounters, PortName, PortSpec,
};
pub use endpoint::{Candidate, EndpointDiscovery, Found, RegistryDiscovery, StaticEndpoint};
pub use next_hop::NextHopStats;
pub use server::{NsmHandle, NsmService, ServeError};
