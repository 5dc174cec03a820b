//! Registration with nsmgr: Quiver registers itself as an endpoint of the network service
//! `forwarder` (labels `{"forwarder": {"p2p": "true"}}`, url = its own socket), as
//! cmd-forwarder-vpp does, and registers again at 2/3 of the expiration nsmgr returns.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use tonic::Status;

use super::config::NsmConfig;
use super::endpoint::dial;
use super::path::system_time;
use crate::proto::registry::network_service_endpoint_registry_client::NetworkServiceEndpointRegistryClient;
use crate::proto::registry::{NetworkServiceEndpoint, NetworkServiceLabels};

/// The network service every forwarder registers under.
pub const FORWARDER_SERVICE: &str = "forwarder";

/// How long to wait before registering again when nsmgr returned no expiration.
const DEFAULT_REFRESH: Duration = Duration::from_secs(60);

/// Quiver as a registry entry.
pub fn endpoint(cfg: &NsmConfig) -> NetworkServiceEndpoint {
    let mut labels = cfg.labels.clone();
    labels.insert("p2p".into(), "true".into());
    NetworkServiceEndpoint {
        name: cfg.name.clone(),
        network_service_names: vec![FORWARDER_SERVICE.into()],
        network_service_labels: HashMap::from([(
            FORWARDER_SERVICE.to_string(),
            NetworkServiceLabels { labels },
        )]),
        url: cfg.listen_on.clone(),
        ..Default::default()
    }
}

/// Registers once; returns how long until the next registration is due (2/3 of the
/// expiration nsmgr granted).
pub async fn register(cfg: &NsmConfig) -> Result<Duration, Status> {
    let channel = dial(&cfg.connect_to, cfg.dial_timeout).await?;
    let mut client = NetworkServiceEndpointRegistryClient::new(channel);
    let mut req = tonic::Request::new(endpoint(cfg));
    req.set_timeout(cfg.dial_timeout * 4);
    let granted = client.register(req).await?.into_inner();
    let left = granted
        .expiration_time
        .as_ref()
        .and_then(system_time)
        .and_then(|t| t.duration_since(SystemTime::now()).ok());
    Ok(left.map_or(DEFAULT_REFRESH, |d| d * 2 / 3))
}

/// Registers, and again before each registration expires, forever; a failure is logged and
/// retried with a growing pause (up to 30 s).
pub async fn keep_registered(cfg: NsmConfig) {
    let mut pause = Duration::from_millis(250);
    loop {
        match register(&cfg).await {
            Ok(next) => {
                tracing::debug!(registry = cfg.connect_to, ?next, "registered with nsmgr");
                pause = Duration::from_millis(250);
                tokio::time::sleep(next).await;
            }
            Err(e) => {
                tracing::warn!(registry = cfg.connect_to, error = %e, "cannot register with nsmgr");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(30));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_is_a_p2p_forwarder_at_our_socket() {
        let cfg = NsmConfig {
            name: "quiver-a".into(),
            listen_on: "unix:///q.sock".into(),
            ..NsmConfig::default()
        };
        let e = endpoint(&cfg);
        assert_eq!(e.name, "quiver-a");
        assert_eq!(e.network_service_names, ["forwarder"]);
        assert_eq!(e.network_service_labels["forwarder"].labels["p2p"], "true");
        assert_eq!(e.url, "unix:///q.sock");
    }
}
