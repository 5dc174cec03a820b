//! NSM's metrics with a live connection (kernel interfaces, IP payload, real pings through
//! Quiver): Quiver's path segment carries the counters of its two interfaces
//! (`server_*` toward the NSC, `client_*` toward the NSE, as sdk-vpp names them) in the
//! Request's answer, in a refresh's answer and in MonitorConnections events (published again
//! every `NSM_METRICS_EXPORT_INTERVAL` when they moved); the Prometheus endpoint shows the
//! same counters under cmd-forwarder-vpp's names, after `PROMETHEUS_METRICS_PREFIX`, with its
//! labels, and its packet counts move with the traffic.

mod nsm_support;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nsm_forwarder::connect::metrics::own_segment_metrics;
use nsm_forwarder::testing::{BlockingClient, TestEndpoint};
use nsm_proto::connection::{
    Connection, ConnectionEventType, MonitorScopeSelector, PathSegment, State,
};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext};
use nsm_proto::networkservice::NetworkServiceRequest;
use nsm_support::{kernel_mech, nsc_connection, KernelTest, IP, PING};
use quiver::control::admin::{nsm_connections, ConnectionSlot};
use quiver::metrics::nsm::NsmSource;
use testkit::wait_for;

const NSC_ADDR: &str = "10.75.0.1";
const NSE_ADDR: &str = "10.75.0.2";
const PREFIX: &str = "nsmtest";

/// Every metric name NSM's path segment carries.
const NAMES: [&str; 10] = [
    "server_rx_bytes",
    "server_tx_bytes",
    "server_rx_packets",
    "server_tx_packets",
    "server_drops",
    "client_rx_bytes",
    "client_tx_bytes",
    "client_rx_packets",
    "client_tx_packets",
    "client_drops",
];

/// Quiver's segment's metrics in a connection as Quiver answered or published it: the segment
/// named `quiver`, whatever the path index.
fn quiver_metrics(c: &Connection) -> HashMap<String, String> {
    let path = c.path.as_ref().expect("a path");
    let own = path
        .path_segments
        .iter()
        .position(|s: &PathSegment| s.name == "quiver")
        .expect("Quiver's segment");
    let mut at_own = c.clone();
    at_own.path.as_mut().unwrap().index = own as u32;
    own_segment_metrics(&at_own)
}

fn number(m: &HashMap<String, String>, name: &str) -> u64 {
    m.get(name)
        .unwrap_or_else(|| panic!("no {name} in {m:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a decimal number: {m:?}"))
}

/// `GET /metrics` at `addr`.
fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// The samples of family `name`: labels (label values here have no escapes) and value.
fn samples(page: &str, name: &str) -> Vec<(BTreeMap<String, String>, u64)> {
    page.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .map(|rest| {
            let (labels, value) = rest.rsplit_once("} ").unwrap();
            let labels = labels
                .split("\",")
                .map(|kv| {
                    let (k, v) = kv.split_once("=\"").unwrap();
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect();
            (labels, value.parse().unwrap())
        })
        .collect()
}

#[test]
fn path_segment_metrics_and_prometheus_counters_follow_a_live_connection() {
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::start(
        "path_segment_metrics_and_prometheus_counters_follow_a_live_connection",
        &[IP, PING],
        ["nsc", "nse", "nsm-metrics"],
    )
    else {
        return;
    };
    let fwd = quiver.fwd.clone();
    let endpoint = TestEndpoint::start(
        &dir.join("nse.sock"),
        "nse",
        kernel_mech(&nse.url(), "nse0"),
    )
    .unwrap();
    let listen = format!("unix://{}", dir.join("quiver.sock").display());
    let dp = quiver.dataplane();
    let server = quiver.serve_with(
        dp.clone(),
        "quiver",
        &listen,
        None,
        format!("unix://{}", dir.join("nse.sock").display()),
        |c| c.metrics_export_interval = Duration::from_millis(200),
    );
    let connections = ConnectionSlot::default();
    connections.set(nsm_connections(&server));
    let metrics = quiver::metrics::start(
        &fwd,
        quiver::metrics::bind("127.0.0.1:0").unwrap(),
        Some(connections),
        Some(NsmSource::new(&server, PREFIX)),
        quiver::metrics::HEADER_TIMEOUT,
    )
    .unwrap();

    let mut client = BlockingClient::connect(&listen).unwrap();
    let mut watcher = BlockingClient::connect(&listen).unwrap();
    let mut events = watcher.monitor(MonitorScopeSelector::default()).unwrap();
    let initial = watcher
        .next_event(&mut events, Duration::from_secs(10))
        .unwrap()
        .expect("the initial state");
    assert!(initial.connections.is_empty());

    let id = format!("metrics-{}", std::process::id());
    let request = NetworkServiceRequest {
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
            ..nsc_connection(&id, "ping")
        }),
        mechanism_preferences: kernel_mech(&nsc.url(), "nsm0"),
    };
    let answer = client.request(request.clone()).unwrap();
    assert_eq!(answer.state, State::Up as i32);
    let first = quiver_metrics(&answer);
    for name in NAMES {
        number(&first, name);
    }
    assert_eq!(first.len(), NAMES.len(), "{first:?}");
    // Only Quiver's segment carries them.
    let nsc_segment = &answer.path.as_ref().unwrap().path_segments[0];
    assert!(nsc_segment.metrics.is_empty(), "{nsc_segment:?}");

    // The Prometheus families, labelled, before any traffic.
    let own_id = {
        let path = answer.path.as_ref().unwrap();
        path.path_segments[1].id.clone()
    };
    let want_labels: BTreeMap<String, String> = [
        ("connection_id", own_id.as_str()),
        ("network_service", "ping"),
        ("nsc", "nsc"),
        ("nsc_interface", &format!("nsm-{id}-client")),
        ("nse_interface", &format!("nsm-{id}-endpoint")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let value_of = |page: &str, name: &str| -> u64 {
        let family = format!("{PREFIX}_{name}_total");
        let found = samples(page, &family);
        assert_eq!(found.len(), 1, "{family}: {found:?}\n{page}");
        assert_eq!(found[0].0, want_labels, "{family}");
        found[0].1
    };
    // A connection whose entry is being changed (the Request's last steps) is left out of a
    // scrape for that moment: wait until the page has it.
    let listed =
        |page: &str| !samples(page, &format!("{PREFIX}_server_rx_packets_total")).is_empty();
    let mut before = String::new();
    wait_for("the connection's series on the metrics page", 30, || {
        before = scrape(metrics.addr());
        listed(&before)
    });
    for name in NAMES {
        assert!(
            before
                .lines()
                .any(|l| l == format!("# TYPE {PREFIX}_{name}_total counter")),
            "{name}:\n{before}"
        );
        value_of(&before, name);
    }

    // Pings across Quiver: the client's echoes come in from the NSC and go out to the NSE.
    wait_for("a ping from the NSC to the NSE through Quiver", 30, || {
        nsc.ping_reply(NSE_ADDR, 64).is_some()
    });
    for _ in 0..3 {
        assert!(nsc.ping_reply(NSE_ADDR, 64).is_some(), "a ping");
    }

    // MonitorConnections: an UPDATE whose metrics moved, without any Request (the periodic
    // export).
    let mut moved = None;
    wait_for("an UPDATE with the traffic's counters", 30, || {
        let Ok(Some(ev)) = watcher.next_event(&mut events, Duration::from_millis(500)) else {
            return false;
        };
        if ev.r#type != ConnectionEventType::Update as i32 {
            return false;
        }
        moved = ev
            .connections
            .values()
            .map(quiver_metrics)
            // The pings' counters (a namespace may send a frame of its own first, as a new
            // interface's IPv6 router solicitation: the server side alone moves then).
            .find(|m| {
                let moved = |k: &str| m.get(k).is_some_and(|v| v != "0");
                moved("server_rx_packets") && moved("client_tx_packets")
            });
        moved.is_some()
    });
    let moved = moved.expect("waited for");
    assert!(number(&moved, "client_tx_packets") > 0, "{moved:?}");

    // A refresh's answer carries them too, at least as far as the event's.
    let refreshed = quiver_metrics(&client.request(request).unwrap());
    for name in [
        "server_rx_packets",
        "server_tx_packets",
        "client_rx_packets",
        "client_tx_packets",
        "server_rx_bytes",
        "client_tx_bytes",
    ] {
        let (then, now) = (number(&first, name), number(&refreshed, name));
        assert!(now > then, "{name}: {then} then, {now} after the pings");
        assert!(now >= number(&moved, name), "{name}");
    }

    // And Prometheus: the same connection, its packet counts moved.
    let mut after = String::new();
    wait_for("the connection's series after the pings", 30, || {
        after = scrape(metrics.addr());
        listed(&after)
    });
    for name in [
        "server_rx_packets",
        "client_tx_packets",
        "client_rx_packets",
    ] {
        let (then, now) = (value_of(&before, name), value_of(&after, name));
        assert!(now > then, "{name}: {then} before the pings, {now} after");
        assert!(now >= number(&refreshed, name), "{name}");
    }

    client.close(answer).unwrap();
    assert_eq!(endpoint.log().closes.len(), 1);
    // Gone from the page with the connection.
    let closed = scrape(metrics.addr());
    assert!(
        samples(&closed, &format!("{PREFIX}_server_rx_packets_total")).is_empty(),
        "{closed}"
    );

    drop(metrics);
    drop(events);
    drop(watcher);
    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
}
