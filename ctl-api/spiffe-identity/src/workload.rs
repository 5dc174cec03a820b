//! The SPIFFE Workload API client and [`Identity`], the handle to the current X.509 identity.
//!
//! [`Identity::connect`] opens `FetchX509SVID` (a server stream) on the agent's socket, waits for
//! the first usable response, then keeps reading in a background task: each new response
//! replaces the identity (rotation), a bad one is logged and ignored, a broken stream is
//! reopened with backoff while the last good identity stays in use.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::Streaming;

use crate::error::SpiffeError;
use crate::id::SpiffeId;
use crate::svid::X509Identity;
use crate::workload_api::spiffe_workload_api_client::SpiffeWorkloadApiClient;
use crate::workload_api::{X509svidRequest, X509svidResponse};

/// The environment variable naming the Workload API socket (`unix:///run/spire/sockets/agent.sock`).
pub const ENDPOINT_ENV: &str = "SPIFFE_ENDPOINT_SOCKET";
/// The metadata every Workload API call carries (value `true`), without which the agent refuses.
pub const SECURITY_HEADER: &str = "workload.spiffe.io";

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The current X.509 identity of this workload, following rotations. Cheap to clone; reading
/// it ([`Identity::current`]) takes no lock beyond a watch channel's read.
#[derive(Clone)]
pub struct Identity {
    current: watch::Receiver<Arc<X509Identity>>,
    /// Stops the Workload API stream when the last handle goes.
    _source: Option<Arc<SourceTask>>,
}

struct SourceTask(AbortHandle);

impl Drop for SourceTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Identity {
    /// The identity from the Workload API at `$SPIFFE_ENDPOINT_SOCKET`, or `None` when that is
    /// not set: then Quiver serves plaintext gRPC on unix sockets only, and this logs so.
    /// Waits for the first SVID (the agent may need a while to attest us): bound it with
    /// `tokio::time::timeout` if needed.
    pub async fn from_env() -> Result<Option<Identity>, SpiffeError> {
        let endpoint = std::env::var(ENDPOINT_ENV).ok();
        Self::from_endpoint(endpoint.as_deref()).await
    }

    /// [`Identity::from_env`] with the variable's value given: `None` or empty means no
    /// Workload API (plaintext on unix sockets only, logged).
    pub async fn from_endpoint(endpoint: Option<&str>) -> Result<Option<Identity>, SpiffeError> {
        match endpoint.map(str::trim).filter(|e| !e.is_empty()) {
            None => {
                tracing::warn!(
                    "{ENDPOINT_ENV} is not set: no SPIFFE identity, gRPC is served and dialed in \
                     plaintext, on unix sockets only, and path tokens are neither minted nor checked"
                );
                Ok(None)
            }
            Some(endpoint) => {
                let identity = Self::connect(endpoint).await?;
                tracing::info!(
                    spiffe_id = %identity.spiffe_id(),
                    endpoint,
                    "SPIFFE identity from the Workload API: gRPC is served and dialed with mTLS"
                );
                Ok(Some(identity))
            }
        }
    }

    /// Connects to the Workload API at `endpoint` (`unix:///path` or `unix:/path`), waits for
    /// the first usable X.509 SVID (retrying with backoff while the agent refuses or is not
    /// there yet), then follows rotations in the background until the last handle is dropped.
    /// Fails at once only when `endpoint` is not a unix socket address.
    pub async fn connect(endpoint: &str) -> Result<Identity, SpiffeError> {
        let path = unix_socket_path(endpoint)?;
        let mut backoff = Backoff::default();
        let (first, stream) = loop {
            match open_stream(&path).await {
                Ok(mut stream) => match next_identity(&mut stream).await {
                    Ok(first) => break (first, stream),
                    Err(e) => tracing::warn!(endpoint, error = %e, "Workload API: no SVID yet"),
                },
                Err(e) => tracing::warn!(endpoint, error = %e, "Workload API unreachable"),
            }
            backoff.wait().await;
        };
        let (tx, rx) = watch::channel(Arc::new(first));
        let endpoint = endpoint.to_string();
        let task = tokio::spawn(follow(endpoint, path, stream, tx));
        Ok(Identity {
            current: rx,
            _source: Some(Arc::new(SourceTask(task.abort_handle()))),
        })
    }

    /// A fixed identity, with no Workload API behind it (tests, or SVIDs from files).
    pub fn fixed(identity: X509Identity) -> Identity {
        let (_tx, rx) = watch::channel(Arc::new(identity));
        Identity {
            current: rx,
            _source: None,
        }
    }

    /// An identity fed by the caller: every value sent on the channel replaces it.
    pub fn from_watch(current: watch::Receiver<Arc<X509Identity>>) -> Identity {
        Identity {
            current,
            _source: None,
        }
    }

    /// The current identity (certificates, key, bundles).
    pub fn current(&self) -> Arc<X509Identity> {
        self.current.borrow().clone()
    }

    /// The current SPIFFE ID.
    pub fn spiffe_id(&self) -> SpiffeId {
        self.current.borrow().spiffe_id().clone()
    }

    /// Waits until the identity changes after the last one this handle saw, and returns the
    /// new one; fails when no change can come any more.
    pub async fn changed(&mut self) -> Result<Arc<X509Identity>, SpiffeError> {
        self.current
            .changed()
            .await
            .map_err(|_| SpiffeError::SourceClosed)?;
        Ok(self.current.borrow_and_update().clone())
    }

    /// A receiver of every new identity.
    pub fn subscribe(&self) -> watch::Receiver<Arc<X509Identity>> {
        self.current.clone()
    }
}

/// Two handles are equal when they follow the same identity source.
impl PartialEq for Identity {
    fn eq(&self, other: &Self) -> bool {
        self.current.same_channel(&other.current)
    }
}

impl Eq for Identity {}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Identity")
            .field(&self.current.borrow().spiffe_id())
            .finish()
    }
}

/// The socket path of a `unix:///path` (or `unix:/path`) address.
pub(crate) fn unix_socket_path(endpoint: &str) -> Result<PathBuf, SpiffeError> {
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .filter(|p| p.starts_with('/'))
        .ok_or_else(|| {
            SpiffeError::InvalidEndpoint(format!(
                "{endpoint:?}: expected unix:///absolute/path/to/socket"
            ))
        })?;
    Ok(PathBuf::from(path))
}

/// A channel over the unix socket at `path`, connected now.
pub(crate) async fn unix_channel(path: PathBuf) -> Result<Channel, tonic::transport::Error> {
    // The URI only fills `:authority`; the connector ignores it.
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
}

async fn open_stream(path: &std::path::Path) -> Result<Streaming<X509svidResponse>, SpiffeError> {
    let channel = unix_channel(path.to_path_buf()).await?;
    let mut client = SpiffeWorkloadApiClient::new(channel);
    let mut request = tonic::Request::new(X509svidRequest {});
    request
        .metadata_mut()
        .insert(SECURITY_HEADER, MetadataValue::from_static("true"));
    Ok(client.fetch_x509svid(request).await?.into_inner())
}

/// The next response of the stream, made into an identity (the first, default, SVID).
async fn next_identity(
    stream: &mut Streaming<X509svidResponse>,
) -> Result<X509Identity, SpiffeError> {
    let response = stream.message().await?.ok_or(SpiffeError::StreamEnded)?;
    identity_of(response)
}

fn identity_of(response: X509svidResponse) -> Result<X509Identity, SpiffeError> {
    let svid = response
        .svids
        .into_iter()
        .next()
        .ok_or_else(|| SpiffeError::InvalidSvid("the response holds no SVID".into()))?;
    Ok(X509Identity::from_der(
        &svid.spiffe_id,
        &svid.x509_svid,
        &svid.x509_svid_key,
        &svid.bundle,
        &response.federated_bundles,
    )?
    .with_hint(svid.hint))
}

/// Follows the stream forever: each good response replaces the identity.
async fn follow(
    endpoint: String,
    path: PathBuf,
    mut stream: Streaming<X509svidResponse>,
    tx: watch::Sender<Arc<X509Identity>>,
) {
    let mut backoff = Backoff::default();
    loop {
        match stream.message().await {
            Ok(Some(response)) => match identity_of(response) {
                Ok(identity) => {
                    tracing::info!(
                        spiffe_id = %identity.spiffe_id(),
                        not_after = ?identity.not_after(),
                        "SPIFFE identity rotated"
                    );
                    backoff = Backoff::default();
                    tx.send_replace(Arc::new(identity));
                }
                Err(e) => tracing::warn!(
                    endpoint,
                    error = %e,
                    "Workload API sent an unusable SVID: keeping the current one"
                ),
            },
            end => {
                let error = end.err().map(|e| e.to_string()).unwrap_or_default();
                tracing::warn!(
                    endpoint,
                    error,
                    "Workload API stream ended: reconnecting, keeping the current SVID"
                );
                stream = loop {
                    backoff.wait().await;
                    match open_stream(&path).await {
                        Ok(s) => break s,
                        Err(e) => {
                            tracing::warn!(endpoint, error = %e, "Workload API unreachable")
                        }
                    }
                };
            }
        }
    }
}

/// Exponential backoff between reconnection attempts (pacing, not synchronisation).
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Self(BACKOFF_MIN)
    }
}

impl Backoff {
    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(BACKOFF_MAX);
    }
}
