//! NSM's connection metrics, as cmd-forwarder-vpp names them: for each connection, the
//! counters of Quiver's interface toward the NSC (`server_*`: Quiver serves the NSC) and
//! toward the NSE (`client_*`: Quiver is the NSE's client), as
//! `[PROMETHEUS_METRICS_PREFIX_]{server,client}_{rx,tx}_{bytes,packets}_total` and
//! `…{server,client}_drops_total`, labelled `connection_id` (Quiver's path segment id),
//! `network_service`, `nsc` (the first path segment's name), `nsc_interface` and
//! `nse_interface` (Quiver's interfaces, as `quiver ctl show interfaces` names them). The same
//! numbers as the path segment's `metrics` map (`nsm_forwarder::connect::metrics`), read live
//! at each scrape.

use std::sync::{Arc, Weak};

use nsm_forwarder::connect::metrics::{CLIENT, FIELDS, SERVER};
use nsm_forwarder::{ConnectionSummary, Core, NsmHandle, PortCounters};

use super::exposition::Out;
use crate::control::nsm::port_counters;
use crate::control::owner::ForwarderView;

/// One connection's counters, and its labels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionCounters {
    /// Quiver's path segment id.
    pub connection_id: String,
    /// The network service.
    pub network_service: String,
    /// The NSC's name (the first path segment's).
    pub nsc: String,
    /// Quiver's interface toward the NSC.
    pub nsc_interface: String,
    /// Quiver's interface toward the NSE.
    pub nse_interface: String,
    /// The counters toward the NSC (`None`: an interface without counters, a tunnel).
    pub nsc_side: Option<PortCounters>,
    /// The counters toward the NSE.
    pub nse_side: Option<PortCounters>,
}

/// What a scrape shows of NSM's connections.
#[derive(Debug, Clone, Default)]
pub struct NsmScrape {
    /// `PROMETHEUS_METRICS_PREFIX` (empty: none).
    pub prefix: String,
    /// Every connection's counters.
    pub connections: Vec<ConnectionCounters>,
}

/// Where a scrape finds NSM's connections: the running service, held weakly (stopping NSM
/// lets go of what it holds).
#[derive(Clone)]
pub struct NsmSource {
    core: Weak<Core>,
    prefix: String,
}

impl NsmSource {
    /// The connections of `nsm`, their metric names after `prefix`
    /// (`PROMETHEUS_METRICS_PREFIX`).
    pub fn new(nsm: &NsmHandle, prefix: &str) -> NsmSource {
        NsmSource {
            core: Arc::downgrade(nsm.core()),
            prefix: prefix.to_string(),
        }
    }

    /// The connections now, with their ports' counters in `view`.
    pub fn read(&self, view: &ForwarderView) -> NsmScrape {
        let summaries = self
            .core
            .upgrade()
            .map(|c| c.summaries())
            .unwrap_or_default();
        NsmScrape {
            prefix: self.prefix.clone(),
            connections: summaries.iter().map(|s| counters(view, s)).collect(),
        }
    }
}

fn counters(view: &ForwarderView, s: &ConnectionSummary) -> ConnectionCounters {
    ConnectionCounters {
        connection_id: s.id.clone(),
        network_service: s.network_service.clone(),
        nsc: s.nsc.clone(),
        nsc_interface: s.client.1.clone(),
        nse_interface: s.endpoint.1.clone(),
        nsc_side: port_counters(view, &s.client.1),
        nse_side: port_counters(view, &s.endpoint.1),
    }
}

/// The name of family `side` + `field` (`server_rx_bytes`) after `prefix`.
pub fn family_name(prefix: &str, side: &str, field: &str) -> String {
    let sep = if prefix.is_empty() { "" } else { "_" };
    format!("{prefix}{sep}{side}{field}_total")
}

/// Writes NSM's families into `o`.
pub(super) fn render(o: &mut Out, s: &NsmScrape) {
    for (side, toward) in [(SERVER, "NSC"), (CLIENT, "NSE")] {
        for (field, read) in FIELDS {
            let name = family_name(&s.prefix, side, field);
            let what = field.replace('_', " ");
            o.family(
                &name,
                "counter",
                &format!("NSM connections: {what} of Quiver's interface toward the {toward}."),
            );
            for c in &s.connections {
                let counters = if side == SERVER {
                    c.nsc_side
                } else {
                    c.nse_side
                };
                let Some(counters) = counters else { continue };
                o.sample(
                    &name,
                    &[
                        ("connection_id", &c.connection_id),
                        ("network_service", &c.network_service),
                        ("nsc", &c.nsc),
                        ("nsc_interface", &c.nsc_interface),
                        ("nse_interface", &c.nse_interface),
                    ],
                    read(&counters),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_take_the_prefix_and_samples_the_labels() {
        assert_eq!(
            family_name("", "client_", "rx_bytes"),
            "client_rx_bytes_total"
        );
        assert_eq!(
            family_name("fwd", "server_", "drops"),
            "fwd_server_drops_total"
        );
        let c = ConnectionCounters {
            connection_id: "seg-1".into(),
            network_service: "ns".into(),
            nsc: "nsc-a".into(),
            nsc_interface: "nsm-x-client".into(),
            nse_interface: "nsm-x-endpoint".into(),
            nsc_side: Some(PortCounters {
                rx_packets: 7,
                drops: 2,
                ..Default::default()
            }),
            nse_side: None,
        };
        let mut o = Out(String::new());
        render(
            &mut o,
            &NsmScrape {
                prefix: "p".into(),
                connections: vec![c],
            },
        );
        let labels = r#"{connection_id="seg-1",network_service="ns",nsc="nsc-a",nsc_interface="nsm-x-client",nse_interface="nsm-x-endpoint"}"#;
        for want in [
            format!("p_server_rx_packets_total{labels} 7"),
            format!("p_server_drops_total{labels} 2"),
            format!("p_server_tx_bytes_total{labels} 0"),
            "# TYPE p_client_rx_bytes_total counter".to_string(),
        ] {
            assert!(o.0.lines().any(|l| l == want), "missing {want}:\n{}", o.0);
        }
        // A side without counters has its families but no sample.
        assert!(!o.0.lines().any(|l| l.starts_with("p_client_")), "{}", o.0);
        assert_eq!(o.0.matches("# TYPE ").count(), 10);
    }
}
