//! The rest of cmd-forwarder-vpp's environment: the variables that do not apply to Quiver (each
//! with the reason, for one log line at start) and the parsers of the ones that do.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// A variable of cmd-forwarder-vpp's that Quiver accepts but does not act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotApplicable {
    /// The variable.
    pub var: &'static str,
    /// Why it does not apply to Quiver.
    pub why: &'static str,
}

const NO_VPP: &str = "Quiver is its own data plane: there is no VPP to connect to or start";
const NO_SRIOV: &str = "Quiver offers no SR-IOV, PCI or VFIO mechanisms: no devices to manage";
const NO_PPROF: &str = "Go's pprof profiler: Quiver is not a Go program";
const NO_PROMETHEUS_TLS: &str =
    "Quiver serves Prometheus metrics over plain HTTP only (no TLS on the metrics endpoint)";

/// Every variable of cmd-forwarder-vpp (v1.18) that Quiver accepts without acting on it.
pub const NOT_APPLICABLE: &[NotApplicable] = &[
    NotApplicable {
        var: "NSM_REGISTRY_CLIENT_POLICIES",
        why: "Quiver has no OPA policy engine: registry answers are checked by its own rules",
    },
    NotApplicable {
        var: "NSM_PPROF_ENABLED",
        why: NO_PPROF,
    },
    NotApplicable {
        var: "NSM_PPROF_LISTEN_ON",
        why: NO_PPROF,
    },
    NotApplicable {
        var: "NSM_PROMETHEUS_CA_FILE",
        why: NO_PROMETHEUS_TLS,
    },
    NotApplicable {
        var: "NSM_PROMETHEUS_KEY_FILE",
        why: NO_PROMETHEUS_TLS,
    },
    NotApplicable {
        var: "NSM_PROMETHEUS_CERT_FILE",
        why: NO_PROMETHEUS_TLS,
    },
    NotApplicable {
        var: "NSM_PROMETHEUS_MONITOR_CERTIFICATE",
        why: NO_PROMETHEUS_TLS,
    },
    NotApplicable {
        var: "NSM_PROMETHEUS_MAX_BIND_THRESHOLD",
        why: "Quiver binds its metrics address once at start and refuses to start if it cannot, \
              instead of retrying",
    },
    NotApplicable {
        var: "NSM_VPP_API_SOCKET",
        why: NO_VPP,
    },
    NotApplicable {
        var: "NSM_VPP_INIT",
        why: NO_VPP,
    },
    NotApplicable {
        var: "NSM_VPP_INIT_PARAMS",
        why: NO_VPP,
    },
    NotApplicable {
        var: "NSM_VPP_MIN_OPERATION_TIMEOUT",
        why: NO_VPP,
    },
    NotApplicable {
        var: "NSM_RESOURCE_POLL_TIMEOUT",
        why: NO_SRIOV,
    },
    NotApplicable {
        var: "NSM_DEVICE_PLUGIN_PATH",
        why: NO_SRIOV,
    },
    NotApplicable {
        var: "NSM_POD_RESOURCES_PATH",
        why: NO_SRIOV,
    },
    NotApplicable {
        var: "NSM_SRIOV_CONFIG_FILE",
        why: NO_SRIOV,
    },
    NotApplicable {
        var: "NSM_PCI_DEVICES_PATH",
        why: NO_SRIOV,
    },
    NotApplicable {
        var: "NSM_PCI_DRIVERS_PATH",
        why: NO_SRIOV,
    },
    NotApplicable {
        var: "NSM_CGROUP_PATH",
        why: NO_SRIOV,
    },
    NotApplicable {
        var: "NSM_VFIO_PATH",
        why: NO_SRIOV,
    },
];

/// The variables of [`NOT_APPLICABLE`] set (not empty) in the environment `get` reads, in the
/// table's order: the caller logs one line for each.
pub fn not_applicable(get: impl Fn(&str) -> Option<String>) -> Vec<NotApplicable> {
    NOT_APPLICABLE
        .iter()
        .filter(|n| get(n.var).is_some_and(|v| !v.trim().is_empty()))
        .copied()
        .collect()
}

/// A boolean as Go's `strconv.ParseBool` reads it (`1`, `t`, `true`, `TRUE`, `True`, and the
/// false ones alike).
pub fn parse_go_bool(s: &str) -> Option<bool> {
    match s.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// `NSM_MECHANISM_PRIORITY`: comma-separated mechanism types, upper-cased; any type is
/// accepted (other forwarders' too), but not an empty list item between commas.
pub(super) fn mechanism_list(s: &str) -> Result<Vec<String>, String> {
    let items: Vec<&str> = s.split(',').map(str::trim).collect();
    if items.iter().any(|i| i.is_empty()) {
        return Err("expected mechanism types separated by commas, e.g. KERNEL,MEMIF".into());
    }
    if let Some(bad) = items
        .iter()
        .find(|i| !i.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(format!("{bad:?} is not a mechanism type"));
    }
    Ok(items.iter().map(|i| i.to_ascii_uppercase()).collect())
}

/// Go's listen address `host:port` as a socket address: an empty host is every IPv4 address,
/// `localhost` is 127.0.0.1, an IPv6 host is in brackets.
pub(super) fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    let (host, port) = s.rsplit_once(':').ok_or("expected host:port, e.g. :8081")?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{port:?} is not a port"))?;
    let ip = match host.trim_start_matches('[').trim_end_matches(']') {
        "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        h => h
            .parse()
            .map_err(|_| format!("{h:?} is not an IP address (host names are not resolved)"))?,
    };
    Ok(SocketAddr::new(ip, port))
}

/// `PROMETHEUS_METRICS_PREFIX`: it must make valid metric names (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub(super) fn metric_prefix(s: &str) -> Result<(), String> {
    let s = s.trim();
    let first_ok = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':');
    if first_ok
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        Ok(())
    } else {
        Err("not a Prometheus metric name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::super::NsmConfig;
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    fn from(vars: &[(&str, &str)]) -> Result<NsmConfig, super::super::ConfigError> {
        let m: HashMap<&str, &str> = vars.iter().copied().collect();
        NsmConfig::from_vars(|k| m.get(k).map(|v| v.to_string()))
    }

    /// Each variable that applies, with a good value and what it sets, or a bad value.
    #[test]
    fn parsing_table() {
        type Check = fn(&NsmConfig) -> bool;
        let good: &[(&str, &str, Check)] = &[
            ("NSM_NSNAME", "fwd-svc", |c| c.nsname == "fwd-svc"),
            ("NSM_MECHANISM_PRIORITY", "kernel, MEMIF", |c| {
                c.mechanism_priority == ["KERNEL", "MEMIF"]
            }),
            ("NSM_METRICS_EXPORT_INTERVAL", "2s", |c| {
                c.metrics_export_interval == Duration::from_secs(2)
            }),
            ("NSM_METRICS_EXPORT_INTERVAL", "0", |c| {
                c.metrics_export_interval.is_zero()
            }),
            ("PROMETHEUS", "true", |c| {
                c.prometheus && c.prometheus_addr() == Some("0.0.0.0:8081".parse().unwrap())
            }),
            ("PROMETHEUS", "1", |c| c.prometheus),
            ("PROMETHEUS", "False", |c| {
                !c.prometheus && c.prometheus_addr().is_none()
            }),
            ("NSM_PROMETHEUS_LISTEN_ON", "127.0.0.1:9090", |c| {
                c.prometheus_listen_on == "127.0.0.1:9090" && c.prometheus_addr().is_none()
            }),
            ("PROMETHEUS_METRICS_PREFIX", "nsm_fwd", |c| {
                c.prometheus_metrics_prefix == "nsm_fwd"
            }),
            ("NSM_PROMETHEUS_SERVER_HEADER_TIMEOUT", "2s", |c| {
                c.prometheus_server_header_timeout == Duration::from_secs(2)
            }),
            ("NSM_LOG_LEVEL", "warn", |c| c.tracing_level() == "warn"),
            ("NSM_DIAL_TIMEOUT", "100ms", |c| {
                c.dial_timeout == Duration::from_millis(100)
            }),
            ("NSM_MAX_TOKEN_LIFETIME", "24h", |c| {
                c.max_token_lifetime == Duration::from_secs(86400)
            }),
            ("NSM_VXLAN_PORT", "0", |c| c.vxlan_port == 4789),
            ("NSM_VXLAN_PORT", "8472", |c| c.vxlan_port == 8472),
            ("NSM_KERNEL_BACKEND", "tap", |c| {
                c.kernel_backend == crate::config::KernelBackend::Tap
            }),
            ("NSM_KERNEL_BACKEND", "VETH", |c| {
                c.kernel_backend == crate::config::KernelBackend::Veth
            }),
            (
                "NSM_WIREGUARD_PRIVATE_KEY_FILE",
                "/etc/quiver/wg.key",
                |c| {
                    c.wireguard_key_file.as_deref()
                        == Some(std::path::Path::new("/etc/quiver/wg.key"))
                },
            ),
            ("TELEMETRY", "true", |c| {
                c.telemetry
                    && c.open_telemetry_endpoint
                        == "otel-collector.observability.svc.cluster.local:4317"
            }),
            ("TELEMETRY", "F", |c| !c.telemetry),
            ("NSM_OPEN_TELEMETRY_ENDPOINT", "collector.obs:4317", |c| {
                c.open_telemetry_endpoint == "collector.obs:4317" && !c.telemetry
            }),
            // Not applicable: accepted whatever its value, and changes nothing.
            ("NSM_VPP_INIT", "NONE", |c| *c == from(&[]).unwrap()),
            ("NSM_PPROF_ENABLED", "maybe", |c| *c == from(&[]).unwrap()),
        ];
        for (var, value, check) in good {
            let c = from(&[(var, value)]).unwrap_or_else(|e| panic!("{var}={value}: {e}"));
            assert!(check(&c), "{var}={value}: {c:?}");
        }
        let bad = [
            ("NSM_MECHANISM_PRIORITY", "KERNEL,,MEMIF"),
            ("NSM_MECHANISM_PRIORITY", "KER NEL"),
            ("NSM_METRICS_EXPORT_INTERVAL", "10"),
            ("PROMETHEUS", "yes"),
            ("NSM_PROMETHEUS_LISTEN_ON", "8081"),
            ("NSM_PROMETHEUS_LISTEN_ON", ":http"),
            ("NSM_PROMETHEUS_LISTEN_ON", "metrics.local:8081"),
            ("PROMETHEUS_METRICS_PREFIX", "9lives"),
            ("PROMETHEUS_METRICS_PREFIX", "a-b"),
            ("NSM_DIAL_TIMEOUT", "soon"),
            ("NSM_PROMETHEUS_SERVER_HEADER_TIMEOUT", "5"),
            ("NSM_LOG_LEVEL", "chatty"),
            ("TELEMETRY", "maybe"),
            ("NSM_OPEN_TELEMETRY_ENDPOINT", "otel-collector"),
            ("NSM_OPEN_TELEMETRY_ENDPOINT", "https://otel-collector:4317"),
        ];
        for (var, value) in bad {
            let e = from(&[(var, value)]).expect_err(&format!("{var}={value} accepted"));
            assert_eq!(e.var, var);
            assert!(e.to_string().starts_with(var), "{e}");
        }
    }

    #[test]
    fn listen_addresses_as_go_writes_them() {
        for (text, want) in [
            (":8081", "0.0.0.0:8081"),
            ("localhost:9", "127.0.0.1:9"),
            ("[::1]:8081", "[::1]:8081"),
            ("10.1.2.3:80", "10.1.2.3:80"),
        ] {
            assert_eq!(listen_addr(text), Ok(want.parse().unwrap()), "{text}");
        }
    }

    #[test]
    fn only_what_is_set_is_named_once_each() {
        let set = HashMap::from([
            ("NSM_VPP_API_SOCKET", "/var/run/vpp/api.sock"),
            ("TELEMETRY", "true"),
            ("NSM_OPEN_TELEMETRY_ENDPOINT", "otel:4317"),
            ("NSM_PPROF_ENABLED", ""),
            ("NSM_PROMETHEUS_CA_FILE", "/ca.crt"),
            ("NSM_NAME", "q"),
        ]);
        let named: Vec<&str> = not_applicable(|k| set.get(k).map(|v| v.to_string()))
            .iter()
            .map(|n| n.var)
            .collect();
        assert_eq!(named, ["NSM_PROMETHEUS_CA_FILE", "NSM_VPP_API_SOCKET"]);
        // OpenTelemetry applies now.
        for var in ["TELEMETRY", "NSM_OPEN_TELEMETRY_ENDPOINT"] {
            assert!(NOT_APPLICABLE.iter().all(|n| n.var != var), "{var}");
        }
        let mut vars: Vec<&str> = NOT_APPLICABLE.iter().map(|n| n.var).collect();
        vars.sort_unstable();
        vars.dedup();
        assert_eq!(vars.len(), NOT_APPLICABLE.len(), "each variable once");
    }
}
