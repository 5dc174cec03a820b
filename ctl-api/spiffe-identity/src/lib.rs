//! Quiver's SPIFFE identity: X.509 SVIDs and trust bundles from the SPIFFE Workload API, mTLS
//! with them on every gRPC hop, and NSM's path tokens signed with them (NSM's security model,
//! see `specs/nsm.md`).
//!
//! - [`Identity`]: the current identity, fetched from the Workload API at
//!   `$SPIFFE_ENDPOINT_SOCKET` ([`Identity::from_env`]; `None` without it: plaintext on unix
//!   sockets only) and replaced on every rotation the agent streams.
//! - [`server_config`] / [`client_config`]: rustls configurations that present the current SVID
//!   and verify the peer's as an X509-SVID of a trusted trust domain, any SPIFFE ID, no
//!   hostname check, TLS 1.2 or 1.3.
//! - [`serve_tls`] / [`serve`] and [`connect_tls`] / [`connect`]: tonic over unix sockets or
//!   TCP ([`Listener`]) with that TLS (plaintext on unix sockets only; fds pass beside the
//!   bytes on unix sockets, see [`grpc_unix`]); servers find the client's [`PeerIdentity`] and
//!   passed fds in request extensions ([`ConnectionInfo`]), clients get the server's from
//!   [`PeerChannel::peer`].
//! - [`tokens`]: NSM path tokens (ES256 JWTs) minted with the SVID and checked against the TLS
//!   peer.
//! - [`workload_api`]: the Workload API protocol (`SpiffeWorkloadAPI`), generated from
//!   `ctl-api/proto/workload.proto`.
//! - `testing` (feature `testing`): a test CA and Workload API, for tests.
//!
//! Modules, each depending only on those listed before it: `error`, `id`, `crypto`, `svid`,
//! `peer`, `workload_api`, `workload`, `tls`, `dialed`, `listener`, `connection`, `serve`,
//! `connect`, `tokens`, `testing`.

mod connect;
mod connection;
mod crypto;
mod dialed;
mod error;
mod id;
mod listener;
mod peer;
mod serve;
mod svid;
mod tls;
mod workload;

#[cfg(feature = "testing")]
pub mod testing;
pub mod tokens;
pub mod workload_api;

pub use connect::{connect, connect_tls, connect_tls_with_config, PeerChannel};
pub use connection::ConnectionInfo;
pub use error::SpiffeError;
pub use id::{SpiffeId, SpiffeIdError};
pub use listener::Listener;
pub use peer::PeerIdentity;
pub use serve::{serve, serve_tls, tls_incoming, SpiffeTlsStream};
pub use svid::{TrustBundle, X509Identity};
pub use tls::{
    client_config, server_config, SpiffeClientCertVerifier, SpiffeServerCertVerifier, SvidResolver,
    SvidVerifier,
};
pub use workload::{Identity, ENDPOINT_ENV, SECURITY_HEADER};
