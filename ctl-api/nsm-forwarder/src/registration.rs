//! Registration with nsmgr: Quiver registers itself as an endpoint of the network service
//! `NSM_NSNAME` (default `forwarder`; labels from `NSM_LABELS`, by default `{"forwarder": {"p2p": "true"}}`, url =
//! its own socket), as cmd-forwarder-vpp does, registers again at 2/3 of the expiration nsmgr
//! returns, and at once when nsmgr restarts or drops the entry (Quiver watches its own entry
//! between refreshes); a failed registration is retried with backoff. It unregisters when the
//! server stops, after a Register in flight ends. nsmgr is dialed with mTLS when Quiver has a
//! SPIFFE identity, and then every call (Register, the watch's Find, Unregister) carries Quiver's path token for nsmgr
//! (`nsm-client-token`, aud = nsmgr's SPIFFE ID; see [`super::secure::sign_call`]). On a unix socket,
//! the url is passed as NSM's grpcfd does: `inode://<dev>/<ino>` of Quiver's socket, its fd
//! sent beside the call (see [`passed_endpoint`]). Register and Unregister carry the registry
//! path as NSM's registry clients do (gRPC metadata `path`, see [`RegistryPath`]): nsmgr's
//! authorization refuses them without it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nsm_proto::registry::network_service_endpoint_registry_client::NetworkServiceEndpointRegistryClient;
use nsm_proto::registry::{
    NetworkServiceEndpoint, NetworkServiceEndpointQuery, NetworkServiceLabels,
};
use spiffe_identity::PeerChannel;
use tokio::sync::watch;
use tonic::Status;

use crate::config::NsmConfig;
use crate::dial::dial_peer;
use crate::path::system_time;
use crate::secure::sign_call;

/// The network service forwarders register under unless `NSM_NSNAME` says otherwise.
pub const FORWARDER_SERVICE: &str = "forwarder";

/// How long to wait before registering again when nsmgr returned no expiration.
const DEFAULT_REFRESH: Duration = Duration::from_secs(60);

/// The gRPC metadata key of the registry path.
const PATH_KEY: &str = "path";

/// The path of a first registration: no segment yet (nsmgr fills them).
const FIRST_PATH: &str = r#"{"Index":0,"PathSegments":null}"#;

/// The registry path NSM's registry clients send beside Register and Unregister (sdk
/// `grpcmetadata`): the JSON `{"Index":…,"PathSegments":[{"token":…},…]}` in the gRPC metadata
/// `path`, `FIRST_PATH` the first time, then the one nsmgr sent back in its `path` response
/// header, so that a refresh and the Unregister continue the same path. nsmgr's registry puts it
/// in the call's context, its `updatepath` fills it and its authorization (`prev_token_signed`)
/// checks it: without it every Register is `PermissionDenied`.
#[derive(Clone, Debug, Default)]
pub struct RegistryPath(Arc<Mutex<Option<String>>>);

/// The shape of a registry path, to check what nsmgr sends back before keeping it.
#[derive(serde::Deserialize)]
struct PathJson {
    #[serde(rename = "Index")]
    _index: u32,
    #[serde(rename = "PathSegments")]
    _segments: Option<Vec<SegmentJson>>,
}

#[derive(serde::Deserialize)]
struct SegmentJson {
    #[serde(rename = "token")]
    _token: String,
}

impl RegistryPath {
    /// The path to send now.
    pub fn current(&self) -> String {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.clone().unwrap_or_else(|| FIRST_PATH.to_string())
    }

    /// Forgets the path: the next registration is a first one (nsmgr lost Quiver's entry).
    pub fn reset(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Puts the path in `req`'s metadata.
    fn attach<T>(&self, req: &mut tonic::Request<T>) {
        let value = tonic::metadata::MetadataValue::try_from(self.current())
            .unwrap_or_else(|_| tonic::metadata::MetadataValue::from_static(FIRST_PATH));
        req.metadata_mut().insert(PATH_KEY, value);
    }

    /// Keeps the path nsmgr sent back in `headers`, when it sent one that reads as a path.
    fn keep(&self, headers: &tonic::metadata::MetadataMap) {
        let Some(text) = headers.get(PATH_KEY).and_then(|v| v.to_str().ok()) else {
            return;
        };
        match serde_json::from_str::<PathJson>(text) {
            Ok(_) => *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(text.to_string()),
            Err(e) => tracing::warn!(error = %e, "nsmgr sent a registry path that does not parse"),
        }
    }
}

/// Quiver as a registry entry.
pub fn endpoint(cfg: &NsmConfig) -> NetworkServiceEndpoint {
    let labels = cfg.registration_labels();
    NetworkServiceEndpoint {
        name: cfg.name.clone(),
        network_service_names: vec![cfg.nsname.clone()],
        network_service_labels: HashMap::from([(
            cfg.nsname.clone(),
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

/// Registers once, continuing `path`; returns how long until the next registration is due
/// (2/3 of the expiration nsmgr granted).
pub async fn register(cfg: &NsmConfig, path: &RegistryPath) -> Result<Duration, Status> {
    register_on(cfg, path).await.map(|(next, _)| next)
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
async fn register_on(
    cfg: &NsmConfig,
    path: &RegistryPath,
) -> Result<(Duration, PeerChannel), Status> {
    let peer = dial_peer(&cfg.connect_to, cfg.dial_timeout, cfg.identity.as_ref()).await?;
    let mut client = NetworkServiceEndpointRegistryClient::new(peer.channel());
    let mut req = registry_request(cfg, &peer, passed_endpoint(cfg, &peer))?;
    req.set_timeout(cfg.dial_timeout * 4);
    path.attach(&mut req);
    let answer = client.register(req).await?;
    path.keep(answer.metadata());
    let granted = answer.into_inner();
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
/// `deleted` answer for Quiver that nsmgr forgot it, and so does a watch that cannot be opened
/// because nsmgr is gone; each ends the wait early. So does a watch that ends cleanly: nsmgr
/// ends it so when the registry behind it restarts, and that registry has forgotten Quiver
/// (waiting for the refresh left new clients with "no candidates found" for ~35 s). A
/// registry that refuses to watch with a status of its own leaves only the timer.
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
        found = tokio::time::timeout(WATCH_ANSWER, client.find(query)) => match found {
            // nsmgr answers a watch at once (with Quiver's own entry); one that does not
            // answer at all is gone (a connection to an nsmgr that stopped serving it).
            Err(_) => return Watched::Lost("nsmgr did not answer the watch".into()),
            Ok(found) => match found {
            Ok(stream) => stream.into_inner(),
            // A registry that answers but will not watch: the timer alone.
            Err(e) if refuses_to_watch(e.code()) => {
                tracing::debug!(error = %e, "nsmgr does not watch: refreshing on time only");
                due.await;
                return Watched::Due;
            }
            // No answer at all (nsmgr went away between the registration and the watch, or
            // the connection broke): as a watch that breaks, registering again at once.
            Err(e) => return Watched::Lost(e.to_string()),
            },
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
                Ok(None) => return Watched::Lost("nsmgr ended the watch".into()),
                Err(e) => return Watched::Lost(e.to_string()),
            },
        }
    }
}

/// How long nsmgr may take to answer the watch of Quiver's entry.
const WATCH_ANSWER: Duration = Duration::from_secs(5);

/// Whether a refused `Find` with `watch` means the registry answers but does not watch (so
/// only the refresh timer is left), rather than that nsmgr is gone.
fn refuses_to_watch(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(
        code,
        Unimplemented | PermissionDenied | InvalidArgument | FailedPrecondition | NotFound
    )
}

/// Removes Quiver's registration (when the server stops), continuing `path`; a failure is
/// logged (the entry expires on its own).
pub async fn unregister(cfg: &NsmConfig, path: &RegistryPath) {
    let unregister = async {
        let peer = dial_peer(&cfg.connect_to, cfg.dial_timeout, cfg.identity.as_ref()).await?;
        let mut client = NetworkServiceEndpointRegistryClient::new(peer.channel());
        let mut req = registry_request(cfg, &peer, passed_endpoint(cfg, &peer))?;
        req.set_timeout(cfg.dial_timeout * 4);
        path.attach(&mut req);
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
/// `watch_until`), along `path`, until `stop` turns true (or its sender goes); a failure is
/// logged and retried with a growing pause (up to 30 s). A registration lost after it held
/// for [`CALM`] is renewed at once; one lost again and again (a registry whose watches end at
/// once) waits a growing pause first, up to 30 s. A Register already sent when `stop` comes is finished, not dropped: the path nsmgr
/// answers it with is kept, so the Unregister that follows continues it and reaches nsmgr after
/// that Register, never before it.
pub async fn keep_registered(cfg: NsmConfig, path: RegistryPath, mut stop: watch::Receiver<bool>) {
    const FIRST_PAUSE: Duration = Duration::from_millis(250);
    let mut pause = FIRST_PAUSE;
    let mut lost_pause = Duration::ZERO;
    while !stopped_now(&stop) {
        match register_on(&cfg, &path).await {
            Ok((next, channel)) => {
                tracing::debug!(registry = cfg.connect_to, ?next, "registered with nsmgr");
                pause = FIRST_PAUSE;
                let held_since = tokio::time::Instant::now();
                let Some(watched) =
                    unless_stopped(&mut stop, watch_until(&cfg, channel, next)).await
                else {
                    return;
                };
                match watched {
                    Watched::Due => lost_pause = Duration::ZERO,
                    Watched::Lost(why) => {
                        // A new registration, not a refresh: nsmgr no longer has the old one.
                        path.reset();
                        if held_since.elapsed() >= CALM {
                            lost_pause = Duration::ZERO;
                        }
                        tracing::warn!(
                            registry = cfg.connect_to,
                            why,
                            after = ?lost_pause,
                            "lost the registration with nsmgr: registering again"
                        );
                        unless_stopped(&mut stop, tokio::time::sleep(lost_pause)).await;
                        lost_pause = (lost_pause * 2).clamp(FIRST_PAUSE, Duration::from_secs(30));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(registry = cfg.connect_to, error = %e, "cannot register with nsmgr");
                unless_stopped(&mut stop, tokio::time::sleep(pause)).await;
                pause = (pause * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// A registration that held this long before it was lost is renewed at once: it was lost to
/// a restart, not to a registry that cannot keep it.
const CALM: Duration = Duration::from_secs(10);

/// Whether `stop` says stop (true, or its sender is gone).
fn stopped_now(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow() || stop.has_changed().is_err()
}

/// Runs `work` unless `stop` turns true first (or its sender goes): `None` then.
async fn unless_stopped<F: std::future::Future>(
    stop: &mut watch::Receiver<bool>,
    work: F,
) -> Option<F::Output> {
    tokio::select! {
        biased;
        _ = stop.wait_for(|stop| *stop) => None,
        done = work => Some(done),
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
        // NSM_NSNAME names the service, and keys its labels.
        let cfg = NsmConfig {
            nsname: "fwd-b".into(),
            ..cfg
        };
        let e = endpoint(&cfg);
        assert_eq!(e.network_service_names, ["fwd-b"]);
        assert_eq!(e.network_service_labels["fwd-b"].labels["zone"], "a");
    }
}
