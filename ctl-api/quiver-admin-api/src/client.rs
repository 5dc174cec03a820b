//! A blocking client of the admin service, for `quiver ctl`.

use std::future::Future;
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::proto::admin_client::AdminClient as Stub;

/// The largest reply accepted.
const MAX_REPLY: usize = 1 << 30;

/// A connection to the admin socket with a small runtime to drive it.
pub struct AdminClient {
    runtime: tokio::runtime::Runtime,
    stub: Stub<Channel>,
}

impl AdminClient {
    /// Connects to the admin socket at `path`.
    pub fn connect(path: &Path) -> Result<AdminClient, ClientError> {
        // A clear message for the usual mistakes before gRPC's own.
        if let Err(source) = std::os::unix::net::UnixStream::connect(path) {
            return Err(ClientError::Socket {
                path: path.to_path_buf(),
                source,
            });
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ClientError::Runtime)?;
        let path: PathBuf = path.to_path_buf();
        let shown = path.clone();
        let channel = runtime
            .block_on(
                // The URI is required but unused: every connection goes to the socket.
                Endpoint::from_static("http://quiver.admin").connect_with_connector(
                    tower::service_fn(move |_: Uri| {
                        let path = path.clone();
                        async move {
                            let s = tokio::net::UnixStream::connect(path).await?;
                            Ok::<_, std::io::Error>(TokioIo::new(s))
                        }
                    }),
                ),
            )
            .map_err(|e| ClientError::Connect {
                path: shown,
                chain: error_chain(&e),
            })?;
        Ok(AdminClient {
            runtime,
            // A FIB of a million routes is tens of megabytes: far above gRPC's default 4 MiB.
            stub: Stub::new(channel).max_decoding_message_size(MAX_REPLY),
        })
    }

    /// A stub to make calls with (cheap: it shares the connection).
    pub fn stub(&self) -> Stub<Channel> {
        self.stub.clone()
    }

    /// Runs a call to completion.
    pub fn block_on<F: Future>(&self, call: F) -> F::Output {
        self.runtime.block_on(call)
    }
}

/// Why [`AdminClient::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing accepts on the socket (or it cannot be reached).
    #[error(
        "cannot connect to {}: {source} (is `quiver run` running with this --admin-socket?)",
        path.display()
    )]
    Socket {
        /// The admin socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The client's runtime could not start.
    #[error("cannot start a tokio runtime: {0}")]
    Runtime(std::io::Error),
    /// gRPC could not connect.
    #[error("cannot connect to {}: {chain}", path.display())]
    Connect {
        /// The admin socket.
        path: PathBuf,
        /// The transport error and its causes, `: `-separated.
        chain: String,
    },
}

/// For callers that report errors as text (`quiver ctl`).
impl From<ClientError> for String {
    fn from(e: ClientError) -> String {
        e.to_string()
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s += &format!(": {c}");
        source = c.source();
    }
    s
}
