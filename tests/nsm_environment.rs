//! `quiver run --nsm` with cmd-forwarder-vpp's whole environment (v1.18, every variable its
//! DaemonSet may set, each with a plausible value): Quiver starts, acts on the variables that
//! apply (a SPIFFE identity from a test Workload API, Prometheus metrics at
//! `NSM_PROMETHEUS_LISTEN_ON` with `PROMETHEUS_METRICS_PREFIX` on NSM's names; `TELEMETRY` is
//! false, as NSM deploys it, so no span is exported: tests/nsm_telemetry.rs), and logs one line
//! for each of the others, naming it and why it does not apply. A malformed value of one that
//! applies stops it at start, naming the variable.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use nsm_forwarder::config::NOT_APPLICABLE;
use spiffe_identity::testing::{in_a_year, FakeWorkloadApi, TestCa};
use support::{memif_pair_config, Quiver, Scratch};
use testkit::wait_for;

/// A test Workload API serving one SVID, on a thread of its own for the rest of the test
/// process: its `unix://` endpoint.
fn workload_api(dir: &Scratch) -> String {
    let dir = dir.0.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let ca = TestCa::new("env.test");
            let svid = ca.issue("/ns/nsm-system/sa/forwarder", 1, in_a_year());
            let api = FakeWorkloadApi::start(&dir, "agent", ca.response(&svid));
            tx.send(api.endpoint().to_string()).unwrap();
            std::future::pending::<()>().await
        });
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

/// A TCP port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET /metrics` at `addr`: the body, once it answers 200.
fn scrape(addr: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// Every variable of cmd-forwarder-vpp's environment, with a value its DaemonSet could give.
fn every_variable(dir: &Scratch, spiffe: &str, prometheus: &str) -> Vec<(&'static str, String)> {
    let unix = |name: &str| format!("unix://{}", dir.path(name).display());
    let mut vars: Vec<(&'static str, String)> = [
        ("NSM_NAME", "forwarder-quiver"),
        ("NSM_LABELS", "p2p:true"),
        ("NSM_NSNAME", "forwarder"),
        ("NSM_MAX_TOKEN_LIFETIME", "10m"),
        (
            "NSM_REGISTRY_CLIENT_POLICIES",
            "etc/nsm/opa/common/.*.rego,etc/nsm/opa/registry/.*.rego,etc/nsm/opa/client/.*.rego",
        ),
        ("NSM_LOG_LEVEL", "INFO"),
        ("NSM_DIAL_TIMEOUT", "750ms"),
        (
            "NSM_OPEN_TELEMETRY_ENDPOINT",
            "otel-collector.observability:4317",
        ),
        ("NSM_METRICS_EXPORT_INTERVAL", "10s"),
        ("NSM_PPROF_ENABLED", "false"),
        ("NSM_PPROF_LISTEN_ON", "localhost:6060"),
        ("NSM_PROMETHEUS_CA_FILE", "/tmp/tls/ca.crt"),
        ("NSM_PROMETHEUS_KEY_FILE", "/tmp/tls/tls.key"),
        ("NSM_PROMETHEUS_CERT_FILE", "/tmp/tls/tls.crt"),
        ("NSM_PROMETHEUS_MONITOR_CERTIFICATE", "false"),
        ("NSM_PROMETHEUS_SERVER_HEADER_TIMEOUT", "5s"),
        ("NSM_PROMETHEUS_MAX_BIND_THRESHOLD", "120s"),
        ("NSM_TUNNEL_IP", "192.0.2.10"),
        ("NSM_VXLAN_PORT", "0"),
        ("NSM_VPP_API_SOCKET", "/var/run/vpp/external/vpp-api.sock"),
        ("NSM_VPP_INIT", "AF_PACKET"),
        (
            "NSM_VPP_INIT_PARAMS",
            "/var/lib/networkservicemesh/vpp-init.yaml",
        ),
        ("NSM_VPP_MIN_OPERATION_TIMEOUT", "2s"),
        ("NSM_RESOURCE_POLL_TIMEOUT", "30s"),
        ("NSM_DEVICE_PLUGIN_PATH", "/var/lib/kubelet/device-plugins/"),
        ("NSM_POD_RESOURCES_PATH", "/var/lib/kubelet/pod-resources/"),
        (
            "NSM_SRIOV_CONFIG_FILE",
            "/var/lib/networkservicemesh/sriov.yaml",
        ),
        ("NSM_PCI_DEVICES_PATH", "/sys/bus/pci/devices"),
        ("NSM_PCI_DRIVERS_PATH", "/sys/bus/pci/drivers"),
        ("NSM_CGROUP_PATH", "/host/sys/fs/cgroup/devices"),
        ("NSM_VFIO_PATH", "/host/dev/vfio"),
        ("NSM_MECHANISM_PRIORITY", "MEMIF,KERNEL"),
        ("PROMETHEUS", "true"),
        ("PROMETHEUS_METRICS_PREFIX", "nsm_env"),
        ("TELEMETRY", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect();
    // The VLAN mechanism's host interfaces, as NSM's remotevlan example selects them (the
    // interface is not there: Quiver attaches it when a connection needs it).
    let selector = dir.path("device-selector.yaml");
    std::fs::write(
        &selector,
        "---\ninterfaces:\n  - name: ext_net1\n    matches:\n       - labelSelector:\n           - via: gw1\n",
    )
    .unwrap();
    vars.extend([
        ("NSM_DEVICE_SELECTOR_FILE", selector.display().to_string()),
        // nsmgr is not there: Quiver retries its registration in the background.
        ("NSM_CONNECT_TO", unix("nsmgr.sock")),
        ("NSM_LISTEN_ON", unix("nsm.sock")),
        ("SPIFFE_ENDPOINT_SOCKET", spiffe.to_string()),
        ("NSM_PROMETHEUS_LISTEN_ON", prometheus.to_string()),
    ]);
    vars
}

/// The variables Quiver acts on.
const APPLIED: &[&str] = &[
    "NSM_NAME",
    "NSM_LABELS",
    "NSM_NSNAME",
    "NSM_CONNECT_TO",
    "NSM_LISTEN_ON",
    "NSM_MAX_TOKEN_LIFETIME",
    "NSM_LOG_LEVEL",
    "NSM_DIAL_TIMEOUT",
    "NSM_METRICS_EXPORT_INTERVAL",
    "NSM_PROMETHEUS_LISTEN_ON",
    "NSM_PROMETHEUS_SERVER_HEADER_TIMEOUT",
    "NSM_TUNNEL_IP",
    "NSM_VXLAN_PORT",
    "NSM_DEVICE_SELECTOR_FILE",
    "NSM_MECHANISM_PRIORITY",
    "SPIFFE_ENDPOINT_SOCKET",
    "PROMETHEUS",
    "PROMETHEUS_METRICS_PREFIX",
    "TELEMETRY",
    "NSM_OPEN_TELEMETRY_ENDPOINT",
];

fn not_applicable_line(var: &str) -> String {
    format!("{var} is set but does not apply to Quiver: ")
}

#[test]
fn the_whole_environment_of_cmd_forwarder_vpp_starts_quiver() {
    let dir = Scratch::new("nsm-environment");
    let spiffe = workload_api(&dir);
    let prometheus = format!("127.0.0.1:{}", free_port());
    let vars = every_variable(&dir, &spiffe, &prometheus);
    // The list is the spec's: 40 variables, each either acted on or named as not applying.
    assert_eq!(vars.len(), 40);
    for (k, _) in &vars {
        let ignored = NOT_APPLICABLE.iter().any(|n| n.var == *k);
        assert_ne!(APPLIED.contains(k), ignored, "{k}: applied xor ignored");
    }
    let config = memif_pair_config(&dir.path("memif.sock"), "[stats]\ninterval_secs = 0");
    let mut q = Quiver::spawn_with(&dir, "quiver", &config, &dir.path("admin.sock"), |c| {
        c.arg("--nsm").env_remove("RUST_LOG");
        for (k, v) in &vars {
            c.env(k, v);
        }
    });
    q.wait_log("NSM services use SPIFFE mTLS");
    q.wait_log("NSM forwarder services listening");
    // Prometheus where NSM_PROMETHEUS_LISTEN_ON says, NSM's names after the prefix.
    let mut page = None;
    wait_for(
        "the metrics endpoint at NSM_PROMETHEUS_LISTEN_ON",
        30,
        || {
            q.check_running();
            page = scrape(&prometheus);
            page.is_some()
        },
    );
    let page = page.expect("waited for");
    for family in [
        "# TYPE nsm_env_server_rx_bytes_total counter",
        "# TYPE nsm_env_client_drops_total counter",
        "# TYPE quiver_buffer_pool_capacity gauge",
        "# TYPE quiver_nsm_connections gauge",
    ] {
        assert!(page.lines().any(|l| l == family), "{family}:\n{page}");
    }
    let (_, log) = q.stop();
    for n in NOT_APPLICABLE {
        let lines = log
            .lines()
            .filter(|l| l.contains(&not_applicable_line(n.var)))
            .collect::<Vec<_>>();
        assert_eq!(lines.len(), 1, "{}: {lines:?}\n{log}", n.var);
        assert!(lines[0].ends_with(n.why), "{}", lines[0]);
    }
    for k in APPLIED {
        assert!(!log.contains(&not_applicable_line(k)), "{k}:\n{log}");
    }
}

#[test]
fn a_malformed_value_of_a_variable_that_applies_stops_quiver_naming_it() {
    let dir = Scratch::new("nsm-environment-bad");
    let config = memif_pair_config(&dir.path("memif.sock"), "[stats]\ninterval_secs = 0");
    let listen = format!("unix://{}", dir.path("nsm.sock").display());
    for (var, value) in [
        ("PROMETHEUS", "yes"),
        ("NSM_PROMETHEUS_LISTEN_ON", "8081"),
        ("PROMETHEUS_METRICS_PREFIX", "1st"),
        ("NSM_METRICS_EXPORT_INTERVAL", "10"),
        ("NSM_PROMETHEUS_SERVER_HEADER_TIMEOUT", "5"),
        ("NSM_MECHANISM_PRIORITY", "MEMIF,,KERNEL"),
        ("TELEMETRY", "on"),
        ("NSM_OPEN_TELEMETRY_ENDPOINT", "otel-collector"),
        // IPv6 is served; a multicast address is not an address to tunnel from.
        ("NSM_TUNNEL_IP", "ff02::1"),
        (
            "NSM_DEVICE_SELECTOR_FILE",
            "/nonexistent/device-selector.yaml",
        ),
    ] {
        let q = Quiver::spawn_with(&dir, "quiver", &config, &dir.path("admin.sock"), |c| {
            c.arg("--nsm")
                .env("NSM_LISTEN_ON", &listen)
                .env_remove("NSM_CONNECT_TO")
                .env_remove("SPIFFE_ENDPOINT_SOCKET")
                .env(var, value);
        });
        let (status, log) = q.wait_exit();
        assert!(!status.success(), "{var}={value}: quiver started:\n{log}");
        assert!(
            log.contains(&format!("quiver: {var}={value:?}: ")),
            "{var}={value}: the variable is not named:\n{log}"
        );
    }
}
