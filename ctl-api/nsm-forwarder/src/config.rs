//! The NSM forwarder's settings, from the environment as cmd-forwarder-vpp reads them
//! (`NSM_NAME`, `NSM_CONNECT_TO`, `NSM_LISTEN_ON`, …), `SPIFFE_ENDPOINT_SOCKET`, and its
//! Prometheus settings (`PROMETHEUS`, `NSM_PROMETHEUS_LISTEN_ON`, `PROMETHEUS_METRICS_PREFIX`)
//! and OpenTelemetry's (`TELEMETRY`, `NSM_OPEN_TELEMETRY_ENDPOINT`).
//! cmd-forwarder-vpp's variables that do not apply to Quiver (VPP's, SR-IOV's, pprof's, …) are
//! accepted and named by [`not_applicable`], each with the reason, for the caller to log.

mod env;

pub use env::{not_applicable, parse_go_bool, NotApplicable, NOT_APPLICABLE};

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::device_selector::DeviceSelector;
use spiffe_identity::{Identity, ENDPOINT_ENV};

/// Where Quiver listens when `NSM_LISTEN_ON` is not set.
pub const DEFAULT_LISTEN_ON: &str = "unix:///listen.on.socket";
/// nsmgr's socket when `NSM_CONNECT_TO` is not set.
pub const DEFAULT_CONNECT_TO: &str = "unix:///var/lib/networkservicemesh/nsm.io.sock";
/// Where Prometheus metrics are served when `PROMETHEUS` is true and
/// `NSM_PROMETHEUS_LISTEN_ON` is not set (Go's `:8081`: every address, port 8081).
pub const DEFAULT_PROMETHEUS_LISTEN_ON: &str = ":8081";

/// Where spans go when `TELEMETRY` is true and `NSM_OPEN_TELEMETRY_ENDPOINT` is not set (NSM's
/// collector).
pub const DEFAULT_OPEN_TELEMETRY_ENDPOINT: &str =
    "otel-collector.observability.svc.cluster.local:4317";

/// A bad setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?}: {why}")]
pub struct ConfigError {
    /// The variable.
    pub var: String,
    /// Its value.
    pub value: String,
    /// What is wrong with it.
    pub why: String,
}

/// The NSM forwarder's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsmConfig {
    /// `NSM_NAME`: Quiver's name in paths and in the registry (default `forwarder`).
    pub name: String,
    /// `NSM_LABELS`: `key=value,…` (or `key:value,…`) labels for registration; empty means
    /// cmd-forwarder-vpp's default, `p2p:true`.
    pub labels: HashMap<String, String>,
    /// `NSM_CONNECT_TO`: nsmgr's URL (the registry).
    pub connect_to: String,
    /// `NSM_LISTEN_ON`: where the NSM services listen: `unix:///path`, or `tcp://host:port`
    /// (served with mTLS only: it needs [`NsmConfig::identity`]; see
    /// [`super::server::bind_for`]).
    pub listen_on: String,
    /// `NSM_TUNNEL_IP`: the source address of tunnels (VXLAN, WireGuard), if set.
    pub tunnel_ip: Option<IpAddr>,
    /// `NSM_VXLAN_PORT`: the VXLAN UDP port (default, and 0: 4789).
    pub vxlan_port: u16,
    /// The MTU of the uplink holding [`NsmConfig::tunnel_ip`] (not from the environment: the
    /// forwarder sets it from its port; default 1500). VXLAN connections get 50 bytes less
    /// (70 over IPv6), WireGuard ones 60 (80 over IPv6).
    pub tunnel_mtu: u32,
    /// `NSM_WIREGUARD_PRIVATE_KEY_FILE`: a file holding Quiver's WireGuard private key (base64,
    /// as `wg genkey` writes it); unset: the forwarder makes a key at start.
    pub wireguard_key_file: Option<PathBuf>,
    /// `NSM_DEVICE_SELECTOR_FILE`: the host interfaces NSM's VLAN mechanism leaves by, by the
    /// connection's `via` label (read and checked at start; empty: no VLAN mechanism).
    pub device_selector: DeviceSelector,
    /// `NSM_KERNEL_BACKEND`: the interface a KERNEL mechanism gets (`tap`, the default, or
    /// `veth`).
    pub kernel_backend: KernelBackend,
    /// `NSM_UPLINK`: `af_xdp` (the default) or `none`. With `af_xdp`, when the kernel (not a
    /// port of Quiver's) holds [`NsmConfig::tunnel_ip`], the forwarder attaches to that NIC with
    /// an AF_XDP port that takes only its tunnels' datagrams and leaves the NIC to the node.
    pub node_uplink: bool,
    /// Quiver's WireGuard public key (not from the environment: the forwarder sets it from its
    /// private key). `None`: no WireGuard mechanism (IP payload stays on this node).
    pub wireguard_public_key: Option<[u8; 32]>,
    /// `NSM_MAX_TOKEN_LIFETIME`: how long Quiver's own path segment is valid (default 10m).
    pub max_token_lifetime: Duration,
    /// `NSM_DIAL_TIMEOUT`: how long dialing the endpoint or the registry may take (750ms).
    pub dial_timeout: Duration,
    /// `NSM_LOG_LEVEL`: `TRACE`, `DEBUG`, `INFO` (default), `WARN`, `ERROR`.
    pub log_level: String,
    /// `NSM_NSNAME`: the network service Quiver registers under (default `forwarder`).
    pub nsname: String,
    /// `NSM_MECHANISM_PRIORITY`: mechanism types (`KERNEL,MEMIF`, …) Quiver offers the
    /// endpoint first, in this order; the others follow in their usual order (empty: no
    /// change).
    pub mechanism_priority: Vec<String>,
    /// `NSM_METRICS_EXPORT_INTERVAL`: how often each connection's path segment metrics are
    /// read again and, when they changed, published to MonitorConnections (default 10s; 0:
    /// only at each Request); with [`NsmConfig::telemetry`], also how often they are exported
    /// as OpenTelemetry metrics (0: the SDK's default).
    pub metrics_export_interval: Duration,
    /// `PROMETHEUS`: serve Prometheus metrics at [`NsmConfig::prometheus_listen_on`].
    pub prometheus: bool,
    /// `NSM_PROMETHEUS_LISTEN_ON`: Go's `host:port` (default `:8081`); see
    /// [`NsmConfig::prometheus_addr`].
    pub prometheus_listen_on: String,
    /// `NSM_PROMETHEUS_SERVER_HEADER_TIMEOUT`: how long a client of the Prometheus endpoint may
    /// take to send its request's headers (default 5s).
    pub prometheus_server_header_timeout: Duration,
    /// `PROMETHEUS_METRICS_PREFIX`: put before the NSM connection metrics' names, joined with
    /// `_` (empty: none).
    pub prometheus_metrics_prefix: String,
    /// `TELEMETRY`: send OpenTelemetry spans of Request and Close, and Quiver's path segment
    /// metrics, to [`NsmConfig::open_telemetry_endpoint`] (see [`crate::telemetry`]).
    pub telemetry: bool,
    /// `NSM_OPEN_TELEMETRY_ENDPOINT`: the OTLP/gRPC collector, Go's `host:port`, plaintext
    /// (default [`DEFAULT_OPEN_TELEMETRY_ENDPOINT`]).
    pub open_telemetry_endpoint: String,
    /// Remove what no connection owns when the server starts (default true; not from the
    /// environment: tests sharing a host with other Quivers turn it off).
    pub reconcile_at_start: bool,
    /// Close a connection as soon as its client's or endpoint's pod is gone
    /// (`crate::pod_watch`), as cmd-forwarder-vpp does. On in `quiver run` (from the
    /// environment); off by default for library users whose test namespaces hold only
    /// short-lived processes.
    pub watch_pods: bool,
    /// Register with nsmgr at `connect_to` and keep the registration fresh (on when
    /// `NSM_CONNECT_TO` is set in the environment).
    pub register: bool,
    /// `SPIFFE_ENDPOINT_SOCKET`: the Workload API to fetch [`NsmConfig::identity`] from when
    /// the server starts (`None`: plaintext on unix sockets only).
    pub spiffe_endpoint: Option<String>,
    /// Quiver's SPIFFE identity: with one, every hop is mTLS and path tokens are minted and
    /// checked; without, plaintext on unix sockets and tokens are passed on unchecked. Set by
    /// the caller, or fetched from [`NsmConfig::spiffe_endpoint`] at start.
    pub identity: Option<Identity>,
}

/// The interface NSM's KERNEL mechanism gets in the pod's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelBackend {
    /// A veth pair; Quiver's end an AF_PACKET port.
    Veth,
    /// A TAP device Quiver holds (virtio-net headers, multi-queue), moved into the namespace.
    #[default]
    Tap,
}

impl Default for NsmConfig {
    fn default() -> Self {
        NsmConfig {
            name: "forwarder".into(),
            labels: HashMap::new(),
            connect_to: DEFAULT_CONNECT_TO.into(),
            listen_on: DEFAULT_LISTEN_ON.into(),
            tunnel_ip: None,
            vxlan_port: 4789,
            tunnel_mtu: 1500,
            wireguard_key_file: None,
            device_selector: DeviceSelector::default(),
            kernel_backend: KernelBackend::default(),
            node_uplink: true,
            wireguard_public_key: None,
            max_token_lifetime: Duration::from_secs(600),
            dial_timeout: Duration::from_millis(750),
            log_level: "INFO".into(),
            nsname: "forwarder".into(),
            mechanism_priority: Vec::new(),
            metrics_export_interval: Duration::from_secs(10),
            prometheus: false,
            prometheus_listen_on: DEFAULT_PROMETHEUS_LISTEN_ON.into(),
            prometheus_server_header_timeout: Duration::from_secs(5),
            prometheus_metrics_prefix: String::new(),
            telemetry: false,
            open_telemetry_endpoint: DEFAULT_OPEN_TELEMETRY_ENDPOINT.into(),
            reconcile_at_start: true,
            watch_pods: false,
            register: false,
            spiffe_endpoint: None,
            identity: None,
        }
    }
}

/// An environment lookup that treats empty values as unset.
type Vars<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// `var`'s `value` refused: `why`.
fn invalid(var: &str, value: &str, why: &str) -> ConfigError {
    ConfigError {
        var: var.into(),
        value: value.into(),
        why: why.into(),
    }
}

impl NsmConfig {
    /// True when the environment asks for the NSM forwarder (`NSM_LISTEN_ON` is set).
    pub fn requested_by_env() -> bool {
        std::env::var_os("NSM_LISTEN_ON").is_some()
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<NsmConfig, ConfigError> {
        NsmConfig::from_vars(|k| std::env::var(k).ok())
    }

    /// Reads settings through `get` (an environment lookup); unset or empty variables take
    /// their defaults.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<NsmConfig, ConfigError> {
        let mut c = NsmConfig {
            watch_pods: true,
            ..NsmConfig::default()
        };
        let var = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        c.service_vars(&var)?;
        c.dataplane_vars(&var)?;
        c.duration_vars(&var)?;
        c.observability_vars(&var)?;
        Ok(c)
    }

    /// The service: its names, labels, mechanism priority, sockets, registration and SPIFFE.
    fn service_vars(&mut self, var: &Vars) -> Result<(), ConfigError> {
        if let Some(v) = var("NSM_NAME") {
            self.name = v;
        }
        if let Some(v) = var("NSM_NSNAME") {
            self.nsname = v.trim().to_string();
        }
        if let Some(v) = var("NSM_MECHANISM_PRIORITY") {
            self.mechanism_priority = env::mechanism_list(&v)
                .map_err(|why| invalid("NSM_MECHANISM_PRIORITY", &v, &why))?;
        }
        if let Some(v) = var("NSM_LABELS") {
            for kv in v.split(',').filter(|s| !s.is_empty()) {
                let (k, val) = kv
                    .split_once(['=', ':'])
                    .ok_or_else(|| invalid("NSM_LABELS", &v, "expected key=value,…"))?;
                self.labels.insert(k.trim().into(), val.trim().into());
            }
        }
        for (name, slot) in [
            ("NSM_CONNECT_TO", &mut self.connect_to),
            ("NSM_LISTEN_ON", &mut self.listen_on),
        ] {
            if let Some(v) = var(name) {
                if !v.starts_with("unix://") && !v.starts_with("tcp://") {
                    return Err(invalid(
                        name,
                        &v,
                        "expected unix:///path or tcp://host:port",
                    ));
                }
                *slot = v;
            }
        }
        self.register = var("NSM_CONNECT_TO").is_some();
        self.spiffe_endpoint = var(ENDPOINT_ENV);
        Ok(())
    }

    /// The data plane: the tunnel address, kernel backend, uplink, WireGuard key, the VLAN
    /// device selector, VXLAN port.
    fn dataplane_vars(&mut self, var: &Vars) -> Result<(), ConfigError> {
        if let Some(v) = var("NSM_TUNNEL_IP") {
            let ip: IpAddr = v
                .parse()
                .map_err(|_| invalid("NSM_TUNNEL_IP", &v, "not an IP address"))?;
            if ip.is_unspecified() || ip.is_multicast() {
                return Err(invalid("NSM_TUNNEL_IP", &v, "not a unicast address"));
            }
            self.tunnel_ip = Some(ip);
        }
        if let Some(v) = var("NSM_KERNEL_BACKEND") {
            self.kernel_backend = match v.to_ascii_lowercase().as_str() {
                "veth" => KernelBackend::Veth,
                "tap" => KernelBackend::Tap,
                _ => return Err(invalid("NSM_KERNEL_BACKEND", &v, "expected veth or tap")),
            };
        }
        if let Some(v) = var("NSM_UPLINK") {
            self.node_uplink = match v.to_ascii_lowercase().as_str() {
                "af_xdp" => true,
                "none" => false,
                _ => return Err(invalid("NSM_UPLINK", &v, "expected af_xdp or none")),
            };
        }
        if let Some(v) = var("NSM_WIREGUARD_PRIVATE_KEY_FILE") {
            self.wireguard_key_file = Some(PathBuf::from(v));
        }
        if let Some(v) = var("NSM_DEVICE_SELECTOR_FILE") {
            self.device_selector = DeviceSelector::read(std::path::Path::new(&v))
                .map_err(|why| invalid("NSM_DEVICE_SELECTOR_FILE", &v, &why))?;
        }
        if let Some(v) = var("NSM_VXLAN_PORT") {
            self.vxlan_port = match v.parse() {
                // cmd-forwarder-vpp's default: 0 means VXLAN's own port.
                Ok(0) => 4789,
                Ok(port) => port,
                Err(_) => return Err(invalid("NSM_VXLAN_PORT", &v, "not a UDP port")),
            };
        }
        Ok(())
    }

    /// Lifetimes, timeouts and intervals (Go durations).
    fn duration_vars(&mut self, var: &Vars) -> Result<(), ConfigError> {
        for (name, slot) in [
            ("NSM_MAX_TOKEN_LIFETIME", &mut self.max_token_lifetime),
            ("NSM_DIAL_TIMEOUT", &mut self.dial_timeout),
            (
                "NSM_METRICS_EXPORT_INTERVAL",
                &mut self.metrics_export_interval,
            ),
            (
                "NSM_PROMETHEUS_SERVER_HEADER_TIMEOUT",
                &mut self.prometheus_server_header_timeout,
            ),
        ] {
            if let Some(v) = var(name) {
                *slot = parse_go_duration(&v).map_err(|why| invalid(name, &v, &why.to_string()))?;
            }
        }
        Ok(())
    }

    /// Logging, Prometheus and OpenTelemetry.
    fn observability_vars(&mut self, var: &Vars) -> Result<(), ConfigError> {
        if let Some(v) = var("NSM_LOG_LEVEL") {
            let up = v.to_ascii_uppercase();
            if ![
                "TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL", "PANIC",
            ]
            .contains(&up.as_str())
            {
                return Err(invalid("NSM_LOG_LEVEL", &v, "not a log level"));
            }
            self.log_level = up;
        }
        if let Some(v) = var("PROMETHEUS") {
            self.prometheus = parse_go_bool(&v)
                .ok_or_else(|| invalid("PROMETHEUS", &v, "expected true or false"))?;
        }
        if let Some(v) = var("NSM_PROMETHEUS_LISTEN_ON") {
            env::listen_addr(&v).map_err(|why| invalid("NSM_PROMETHEUS_LISTEN_ON", &v, &why))?;
            self.prometheus_listen_on = v.trim().to_string();
        }
        if let Some(v) = var("PROMETHEUS_METRICS_PREFIX") {
            env::metric_prefix(&v).map_err(|why| invalid("PROMETHEUS_METRICS_PREFIX", &v, &why))?;
            self.prometheus_metrics_prefix = v.trim().to_string();
        }
        if let Some(v) = var("TELEMETRY") {
            self.telemetry = parse_go_bool(&v)
                .ok_or_else(|| invalid("TELEMETRY", &v, "expected true or false"))?;
        }
        if let Some(v) = var("NSM_OPEN_TELEMETRY_ENDPOINT") {
            crate::telemetry::endpoint_url(&v)
                .map_err(|why| invalid("NSM_OPEN_TELEMETRY_ENDPOINT", &v, &why.to_string()))?;
            self.open_telemetry_endpoint = v.trim().to_string();
        }
        Ok(())
    }

    /// Where to serve Prometheus metrics (`IP:PORT`), when `PROMETHEUS` is true:
    /// `NSM_PROMETHEUS_LISTEN_ON` with an empty host as every IPv4 address and `localhost` as
    /// 127.0.0.1.
    pub fn prometheus_addr(&self) -> Option<std::net::SocketAddr> {
        self.prometheus
            .then(|| env::listen_addr(&self.prometheus_listen_on).ok())
            .flatten()
    }

    /// Fetches [`NsmConfig::identity`] from the Workload API at
    /// [`NsmConfig::spiffe_endpoint`] unless it is set already (waits for the first SVID; logs
    /// that the service runs in plaintext when there is no endpoint). Call on the runtime the
    /// service runs on: the identity follows rotations in a task of it.
    pub async fn resolve_identity(&mut self) -> Result<(), spiffe_identity::SpiffeError> {
        if self.identity.is_none() {
            self.identity = Identity::from_endpoint(self.spiffe_endpoint.as_deref()).await?;
        }
        Ok(())
    }

    /// The labels Quiver registers with: `NSM_LABELS`, or `p2p: true` when it is empty.
    pub fn registration_labels(&self) -> HashMap<String, String> {
        if self.labels.is_empty() {
            HashMap::from([("p2p".to_string(), "true".to_string())])
        } else {
            self.labels.clone()
        }
    }

    /// `NSM_LOG_LEVEL` as a `tracing` filter directive.
    pub fn tracing_level(&self) -> &'static str {
        match self.log_level.as_str() {
            "TRACE" => "trace",
            "DEBUG" => "debug",
            "WARN" | "WARNING" => "warn",
            "ERROR" | "FATAL" | "PANIC" => "error",
            _ => "info",
        }
    }
}

/// Why text is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing at all.
    #[error("empty duration")]
    Empty,
    /// A number without a unit.
    #[error("{0:?}: missing unit")]
    MissingUnit(String),
    /// Not a number where one should be.
    #[error("{0:?}: bad number")]
    Number(String),
    /// A unit Go does not have.
    #[error("{duration:?}: unknown unit {unit:?}")]
    Unit {
        /// The whole duration.
        duration: String,
        /// The unit.
        unit: String,
    },
}

/// Parses a Go duration (`750ms`, `10m`, `1h30m`, `1.5s`, `0`), as NSM's env uses.
pub fn parse_go_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| DurationError::MissingUnit(s.to_string()))?;
        let n: f64 = rest[..num_end]
            .parse()
            .map_err(|_| DurationError::Number(s.to_string()))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => {
                return Err(DurationError::Unit {
                    duration: s.to_string(),
                    unit: u.to_string(),
                })
            }
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<NsmConfig, ConfigError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        NsmConfig::from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_like_cmd_forwarder_vpp() {
        let c = from(&[]).unwrap();
        // The daemon watches pods, as cmd-forwarder-vpp does; a library user opts in.
        assert!(c.watch_pods && !NsmConfig::default().watch_pods);
        assert_eq!(
            c,
            NsmConfig {
                watch_pods: true,
                ..NsmConfig::default()
            }
        );
        assert_eq!(c.listen_on, "unix:///listen.on.socket");
        assert_eq!(c.max_token_lifetime, Duration::from_secs(600));
        assert_eq!(c.dial_timeout, Duration::from_millis(750));
    }

    #[test]
    fn a_tunnel_ip_of_either_family_is_taken_and_a_non_unicast_one_refused() {
        let c = from(&[("NSM_TUNNEL_IP", "fd00:77::1")]).unwrap();
        assert_eq!(c.tunnel_ip, Some("fd00:77::1".parse().unwrap()));
        assert!(from(&[("NSM_TUNNEL_IP", "192.0.2.1")]).is_ok());
        for bad in ["::", "ff02::1", "0.0.0.0", "224.0.0.1"] {
            let e = from(&[("NSM_TUNNEL_IP", bad)]).unwrap_err();
            assert_eq!(e.var, "NSM_TUNNEL_IP");
            assert!(e.why.contains("unicast"), "{e}");
        }
    }

    #[test]
    fn every_variable_is_read() {
        let c = from(&[
            ("NSM_NAME", "quiver-1"),
            ("NSM_LABELS", "a=b,c=d"),
            ("NSM_CONNECT_TO", "unix:///nsm.sock"),
            ("NSM_LISTEN_ON", "unix:///q.sock"),
            ("NSM_TUNNEL_IP", "10.0.0.1"),
            ("NSM_VXLAN_PORT", "4790"),
            ("NSM_MAX_TOKEN_LIFETIME", "1h30m"),
            ("NSM_DIAL_TIMEOUT", "1.5s"),
            ("NSM_LOG_LEVEL", "debug"),
        ])
        .unwrap();
        assert_eq!(c.name, "quiver-1");
        assert_eq!(c.labels["c"], "d");
        assert_eq!(c.connect_to, "unix:///nsm.sock");
        assert_eq!(c.listen_on, "unix:///q.sock");
        assert_eq!(c.tunnel_ip, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(c.vxlan_port, 4790);
        assert_eq!(c.max_token_lifetime, Duration::from_secs(5400));
        assert_eq!(c.dial_timeout, Duration::from_millis(1500));
        assert_eq!(c.tracing_level(), "debug");
        assert!(c.register);
        assert!(!from(&[]).unwrap().register);
        assert_eq!(c.registration_labels()["a"], "b");
        assert!(!c.registration_labels().contains_key("p2p"));
        assert_eq!(from(&[]).unwrap().registration_labels()["p2p"], "true");
        let s = from(&[("SPIFFE_ENDPOINT_SOCKET", "unix:///run/spire/agent.sock")]).unwrap();
        assert_eq!(
            s.spiffe_endpoint.as_deref(),
            Some("unix:///run/spire/agent.sock")
        );
        assert_eq!(from(&[]).unwrap().spiffe_endpoint, None);
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("NSM_TUNNEL_IP", "x"),
            ("NSM_LISTEN_ON", "/path"),
            ("NSM_DIAL_TIMEOUT", "5"),
            ("NSM_MAX_TOKEN_LIFETIME", "10y"),
            ("NSM_LOG_LEVEL", "loud"),
            ("NSM_VXLAN_PORT", "70000"),
        ] {
            assert_eq!(from(&[(k, v)]).unwrap_err().var, k);
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(
            parse_go_duration("750ms").unwrap(),
            Duration::from_millis(750)
        );
        assert_eq!(parse_go_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration("ms").is_err());
    }
}
