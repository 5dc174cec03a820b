//! Registration with nsmgr: Quiver registers itself as an endpoint of the network service
//! `forwarder` (labels from `NSM_LABELS`, by default `{"forwarder": {"p2p": "true"}}`, url =
//! its own socket), as cmd-forwarder-vpp does, registers again at 2/3 of the expiration nsmgr
//! returns, and at once when nsmgr restarts or drops the entry (Quiver watches its own entry
//! between refreshes); a failed registration is retried with backoff. It unregisters when the
//! server stops. nsmgr is dialed with mTLS when Quiver has a SPIFFE identity, and then every
//! call (Register, the watch's Find, Unregister) carries Quiver's path token for nsmgr
//! (`nsm-client-token`, aud = nsmgr's SPIFFE ID; see [`super::secure::sign_call`]). On a unix socket,
//! the url is passed as NSM's grpcfd does: `inode://<dev>/<ino>` of Quiver's socket, its fd
//! sent beside the call (see [`passed_endpoint`]).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use nsm_proto::registry::network_service_endpoint_registry_client::NetworkServiceEndpointRegistryClient;
use nsm_proto::registry::{
    NetworkServiceEndpoint, NetworkServiceEndpointQuery, NetworkServiceLabels,
};
use spiffe_identity::PeerChannel;
use tonic::Status;

use crate::config::NsmConfig;
use crate::dial::dial_peer;
use crate::path::system_time;
use crate::secure::sign_call;

/// The network service every forwarder registers under.
pub const FORWARDER_SERVICE: &str = "forwarder";

/// How long to wait before registering again when nsmgr returned no expiration.
const DEFAULT_REFRESH: Duration = Duration::from_secs(60);

/// Quiver as a registry entry.
pub fn endpoint(cfg: &NsmConfig) -> NetworkServiceEndpoint {
    let labels = cfg.registration_labels();
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

/// [`endpoint`] as sent on `channel`: when both Quiver's socket and nsmgr's are unix sockets,
/// the url is the socket's `inode://<dev>/<ino>` and its fd is queued to go with the call
/// (grpcfd; nsmgr dials it through the fd). Otherwise, or if the socket cannot be opened, the
/// `unix://` url itself.
pub fn passed_endpoint(cfg: &NsmConfig, channel: &PeerChannel) -> NetworkServiceEndpoint {
    let mut nse = endpoint(cfg);
    let socket = cfg
        .listen_on
        .strip_prefix("unix://")
        .filter(|p| p.starts_with('/'));
    if let (Some(socket), true) = (socket, cfg.connect_to.starts_with("unix://")) {
        match channel.fds().send_file(std::path::Path::new(socket)) {
            Ok(key) => nse.url = key.to_string(),
            Err(e) => tracing::warn!(
                socket,
                error = %e,
                "cannot pass Quiver's socket by fd: registering its unix:// url"
            ),
        }
    }
    nse
}

/// Registers once; returns how long until the next registration is due (2/3 of the
/// expiration nsmgr granted).
pub async fn register(cfg: &NsmConfig) -> Result<Duration, Status> {
    register_on(cfg).await.map(|(next, _)| next)
}

/// A call to nsmgr on `channel`: with Quiver's path token for it when Quiver has an identity.
fn registry_request<T>(
    cfg: &NsmConfig,
    channel: &PeerChannel,
    msg: T,
) -> Result<tonic::Request<T>, Status> {
    sign_call(
        cfg.identity.as_ref(),
        channel.peer().as_ref(),
        cfg.max_token_lifetime,
        msg,
    )
}

/// [`register`], also returning the channel to nsmgr.
async fn register_on(cfg: &NsmConfig) -> Result<(Duration, PeerChannel), Status> {
    let peer = dial_peer(&cfg.connect_to, cfg.dial_timeout, cfg.identity.as_ref()).await?;
    let mut client = NetworkServiceEndpointRegistryClient::new(peer.channel());
    let mut req = registry_request(cfg, &peer, passed_endpoint(cfg, &peer))?;
    req.set_timeout(cfg.dial_timeout * 4);
    let granted = client.register(req).await?.into_inner();
    let left = granted
        .expiration_time
        .as_ref()
        .and_then(system_time)
        .and_then(|t| t.duration_since(SystemTime::now()).ok());
    Ok((left.map_or(DEFAULT_REFRESH, |d| d * 2 / 3), peer))
}

/// Why [`watch_until`] returned.
enum Watched {
    /// The refresh is due.
    Due,
    /// nsmgr went away, or dropped Quiver's entry: register again now.
    Lost(String),
}

/// Waits `next` (the refresh), watching Quiver's own entry on nsmgr meanwhile (`Find` with
/// `watch`): a watch that breaks means nsmgr restarted (or the connection to it went), a
/// `deleted` answer for Quiver that nsmgr forgot it; either ends the wait early. A registry
/// that does not watch (refuses, or ends the stream) leaves only the timer.
async fn watch_until(cfg: &NsmConfig, channel: PeerChannel, next: Duration) -> Watched {
    let due = tokio::time::sleep(next);
    tokio::pin!(due);
    let mut client = NetworkServiceEndpointRegistryClient::new(channel.channel());
    let query = NetworkServiceEndpointQuery {
        network_service_endpoint: Some(NetworkServiceEndpoint {
            name: cfg.name.clone(),
            ..Default::default()
        }),
        watch: true,
    };
    let query = match registry_request(cfg, &channel, query) {
        Ok(query) => query,
        Err(e) => {
            tracing::warn!(error = %e, "cannot sign the watch of Quiver's entry: refreshing on time only");
            due.await;
            return Watched::Due;
        }
    };
    let mut stream = tokio::select! {
        () = &mut due => return Watched::Due,
        found = client.find(query) => match found {
            Ok(stream) => stream.into_inner(),
            Err(e) => {
                tracing::debug!(error = %e, "nsmgr does not watch: refreshing on time only");
                due.await;
                return Watched::Due;
            }
        },
    };
    loop {
        tokio::select! {
            () = &mut due => return Watched::Due,
            answer = stream.message() => match answer {
                Ok(Some(a)) => {
                    let ours = a
                        .network_service_endpoint
                        .as_ref()
                        .is_some_and(|e| e.name == cfg.name);
                    if a.deleted && ours {
                        return Watched::Lost("nsmgr deleted Quiver's registration".into());
                    }
                }
                Ok(None) => {
                    due.await;
                    return Watched::Due;
                }
                Err(e) => return Watched::Lost(e.to_string()),
            },
        }
    }
}

/// Removes Quiver's registration (when the server stops); a failure is logged (the entry
/// expires on its own).
pub async fn unregister(cfg: &NsmConfig) {
    let unregister = async {
        let peer = dial_peer(&cfg.connect_to, cfg.dial_timeout, cfg.identity.as_ref()).await?;
        let mut client = NetworkServiceEndpointRegistryClient::new(peer.channel());
        let mut req = registry_request(cfg, &peer, passed_endpoint(cfg, &peer))?;
        req.set_timeout(cfg.dial_timeout * 4);
        client.unregister(req).await
    };
    match tokio::time::timeout(cfg.dial_timeout * 5, unregister).await {
        Ok(Ok(_)) => tracing::info!(registry = cfg.connect_to, "unregistered from nsmgr"),
        Ok(Err(e)) => {
            tracing::warn!(registry = cfg.connect_to, error = %e, "cannot unregister from nsmgr")
        }
        Err(_) => tracing::warn!(registry = cfg.connect_to, "nsmgr did not answer Unregister"),
    }
}

/// Registers, and again before each registration expires or as soon as nsmgr lost it (see
/// `watch_until`), forever; a failure is logged and retried with a growing pause (up to
/// 30 s), as is a registration lost again and again.
pub async fn keep_registered(cfg: NsmConfig) {
    const FIRST_PAUSE: Duration = Duration::from_millis(250);
    let mut pause = FIRST_PAUSE;
    let mut lost_pause = FIRST_PAUSE;
    loop {
        match register_on(&cfg).await {
            Ok((next, channel)) => {
                tracing::debug!(registry = cfg.connect_to, ?next, "registered with nsmgr");
                pause = FIRST_PAUSE;
                match watch_until(&cfg, channel, next).await {
                    Watched::Due => lost_pause = FIRST_PAUSE,
                    Watched::Lost(why) => {
                        tracing::warn!(
                            registry = cfg.connect_to,
                            why,
                            "lost the registration with nsmgr: registering again"
                        );
                        tokio::time::sleep(lost_pause).await;
                        lost_pause = (lost_pause * 2).min(Duration::from_secs(30));
                    }
                }
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
        // NSM_LABELS replaces the default.
        let cfg = NsmConfig {
            labels: HashMap::from([("p2p".into(), "false".into()), ("zone".into(), "a".into())]),
            ..cfg
        };
        let labels = &endpoint(&cfg).network_service_labels["forwarder"].labels;
        assert_eq!(labels["p2p"], "false");
        assert_eq!(labels["zone"], "a");
    }
}
