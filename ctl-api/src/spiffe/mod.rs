//! Quiver's SPIFFE identity: X.509 SVIDs and trust bundles from the SPIFFE Workload API, and
//! mTLS with them on every gRPC hop (NSM's security model, see `specs/nsm.md`).
//!
//! - [`Identity`]: the current identity, fetched from the Workload API at
//!   `$SPIFFE_ENDPOINT_SOCKET` ([`Identity::from_env`]; `None` without it: plaintext on unix
//!   sockets only) and replaced on every rotation the agent streams.
//! - [`server_config`] / [`client_config`]: rustls configurations that present the current SVID
//!   and verify the peer's as an X509-SVID of a trusted trust domain, any SPIFFE ID, no
//!   hostname check, TLS 1.2 or 1.3.
//! - [`serve_tls`] / [`serve`] and [`connect_tls`] / [`connect`]: tonic over unix sockets or
//!   TCP ([`Listener`]) with that TLS (plaintext on unix sockets only); servers find the
//!   client's [`PeerIdentity`] in request extensions, clients get it from
//!   [`PeerChannel::peer`]. Path tokens built on them are in [`crate::tokens`].
//!
//! The Workload API protocol (`SpiffeWorkloadAPI`) is generated from `proto/workload.proto`
//! into [`crate::proto::spiffe_workload`].

mod connection;
mod id;
mod listener;
mod peer;
mod svid;
mod tls;
mod transport;
mod workload;

pub use connection::ConnectionInfo;
pub use id::{SpiffeId, SpiffeIdError};
pub use listener::Listener;
pub use peer::PeerIdentity;
pub use svid::{TrustBundle, X509Identity};
pub use tls::{
    client_config, server_config, SpiffeClientCertVerifier, SpiffeServerCertVerifier, SvidResolver,
    SvidVerifier,
};
pub use transport::{
    connect, connect_tls, connect_tls_with_config, serve, serve_tls, tls_incoming, PeerChannel,
    SpiffeTlsStream,
};
pub use workload::{Identity, ENDPOINT_ENV, SECURITY_HEADER};

/// What can go wrong getting or using a SPIFFE identity.
#[derive(Debug, thiserror::Error)]
pub enum SpiffeError {
    /// The Workload API address is not `unix:///path`.
    #[error("invalid SPIFFE endpoint {0}")]
    InvalidEndpoint(String),
    /// Connecting (to the Workload API or a gRPC peer) failed.
    #[error("gRPC transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The Workload API answered with an error.
    #[error("Workload API: {0}")]
    Status(#[from] tonic::Status),
    /// The Workload API stream ended before sending an SVID.
    #[error("the Workload API stream ended")]
    StreamEnded,
    /// A TCP address was to be served without an identity: plaintext is for unix sockets only.
    #[error(
        "refusing to serve {0} in plaintext: without a SPIFFE identity (SPIFFE_ENDPOINT_SOCKET) \
         only unix sockets are served; TCP needs mTLS"
    )]
    PlaintextTcp(String),
    /// The identity source is gone: no more rotations will come.
    #[error("the SPIFFE identity source has stopped")]
    SourceClosed,
    /// An SVID or bundle is not usable (malformed, no SPIFFE ID, key not matching...).
    #[error("invalid SVID: {0}")]
    InvalidSvid(String),
    /// rustls refused a configuration.
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    /// An I/O error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
