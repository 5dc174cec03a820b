//! Prometheus metrics: `quiver run --metrics-listen 127.0.0.1:9464` (or `[metrics] listen`)
//! serves `GET /metrics` in the text exposition format. Off by default.
//!
//! A scrape reads the counters exactly as the admin API's `show` commands do, through the same
//! [`ForwarderAdmin`] backend (interfaces, runtime per worker, errors, memif, NSM connections)
//! plus the buffer pool's usage, on the control side: the HTTP server runs on a tokio runtime
//! of its own thread and never touches a worker.
//!
//! - [`mod@render`]: the text format;
//! - [`nsm`]: NSM's connection counters, named as cmd-forwarder-vpp names them;
//! - [`http`]: the endpoint.

mod exposition;
pub mod http;
pub mod nsm;
pub mod render;

use std::sync::Arc;

use quiver_admin_api::{AdminBackend, AdminError};

use crate::control::admin::{ConnectionSlot, ForwarderAdmin};
use crate::control::owner::Control;

pub use http::{bind, MetricsError, MetricsServer, HEADER_TIMEOUT};
pub use render::{render, PoolUsage, Scrape};

/// Reads everything a scrape shows. `nsm`: the NSM service's connections, and `nsm_metrics`
/// their counters, when it runs.
pub fn scrape(
    admin: &ForwarderAdmin,
    pool: &dataplane::BufferPool,
    nsm: Option<&ConnectionSlot>,
    nsm_metrics: Option<(&nsm::NsmSource, &Control)>,
) -> Result<Scrape, AdminError> {
    // Free before capacity - free: a buffer freed in between is not counted twice.
    let free = pool.free_count() as u64;
    Ok(Scrape {
        interfaces: admin.interfaces()?,
        runtime: admin.runtime(true)?,
        errors: admin.errors()?,
        memifs: admin.memifs()?,
        connections: nsm.map(|c| c.list()),
        nsm: nsm_metrics.map(|(source, control)| source.read(&control.view())),
        pool: PoolUsage {
            capacity: u64::from(pool.capacity()),
            free,
            in_use: u64::from(pool.capacity()).saturating_sub(free),
        },
    })
}

/// Serves metrics of the forwarder `control` reads on `listener` (from [`bind`]) until the
/// returned server is dropped; with `nsm_metrics`, NSM's connection counters too. A client
/// slower than `header_timeout` with its request's headers is cut off. A scrape reads the
/// owner's published view: it never waits for a change in progress.
pub fn start(
    control: &Control,
    listener: std::net::TcpListener,
    nsm: Option<ConnectionSlot>,
    nsm_metrics: Option<nsm::NsmSource>,
    header_timeout: std::time::Duration,
) -> Result<MetricsServer, MetricsError> {
    let pool = control.pool().clone();
    // Its own backend: `clear counters` through the admin API does not rewind the interface
    // counters Prometheus sees (node and error counters are the data plane's and do rewind,
    // which Prometheus treats as a counter reset).
    let admin = ForwarderAdmin::new(control.clone(), nsm.clone().unwrap_or_default());
    let control = control.clone();
    let page: http::Render = Arc::new(move || {
        let nsm_metrics = nsm_metrics.as_ref().map(|s| (s, &control));
        scrape(&admin, &pool, nsm.as_ref(), nsm_metrics).map(|s| render(&s))
    });
    MetricsServer::start(listener, page, header_timeout)
}
