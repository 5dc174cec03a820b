//! A running forwarder assembled from `quiver.toml`: the ports opened, the forwarding state
//! built from the cross-connects, addresses, routes and neighbours, and the workers started with
//! one input node per port queue.

use std::sync::Arc;

use dataplane::{BufferPool, Dataplane, GraphBuilder, PortInput, RuntimeSnapshot, TxQueue};
use drivers::af_packet::{AfPacketConfig, AfPacketPort};
use drivers::memif_port::{MemifControl, MemifPortConfig};
use drivers::tap::{TapConfig, TapPort};
use drivers::{LinkStatus, Port};
use graph_nodes::{
    add_forwarding_nodes, names, FibConfig, Forwarding, ForwardingState, IfIndex, LocalState, Path,
};
use memif::{Mode, Role, SocketAddress};

use crate::config::topology::{parse_ip, parse_mac, parse_prefix};
use crate::config::{Config, MemifMode, MemifRole, MemifSection, PortSection};

/// One configured port and the interface it is in the forwarding state.
pub struct PortEntry {
    /// The port's name.
    pub name: String,
    /// Its interface index.
    pub interface: IfIndex,
    /// The driver's port.
    pub port: Arc<dyn Port>,
}

/// The forwarder: ports, forwarding state, workers.
pub struct Forwarder {
    dataplane: Dataplane<ForwardingState>,
    forwarding: Forwarding,
    ports: Vec<PortEntry>,
    /// The memif control thread, when there are memif ports (stopped on drop, after the
    /// workers).
    _memif: Option<MemifControl>,
}

/// The buffer pool layout `cfg` needs: with DPDK ports, room in front of every buffer for the
/// `rte_mbuf` that makes it a DPDK mbuf too.
pub fn pool_config(cfg: &Config) -> dataplane::BufferPoolConfig {
    let mut c = cfg.buffers.pool_config();
    if uses_dpdk(cfg) {
        c.prefix_size = dpdk_ports::PREFIX_SIZE;
    }
    c
}

fn uses_dpdk(cfg: &Config) -> bool {
    cfg.port.iter().any(|p| matches!(p, PortSection::Dpdk(_)))
}

impl Forwarder {
    /// Opens every port of `cfg`, builds the forwarding state and starts one worker per core.
    pub fn start(
        cfg: &Config,
        workers: &dataplane::WorkerConfig,
        pool: Arc<BufferPool>,
    ) -> Result<Forwarder, String> {
        let nworkers = workers.cores.len();
        let mut memif: Option<MemifControl> = None;
        let dpdk = if uses_dpdk(cfg) {
            Some(dpdk_ports::Dpdk::start(cfg, pool.clone())?)
        } else {
            None
        };
        let mut forwarding = Forwarding::new(FibConfig {
            hugepages: cfg.buffers.pool_config().hugepages,
            ..FibConfig::default()
        })
        .map_err(|e| e.to_string())?;
        let mut ports = Vec::new();
        for p in &cfg.port {
            let common = p.common();
            let name = common.name;
            if ports.iter().any(|e: &PortEntry| e.name == name) {
                return Err(format!("two ports are named {name}"));
            }
            let port = open_port(p, nworkers, &mut memif, dpdk.as_ref())
                .map_err(|e| format!("port {name}: {e}"))?;
            let interface = forwarding
                .add_port(name, port.mac(), common.mtu)
                .map_err(|e| format!("port {name}: {e}"))?;
            ports.push(PortEntry {
                name: name.to_string(),
                interface,
                port,
            });
        }
        configure(cfg, &ports, &mut forwarding)?;
        forwarding
            .commit(&LocalState::default())
            .map_err(|e| e.to_string())?;

        let graph_ports: Vec<(IfIndex, Arc<dyn Port>)> = ports
            .iter()
            .map(|e| (e.interface, e.port.clone()))
            .collect();
        let dataplane = Dataplane::start(workers, pool, forwarding.snapshot(), move |init| {
            let mut b = GraphBuilder::new();
            let mut tx: Vec<(IfIndex, Box<dyn TxQueue>)> = Vec::new();
            for (interface, port) in &graph_ports {
                let qp = port.queue_pair(init.index).map_err(|e| e.to_string())?;
                let node = format!("{}-input", port.name());
                b.add(PortInput::new(
                    &node,
                    names::ETHERNET_INPUT,
                    *interface,
                    qp.rx,
                ));
                tx.push((*interface, qp.tx));
            }
            add_forwarding_nodes(&mut b, tx);
            b.build().map_err(|e| e.to_string())
        })
        .map_err(|e| e.to_string())?;
        Ok(Forwarder {
            dataplane,
            forwarding,
            ports,
            _memif: memif,
        })
    }

    /// The running data plane.
    pub fn dataplane(&self) -> &Dataplane<ForwardingState> {
        &self.dataplane
    }

    /// The ports.
    pub fn ports(&self) -> &[PortEntry] {
        &self.ports
    }

    /// Control-side housekeeping, called often (every few milliseconds): applies what the data
    /// path learned (ARP), publishes it, and frees retired state.
    pub fn housekeeping(&mut self) -> Result<(), String> {
        if self.forwarding.take_events() > 0 {
            self.forwarding
                .commit(&self.dataplane)
                .map_err(|e| e.to_string())?;
        }
        self.dataplane.reclaim();
        Ok(())
    }

    /// Frames sent by every port.
    pub fn tx_packets(&self) -> u64 {
        self.ports.iter().map(|e| e.port.stats().tx_packets).sum()
    }

    /// `show interfaces`: link and counters per port, with the non-zero driver details.
    pub fn format_interfaces(&self) -> String {
        let mut out = format!(
            "{:<16} {:>5} {:<6} {:>12} {:>14} {:>12} {:>14} {:>10} {:>10}\n",
            "interface",
            "index",
            "link",
            "rx packets",
            "rx bytes",
            "tx packets",
            "tx bytes",
            "rx drops",
            "tx drops"
        );
        for e in &self.ports {
            let s = e.port.stats();
            let link = match e.port.link() {
                LinkStatus::Up => "up".to_string(),
                LinkStatus::Down(_) => "down".to_string(),
            };
            out += &format!(
                "{:<16} {:>5} {:<6} {:>12} {:>14} {:>12} {:>14} {:>10} {:>10}\n",
                e.name,
                e.interface,
                link,
                s.rx_packets,
                s.rx_bytes,
                s.tx_packets,
                s.tx_bytes,
                s.rx_dropped,
                s.tx_dropped
            );
            if let LinkStatus::Down(why) = e.port.link() {
                out += &format!("{:<16}   down: {why}\n", "");
            }
            for (k, v) in s.detail.iter().filter(|(_, v)| *v != 0) {
                out += &format!("{:<16}   {k}: {v}\n", "");
            }
        }
        out
    }

    /// Stops the workers (draining the graph) and returns their last counters.
    pub fn stop(self) -> RuntimeSnapshot {
        let runtime = self.dataplane.runtime();
        self.dataplane.stop();
        runtime
    }
}

fn open_port(
    p: &PortSection,
    workers: usize,
    memif: &mut Option<MemifControl>,
    dpdk: Option<&dpdk_ports::Dpdk>,
) -> Result<Arc<dyn Port>, String> {
    let common = p.common();
    let mac = common.mac.map(parse_mac).transpose()?;
    Ok(match p {
        PortSection::Memif(m) => {
            if memif.is_none() {
                *memif = Some(MemifControl::start(workers).map_err(|e| e.to_string())?);
            }
            let control = memif.as_ref().expect("started above");
            let mut c = memif_config(common.name, m)?;
            if let Some(mac) = mac {
                c.mac = mac;
            }
            control.add_port(c).map_err(|e| e.to_string())?
        }
        PortSection::AfPacket(a) => {
            if mac.is_some() {
                return Err("an af_packet port uses its kernel interface's MAC".into());
            }
            let mut c = AfPacketConfig::new(&a.interface, workers);
            c.promiscuous = a.promiscuous;
            Arc::new(AfPacketPort::open(&c).map_err(|e| e.to_string())?)
        }
        PortSection::Dpdk(d) => {
            if mac.is_some() {
                return Err("a dpdk port uses its device's MAC".into());
            }
            let dpdk = dpdk.ok_or("the EAL is not running")?;
            dpdk.open(d, workers)?
        }
        PortSection::Tap(t) => {
            let mut c = TapConfig::new(t.device.as_deref().unwrap_or(common.name), workers);
            c.mac = mac;
            Arc::new(TapPort::open(&c).map_err(|e| e.to_string())?)
        }
    })
}

fn memif_config(name: &str, m: &MemifSection) -> Result<MemifPortConfig, String> {
    if !m.ring_size.is_power_of_two() || !(2..=1 << 14).contains(&m.ring_size) {
        return Err(format!(
            "ring_size {} must be a power of two from 2 to 16384",
            m.ring_size
        ));
    }
    if m.socket.is_empty() {
        return Err("socket is empty".into());
    }
    let role = match m.role {
        MemifRole::Master => Role::Master,
        MemifRole::Slave => Role::Slave,
    };
    let mut c = MemifPortConfig::new(name, role, SocketAddress::parse(&m.socket), m.id);
    c.secret = m.secret.clone();
    c.mode = match m.mode {
        MemifMode::Ethernet => Mode::Ethernet,
        MemifMode::Ip => Mode::Ip,
    };
    c.log2_ring_size = m.ring_size.trailing_zeros() as u8;
    c.buffer_size = m.buffer_size;
    Ok(c)
}

/// Applies the cross-connects, addresses, routes and neighbours.
fn configure(cfg: &Config, ports: &[PortEntry], f: &mut Forwarding) -> Result<(), String> {
    let port = |name: &str| {
        ports
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.interface)
            .ok_or_else(|| format!("no port named `{name}`"))
    };
    for x in &cfg.xconnect {
        let (a, b) = (port(&x.a)?, port(&x.b)?);
        if a == b {
            return Err(format!("xconnect {} to itself", x.a));
        }
        f.cross_connect(a, b).map_err(|e| e.to_string())?;
        f.cross_connect(b, a).map_err(|e| e.to_string())?;
    }
    for a in &cfg.address {
        let (ip, len) = parse_prefix(&a.ip)?;
        f.add_address(port(&a.port)?, ip, len)
            .map_err(|e| format!("address {}: {e}", a.ip))?;
    }
    for n in &cfg.neighbor {
        f.add_neighbor(port(&n.port)?, parse_ip(&n.ip)?, parse_mac(&n.mac)?)
            .map_err(|e| format!("neighbor {}: {e}", n.ip))?;
    }
    for r in &cfg.route {
        let (prefix, len) = parse_prefix(&r.prefix)?;
        if r.via.is_empty() {
            f.add_drop_route(prefix, len).map_err(|e| e.to_string())?;
            continue;
        }
        let paths = r
            .via
            .iter()
            .map(|v| {
                let (ip, p) = v
                    .split_once('@')
                    .ok_or_else(|| format!("route {}: via `{v}` is not address@port", r.prefix))?;
                Ok(Path {
                    next_hop: parse_ip(ip)?,
                    interface: port(p)?,
                })
            })
            .collect::<Result<Vec<Path>, String>>()?;
        f.add_route(prefix, len, &paths)
            .map_err(|e| format!("route {}: {e}", r.prefix))?;
    }
    Ok(())
}

/// DPDK ports, when Quiver is built with the `dpdk` feature.
#[cfg(feature = "dpdk")]
mod dpdk_ports {
    use std::sync::Arc;

    use dataplane::BufferPool;
    use drivers::dpdk::{DpdkMempool, DpdkPort, DpdkPortConfig, Eal, EalConfig, PciDevices};
    use drivers::Port;

    use crate::config::{Config, DpdkSection};

    pub use drivers::dpdk::PREFIX_SIZE;

    /// The EAL and the mempool over Quiver's buffers.
    pub struct Dpdk {
        mempool: Arc<DpdkMempool>,
    }

    impl Dpdk {
        /// Starts the EAL from `[dpdk]` (once per process) and makes Quiver's buffers its mbufs.
        pub fn start(cfg: &Config, pool: Arc<BufferPool>) -> Result<Dpdk, String> {
            let mut eal = EalConfig::vdevs_only();
            if !cfg.dpdk.pci.is_empty() {
                eal.pci = PciDevices::Allow(cfg.dpdk.pci.clone());
            }
            eal.vdevs = cfg.dpdk.vdevs.clone();
            eal.extra_args = cfg.dpdk.eal_args.clone();
            let eal = Eal::init(&eal).map_err(|e| e.to_string())?;
            let mempool = DpdkMempool::new(eal, pool).map_err(|e| e.to_string())?;
            Ok(Dpdk { mempool })
        }

        /// Opens a port with one queue pair per worker.
        pub fn open(&self, d: &DpdkSection, workers: usize) -> Result<Arc<dyn Port>, String> {
            let mut c = DpdkPortConfig::new(&d.device, workers);
            c.rx_descriptors = d.rx_descriptors;
            c.tx_descriptors = d.tx_descriptors;
            c.mtu = Some(d.mtu);
            let port = DpdkPort::open(&self.mempool, &c).map_err(|e| e.to_string())?;
            Ok(Arc::new(port))
        }
    }
}

/// Without the `dpdk` feature, a `type = "dpdk"` port is refused with a clear message.
#[cfg(not(feature = "dpdk"))]
mod dpdk_ports {
    use std::sync::Arc;

    use dataplane::BufferPool;
    use drivers::Port;

    use crate::config::{Config, DpdkSection};

    /// No room needed: DPDK ports cannot be opened.
    pub const PREFIX_SIZE: u16 = 0;

    /// Never made.
    pub enum Dpdk {}

    impl Dpdk {
        /// Always an error: this build has no DPDK.
        pub fn start(_: &Config, _: Arc<BufferPool>) -> Result<Dpdk, String> {
            Err(
                "this quiver was built without the `dpdk` feature (cargo build --features dpdk)"
                    .into(),
            )
        }

        /// Unreachable: no `Dpdk` exists.
        pub fn open(&self, _: &DpdkSection, _: usize) -> Result<Arc<dyn Port>, String> {
            match *self {}
        }
    }
}
