//! NSM's path segment metrics: the counters of a connection's two ports in Quiver's own
//! segment's `metrics` map, as sdk-vpp's `stats` elements write them for cmd-forwarder-vpp:
//! `server_*` for the port toward the NSC (the side where Quiver is the server), `client_*`
//! for the port toward the NSE (where Quiver is the client), each `rx_bytes`, `tx_bytes`,
//! `rx_packets`, `tx_packets` and `drops` as a decimal string. Written at each Request (so a
//! refresh's answer carries them) and, every `NSM_METRICS_EXPORT_INTERVAL`, published to
//! MonitorConnections when they changed; the OpenTelemetry export (`crate::telemetry::metrics`)
//! reads them as published.

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Duration;

use nsm_proto::connection::Connection;

use super::entry::Entry;
use super::Core;
use crate::dataplane::{PortCounters, PortName};

/// The prefix of the NSC-facing port's metrics (Quiver serves the NSC).
pub const SERVER: &str = "server_";
/// The prefix of the NSE-facing port's metrics (Quiver is the NSE's client).
pub const CLIENT: &str = "client_";

/// How one metric is read from a port's counters.
pub type Counter = fn(&PortCounters) -> u64;

/// The metric names of one port, after its prefix, and how each is read.
pub const FIELDS: [(&str, Counter); 5] = [
    ("rx_bytes", |c| c.rx_bytes),
    ("tx_bytes", |c| c.tx_bytes),
    ("rx_packets", |c| c.rx_packets),
    ("tx_packets", |c| c.tx_packets),
    ("drops", |c| c.drops),
];

/// Every metric name Quiver's segment may carry (`server_rx_bytes`, …, `client_drops`).
pub fn metric_names() -> Vec<String> {
    [SERVER, CLIENT]
        .into_iter()
        .flat_map(|prefix| FIELDS.map(|(name, _)| format!("{prefix}{name}")))
        .collect()
}

/// Writes the metrics of the NSC-facing port (`server`) and the NSE-facing port (`client`)
/// into `conn`'s own segment (the one its path index names); a side without counters (a
/// tunnel) has its names removed. Returns whether anything changed.
pub fn write_segment_metrics(
    conn: &mut Connection,
    server: Option<PortCounters>,
    client: Option<PortCounters>,
) -> bool {
    let Some(path) = conn.path.as_mut() else {
        return false;
    };
    let Some(own) = path.path_segments.get_mut(path.index as usize) else {
        return false;
    };
    let before = own.metrics.clone();
    for (prefix, counters) in [(SERVER, server), (CLIENT, client)] {
        for (name, read) in FIELDS {
            let key = format!("{prefix}{name}");
            match &counters {
                Some(c) => own.metrics.insert(key, read(c).to_string()),
                None => own.metrics.remove(&key),
            };
        }
    }
    own.metrics != before
}

impl Core {
    /// Reads the counters of `entry`'s ports into its published connection; returns whether
    /// they changed.
    pub(super) async fn fill_metrics(&self, entry: &mut Entry) -> bool {
        let ports: [PortName; 2] = [entry.client.name().clone(), entry.endpoint.name().clone()];
        let read = self
            .dp
            .call(move |d| Ok(ports.map(|p| d.port_counters(&p))))
            .await;
        match read {
            Ok([server, client]) => write_segment_metrics(&mut entry.published, server, client),
            Err(e) => {
                tracing::debug!(error = %e, "cannot read a connection's counters");
                false
            }
        }
    }

    /// Reads every connection's counters again and publishes (UPDATE) each whose metrics
    /// changed.
    pub async fn refresh_metrics(&self) {
        for id in self.table.ids() {
            let mut slot = self.table.lock(&id).await;
            let Some(entry) = slot.as_mut() else {
                continue;
            };
            if self.fill_metrics(entry).await {
                self.monitor.update(&entry.published);
            }
        }
    }
}

/// Refreshes `core`'s metrics every `every` until the core is gone (or the task aborted).
pub async fn refresh_every(core: Weak<Core>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(core) = core.upgrade() else { return };
        core.refresh_metrics().await;
    }
}

/// The metrics of `conn`'s own segment (empty when it has none).
pub fn own_segment_metrics(conn: &Connection) -> HashMap<String, String> {
    conn.path
        .as_ref()
        .and_then(|p| p.path_segments.get(p.index as usize))
        .map(|s| s.metrics.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsm_proto::connection::{Path, PathSegment};

    #[test]
    fn both_sides_go_into_the_own_segment_only() {
        let seg = |name: &str| PathSegment {
            name: name.into(),
            ..Default::default()
        };
        let mut conn = Connection {
            path: Some(Path {
                index: 1,
                path_segments: vec![seg("nsc"), seg("quiver"), seg("nse")],
            }),
            ..Default::default()
        };
        let nsc_side = PortCounters {
            rx_bytes: 100,
            tx_bytes: 200,
            rx_packets: 1,
            tx_packets: 2,
            drops: 3,
        };
        assert!(write_segment_metrics(&mut conn, Some(nsc_side), None));
        let m = own_segment_metrics(&conn);
        assert_eq!(m["server_rx_bytes"], "100");
        assert_eq!(m["server_tx_packets"], "2");
        assert_eq!(m["server_drops"], "3");
        assert!(
            !m.contains_key("client_rx_bytes"),
            "a tunnel has none: {m:?}"
        );
        let path = conn.path.as_ref().unwrap();
        assert!(path.path_segments[0].metrics.is_empty());
        assert!(path.path_segments[2].metrics.is_empty());
        // The same again changes nothing; the other side's counters do.
        assert!(!write_segment_metrics(&mut conn, Some(nsc_side), None));
        assert!(write_segment_metrics(
            &mut conn,
            Some(nsc_side),
            Some(PortCounters::default())
        ));
        let m = own_segment_metrics(&conn);
        assert_eq!(m.len(), 10, "{m:?}");
        assert_eq!(m["client_drops"], "0");
    }
}
