//! NSM's path segment metrics as OpenTelemetry metrics (`TELEMETRY=true`), with a live
//! connection (kernel interfaces, IP payload, real pings through Quiver) and an OTLP/gRPC
//! metrics collector of the test's own at `NSM_OPEN_TELEMETRY_ENDPOINT`: every
//! `NSM_METRICS_EXPORT_INTERVAL` Quiver exports each key of its own segment's `metrics` map as
//! `<NSM_NAME>_<key>` (`…_server_tx_bytes`, the name NSM's jaeger_and_prometheus example
//! queries), a cumulative monotonic sum of integers with one data point per connection,
//! attribute `connection` = the connection's first path segment id, as NSM's sdk records them;
//! the values follow the traffic and are those of the segment's `metrics` map; a closed
//! connection is no longer reported.

mod nsm_support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nsm_forwarder::connect::metrics::{metric_names, own_segment_metrics};
use nsm_forwarder::telemetry::metrics::CONNECTION;
use nsm_forwarder::testing::{BlockingClient, TestEndpoint};
use nsm_forwarder::NsmConfig;
use nsm_proto::connection::{Connection, State};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext};
use nsm_proto::networkservice::NetworkServiceRequest;
use nsm_support::{kernel_mech, nsc_connection, KernelTest, IP, PING};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality,
};
use testkit::wait_for;

/// Quiver's `NSM_NAME`, so its path segment's name (a `-` in it, as in a pod's name).
const NAME: &str = "quiver-otel";
const NSC_ADDR: &str = "10.76.0.1";
const NSE_ADDR: &str = "10.76.0.2";
/// The echoes sent through the connection.
const PINGS: u64 = 5;

/// One data point as the collector received it.
#[derive(Debug, Clone)]
struct Point {
    /// The resource's `service.name`.
    service: String,
    /// The metric's name.
    metric: String,
    /// A sum, monotonic, cumulative, with an integer value: as the sdk's Int64Counter.
    cumulative_int_counter: bool,
    /// Its attributes, as strings.
    attributes: BTreeMap<String, String>,
    value: i64,
}

fn string_value(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        other => format!("{other:?}"),
    }
}

/// An OTLP/gRPC metrics collector keeping every export it is sent, each as its data points.
#[derive(Clone, Default)]
struct Collector {
    exports: Arc<(Mutex<Vec<Vec<Point>>>, Condvar)>,
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let mut points = Vec::new();
        for rm in request.into_inner().resource_metrics {
            let attrs = rm.resource.map(|r| r.attributes).unwrap_or_default();
            let service = attrs
                .iter()
                .find(|kv| kv.key == "service.name")
                .map(string_value)
                .unwrap_or_default();
            for metric in rm.scope_metrics.into_iter().flat_map(|s| s.metrics) {
                let (sum, data_points) = match metric.data {
                    Some(Data::Sum(s)) => {
                        let counter = s.is_monotonic
                            && s.aggregation_temporality
                                == AggregationTemporality::Cumulative as i32;
                        (counter, s.data_points)
                    }
                    Some(Data::Gauge(g)) => (false, g.data_points),
                    _ => (false, Vec::new()),
                };
                for dp in data_points {
                    let (int, value) = match dp.value {
                        Some(number_data_point::Value::AsInt(v)) => (true, v),
                        Some(number_data_point::Value::AsDouble(v)) => (false, v as i64),
                        None => (false, -1),
                    };
                    points.push(Point {
                        service: service.clone(),
                        metric: metric.name.clone(),
                        cumulative_int_counter: sum && int,
                        attributes: dp
                            .attributes
                            .iter()
                            .map(|kv| (kv.key.clone(), string_value(kv)))
                            .collect(),
                        value,
                    });
                }
            }
        }
        let (exports, arrived) = &*self.exports;
        exports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(points);
        arrived.notify_all();
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

impl Collector {
    /// Serves on a port of 127.0.0.1, on a thread of its own for the rest of the test process:
    /// the collector and its `host:port`.
    fn start() -> (Collector, String) {
        let collector = Collector::default();
        let serving = collector.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let incoming =
                    tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap())
                        .unwrap();
                tx.send(incoming.local_addr().unwrap().to_string()).unwrap();
                tonic::transport::Server::builder()
                    .add_service(MetricsServiceServer::new(serving))
                    .serve_with_incoming(incoming)
                    .await
                    .unwrap();
            });
        });
        let addr = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        (collector, addr)
    }

    /// Waits, export by export, for the first export from the `from`th on for which `check`
    /// gives a value; panics after `secs` seconds with the last export.
    fn wait<T>(
        &self,
        what: &str,
        secs: u64,
        from: usize,
        mut check: impl FnMut(&[Point]) -> Option<T>,
    ) -> (usize, T) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let (exports, arrived) = &*self.exports;
        let mut got = exports.lock().unwrap();
        let mut next = from;
        loop {
            while next < got.len() {
                if let Some(t) = check(&got[next]) {
                    return (next, t);
                }
                next += 1;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for {what}; the last export: {:#?}",
                got.last()
            );
            got = arrived.wait_timeout(got, left).unwrap().0;
        }
    }
}

/// The instrument name of `key`.
fn name_of(key: &str) -> String {
    format!("{NAME}_{key}")
}

/// `export`'s values for connection `connection`, by metric key (all ten, or `None`).
fn values_of(export: &[Point], connection: &str) -> Option<BTreeMap<String, i64>> {
    let mine: Vec<&Point> = export
        .iter()
        .filter(|p| p.attributes.get(CONNECTION).map(String::as_str) == Some(connection))
        .collect();
    metric_names()
        .into_iter()
        .map(|key| {
            let p = mine.iter().find(|p| p.metric == name_of(&key))?;
            Some((key, p.value))
        })
        .collect()
}

/// The published metrics of Quiver's segment of connection `own_id`, as numbers.
fn segment_metrics(core: &nsm_forwarder::Core, own_id: &str) -> BTreeMap<String, i64> {
    let conn = core.monitor.get(own_id).expect("published");
    let m: HashMap<String, String> = own_segment_metrics(&conn);
    m.into_iter()
        .map(|(k, v)| {
            let n = v.parse().unwrap_or_else(|_| panic!("{k}={v:?}"));
            (k, n)
        })
        .collect()
}

/// An IP connection between the NSC's and the NSE's namespaces, KERNEL both ways.
fn ip_request(id: &str, nsc_url: &str) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            payload: "IP".into(),
            context: Some(ConnectionContext {
                ip_context: Some(IpContext {
                    src_ip_addrs: vec![format!("{NSC_ADDR}/24")],
                    dst_ip_addrs: vec![format!("{NSE_ADDR}/24")],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..nsc_connection(id, "otel")
        }),
        mechanism_preferences: kernel_mech(nsc_url, "nsm0"),
    }
}

#[test]
fn path_segment_metrics_reach_an_otlp_collector_named_labelled_and_valued_as_nsm_does() {
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::start(
        "path_segment_metrics_reach_an_otlp_collector_named_labelled_and_valued_as_nsm_does",
        &[IP, PING],
        ["otel-nsc", "otel-nse", "nsm-otel-metrics"],
    )
    else {
        return;
    };
    let (collector, endpoint) = Collector::start();
    // The settings as `quiver run` reads them from its environment.
    let vars: HashMap<&str, String> = [
        ("TELEMETRY", "true".to_string()),
        ("NSM_OPEN_TELEMETRY_ENDPOINT", endpoint),
        ("NSM_METRICS_EXPORT_INTERVAL", "200ms".to_string()),
        ("NSM_NAME", NAME.to_string()),
    ]
    .into();
    let env = NsmConfig::from_vars(|k| vars.get(k).cloned()).unwrap();
    assert!(env.telemetry);
    assert_eq!(env.metrics_export_interval, Duration::from_millis(200));

    let fwd = quiver.fwd.clone();
    let nse_endpoint = TestEndpoint::start(
        &dir.join("nse.sock"),
        "nse",
        kernel_mech(&nse.url(), "nse0"),
    )
    .unwrap();
    let listen = format!("unix://{}", dir.join("quiver.sock").display());
    let dp = quiver.dataplane();
    let server = quiver.serve_with(
        dp.clone(),
        &env.name,
        &listen,
        None,
        format!("unix://{}", dir.join("nse.sock").display()),
        |c| {
            c.telemetry = env.telemetry;
            c.open_telemetry_endpoint = env.open_telemetry_endpoint.clone();
            c.metrics_export_interval = env.metrics_export_interval;
        },
    );
    let core = server.core().clone();

    let mut client = BlockingClient::connect(&listen).unwrap();
    let id = format!("otel-{}", std::process::id());
    let answer = client.request(ip_request(&id, &nsc.url())).unwrap();
    assert_eq!(answer.state, State::Up as i32);
    let own_id = answer.path.as_ref().unwrap().path_segments[1].id.clone();
    assert_ne!(own_id, id, "Quiver's segment has an id of its own");

    // The connection's ten metrics, and nothing else, each as the sdk's Int64Counter writes
    // it: labelled with the NSC's segment id, not Quiver's.
    let (_, first) = collector.wait("the connection's metrics", 30, 0, |export| {
        values_of(export, &id).map(|_| export.to_vec())
    });
    let want: BTreeSet<String> = metric_names().iter().map(|k| name_of(k)).collect();
    assert_eq!(want.len(), 10);
    assert!(want.contains("quiver-otel_server_tx_bytes"), "{want:?}");
    let got: BTreeSet<String> = first.iter().map(|p| p.metric.clone()).collect();
    assert_eq!(got, want, "{first:#?}");
    for p in &first {
        assert_eq!(p.service, NAME, "{p:?}");
        assert!(p.cumulative_int_counter, "{p:?}");
        let labels: Vec<(&str, &str)> = p
            .attributes
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(labels, [("connection", id.as_str())], "{p:?}");
        assert!(p.value >= 0, "{p:?}");
    }
    let before = values_of(&first, &id).expect("found");

    // Echoes across Quiver: in from the NSC, out to the NSE, and the replies back.
    let mut echoes = 0;
    wait_for("a ping from the NSC to the NSE through Quiver", 30, || {
        if nsc.ping(NSE_ADDR) {
            echoes += 1;
        }
        echoes > 0
    });
    while echoes < PINGS {
        assert!(nsc.ping(NSE_ADDR), "a ping");
        echoes += 1;
    }
    let moved = |export: &[Point]| -> Option<BTreeMap<String, i64>> {
        let now = values_of(export, &id)?;
        let grew = |key: &str, by: u64| now[key] - before[key] >= by as i64;
        let all = [
            "server_rx_packets",
            "client_tx_packets",
            "client_rx_packets",
            "server_tx_packets",
        ]
        .iter()
        .all(|k| grew(k, echoes))
            // An echo is an 84-byte IPv4 packet at least.
            && [
                "server_rx_bytes",
                "client_tx_bytes",
                "client_rx_bytes",
                "server_tx_bytes",
            ]
            .iter()
            .all(|k| grew(k, echoes * 84));
        all.then_some(now)
    };
    let (at, after) = collector.wait("the echoes in the exported counters", 30, 0, moved);
    for key in ["server_drops", "client_drops"] {
        assert!(after[key] >= before[key], "{key}: {before:?} → {after:?}");
    }

    // The exported values are those of Quiver's segment's metrics map (as published: what
    // MonitorConnections shows): wait for an export made after the counters last moved.
    let (_, (exported, segment)) = collector.wait(
        "an export equal to the segment's metrics",
        30,
        at,
        |export| {
            let exported = values_of(export, &id)?;
            let segment = segment_metrics(&core, &own_id);
            (exported == segment).then_some((exported, segment))
        },
    );
    assert_eq!(segment.len(), 10, "{segment:?}");
    assert!(exported["server_rx_packets"] >= after["server_rx_packets"]);

    // Closed, the connection is no longer reported: the next connection's exports are its
    // own alone.
    client.close(answer).unwrap();
    let seen = collector.exports.0.lock().unwrap().len();
    let id2 = format!("{id}-2");
    let answer2 = client.request(ip_request(&id2, &nsc.url())).unwrap();
    let (_, stale) = collector.wait("the next connection's metrics", 30, seen, |export| {
        values_of(export, &id2).map(|_| {
            export
                .iter()
                .filter(|p| p.attributes.get(CONNECTION) != Some(&id2))
                .cloned()
                .collect::<Vec<_>>()
        })
    });
    assert!(
        stale.is_empty(),
        "the closed connection still reported: {stale:#?}"
    );
    client.close(answer2).unwrap();
    assert_eq!(nse_endpoint.log().closes.len(), 2);

    drop(client);
    drop(core);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}
