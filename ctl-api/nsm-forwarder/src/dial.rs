//! Dialing a gRPC peer (the endpoint, nsmgr's registry, a health check's server) at a
//! `unix://` or `tcp://` URL: with SPIFFE mTLS when Quiver has an identity, in plaintext on unix
//! sockets only when it has none. Failing to connect is `Unavailable`.

use std::time::Duration;

use spiffe_identity::{Identity, PeerChannel, ENDPOINT_ENV};
use tonic::transport::Channel;
use tonic::Status;

/// Dials `url` (`unix:///path`) within `timeout`, in plaintext: [`dial_with`] without an
/// identity.
pub async fn dial(url: &str, timeout: Duration) -> Result<Channel, Status> {
    dial_with(url, timeout, None).await
}

/// Dials `url` within `timeout`: with SPIFFE mTLS when there is an `identity` (`unix:///path`
/// or `tcp://host:port`; the server must present an SVID of a trusted trust domain), in
/// plaintext on `unix:///path` only when there is none. Failing to connect is `Unavailable`.
pub async fn dial_with(
    url: &str,
    timeout: Duration,
    identity: Option<&Identity>,
) -> Result<Channel, Status> {
    dial_peer(url, timeout, identity).await.map(|c| c.channel())
}

/// [`dial_with`], keeping who answered: [`PeerChannel::peer`] is the server's identity as the
/// last TLS handshake verified it (`None` in plaintext), the audience of the path tokens Quiver
/// mints for calls on the channel.
pub async fn dial_peer(
    url: &str,
    timeout: Duration,
    identity: Option<&Identity>,
) -> Result<PeerChannel, Status> {
    let is_unix = url
        .strip_prefix("unix://")
        .is_some_and(|p| p.starts_with('/'));
    let is_tcp = url.strip_prefix("tcp://").is_some_and(|a| !a.is_empty());
    if !is_unix && !is_tcp {
        return Err(Status::invalid_argument(format!(
            "URL {url:?} is neither unix:///path nor tcp://host:port"
        )));
    }
    if is_tcp && identity.is_none() {
        return Err(Status::failed_precondition(format!(
            "cannot dial {url} in plaintext: without a SPIFFE identity ({}) Quiver only dials \
             unix sockets",
            ENDPOINT_ENV
        )));
    }
    let unavailable =
        |e: &dyn std::fmt::Display| Status::unavailable(format!("cannot reach {url}: {e}"));
    tokio::time::timeout(timeout, spiffe_identity::connect(url, identity))
        .await
        .map_err(|_| unavailable(&format!("no connection within {timeout:?}")))?
        .map_err(|e| unavailable(&error_chain(&e)))
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
