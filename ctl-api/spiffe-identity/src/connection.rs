//! What a connection served by [`crate::serve`] tells the handlers of its requests: the fds the
//! client passed on it (unix sockets, see [`grpc_unix::FdStream`]), the queue of fds to pass
//! back, and the client's verified identity under TLS.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use grpc_unix::{FdSender, FdStream, ReceivedFds};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

use crate::peer::PeerIdentity;

/// What tonic puts in the extensions of every request that came over a unix socket or TLS
/// served by [`crate::serve`]: the fds the client passed on this connection, the queue of fds
/// to pass back to it, and the client's verified identity under TLS.
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    /// The fds received on the connection so far.
    pub fds: ReceivedFds,
    /// The fds to pass back to the client: each goes with the next bytes written on the
    /// connection (queue them before answering the call that names them).
    pub sender: FdSender,
    /// The TLS peer; `None` on a plaintext connection.
    pub peer: Option<PeerIdentity>,
}

impl ConnectionInfo {
    /// The connection info of the connection `request` came on, if it came over a connection
    /// [`crate::serve`] accepted.
    pub fn from_request<T>(request: &tonic::Request<T>) -> Option<&ConnectionInfo> {
        request.extensions().get::<ConnectionInfo>()
    }
}

impl PeerIdentity {
    /// The peer of the connection a request came on, when it came over [`crate::serve_tls`]
    /// (or [`crate::serve`] with an identity).
    pub fn from_request<T>(request: &tonic::Request<T>) -> Option<&PeerIdentity> {
        request
            .extensions()
            .get::<PeerIdentity>()
            .or_else(|| ConnectionInfo::from_request(request).and_then(|c| c.peer.as_ref()))
    }
}

/// A plaintext unix connection as [`crate::serve`] accepts it: the [`FdStream`]'s bytes and
/// fds, and a [`ConnectionInfo`] without a peer.
pub(crate) struct PlainUnix(pub(crate) FdStream);

impl Connected for PlainUnix {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        ConnectionInfo {
            fds: self.0.received().clone(),
            sender: self.0.sender().clone(),
            peer: None,
        }
    }
}

impl AsyncRead for PlainUnix {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for PlainUnix {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
