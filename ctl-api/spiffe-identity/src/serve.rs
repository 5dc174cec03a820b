//! Serving tonic over unix sockets and TCP with SPIFFE mTLS: a TLS acceptor in front of a
//! [`Listener`] (unix or TCP); plaintext on unix sockets only. tonic speaks plain HTTP/2 on
//! top; the TLS is ours (rustls through tokio-rustls), so the client's [`PeerIdentity`] reaches
//! request extensions.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use grpc_unix::{FdStream, LenientAuthority};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::body::Body;
use tonic::codegen::{http, Body as HttpBody, Bytes, StdError};
use tonic::service::Routes;
use tonic::transport::server::{Connected, Router};
use tower::{Layer, Service};

use crate::connection::{ConnectionInfo, PlainUnix};
use crate::dialed::Dialed;
use crate::error::SpiffeError;
use crate::listener::Listener;
use crate::peer::PeerIdentity;
use crate::tls::server_config;
use crate::workload::Identity;

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
