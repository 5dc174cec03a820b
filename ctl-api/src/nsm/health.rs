//! The health check a probe runs against the NSM listen socket (`quiver ctl health`): both
//! services must report SERVING through `grpc.health.v1.Health`, as the server sets them.

use std::time::Duration;

use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::endpoint::dial;

/// The services a healthy forwarder serves.
pub const SERVICES: [&str; 2] = [
    "networkservice.NetworkService",
    "connection.MonitorConnection",
];

/// Asks the server at `url` (`unix:///path`) for the status of each of [`SERVICES`]; `Ok` with
/// their names when every one is SERVING, otherwise why not.
pub async fn check(url: &str, timeout: Duration) -> Result<Vec<&'static str>, String> {
    let channel = dial(url, timeout)
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
