//! tonic over unix sockets and TCP with SPIFFE mTLS: a TLS acceptor in front of a [`Listener`]
//! (unix or TCP) for servers, a TLS connector dialing a unix socket or a TCP address for
//! clients; plaintext on unix sockets only. tonic speaks plain HTTP/2 on top;
//! the TLS is ours (rustls through tokio-rustls), so the peer's [`PeerIdentity`] reaches request
//! extensions and client channels know whom they talk to.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::mpsc;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::body::Body;
use tonic::codegen::{http, Body as HttpBody, Bytes, StdError};
use tonic::service::Routes;
use tonic::transport::server::{Connected, Router};
use tonic::transport::{Channel, Endpoint, Uri};
use tower::{Layer, Service};

use grpc_unix::{FdSender, FdStream, LenientAuthority, ReceivedFds};

use super::connection::{ConnectionInfo, PlainUnix};
use super::listener::Listener;
use super::workload::unix_socket_path;
use super::{client_config, server_config, Identity, PeerIdentity, SpiffeError};

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Accepted connections waiting for tonic.
const INCOMING_BACKLOG: usize = 64;

/// A TLS connection accepted by [`tls_incoming`]: tonic reads and writes through it, and puts
/// its [`ConnectionInfo`] (the [`PeerIdentity`], and the fds the client passed under the TLS,
/// see [`grpc_unix::FdStream`]; none on TCP) in every request's extensions.
pub struct SpiffeTlsStream {
    inner: tokio_rustls::server::TlsStream<Dialed>,
    peer: PeerIdentity,
}

impl SpiffeTlsStream {
    /// The verified client.
    pub fn peer(&self) -> &PeerIdentity {
        &self.peer
    }
}

impl Connected for SpiffeTlsStream {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        let (fds, sender) = match self.inner.get_ref().0 {
            Dialed::Unix(stream) => (stream.received().clone(), stream.sender().clone()),
            // No fds travel over TCP.
            Dialed::Tcp(_) => Default::default(),
        };
        ConnectionInfo {
            fds,
            sender,
            peer: Some(self.peer.clone()),
        }
    }
}

impl AsyncRead for SpiffeTlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for SpiffeTlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Accepts connections on `listener` and runs the TLS handshake of each in its own task (a slow
/// or hostile client holds up no one); yields the ones whose client presented a valid SVID.
/// Refused handshakes are logged. Stops accepting when the stream is dropped.
pub fn tls_incoming(
    listener: impl Into<Listener>,
    identity: &Identity,
) -> Result<ReceiverStream<io::Result<SpiffeTlsStream>>, SpiffeError> {
    let listener = listener.into();
    let acceptor = TlsAcceptor::from(server_config(identity)?);
    let (tx, rx) = mpsc::channel(INCOMING_BACKLOG);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            let stream = match accepted {
                Ok(stream) => stream,
                Err(e) => {
                    // Out of descriptors and the like: say so, let things settle, go on.
                    tracing::warn!(error = %e, "accept failed on the TLS gRPC socket");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match handshake(&acceptor, stream).await {
                    Ok(stream) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "refused a gRPC client: TLS handshake failed")
                    }
                }
            });
        }
    });
    Ok(ReceiverStream::new(rx))
}

async fn handshake(acceptor: &TlsAcceptor, stream: Dialed) -> io::Result<SpiffeTlsStream> {
    let inner = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    let certificates = inner
        .get_ref()
        .1
        .peer_certificates()
        .ok_or_else(|| io::Error::other("the client sent no certificate"))?
        .iter()
        .map(|c| c.clone().into_owned())
        .collect();
    let peer = PeerIdentity::from_certificates(certificates).map_err(io::Error::other)?;
    tracing::debug!(peer = %peer.spiffe_id(), "gRPC client authenticated");
    Ok(SpiffeTlsStream { inner, peer })
}

/// Serves `router` on `listener` with SPIFFE mTLS until the server fails. Handlers find the
/// client's [`PeerIdentity`] with [`PeerIdentity::from_request`].
pub async fn serve_tls<L, ResBody>(
    router: Router<L>,
    listener: impl Into<Listener>,
    identity: &Identity,
) -> Result<(), SpiffeError>
where
    L: Layer<Routes>,
    L::Service:
        Service<http::Request<Body>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    <L::Service as Service<http::Request<Body>>>::Future: Send,
    <L::Service as Service<http::Request<Body>>>::Error: Into<StdError> + Send,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<StdError>,
{
    serve(router, listener, Some(identity), std::future::pending()).await
}

/// Serves `router` on `listener` until `signal` completes: with SPIFFE mTLS when there is an
/// identity, in plaintext when there is none (unix sockets only, see
/// [`Identity::from_env`]: a TCP listener without an identity is
/// [`SpiffeError::PlaintextTcp`]). Either way the fds clients pass on a unix socket reach
/// handlers in the [`ConnectionInfo`] of request extensions (see [`grpc_unix::FdStream`]), and a
/// request's `:authority` may be anything (see [`grpc_unix::LenientAuthority`]).
pub async fn serve<L, ResBody, F>(
    router: Router<L>,
    listener: impl Into<Listener>,
    identity: Option<&Identity>,
    signal: F,
) -> Result<(), SpiffeError>
where
    L: Layer<Routes>,
    L::Service:
        Service<http::Request<Body>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    <L::Service as Service<http::Request<Body>>>::Future: Send,
    <L::Service as Service<http::Request<Body>>>::Error: Into<StdError> + Send,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<StdError>,
    F: Future<Output = ()>,
{
    match identity {
        Some(identity) => {
            use tokio_stream::StreamExt;
            let incoming = tls_incoming(listener, identity)?.map(|s| s.map(LenientAuthority::new));
            router
                .serve_with_incoming_shutdown(incoming, signal)
                .await?
        }
        None => match listener.into() {
            Listener::Unix(listener) => {
                use tokio_stream::StreamExt;
                let incoming = UnixListenerStream::new(listener)
                    .map(|s| s.map(|s| LenientAuthority::new(PlainUnix(FdStream::new(s)))));
                router
                    .serve_with_incoming_shutdown(incoming, signal)
                    .await?
            }
            Listener::Tcp(listener) => {
                let addr = listener.local_addr()?;
                return Err(SpiffeError::PlaintextTcp(format!("tcp://{addr}")));
            }
        },
    }
    Ok(())
}

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
/// with [`super::SpiffeServerCertVerifier`] for [`PeerChannel::peer`] to mean anything).
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

/// A unix or TCP connection under the TLS: dialed by a client, or accepted by a server.
pub(super) enum Dialed {
    Unix(FdStream),
    Tcp(TcpStream),
}

impl AsyncRead for Dialed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Dialed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_flush(cx),
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
