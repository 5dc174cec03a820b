//! OpenTelemetry traces of the NSM calls, as cmd-forwarder-vpp sends them with `TELEMETRY=true`:
//! one span per Request and per Close Quiver's server handles, named for the gRPC method
//! ([`REQUEST`], [`CLOSE`]), with the connection id as its `id` attribute (and `type`
//! `networkService`, as the sdk's trace chain writes), status error when the call failed. Spans
//! are batched and exported over OTLP/gRPC in plaintext to `NSM_OPEN_TELEMETRY_ENDPOINT`
//! (Go's `host:port`) by the SDK's batch processor, on a thread of its own: a call only ends its
//! span into a bounded queue (a full queue drops the span, never waits). A failed export is
//! logged (once, until one succeeds again) and never fails a call. [`Telemetry::shutdown`]
//! exports what is pending, within [`FLUSH_TIMEOUT`]. With a [`SegmentExport`], Quiver's path
//! segment's metrics go to the same collector as OTLP metrics ([`metrics`]).
//!
//! The standard `OTEL_*` variables the SDK reads tune it further (`OTEL_BSP_SCHEDULE_DELAY`,
//! `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_EXPORTER_OTLP_TIMEOUT`, …).

pub mod metrics;

pub use metrics::{SegmentExport, SegmentSource};

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

/// The span of a Request.
pub const REQUEST: &str = "/networkservice.NetworkService/Request";
/// The span of a Close.
pub const CLOSE: &str = "/networkservice.NetworkService/Close";
/// The attribute holding the connection id.
pub const ID: &str = "id";
/// How long [`Telemetry::shutdown`] may take to export the spans still pending.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// The instrumentation scope of the spans (the sdk's `opentelemetry.InstrumentationName`).
const SCOPE: &str = "networkservicemesh";

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("OpenTelemetry exporter to {endpoint:?}: {why}")]
pub struct TelemetryError {
    /// `NSM_OPEN_TELEMETRY_ENDPOINT`.
    pub endpoint: String,
    /// What went wrong.
    #[source]
    pub why: TelemetryFailure,
}

/// What went wrong setting telemetry up ([`TelemetryError`] names the endpoint).
#[derive(Debug, thiserror::Error)]
pub enum TelemetryFailure {
    /// The endpoint is not a plaintext `host:port`.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The OTLP exporter could not be made.
    #[error(transparent)]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Why an endpoint is not Go's plaintext `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// A scheme other than `http://` (`https://`: TLS is not supported).
    #[error("expected host:port (plaintext gRPC)")]
    Scheme,
    /// No `:port`.
    #[error("expected host:port, e.g. otel-collector:4317")]
    NoPort,
    /// The host is empty or has characters no host name has.
    #[error("{host:?} is not a host")]
    Host {
        /// The host as given.
        host: String,
    },
    /// The port is not a number from 0 to 65535.
    #[error("{port:?} is not a port")]
    Port {
        /// The port as given.
        port: String,
    },
}

/// The gRPC URL of a Go `host:port` endpoint (`http://host:port`; an `http://` URL is kept).
/// Plaintext only: `https://` and anything without a port are refused.
pub fn endpoint_url(endpoint: &str) -> Result<String, EndpointError> {
    let e = endpoint.trim();
    let hostport = e.strip_prefix("http://").unwrap_or(e);
    if hostport.contains("://") {
        return Err(EndpointError::Scheme);
    }
    let (host, port) = hostport.rsplit_once(':').ok_or(EndpointError::NoPort)?;
    let host_ok = !host.is_empty()
        && (host.starts_with('[') && host.ends_with(']')
            || host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c)));
    if !host_ok {
        return Err(EndpointError::Host { host: host.into() });
    }
    port.parse::<u16>()
        .map_err(|_| EndpointError::Port { port: port.into() })?;
    Ok(format!("http://{hostport}"))
}

/// Spans of the NSM calls, and the path segment's metrics, on their way to a collector.
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    metrics: Option<metrics::SegmentMetrics>,
}

impl Telemetry {
    /// Exports to `endpoint` (Go's `host:port`) as service `name` (`NSM_NAME`, also the name
    /// of Quiver's path segment): spans, and with `segments` the segment's metrics. Call within
    /// a tokio runtime, which must run until [`Telemetry::shutdown`]: the gRPC channels' tasks
    /// run on it (each connects at its first export, and again after failures).
    pub fn start(
        endpoint: &str,
        name: &str,
        segments: Option<SegmentExport>,
    ) -> Result<Telemetry, TelemetryError> {
        let err = |why: TelemetryFailure| TelemetryError {
            endpoint: endpoint.to_string(),
            why,
        };
        let url = endpoint_url(endpoint).map_err(|e| err(e.into()))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(url.clone())
            .build()
            .map_err(|e| err(e.into()))?;
        let resource = Resource::builder()
            .with_service_name(name.to_string())
            .build();
        let metrics = segments
            .map(|export| metrics::SegmentMetrics::start(&url, resource.clone(), name, export))
            .transpose()
            .map_err(err)?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(Logged {
                inner: exporter,
                log: ExportLog::new(
                    &url,
                    "export",
                    "spans are dropped until the collector answers",
                ),
            })
            .with_resource(resource)
            .build();
        let tracer = provider.tracer(SCOPE);
        Ok(Telemetry {
            provider,
            tracer,
            metrics,
        })
    }

    /// Starts the span of call `method` ([`REQUEST`], [`CLOSE`]) on connection `id`.
    pub fn span(&self, method: &'static str, id: &str) -> CallSpan {
        let span = self
            .tracer
            .span_builder(method)
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new(ID, id.to_string()),
                KeyValue::new("type", "networkService"),
            ])
            .start(&self.tracer);
        CallSpan(span)
    }

    /// Exports the spans still pending (and the metrics' values now) and stops exporting,
    /// within [`FLUSH_TIMEOUT`] each; blocks (call it off the runtime's threads, e.g. in
    /// `spawn_blocking`).
    pub fn shutdown(&self) {
        match self.provider.shutdown_with_timeout(FLUSH_TIMEOUT) {
            Ok(()) => tracing::debug!("OpenTelemetry spans flushed"),
            Err(e) => tracing::warn!(error = %e, "OpenTelemetry spans not flushed at shutdown"),
        }
        if let Some(m) = &self.metrics {
            m.shutdown();
        }
    }
}

/// The span of one call; ends when [`CallSpan::end`] is called or it is dropped.
pub struct CallSpan(opentelemetry_sdk::trace::Span);

impl CallSpan {
    /// Ends the span with the call's outcome: status error with the gRPC status's code and
    /// message when it failed.
    pub fn end<T>(mut self, outcome: &Result<T, tonic::Status>) {
        if let Err(s) = outcome {
            self.0
                .set_status(Status::error(format!("{:?}: {}", s.code(), s.message())));
        }
        self.0.end();
    }
}

/// The log of one exporter's outcomes: the first failure after a success as a warning, the
/// rest at debug level until an export succeeds again.
#[derive(Debug)]
struct ExportLog {
    url: String,
    /// The export's name in messages (`export` for spans, as it always was, `metrics export`).
    export: &'static str,
    /// What a failure costs.
    cost: &'static str,
    failing: AtomicBool,
}

impl ExportLog {
    fn new(url: &str, export: &'static str, cost: &'static str) -> ExportLog {
        ExportLog {
            url: url.to_string(),
            export,
            cost,
            failing: AtomicBool::new(false),
        }
    }

    /// Logs the outcome of an export of `count` items (spans, instruments).
    fn outcome(&self, result: &OTelSdkResult, count: usize) {
        let (endpoint, export) = (&self.url, self.export);
        match result {
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => tracing::warn!(
                endpoint,
                count,
                error = %e,
                "OpenTelemetry {export} failed ({})",
                self.cost
            ),
            Err(e) => tracing::debug!(endpoint, count, error = %e, "OpenTelemetry {export} failed"),
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!(endpoint, "OpenTelemetry {export} works again")
            }
            Ok(()) => {}
        }
    }
}

/// The OTLP span exporter, its failures logged (see [`ExportLog`]).
#[derive(Debug)]
struct Logged {
    inner: opentelemetry_otlp::SpanExporter,
    log: ExportLog,
}

impl SpanExporter for Logged {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        self.log.outcome(&result, spans);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_endpoints_become_plaintext_grpc_urls() {
        for (given, want) in [
            (
                "otel-collector.observability.svc.cluster.local:4317",
                "http://otel-collector.observability.svc.cluster.local:4317",
            ),
            ("127.0.0.1:4317", "http://127.0.0.1:4317"),
            ("[::1]:4317", "http://[::1]:4317"),
            ("http://collector:4317", "http://collector:4317"),
        ] {
            assert_eq!(endpoint_url(given).as_deref(), Ok(want), "{given}");
        }
        for bad in [
            "collector",
            ":4317",
            "collector:otlp",
            "https://collector:4317",
            "a b:1",
        ] {
            assert!(endpoint_url(bad).is_err(), "{bad} accepted");
        }
    }

    #[tokio::test]
    async fn a_bad_endpoint_is_refused_at_start() {
        let e = Telemetry::start("collector", "q", None)
            .err()
            .expect("accepted");
        assert_eq!(e.endpoint, "collector");
        assert!(
            matches!(e.why, TelemetryFailure::Endpoint(EndpointError::NoPort)),
            "{e}"
        );
        let t = Telemetry::start("127.0.0.1:4317", "q", None).unwrap();
        drop(t.span(REQUEST, "c1"));
        tokio::task::spawn_blocking(move || t.shutdown())
            .await
            .unwrap();
    }
}
