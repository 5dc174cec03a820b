//! The health check a probe runs against the NSM listen socket (`quiver ctl health`): both
//! services must report SERVING through `grpc.health.v1.Health`, as the server sets them.

use std::time::Duration;

use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::endpoint::dial_with;
use spiffe_identity::{Identity, ENDPOINT_ENV};

/// The services a healthy forwarder serves.
pub const SERVICES: [&str; 2] = [
    "networkservice.NetworkService",
    "connection.MonitorConnection",
];

/// Asks the server at `url` (`unix:///path`) for the status of each of [`SERVICES`]; `Ok` with
/// their names when every one is SERVING, otherwise why not. With `SPIFFE_ENDPOINT_SOCKET` set
/// (as in the forwarder's container, whose environment an exec probe shares), it dials with
/// mTLS under the SVID from there, as the server requires then.
pub async fn check(url: &str, timeout: Duration) -> Result<Vec<&'static str>, String> {
    let identity = match std::env::var(ENDPOINT_ENV)
        .ok()
        .filter(|e| !e.trim().is_empty())
    {
        None => None,
        Some(endpoint) => Some(
            tokio::time::timeout(timeout, Identity::connect(&endpoint))
                .await
                .map_err(|_| format!("no SVID from {endpoint} within {timeout:?}"))?
                .map_err(|e| format!("SPIFFE identity from {endpoint}: {e}"))?,
        ),
    };
    check_with(url, timeout, identity.as_ref()).await
}

/// [`check`] with a given identity (mTLS) or none (plaintext).
pub async fn check_with(
    url: &str,
    timeout: Duration,
    identity: Option<&Identity>,
) -> Result<Vec<&'static str>, String> {
    let channel = dial_with(url, timeout, identity)
        .await
        .map_err(|s| s.message().to_string())?;
    let mut client = HealthClient::new(channel);
    for service in SERVICES {
        let call = client.check(HealthCheckRequest {
            service: service.to_string(),
        });
        let reply = tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| format!("{service}: no answer within {timeout:?}"))?
            .map_err(|s| format!("{service}: {}", s.message()))?
            .into_inner();
        let status = ServingStatus::try_from(reply.status).unwrap_or(ServingStatus::Unknown);
        if status != ServingStatus::Serving {
            return Err(format!("{service}: {}", status.as_str_name()));
        }
    }
    Ok(SERVICES.to_vec())
}

/// [`check`] from a thread without a tokio runtime (the `quiver ctl` command).
pub fn check_blocking(url: &str, timeout: Duration) -> Result<Vec<&'static str>, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?
        .block_on(check(url, timeout))
}
