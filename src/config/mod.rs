//! `quiver.toml`: what the daemon runs. Every key has a default, so an empty file is valid.

mod check;
mod next_table;
pub mod topology;
pub mod values;
pub mod vxlan;
pub mod wireguard;

use std::path::Path;

use dataplane::{BufferPoolConfig, HugepagePolicy, IdlePolicy};
use serde::Deserialize;

pub use self::check::{Address, Neighbor, Route, Topology};
pub use self::vxlan::{Vxlan, VxlanSection};
pub use self::wireguard::{WireguardPeerSection, WireguardSection};
pub use topology::{
    AddressSection, AfPacketSection, AfXdpSection, CommonPortSettings, DpdkSection, MemifMode,
    MemifRole, MemifSection, NeighborSection, PortSection, RouteSection, TableSection, TapSection,
    XconnectSection, XdpAttachKey, XdpCopyKey,
};

/// The whole configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Worker threads.
    pub dataplane: DataplaneSection,
    /// The buffer pool.
    pub buffers: BuffersSection,
    /// Periodic counter printing.
    pub stats: StatsSection,
    /// The built-in traffic demo (runs while no ports are configured).
    pub demo: DemoSection,
    /// Ports (`[[port]]`).
    pub port: Vec<PortSection>,
    /// L2 cross-connects between ports (`[[xconnect]]`).
    pub xconnect: Vec<XconnectSection>,
    /// Our addresses (`[[address]]`).
    pub address: Vec<AddressSection>,
    /// Static routes (`[[route]]`).
    pub route: Vec<RouteSection>,
    /// Routing tables besides the default one (`[[table]]`, VRFs).
    pub table: Vec<TableSection>,
    /// VXLAN tunnels to other forwarders (`[[vxlan]]`).
    pub vxlan: Vec<VxlanSection>,
    /// Static neighbours (`[[neighbor]]`).
    pub neighbor: Vec<NeighborSection>,
    /// DPDK's EAL, when there are `type = "dpdk"` ports.
    pub dpdk: DpdkEalSection,
    /// Prometheus metrics.
    pub metrics: MetricsSection,
    /// WireGuard tunnels (`[[wireguard]]`).
    pub wireguard: Vec<WireguardSection>,
}

impl Config {
    /// Whether `[[route]]` `r` goes through one of the `[[wireguard]]` tunnels (a `via` of
    /// `<address>@<tunnel>`): such a route is added once its tunnel exists.
    pub fn route_through_wireguard(&self, r: &RouteSection) -> bool {
        r.via.iter().any(|v| {
            v.split_once('@')
                .is_some_and(|(_, p)| self.wireguard.iter().any(|w| w.name == p))
        })
    }
}

/// `[metrics]`: the Prometheus endpoint.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// `IP:PORT` to serve `GET /metrics` on (`127.0.0.1:9464`). Empty (the default): no
    /// metrics.
    pub listen: String,
}

/// `[dpdk]`: how DPDK's EAL starts (only when a `type = "dpdk"` port exists).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DpdkEalSection {
    /// PCI addresses DPDK may use (bound to vfio-pci beforehand). Empty (the default): `--no-pci`,
    /// so the host's own NICs are never touched.
    pub pci: Vec<String>,
    /// Virtual devices to create, as `--vdev` takes them (`net_ring0`, `net_tap0,iface=qtap0`).
    pub vdevs: Vec<String>,
    /// More EAL arguments, passed unchanged.
    pub eal_args: Vec<String>,
}

/// `[dataplane]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataplaneSection {
    /// One worker per core listed, pinned to it. Default: the last core this process may use.
    pub cores: Option<Vec<usize>>,
    /// `poll` (spin, lowest latency) or `adaptive` (sleep 50 µs between passes after 10,000
    /// empty ones).
    pub idle: IdleMode,
}

impl Default for DataplaneSection {
    fn default() -> Self {
        DataplaneSection {
            cores: None,
            idle: IdleMode::Poll,
        }
    }
}

/// What a worker does with nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdleMode {
    /// Spin.
    Poll,
    /// Sleep a little once idle for a while.
    Adaptive,
}

impl From<IdleMode> for IdlePolicy {
    fn from(m: IdleMode) -> Self {
        match m {
            IdleMode::Poll => IdlePolicy::Poll,
            IdleMode::Adaptive => IdlePolicy::ADAPTIVE,
        }
    }
}

/// `[buffers]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BuffersSection {
    /// Number of buffers (default 32768).
    pub count: u32,
    /// Data bytes per buffer (default 2048).
    pub data_size: u16,
    /// Headroom bytes per buffer (default 128, the minimum).
    pub headroom: u16,
    /// `auto` (hugepages when there are enough, else ordinary pages and a warning), `require`,
    /// or `never`.
    pub hugepages: HugepageMode,
}

impl Default for BuffersSection {
    fn default() -> Self {
        let d = BufferPoolConfig::default();
        BuffersSection {
            count: d.buffers,
            data_size: d.data_size,
            headroom: d.headroom,
            hugepages: HugepageMode::Auto,
        }
    }
}

/// Hugepage use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HugepageMode {
    /// Use them when available.
    Auto,
    /// Fail without them.
    Require,
    /// Never.
    Never,
}

impl BuffersSection {
    /// The pool configuration this section describes.
    pub fn pool_config(&self) -> BufferPoolConfig {
        BufferPoolConfig {
            buffers: self.count,
            data_size: self.data_size,
            headroom: self.headroom,
            prefix_size: 0,
            hugepages: match self.hugepages {
                HugepageMode::Auto => HugepagePolicy::Auto,
                HugepageMode::Require => HugepagePolicy::Require,
                HugepageMode::Never => HugepagePolicy::Never,
            },
        }
    }
}

/// `[stats]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatsSection {
    /// Print `show runtime` every this many seconds (0: only at exit).
    pub interval_secs: u64,
}

/// `[demo]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DemoSection {
    /// Packets per second per worker (0: as fast as the worker can).
    pub rate_pps: u64,
    /// Frame size in bytes (60 to 1514: the demo's ports have a 1500-byte MTU).
    pub frame_size: usize,
}

impl Default for DemoSection {
    fn default() -> Self {
        DemoSection {
            rate_pps: 0,
            frame_size: 64,
        }
    }
}

/// Errors reading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid.
    #[error("{path}: {source}")]
    Parse {
        /// The path.
        path: String,
        /// What is wrong, with the line.
        source: toml::de::Error,
    },
    /// A value is out of range.
    #[error("{0}")]
    Invalid(String),
    /// A value is wrong: it does not parse, names nothing the file defines, or would be
    /// refused when the ports open.
    #[error("{key}: {source}")]
    Value {
        /// The key, as the file writes it: `route[2].via[0]`, `port[0].mac`.
        key: String,
        /// What is wrong with its value.
        source: values::ValueError,
    },
}

impl Config {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text).map_err(|e| match e {
            ConfigError::Parse { source, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                source,
            },
            other => other,
        })
    }

    /// Parses and checks configuration text: every value is checked here, before any port
    /// opens (see `check.rs`).
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: "<config>".into(),
            source,
        })?;
        if !(60..=1514).contains(&cfg.demo.frame_size) {
            return Err(ConfigError::Invalid(format!(
                "demo.frame_size {} is outside 60..=1514",
                cfg.demo.frame_size
            )));
        }
        if cfg.dataplane.cores.as_ref().is_some_and(|c| c.is_empty()) {
            return Err(ConfigError::Invalid("dataplane.cores is empty".into()));
        }
        cfg.check()?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_is_all_defaults() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.buffers.count, 32768);
        assert_eq!(c.dataplane.idle, IdleMode::Poll);
        assert_eq!(c.demo.frame_size, 64);
    }

    #[test]
    fn every_key_parses_and_unknown_keys_are_refused() {
        let c = Config::parse(
            "[dataplane]\ncores = [1]\nidle = \"adaptive\"\n[buffers]\ncount = 4096\ndata_size = 9216\n\
             headroom = 256\nhugepages = \"never\"\n[stats]\ninterval_secs = 2\n[demo]\nrate_pps = 1000\nframe_size = 1500\n",
        )
        .unwrap();
        assert_eq!(c.dataplane.cores, Some(vec![1]));
        assert_eq!(c.buffers.pool_config().hugepages, HugepagePolicy::Never);
        assert_eq!(c.stats.interval_secs, 2);
        assert_eq!(c.demo.rate_pps, 1000);
        let err = Config::parse("[buffers]\ncuont = 1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cuont"), "{err}");
        assert!(Config::parse("[demo]\nframe_size = 10\n").is_err());
        assert!(Config::parse("[dataplane]\ncores = []\n").is_err());
    }

    #[test]
    fn ports_and_topology_parse_and_unknown_port_keys_are_refused() {
        let c = Config::parse(
            r#"
[[port]]
name = "a"
type = "memif"
role = "master"
socket = "@quiver"
id = 2
mode = "ip"
ring_size = 2048
[[port]]
name = "b"
type = "af_packet"
interface = "veth0"
mtu = 9000
ring_kb = 256
[[port]]
name = "c"
type = "tap"
mac = "02:00:00:00:00:01"
[[xconnect]]
a = "a"
b = "b"
[[address]]
port = "c"
ip = "10.0.0.1/24"
[[route]]
prefix = "10.1.0.0/16"
via = ["10.0.0.2@c"]
[[neighbor]]
port = "c"
ip = "10.0.0.2"
mac = "02:00:00:00:00:02"
"#,
        )
        .unwrap();
        assert_eq!(c.port.len(), 3);
        assert!(
            matches!(&c.port[0], PortSection::Memif(m) if m.id == 2 && m.mode == MemifMode::Ip)
        );
        assert_eq!(c.port[1].common().mtu, 9000);
        assert!(matches!(&c.port[1], PortSection::AfPacket(a) if a.ring_kb == 256));
        assert_eq!(c.port[2].common().mac, Some("02:00:00:00:00:01"));
        assert_eq!(c.route[0].via, vec!["10.0.0.2@c".to_string()]);
        for bad in [
            "[[port]]\nname = \"a\"\ntype = \"memif\"\nrole = \"master\"\nsocket = \"s\"\nrign_size = 8\n",
            "[[port]]\nname = \"a\"\ntype = \"warp\"\n",
            "[[port]]\nname = \"a\"\ntype = \"tap\"\ninterface = \"x\"\n",
            "[[xconnect]]\na = \"x\"\n",
        ] {
            assert!(Config::parse(bad).is_err(), "accepted: {bad}");
        }
    }

    #[test]
    fn the_example_file_parses_and_its_commented_ports_do_too() {
        let text = include_str!("../../quiver.example.toml");
        Config::parse(text).unwrap();
        // The commented-out topology is documentation users copy: it must stay valid.
        let ports = &text[text.find("# Ports:").expect("the ports example")..];
        let uncommented: String = ports
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| l.starts_with('[') || l.contains(" = "))
            .map(|l| format!("{l}\n"))
            .collect();
        let c = Config::parse(&uncommented).unwrap();
        assert_eq!(c.port.len(), 4);
        assert_eq!(c.xconnect.len(), 1);
        assert_eq!(c.dpdk.vdevs, vec!["net_ring0".to_string()]);
    }
}
