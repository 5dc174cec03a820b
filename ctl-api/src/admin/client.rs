//! A blocking client of the admin service, for `quiver ctl`.

use std::future::Future;
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::proto::quiver_admin::admin_client::AdminClient as Stub;

/// The largest reply accepted.
const MAX_REPLY: usize = 1 << 30;

/// A connection to the admin socket with a small runtime to drive it.
pub struct AdminClient {
    runtime: tokio::runtime::Runtime,
    stub: Stub<Channel>,
}

impl AdminClient {
    /// Connects to the admin socket at `path`.
    pub fn connect(path: &Path) -> Result<AdminClient, String> {
        // A clear message for the usual mistakes before gRPC's own.
        if let Err(e) = std::os::unix::net::UnixStream::connect(path) {
            return Err(format!(
                "cannot connect to {}: {e} (is `quiver run` running with this --admin-socket?)",
                path.display()
            ));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
        let path: PathBuf = path.to_path_buf();
        let shown = path.display().to_string();
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
            .map_err(|e| format!("cannot connect to {shown}: {}", error_chain(&e)))?;
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

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s += &format!(": {c}");
        source = c.source();
    }
    s
}
