//! `quiver run --nsm` with `TELEMETRY=true`: as cmd-forwarder-vpp, Quiver sends an OpenTelemetry
//! span for each Request and Close it handles over OTLP/gRPC to `NSM_OPEN_TELEMETRY_ENDPOINT`,
//! here a collector of the test's own. Spans are batched (none is sent per call) and flushed when
//! Quiver stops; each is named for its gRPC method, carries the connection id, and a failed call's
//! has status error. A collector that is down fails no call: the failed export is logged, and
//! Quiver still stops cleanly.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nsm_forwarder::path::timestamp;
use nsm_forwarder::telemetry::{CLOSE, ID, REQUEST};
use nsm_forwarder::testing::BlockingClient;
use nsm_proto::connection::{Connection, Path, PathSegment};
use nsm_proto::networkservice::NetworkServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode};
use support::{memif_pair_config, Quiver, Scratch};
use testkit::wait_for;

/// A span as the collector received it.
#[derive(Debug, Clone)]
struct Received {
    /// The resource's `service.name`.
    service: String,
    name: String,
    /// The `id` attribute.
    id: Option<String>,
    kind: i32,
    /// The status code.
    status: i32,
}

fn string_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .and_then(|v| match v {
            any_value::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

/// An OTLP/gRPC trace collector keeping every span it is sent.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
    exports: Arc<Mutex<usize>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            let attrs = rs.resource.map(|r| r.attributes).unwrap_or_default();
            let service = string_attr(&attrs, "service.name").unwrap_or_default();
            for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                spans.push(Received {
                    service: service.clone(),
                    id: string_attr(&span.attributes, ID),
                    name: span.name,
                    kind: span.kind,
                    status: span.status.map_or(0, |s| s.code),
                });
            }
        }
        *self.exports.lock().unwrap() += 1;
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
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
                    .add_service(TraceServiceServer::new(serving))
                    .serve_with_incoming(incoming)
                    .await
                    .unwrap();
            });
        });
        let addr = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        (collector, addr)
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }
}

/// A connection as an NSC first Requests it, of a network service no endpoint serves.
fn connection(id: &str) -> Connection {
    Connection {
        id: id.into(),
        network_service: "telemetry".into(),
        network_service_endpoint_name: "nse".into(),
        payload: "ETHERNET".into(),
        path: Some(Path {
            index: 0,
            path_segments: vec![PathSegment {
                name: "nsc".into(),
                id: id.into(),
                expires: Some(timestamp(SystemTime::now() + Duration::from_secs(600))),
                ..Default::default()
            }],
        }),
        ..Default::default()
    }
}

/// Starts `quiver run --nsm` in `dir` as `name`, telemetry on toward `endpoint`, with `env`.
fn quiver(dir: &Scratch, name: &str, endpoint: &str, env: &[(&str, &str)]) -> (Quiver, String) {
    let config = memif_pair_config(&dir.path("memif.sock"), "[stats]\ninterval_secs = 0");
    let nsm = format!("unix://{}", dir.path("nsm.sock").display());
    let mut q = Quiver::spawn_with(dir, name, &config, &dir.path("admin.sock"), |c| {
        c.arg("--nsm")
            .env("NSM_LISTEN_ON", &nsm)
            .env("NSM_NAME", name)
            // nsmgr's default socket, not there: a Request finds no endpoint.
            .env_remove("NSM_CONNECT_TO")
            .env_remove("SPIFFE_ENDPOINT_SOCKET")
            .env_remove("RUST_LOG")
            .env("TELEMETRY", "true")
            .env("NSM_OPEN_TELEMETRY_ENDPOINT", endpoint)
            .envs(env.iter().copied());
    });
    q.wait_log("OpenTelemetry spans of Request and Close exported");
    q.wait_log("NSM forwarder services listening");
    (q, nsm)
}

#[test]
fn request_and_close_spans_reach_the_collector_batched_and_flushed_at_stop() {
    let dir = Scratch::new("nsm-telemetry");
    let (collector, endpoint) = Collector::start();
    // No scheduled export during the test: only the stop's flush sends the spans.
    let (mut q, nsm) = quiver(
        &dir,
        "otel-fwd",
        &endpoint,
        &[("OTEL_BSP_SCHEDULE_DELAY", "600000")],
    );
    let id = format!("otel-{}", std::process::id());
    let mut client = BlockingClient::connect(&nsm).unwrap();
    let failed = client.request(NetworkServiceRequest {
        connection: Some(connection(&id)),
        mechanism_preferences: vec![],
    });
    assert!(failed.is_err(), "no endpoint, yet: {failed:?}");
    client.close(connection(&id)).unwrap();
    drop(client);
    assert!(
        collector.spans().is_empty() && *collector.exports.lock().unwrap() == 0,
        "sent before the batch was due: {:?}",
        collector.spans()
    );

    let (_, log) = q.stop();
    let mut spans = Vec::new();
    wait_for("the Request and Close spans", 10, || {
        spans = collector.spans();
        spans.len() >= 2
    });
    let why = format!("{spans:#?}\n{log}");
    assert_eq!(spans.len(), 2, "{why}");
    let span = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} span: {why}"))
    };
    let (request, close) = (span(REQUEST), span(CLOSE));
    assert_eq!(REQUEST, "/networkservice.NetworkService/Request");
    assert_eq!(CLOSE, "/networkservice.NetworkService/Close");
    for s in [request, close] {
        assert_eq!(s.id.as_deref(), Some(id.as_str()), "{why}");
        assert_eq!(s.service, "otel-fwd", "{why}");
        assert_eq!(s.kind, SpanKind::Server as i32, "{why}");
    }
    assert_eq!(request.status, StatusCode::Error as i32, "{why}");
    assert_ne!(close.status, StatusCode::Error as i32, "{why}");
}

#[test]
fn a_collector_that_is_down_fails_no_call_and_holds_no_stop() {
    let dir = Scratch::new("nsm-telemetry-down");
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (mut q, nsm) = quiver(
        &dir,
        "otel-down",
        &down,
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
        ],
    );
    let mut client = BlockingClient::connect(&nsm).unwrap();
    for i in 0..2 {
        let id = format!("otel-down-{i}");
        client
            .close(connection(&id))
            .unwrap_or_else(|e| panic!("Close {id} failed: {e}\n{}", q.log()));
        if i == 0 {
            q.wait_log("OpenTelemetry export failed");
        }
    }
    drop(client);
    // The second Close's span is pending: the stop's flush gives up on it in bounded time.
    let (_, log) = q.stop();
    assert_eq!(
        log.matches("OpenTelemetry export failed").count(),
        1,
        "one warning while the collector stays down:\n{log}"
    );
}
