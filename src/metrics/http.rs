//! The metrics endpoint: HTTP/1 (hyper) on a TCP address, on a tokio runtime of its own
//! control-side thread. `GET /metrics` renders a scrape; any other path is 404.

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use quiver_admin_api::AdminError;

use crate::config::values::{self, ValueError};

/// How long a client may take to send its request's headers unless told otherwise (as
/// cmd-forwarder-vpp's `NSM_PROMETHEUS_SERVER_HEADER_TIMEOUT`).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Produces the page (blocking: it reads the admin backend), or why it cannot.
pub type Render = Arc<dyn Fn() -> Result<String, AdminError> + Send + Sync>;

/// Why the metrics endpoint cannot start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The listen address does not parse.
    #[error(transparent)]
    NotAddress(#[from] ValueError),
    /// The address cannot be bound.
    #[error("metrics: cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The bound socket cannot be made non-blocking.
    #[error("metrics: cannot configure {addr}: {source}")]
    Configure {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The listener's own address cannot be read.
    #[error("metrics: {0}")]
    LocalAddress(std::io::Error),
    /// The tokio runtime cannot start.
    #[error("metrics: cannot start a tokio runtime: {0}")]
    Runtime(std::io::Error),
    /// The server's thread cannot start.
    #[error("metrics: cannot start its thread: {0}")]
    Thread(std::io::Error),
}

/// Parses `listen` (`IP:PORT`) and binds it, so that a bad address stops `quiver run` before
/// anything starts.
pub fn bind(listen: &str) -> Result<TcpListener, MetricsError> {
    let addr = values::listen_address(listen)?;
    let listener =
        TcpListener::bind(addr).map_err(|source| MetricsError::Listen { addr, source })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| MetricsError::Configure { addr, source })?;
    Ok(listener)
}

/// The running endpoint; dropping it stops it and waits for scrapes in progress.
pub struct MetricsServer {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `render` on `listener` (from [`bind`]) from a new thread (`quiver-metrics`); a
    /// connection whose request headers take longer than `header_timeout` is closed.
    pub fn start(
        listener: TcpListener,
        render: Render,
        header_timeout: Duration,
    ) -> Result<MetricsServer, MetricsError> {
        let addr = listener.local_addr().map_err(MetricsError::LocalAddress)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(MetricsError::Runtime)?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("quiver-metrics".into())
            .spawn(move || {
                runtime.block_on(serve(listener, render, header_timeout, rx));
                // Dropping the runtime ends connections and waits for scrapes still running,
                // so nothing holds the forwarder once the thread is joined.
                drop(runtime);
            })
            .map_err(MetricsError::Thread)?;
        tracing::info!(%addr, "metrics listening (GET /metrics)");
        Ok(MetricsServer {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: TcpListener,
    render: Render,
    header_timeout: Duration,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("metrics: {e}");
            return;
        }
    };
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((s, _)) => s,
                    Err(e) => {
                        // Out of descriptors, say: do not spin.
                        tracing::warn!("metrics: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let render = render.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| respond(req, render.clone()));
                    if let Err(e) = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(header_timeout)
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        tracing::debug!("metrics: connection: {e}");
                    }
                });
            }
        }
    }
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

async fn respond(
    req: Request<Incoming>,
    render: Render,
) -> Result<Response<Full<Bytes>>, Infallible> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if req.uri().path() != "/metrics" {
        return Ok(reply(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found: metrics are at /metrics\n".into(),
        ));
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "only GET /metrics\n".into(),
        );
        r.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
        return Ok(r);
    }
    let page = tokio::task::spawn_blocking(move || render()).await;
    Ok(match page {
        Ok(Ok(text)) => reply(StatusCode::OK, super::render::CONTENT_TYPE, text),
        Ok(Err(e)) => reply(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("{e}\n")),
        Err(e) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            TEXT,
            format!("the scrape failed: {e}\n"),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_client_slow_with_its_headers_is_cut_off_and_others_are_served() {
        let listener = bind("127.0.0.1:0").unwrap();
        let page: Render = Arc::new(|| Ok("up 1\n".to_string()));
        let server = MetricsServer::start(listener, page, Duration::from_millis(100)).unwrap();
        let mut slow = std::net::TcpStream::connect(server.addr()).unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        // Far longer than the timeout, far shorter than hyper's own 30 s.
        slow.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let started = std::time::Instant::now();
        let mut rest = Vec::new();
        let read = slow.read_to_end(&mut rest);
        assert!(read.is_ok(), "not closed: {read:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let text = String::from_utf8_lossy(&rest);
        assert!(!text.contains("up 1"), "{text}");
        let mut ok = std::net::TcpStream::connect(server.addr()).unwrap();
        ok.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        ok.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("up 1\n"),
            "{answer}"
        );
    }
}
