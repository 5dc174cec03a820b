//! Quiver's counters in the Prometheus text exposition format (version 0.0.4): one `# HELP` and
//! one `# TYPE` line per family, then its samples, label values escaped.

use std::collections::BTreeMap;

use quiver_admin_api::proto as pb;

pub use super::exposition::escape_label;
use super::exposition::Out;

/// The buffer pool's usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolUsage {
    /// Buffers in the pool.
    pub capacity: u64,
    /// Buffers on the free stack or in a worker's cache.
    pub free: u64,
    /// Buffers held by packets, frames, rings.
    pub in_use: u64,
}

/// Everything one scrape shows, read as the admin API's `show` commands read it.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// `show interfaces`.
    pub interfaces: Vec<pb::Interface>,
    /// `show runtime --per-worker`.
    pub runtime: pb::ShowRuntimeReply,
    /// `show errors --all`.
    pub errors: Vec<pb::ErrorCounter>,
    /// `show memif`.
    pub memifs: Vec<pb::Memif>,
    /// `show connections`, when the NSM service runs.
    pub connections: Option<Vec<pb::Connection>>,
    /// NSM's connection counters, when the NSM service runs.
    pub nsm: Option<super::nsm::NsmScrape>,
    /// The buffer pool.
    pub pool: PoolUsage,
}

/// The content type of what [`render`] writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A counter family: (metric name suffix, help, how to read it from `T`).
type Field<T> = (&'static str, &'static str, fn(&T) -> u64);

/// Interface counters.
const INTERFACE_COUNTERS: [Field<pb::Interface>; 6] = [
    ("rx_packets_total", "Packets received.", |i| i.rx_packets),
    ("rx_bytes_total", "Bytes received.", |i| i.rx_bytes),
    ("tx_packets_total", "Packets transmitted.", |i| i.tx_packets),
    ("tx_bytes_total", "Bytes transmitted.", |i| i.tx_bytes),
    (
        "rx_dropped_total",
        "Packets dropped on receive by the port.",
        |i| i.rx_dropped,
    ),
    (
        "tx_dropped_total",
        "Packets dropped on transmit by the port.",
        |i| i.tx_dropped,
    ),
];

/// Node counters.
const NODE_COUNTERS: [Field<pb::NodeRuntime>; 4] = [
    ("calls_total", "Times the node was called.", |n| n.calls),
    (
        "vectors_total",
        "Calls of the node that carried packets.",
        |n| n.vectors,
    ),
    ("packets_total", "Packets the node processed.", |n| {
        n.packets
    }),
    (
        "clocks_total",
        "TSC cycles spent in calls that carried packets.",
        |n| n.clocks,
    ),
];

/// Worker loop counters.
const LOOP_COUNTERS: [Field<pb::WorkerRuntime>; 4] = [
    (
        "busy_passes_total",
        "Loop passes that moved packets.",
        |w| w.busy_passes,
    ),
    (
        "busy_clocks_total",
        "TSC cycles of passes that moved packets.",
        |w| w.busy_clocks,
    ),
    ("idle_passes_total", "Empty loop passes.", |w| w.idle_passes),
    (
        "idle_clocks_total",
        "TSC cycles of empty loop passes.",
        |w| w.idle_clocks,
    ),
];

fn is_port(i: &pb::Interface) -> bool {
    matches!(
        i.r#type.as_str(),
        "memif" | "af_packet" | "af_xdp" | "tap" | "dpdk"
    )
}

/// Node counters summed over workers, by node name, in the order nodes first appear.
fn summed_nodes(workers: &[pb::WorkerRuntime]) -> Vec<(String, [u64; 4])> {
    let mut order: Vec<String> = Vec::new();
    let mut sums: BTreeMap<String, [u64; 4]> = BTreeMap::new();
    for w in workers {
        for n in &w.nodes {
            let e = sums.entry(n.name.clone()).or_insert_with(|| {
                order.push(n.name.clone());
                [0; 4]
            });
            for (x, (_, _, f)) in e.iter_mut().zip(NODE_COUNTERS.iter()) {
                *x = x.wrapping_add(f(n));
            }
        }
    }
    order
        .into_iter()
        .map(|name| {
            let v = sums[&name];
            (name, v)
        })
        .collect()
}

/// Renders a scrape.
pub fn render(s: &Scrape) -> String {
    let mut o = Out(String::with_capacity(16 * 1024));
    interfaces(&mut o, s);
    runtime(&mut o, &s.runtime);
    errors_and_nsm(&mut o, s);
    pool(&mut o, &s.pool);
    o.0
}

/// Interface counters, port links and memif links.
fn interfaces(o: &mut Out, s: &Scrape) {
    for (suffix, help, f) in INTERFACE_COUNTERS {
        let name = format!("quiver_interface_{suffix}");
        o.family(&name, "counter", help);
        for i in &s.interfaces {
            o.sample(&name, &[("interface", &i.name), ("type", &i.r#type)], f(i));
        }
    }
    o.family(
        "quiver_interface_link_up",
        "gauge",
        "1 when the port's link is up, 0 when down.",
    );
    for i in s.interfaces.iter().filter(|i| is_port(i)) {
        o.sample(
            "quiver_interface_link_up",
            &[("interface", &i.name), ("type", &i.r#type)],
            u64::from(i.link_up),
        );
    }

    o.family(
        "quiver_memif_link_up",
        "gauge",
        "1 when the memif interface is connected to its peer, 0 when not.",
    );
    for m in &s.memifs {
        let id = m.id.to_string();
        o.sample(
            "quiver_memif_link_up",
            &[
                ("interface", &m.name),
                ("role", &m.role),
                ("mode", &m.mode),
                ("socket", &m.socket),
                ("id", &id),
            ],
            u64::from(m.link_up),
        );
    }
}

/// The TSC rate, node counters (summed and per worker) and worker loop counters.
fn runtime(o: &mut Out, runtime: &pb::ShowRuntimeReply) {
    o.family(
        "quiver_tsc_hz",
        "gauge",
        "TSC cycles per second: divide the clocks counters by it for seconds.",
    );
    o.sample("quiver_tsc_hz", &[], runtime.tsc_hz);
    let nodes = summed_nodes(&runtime.workers);
    for (k, (suffix, help, _)) in NODE_COUNTERS.iter().enumerate() {
        let name = format!("quiver_node_{suffix}");
        o.family(&name, "counter", &format!("{help} Summed over workers."));
        for (node, v) in &nodes {
            o.sample(&name, &[("node", node)], v[k]);
        }
    }
    let worker_labels = |w: &pb::WorkerRuntime| {
        (
            w.worker.map(|x| x.to_string()).unwrap_or_default(),
            w.core.map(|x| x.to_string()).unwrap_or_default(),
        )
    };
    for (suffix, help, f) in NODE_COUNTERS {
        let name = format!("quiver_worker_node_{suffix}");
        o.family(&name, "counter", &format!("{help} Per worker."));
        for w in &runtime.workers {
            let (worker, core) = worker_labels(w);
            for n in &w.nodes {
                o.sample(
                    &name,
                    &[("worker", &worker), ("core", &core), ("node", &n.name)],
                    f(n),
                );
            }
        }
    }
    for (suffix, help, f) in LOOP_COUNTERS {
        let name = format!("quiver_worker_{suffix}");
        o.family(&name, "counter", help);
        for w in &runtime.workers {
            let (worker, core) = worker_labels(w);
            o.sample(&name, &[("worker", &worker), ("core", &core)], f(w));
        }
    }
}

/// Error counters, and NSM's connections and counters when the NSM service runs.
fn errors_and_nsm(o: &mut Out, s: &Scrape) {
    o.family(
        "quiver_errors_total",
        "counter",
        "Packets dropped or flagged, by node and reason (show errors), summed over workers.",
    );
    for e in &s.errors {
        o.sample(
            "quiver_errors_total",
            &[("node", &e.node), ("reason", &e.reason)],
            e.count,
        );
    }

    if let Some(connections) = &s.connections {
        o.family(
            "quiver_nsm_connections",
            "gauge",
            "NSM connections by state.",
        );
        for state in ["up", "down"] {
            let n = connections.iter().filter(|c| c.state == state).count();
            o.sample("quiver_nsm_connections", &[("state", state)], n as u64);
        }
    }
    if let Some(nsm) = &s.nsm {
        super::nsm::render(o, nsm);
    }
}

/// The buffer pool's usage.
fn pool(o: &mut Out, pool: &PoolUsage) {
    o.family(
        "quiver_buffer_pool_capacity",
        "gauge",
        "Buffers in the pool.",
    );
    o.sample("quiver_buffer_pool_capacity", &[], pool.capacity);
    o.family(
        "quiver_buffer_pool_free",
        "gauge",
        "Buffers free: on the pool's stack or in a worker's cache.",
    );
    o.sample("quiver_buffer_pool_free", &[], pool.free);
    o.family(
        "quiver_buffer_pool_in_use",
        "gauge",
        "Buffers held by packets, frames and rings.",
    );
    o.sample("quiver_buffer_pool_in_use", &[], pool.in_use);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_help_and_type_before_its_samples_and_workers_are_summed() {
        let node = |name: &str, packets: u64| pb::NodeRuntime {
            name: name.into(),
            packets,
            calls: 1,
            ..Default::default()
        };
        let s = Scrape {
            interfaces: vec![pb::Interface {
                name: "we\"ird\\if\n".into(),
                r#type: "memif".into(),
                rx_packets: 7,
                link_up: true,
                ..Default::default()
            }],
            runtime: pb::ShowRuntimeReply {
                tsc_hz: 3,
                workers: vec![
                    pb::WorkerRuntime {
                        worker: Some(0),
                        core: Some(1),
                        nodes: vec![node("port-input", 5), node("ip4-input", 4)],
                        ..Default::default()
                    },
                    pb::WorkerRuntime {
                        worker: Some(1),
                        core: Some(2),
                        nodes: vec![node("port-input", 6)],
                        ..Default::default()
                    },
                ],
            },
            errors: vec![pb::ErrorCounter {
                node: "ip4-input".into(),
                reason: "ttl-expired".into(),
                count: 2,
                ..Default::default()
            }],
            connections: Some(vec![pb::Connection {
                state: "up".into(),
                ..Default::default()
            }]),
            pool: PoolUsage {
                capacity: 10,
                free: 8,
                in_use: 2,
            },
            ..Default::default()
        };
        let text = render(&s);
        let mut typed: Vec<&str> = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(!typed.contains(&name), "{name} typed twice");
                typed.push(name);
            } else if !line.starts_with("# HELP ") {
                let name = line.split(['{', ' ']).next().unwrap();
                assert_eq!(typed.last(), Some(&name), "{line}: not under its # TYPE");
            }
        }
        for want in [
            r#"quiver_interface_rx_packets_total{interface="we\"ird\\if\n",type="memif"} 7"#,
            r#"quiver_interface_link_up{interface="we\"ird\\if\n",type="memif"} 1"#,
            r#"quiver_node_packets_total{node="port-input"} 11"#,
            r#"quiver_node_calls_total{node="port-input"} 2"#,
            r#"quiver_node_packets_total{node="ip4-input"} 4"#,
            r#"quiver_worker_node_packets_total{worker="1",core="2",node="port-input"} 6"#,
            r#"quiver_errors_total{node="ip4-input",reason="ttl-expired"} 2"#,
            r#"quiver_nsm_connections{state="up"} 1"#,
            r#"quiver_nsm_connections{state="down"} 0"#,
            "quiver_buffer_pool_in_use 2",
            "quiver_tsc_hz 3",
        ] {
            assert!(
                text.lines().any(|l| l == want),
                "missing {want} in:\n{text}"
            );
        }
        // Without the NSM service, no connection family at all.
        let text = render(&Scrape {
            connections: None,
            ..s
        });
        assert!(!text.contains("quiver_nsm_connections"));
    }
}
