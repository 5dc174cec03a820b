//! The churn's way to its endpoints (by name) and the forwarder's data path with every call
//! timed: where a Request's and a Close's time goes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nsm_forwarder::dataplane::{KernelSpec, MemifRole, MemifSpec};
use nsm_forwarder::endpoint::{BoxFuture, EndpointDiscovery, Found};
use nsm_forwarder::{BackendError, LinkEvents, NsmBackend, PortName};
use nsm_proto::connection::Connection;
use quiver::control::nsm::ForwarderDataplane;
use serde_json::json;

use super::util::{quantile_ms, round3};

/// Finds the endpoint by the connection's endpoint name: the steady one or the churn one.
pub(super) struct ByName(pub(super) HashMap<String, String>);

impl EndpointDiscovery for ByName {
    fn find<'a>(&'a self, conn: &'a Connection) -> BoxFuture<'a, Result<Found, tonic::Status>> {
        Box::pin(async move {
            let name = &conn.network_service_endpoint_name;
            self.0
                .get(name)
                .map(|url| Found::one(name.clone(), url.clone()))
                .ok_or_else(|| tonic::Status::not_found("no such endpoint"))
        })
    }
}

/// The forwarder's data path, each call timed: where a Request's and a Close's time goes.
pub(super) struct Timed {
    pub(super) inner: Arc<ForwarderDataplane>,
    pub(super) times: Mutex<HashMap<&'static str, Vec<Duration>>>,
    /// When the last client-side port (memif master, KERNEL interface) was made: from then
    /// to the endpoint-side port is the endpoint's round trip (find, Request on the cached
    /// channel) plus the server's task hand-offs.
    pub(super) client_side_done: Mutex<Option<Instant>>,
}

impl Timed {
    fn record(&self, what: &'static str, d: Duration) {
        self.times
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(what)
            .or_default()
            .push(d);
    }

    fn time<T>(&self, what: &'static str, f: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let r = f();
        self.record(what, t0.elapsed());
        r
    }

    /// The endpoint side is starting: records the gap since the client side was made.
    fn endpoint_side_starts(&self) {
        let done = self
            .client_side_done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = done {
            self.record("endpoint_request_gap", t.elapsed());
        }
    }

    /// The client side was made.
    fn client_side_made(&self) {
        *self
            .client_side_done
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// Per call: count, mean, p50, p99 (ms); clears what it reports.
    pub(super) fn report(&self) -> serde_json::Value {
        let mut times = std::mem::take(&mut *self.times.lock().unwrap_or_else(|e| e.into_inner()));
        let mut out = serde_json::Map::new();
        for (what, v) in times.iter_mut() {
            v.sort();
            out.insert(what.to_string(), summary(v));
        }
        serde_json::Value::Object(out)
    }
}

/// Count, mean, p50, p99 (ms) of sorted `v`.
pub(super) fn summary(v: &[Duration]) -> serde_json::Value {
    let mean = v.iter().map(|d| d.as_secs_f64()).sum::<f64>() * 1e3 / v.len().max(1) as f64;
    json!({
        "count": v.len(),
        "mean_ms": round3(mean),
        "p50_ms": round3(quantile_ms(v, 0.5)),
        "p99_ms": round3(quantile_ms(v, 0.99)),
    })
}

impl NsmBackend for Timed {
    fn create_memif(&self, owner: &str, spec: &MemifSpec) -> Result<(), BackendError> {
        let what = match spec.role {
            MemifRole::Master => "create_memif_master",
            MemifRole::Slave => "create_memif_slave",
        };
        if spec.role == MemifRole::Slave {
            self.endpoint_side_starts();
        }
        let r = self.time(what, || self.inner.create_memif(owner, spec));
        if spec.role == MemifRole::Master {
            self.client_side_made();
        }
        r
    }
    fn create_kernel(&self, owner: &str, spec: &KernelSpec) -> Result<(), BackendError> {
        // The server names the endpoint side's port `…-endpoint`.
        let endpoint_side = spec.name.0.ends_with("-endpoint");
        if endpoint_side {
            self.endpoint_side_starts();
            self.time("create_kernel_endpoint", || {
                self.inner.create_kernel(owner, spec)
            })
        } else {
            let r = self.time("create_kernel_client", || {
                self.inner.create_kernel(owner, spec)
            });
            self.client_side_made();
            r
        }
    }
    fn remove_port(&self, owner: &str, port: &PortName) -> Result<(), BackendError> {
        self.time("remove_port", || self.inner.remove_port(owner, port))
    }
    fn l2_cross_connect(
        &self,
        owner: &str,
        a: &PortName,
        b: &PortName,
    ) -> Result<(), BackendError> {
        self.time("l2_cross_connect", || {
            self.inner.l2_cross_connect(owner, a, b)
        })
    }
    fn l3_cross_connect(
        &self,
        owner: &str,
        a: &PortName,
        b: &PortName,
        peer_b: nsm_forwarder::L3NextHops,
        peer_a: nsm_forwarder::L3NextHops,
    ) -> Result<(), BackendError> {
        self.time("l3_cross_connect", || {
            self.inner.l3_cross_connect(owner, a, b, peer_b, peer_a)
        })
    }
    fn disconnect(&self, owner: &str, port: &PortName) -> Result<(), BackendError> {
        self.time("disconnect", || self.inner.disconnect(owner, port))
    }
    fn remove_owned(&self, owner: &str) -> Result<(), BackendError> {
        self.time("remove_owned", || self.inner.remove_owned(owner))
    }
    fn owners(&self) -> Result<Vec<String>, BackendError> {
        self.inner.owners()
    }
    fn watch_links(&self, events: LinkEvents) {
        self.inner.watch_links(events)
    }
}
