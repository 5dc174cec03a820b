//! OpenTelemetry metrics of Quiver's path segment, as NSM's sdk records path segment metrics
//! (its `metrics` chain element, `pkg/networkservice/common/metrics`, which nsmgr runs; the
//! forwarder's own segment among them): for each key of the segment's `metrics` map, a
//! cumulative monotonic sum with integer values named `<segment name>_<key>`
//! (`forwarder_server_tx_bytes`), one data point per connection with attribute
//! [`CONNECTION`] = the id of the connection's first path segment (the NSC's). Exported by a
//! periodic reader every `NSM_METRICS_EXPORT_INTERVAL` (0: the SDK's default,
//! `OTEL_METRIC_EXPORT_INTERVAL` or 60 s) over OTLP/gRPC, as cmd-forwarder-vpp's
//! `InitOPTLMetricExporter` sets up.
//!
//! The values are the segment's `metrics` map as last published (what MonitorConnections
//! shows; `crate::connect::metrics` reads the ports' counters into it at each Request and
//! every `NSM_METRICS_EXPORT_INTERVAL`): the reader's thread asks the [`SegmentSource`] at
//! each export; nothing is recorded on the data path. A connection gone is no longer
//! reported.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::metrics::{AsyncInstrument, MeterProvider as _, ObservableCounter};
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::Resource;

use super::{ExportLog, TelemetryFailure, FLUSH_TIMEOUT};
use crate::connect::Core;

/// The attribute naming a data point's connection: the id of its first path segment.
pub const CONNECTION: &str = "connection";

/// The instrumentation scope of the metrics: none, as the sdk's `otel.Meter("")`.
const SCOPE: &str = "";

/// Where the export finds the connections' metrics.
pub trait SegmentSource: Send + Sync + 'static {
    /// Calls `f` with each connection's first path segment id and Quiver's own segment's
    /// `metrics` map. Called on the reader's thread; must not block for long.
    fn for_each(&self, f: &mut dyn FnMut(&str, &HashMap<String, String>));
}

/// What [`super::Telemetry::start`] exports of Quiver's path segment's metrics.
#[derive(Clone)]
pub struct SegmentExport {
    /// `NSM_METRICS_EXPORT_INTERVAL` (zero: the SDK's default).
    pub every: Duration,
    /// The keys of the segment's `metrics` map to export (`server_tx_bytes`, …).
    pub keys: Vec<String>,
    /// The connections.
    pub source: Arc<dyn SegmentSource>,
}

/// The instrument of metric `key` of the segment named `segment`: `<segment>_<key>`.
pub fn instrument_name(segment: &str, key: &str) -> String {
    format!("{segment}_{key}")
}

/// Why OpenTelemetry refuses `name` as an instrument name (the specification's rule, which the
/// Rust SDK enforces by exporting nothing of it: a letter, then up to 254 of letters, digits,
/// `_`, `.`, `-`, `/`).
pub fn invalid_instrument_name(name: &str) -> Option<&'static str> {
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Some("it must start with a letter");
    }
    if name.len() > 255 {
        return Some("it must be at most 255 characters");
    }
    let bad = |c: char| !c.is_ascii_alphanumeric() && !"_.-/".contains(c);
    name.contains(bad)
        .then_some("it may hold only letters, digits, '_', '.', '-' and '/'")
}

/// Reports `key`'s value in every connection `source` has that holds it as a decimal
/// (others, as the sdk does, are left out): `record(value, connection)`.
fn observe(source: &dyn SegmentSource, key: &str, mut record: impl FnMut(u64, &str)) {
    source.for_each(&mut |connection, metrics| {
        if let Some(v) = metrics.get(key).and_then(|v| v.parse::<u64>().ok()) {
            record(v, connection);
        }
    });
}

/// The published connections' own segment metrics, for the OpenTelemetry export: each
/// connection under its first path segment's id (the NSC's, as the sdk labels it). Holds the
/// core weakly; a core gone has none.
pub struct PublishedSegments(pub Weak<Core>);

impl SegmentSource for PublishedSegments {
    fn for_each(&self, f: &mut dyn FnMut(&str, &HashMap<String, String>)) {
        let Some(core) = self.0.upgrade() else { return };
        core.monitor.for_each(|conn| {
            let Some(path) = conn.path.as_ref() else {
                return;
            };
            let first = path.path_segments.first();
            let own = path.path_segments.get(path.index as usize);
            if let (Some(first), Some(own)) = (first, own) {
                f(&first.id, &own.metrics);
            }
        });
    }
}

/// The path segment's metrics on their way to a collector.
pub(super) struct SegmentMetrics {
    provider: SdkMeterProvider,
    /// Held for as long as they are exported.
    _counters: Vec<ObservableCounter<u64>>,
}

impl SegmentMetrics {
    /// Exports `export`'s metrics of the segment named `segment` to `url` as `resource`.
    /// Call within a tokio runtime (see [`super::Telemetry::start`]).
    pub(super) fn start(
        url: &str,
        resource: Resource,
        segment: &str,
        export: SegmentExport,
    ) -> Result<SegmentMetrics, TelemetryFailure> {
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .with_endpoint(url.to_string())
            .build()?;
        let reader = PeriodicReader::builder(Logged {
            inner: exporter,
            log: ExportLog::new(
                url,
                "metrics export",
                "the next one sends the counters again",
            ),
        })
        .with_interval(export.every)
        .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource)
            .build();
        let meter = provider.meter(SCOPE);
        let mut counters = Vec::new();
        for key in export.keys {
            let name = instrument_name(segment, &key);
            if let Some(why) = invalid_instrument_name(&name) {
                tracing::warn!(
                    instrument = name,
                    why,
                    "not an OpenTelemetry instrument name (NSM_NAME makes it): not exported"
                );
                continue;
            }
            let source = export.source.clone();
            let counter = meter
                .u64_observable_counter(name)
                .with_callback(move |o: &dyn AsyncInstrument<u64>| {
                    observe(&*source, &key, |v, connection| {
                        o.observe(v, &[KeyValue::new(CONNECTION, connection.to_string())]);
                    });
                })
                .build();
            counters.push(counter);
        }
        Ok(SegmentMetrics {
            provider,
            _counters: counters,
        })
    }

    /// Exports the values now and stops exporting; blocks (see
    /// [`super::Telemetry::shutdown`]).
    pub(super) fn shutdown(&self) {
        match self.provider.shutdown_with_timeout(FLUSH_TIMEOUT) {
            Ok(()) => tracing::debug!("OpenTelemetry metrics flushed"),
            Err(e) => tracing::warn!(error = %e, "OpenTelemetry metrics not flushed at shutdown"),
        }
    }
}

/// The OTLP metric exporter, its failures logged (see [`ExportLog`]).
#[derive(Debug)]
struct Logged {
    inner: opentelemetry_otlp::MetricExporter,
    log: ExportLog,
}

impl PushMetricExporter for Logged {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        let instruments = metrics.scope_metrics().flat_map(|s| s.metrics()).count();
        self.log.outcome(&result, instruments);
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Vec<(&'static str, HashMap<String, String>)>);

    impl SegmentSource for Fixed {
        fn for_each(&self, f: &mut dyn FnMut(&str, &HashMap<String, String>)) {
            for (connection, metrics) in &self.0 {
                f(connection, metrics);
            }
        }
    }

    fn map(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn each_connection_holding_the_key_as_a_number_is_reported() {
        let source = Fixed(vec![
            ("nsc-1", map(&[("server_tx_bytes", "1500"), ("drops", "0")])),
            // A tunnel side has no such key.
            ("nsc-2", map(&[("client_tx_bytes", "7")])),
            ("nsc-3", map(&[("server_tx_bytes", "many")])),
            ("nsc-4", map(&[("server_tx_bytes", "0")])),
        ]);
        let mut seen = Vec::new();
        observe(&source, "server_tx_bytes", |v, c| {
            seen.push((c.to_string(), v))
        });
        seen.sort();
        assert_eq!(
            seen,
            [("nsc-1".to_string(), 1500), ("nsc-4".to_string(), 0)]
        );
    }

    #[test]
    fn names_are_the_segment_and_the_key_and_checked_as_the_sdks_check_them() {
        assert_eq!(
            instrument_name("forwarder-vpp-x7k2p", "server_tx_bytes"),
            "forwarder-vpp-x7k2p_server_tx_bytes"
        );
        for good in ["forwarder_server_tx_bytes", "a-b.c/d_e", &"f".repeat(255)] {
            assert_eq!(invalid_instrument_name(good), None, "{good}");
        }
        for bad in [
            "1fwd_server_tx_bytes",
            "_x",
            "fwd x",
            "fwd:x",
            "",
            &"f".repeat(256),
        ] {
            assert!(invalid_instrument_name(bad).is_some(), "{bad:?} accepted");
        }
    }
}
