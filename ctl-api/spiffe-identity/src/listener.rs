//! What a gRPC server listens on: a unix socket (plaintext or SPIFFE mTLS; fds passed beside
//! the bytes, see [`grpc_unix::FdStream`]) or a TCP address (SPIFFE mTLS only: plaintext never leaves
//! the host).

use std::io;

use tokio::net::{TcpListener, UnixListener};

use grpc_unix::FdStream;

use crate::dialed::Dialed;

/// A bound listening socket for [`crate::serve`] and [`crate::tls_incoming`].
#[derive(Debug)]
pub enum Listener {
    /// A unix socket (`unix:///path`).
    Unix(UnixListener),
    /// A TCP address (`tcp://host:port`); served with mTLS only.
    Tcp(TcpListener),
}

impl From<UnixListener> for Listener {
    fn from(l: UnixListener) -> Self {
        Self::Unix(l)
    }
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Self {
        Self::Tcp(l)
    }
}

impl Listener {
    /// Where clients reach it: `unix:///path`, or `tcp://ip:port` with the port actually bound
    /// (the one the system chose for port 0).
    pub fn url(&self) -> io::Result<String> {
        match self {
            Self::Unix(l) => {
                let addr = l.local_addr()?;
                let path = addr
                    .as_pathname()
                    .ok_or_else(|| io::Error::other("the unix socket has no path"))?;
                Ok(format!("unix://{}", path.display()))
            }
            Self::Tcp(l) => Ok(format!("tcp://{}", l.local_addr()?)),
        }
    }

    /// The next connection: a unix one ready to receive fds, a TCP one without Nagle's delay.
    pub(crate) async fn accept(&self) -> io::Result<Dialed> {
        match self {
            Self::Unix(l) => {
                let (stream, _) = l.accept().await?;
                Ok(Dialed::Unix(FdStream::new(stream)))
            }
            Self::Tcp(l) => {
                let (stream, _) = l.accept().await?;
                stream.set_nodelay(true)?;
                Ok(Dialed::Tcp(stream))
            }
        }
    }
}
