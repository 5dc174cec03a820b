//! [`SpiffeError`]: what can go wrong getting or using a SPIFFE identity.

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
