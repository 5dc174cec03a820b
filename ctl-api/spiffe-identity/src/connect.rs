//! Dialing tonic channels over unix sockets and TCP with SPIFFE mTLS: a TLS connector dialing
//! a unix socket or a TCP address; plaintext on unix sockets only. Client channels know whom
//! they talk to ([`PeerChannel::peer`]) and pass fds beside the bytes on unix sockets.

use std::io;
use std::sync::{Arc, Mutex};

use grpc_unix::{FdSender, FdStream, ReceivedFds};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsConnector;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::dialed::Dialed;
use crate::error::SpiffeError;
use crate::peer::PeerIdentity;
use crate::tls::client_config;
use crate::workload::{unix_socket_path, Identity};

/// A client channel and the server at its other end, as the last TLS handshake verified it
/// (tonic reconnects on its own; each reconnection updates it).
#[derive(Clone, Debug)]
pub struct PeerChannel {
    channel: Channel,
    peer: Arc<Mutex<Option<PeerIdentity>>>,
    fds: FdSender,
    received: ReceivedFds,
}

impl PeerChannel {
    /// The tonic channel, to build generated clients on.
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// The server's identity; `None` on a plaintext channel.
    pub fn peer(&self) -> Option<PeerIdentity> {
        self.peer.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The fds to pass to the server (on a unix socket): each goes with the next bytes the
    /// channel writes (see [`grpc_unix::FdStream`]). Queue them before the call that names them.
    pub fn fds(&self) -> &FdSender {
        &self.fds
    }

    /// The fds the server passed back (on a unix socket), on any connection of the channel:
    /// they come with the bytes of the answers that name them, so they are here by the time
    /// such an answer is. They close when the channel (every clone of it) is dropped, unless
    /// taken out first.
    pub fn received(&self) -> &ReceivedFds {
        &self.received
    }
}

/// Dials `uri` (`unix:///path`, or `tcp://host:port`) with SPIFFE mTLS and connects now.
pub async fn connect_tls(uri: &str, identity: &Identity) -> Result<PeerChannel, SpiffeError> {
    connect_tls_with_config(uri, client_config(identity)?).await
}

/// Dials `uri` with mTLS when there is an identity, in plaintext when there is none (then only
/// `unix:///path` is accepted: without an identity nothing leaves the host).
pub async fn connect(uri: &str, identity: Option<&Identity>) -> Result<PeerChannel, SpiffeError> {
    match identity {
        Some(identity) => connect_tls(uri, identity).await,
        None => {
            let path = unix_socket_path(uri).map_err(|_| {
                SpiffeError::InvalidEndpoint(format!(
                    "{uri:?}: without a SPIFFE identity only unix:///path is dialed (plaintext)"
                ))
            })?;
            let fds = FdSender::default();
            let received = ReceivedFds::default();
            let (sender, table) = (fds.clone(), received.clone());
            // The URI only fills `:authority`; the connector ignores it.
            let channel = Endpoint::from_static("http://localhost")
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let (path, sender, table) = (path.clone(), sender.clone(), table.clone());
                    async move {
                        let stream = UnixStream::connect(path).await?;
                        Ok::<_, io::Error>(TokioIo::new(FdStream::with_tables(
                            stream, sender, table,
                        )))
                    }
                }))
                .await?;
            Ok(PeerChannel {
                channel,
                peer: Arc::default(),
                fds,
                received,
            })
        }
    }
}

/// [`connect_tls`] with a rustls configuration of the caller's (it must verify the server
/// with [`crate::SpiffeServerCertVerifier`] for [`PeerChannel::peer`] to mean anything).
pub async fn connect_tls_with_config(
    uri: &str,
    config: Arc<rustls::ClientConfig>,
) -> Result<PeerChannel, SpiffeError> {
    let target = Target::parse(uri)?;
    let connector = TlsConnector::from(config);
    let peer: Arc<Mutex<Option<PeerIdentity>>> = Arc::default();
    let seen = peer.clone();
    let fds = FdSender::default();
    let received = ReceivedFds::default();
    let (sender, table) = (fds.clone(), received.clone());
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let (target, connector, seen) = (target.clone(), connector.clone(), seen.clone());
            let (sender, table) = (sender.clone(), table.clone());
            async move {
                let stream = target.dial(sender, table).await?;
                // No name is checked (SPIFFE IDs are) and no SNI is sent: any name will do.
                let name = ServerName::try_from("localhost").map_err(io::Error::other)?;
                let tls = connector.connect(name, stream).await?;
                let certificates = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .ok_or_else(|| io::Error::other("the server sent no certificate"))?
                    .iter()
                    .map(|c| c.clone().into_owned())
                    .collect();
                let identity =
                    PeerIdentity::from_certificates(certificates).map_err(io::Error::other)?;
                *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(identity);
                Ok::<_, io::Error>(TokioIo::new(tls))
            }
        }))
        .await?;
    Ok(PeerChannel {
        channel,
        peer,
        fds,
        received,
    })
}

/// Where a client dials.
#[derive(Clone, Debug)]
enum Target {
    Unix(std::path::PathBuf),
    Tcp(String),
}

impl Target {
    fn parse(uri: &str) -> Result<Self, SpiffeError> {
        match uri.strip_prefix("tcp://") {
            Some(addr) if !addr.is_empty() => Ok(Self::Tcp(addr.to_string())),
            _ => unix_socket_path(uri).map(Self::Unix).map_err(|_| {
                SpiffeError::InvalidEndpoint(format!(
                    "{uri:?}: expected unix:///path or tcp://host:port"
                ))
            }),
        }
    }

    /// Dials; a unix connection passes the fds queued in `fds` with its writes and puts
    /// those it receives in `received`.
    async fn dial(&self, fds: FdSender, received: ReceivedFds) -> io::Result<Dialed> {
        match self {
            Self::Unix(path) => {
                let stream = UnixStream::connect(path).await?;
                Ok(Dialed::Unix(FdStream::with_tables(stream, fds, received)))
            }
            Self::Tcp(addr) => {
                let stream = TcpStream::connect(addr.as_str()).await?;
                stream.set_nodelay(true)?;
                Ok(Dialed::Tcp(stream))
            }
        }
    }
}
