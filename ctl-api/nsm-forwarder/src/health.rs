//! The health check a probe runs against the NSM listen socket (`quiver ctl health`): both
//! services must report SERVING through `grpc.health.v1.Health`, as the server sets them.

use std::time::Duration;

use spiffe_identity::{Identity, SpiffeError, ENDPOINT_ENV};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::dial::dial_with;

/// Why the forwarder is not healthy, or could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// No SVID came from the Workload API in time.
    #[error("no SVID from {endpoint} within {timeout:?}")]
    NoSvid {
        /// The Workload API (`SPIFFE_ENDPOINT_SOCKET`).
        endpoint: String,
        /// How long the check waited.
        timeout: Duration,
    },
    /// The Workload API refused or failed.
    #[error("SPIFFE identity from {endpoint}: {source}")]
    Identity {
        /// The Workload API (`SPIFFE_ENDPOINT_SOCKET`).
        endpoint: String,
        /// Why.
        source: SpiffeError,
    },
    /// The server could not be reached (the dial's status message).
    #[error("{0}")]
    Dial(String),
    /// A service did not answer in time.
    #[error("{service}: no answer within {timeout:?}")]
    NoAnswer {
        /// The service asked about.
        service: &'static str,
        /// How long the check waited.
        timeout: Duration,
    },
    /// The health service refused the question.
    #[error("{service}: {message}")]
    Refused {
        /// The service asked about.
        service: &'static str,
        /// The status message.
        message: String,
    },
    /// A service is not SERVING.
    #[error("{service}: {status}")]
    NotServing {
        /// The service asked about.
        service: &'static str,
        /// Its status (`NOT_SERVING`, `UNKNOWN`, …).
        status: &'static str,
    },
    /// The check's runtime could not start.
    #[error("cannot start a tokio runtime: {0}")]
    Runtime(std::io::Error),
}

/// For callers that report errors as text (`quiver ctl health`).
impl From<HealthError> for String {
    fn from(e: HealthError) -> String {
        e.to_string()
    }
}

/// The services a healthy forwarder serves.
pub const SERVICES: [&str; 2] = [
    "networkservice.NetworkService",
    "connection.MonitorConnection",
];

/// Asks the server at `url` (`unix:///path`) for the status of each of [`SERVICES`]; `Ok` with
/// their names when every one is SERVING, otherwise why not. With `SPIFFE_ENDPOINT_SOCKET` set
/// (as in the forwarder's container, whose environment an exec probe shares), it dials with
/// mTLS under the SVID from there, as the server requires then.
pub async fn check(url: &str, timeout: Duration) -> Result<Vec<&'static str>, HealthError> {
    let identity = match std::env::var(ENDPOINT_ENV)
        .ok()
        .filter(|e| !e.trim().is_empty())
    {
        None => None,
        Some(endpoint) => Some(
            tokio::time::timeout(timeout, Identity::connect(&endpoint))
                .await
                .map_err(|_| HealthError::NoSvid {
                    endpoint: endpoint.clone(),
                    timeout,
                })?
                .map_err(|source| HealthError::Identity {
                    endpoint: endpoint.clone(),
                    source,
                })?,
        ),
    };
    check_with(url, timeout, identity.as_ref()).await
}

/// [`check`] with a given identity (mTLS) or none (plaintext).
pub async fn check_with(
    url: &str,
    timeout: Duration,
    identity: Option<&Identity>,
) -> Result<Vec<&'static str>, HealthError> {
    let channel = dial_with(url, timeout, identity)
        .await
        .map_err(|s| HealthError::Dial(s.message().to_string()))?;
    let mut client = HealthClient::new(channel);
    for service in SERVICES {
        let call = client.check(HealthCheckRequest {
            service: service.to_string(),
        });
        let reply = tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| HealthError::NoAnswer { service, timeout })?
            .map_err(|s| HealthError::Refused {
                service,
                message: s.message().to_string(),
            })?
            .into_inner();
        let status = ServingStatus::try_from(reply.status).unwrap_or(ServingStatus::Unknown);
        if status != ServingStatus::Serving {
            return Err(HealthError::NotServing {
                service,
                status: status.as_str_name(),
            });
        }
    }
    Ok(SERVICES.to_vec())
}

/// [`check`] from a thread without a tokio runtime (the `quiver ctl` command).
pub fn check_blocking(url: &str, timeout: Duration) -> Result<Vec<&'static str>, HealthError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(HealthError::Runtime)?
        .block_on(check(url, timeout))
}
