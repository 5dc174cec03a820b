//! A running forwarder: ports, forwarding state and workers, assembled from `quiver.toml` and
//! changed at run time by the control plane.
//!
//! Each worker polls every attached port's receive queue from one `port-input` node and sends
//! through `interface-output`'s table of transmit queues. Ports are attached and detached at
//! run time by worker commands (`Dataplane::command`): each worker takes its own queue pair on
//! its own thread, and a call returns only when every worker has acknowledged. Every other
//! change (cross-connects, routes, neighbours, addresses) is a forwarding commit: a snapshot
//! swapped in without a barrier. Every object can be tagged with an owner (NSM's connection id)
//! so that everything a connection made can be listed and removed.
//!
//! Here: the forwarder, its start from `quiver.toml` and its read side; `runtime`: the changes
//! the control plane makes; `open`: opening a port of any type; `error`: [`ForwarderError`] and
//! [`Owned`]; `dpdk_ports`: the EAL and DPDK ports (feature `dpdk`).

mod capture;
pub mod closing;
mod cut_through;
mod dpdk_ports;
mod error;
mod open;
mod routes;
mod runtime;
mod tables;
mod vlan;
mod vxlan;
mod wg_tunnels;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use dataplane::{
    BufferPool, CommandError, Dataplane, GraphBuilder, PortsInput, RuntimeSnapshot, TxQueue,
    WorkerCommand, WorkerError, PORT_INPUT,
};
use drivers::memif_port::{MemifControl, MemifPort};
use drivers::{LinkStatus, Port};
use graph_nodes::forwarding::Path6;
use graph_nodes::nodes::InterfaceOutput;
use graph_nodes::TableId;
use graph_nodes::{
    add_forwarding_nodes, names, FibConfig, Forwarding, ForwardingState, IfIndex, LocalState, Path,
};

use crate::config::{Config, MemifMode, PortSection};

pub use dpdk_ports::DpdkStartError;
use error::port_error;
pub use error::{ForwarderError, Owned, StartError};
pub use graph_nodes::L3Peer;
use open::open_port;
pub use open::OpenError;
pub use tables::DEFAULT_TABLE;
pub(crate) use vxlan::has_address;
pub use wg_tunnels::tunnel::{WgPeerStatus, WgTunnelStatus};

/// One port and the interface it is in the forwarding state.
#[derive(Clone)]
pub struct PortEntry {
    /// The port's name.
    pub name: String,
    /// Its interface index.
    pub interface: IfIndex,
    /// The driver's port.
    pub port: Arc<dyn Port>,
    /// The same port when it is a memif one, for what only memif has (negotiated queues and
    /// sizes, refusals).
    pub memif: Option<Arc<MemifPort>>,
}

/// One VXLAN tunnel of the forwarder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelEntry {
    /// The tunnel's name (an interface name, like a port's).
    pub name: String,
    /// Its interface index.
    pub interface: IfIndex,
    /// Quiver's address the tunnel's packets come from.
    pub local: IpAddr,
    /// The remote VTEP (of `local`'s family).
    pub remote: IpAddr,
    /// The VXLAN network identifier (24 bits).
    pub vni: u32,
    /// The UDP port packets are sent to.
    pub dst_port: u16,
}

/// The forwarder: ports, forwarding state, workers. Every method that changes something blocks
/// until the data path applies it (a few milliseconds), and [`Forwarder::housekeeping`] must
/// keep being called: `crate::control::owner::ConfigOwner` owns it in `quiver run`, applies
/// every client's changes to it in turn and runs its housekeeping.
pub struct Forwarder {
    dataplane: Dataplane<ForwardingState>,
    forwarding: Forwarding,
    ports: Vec<PortEntry>,
    /// Each port's configuration, by port name (in the order of `ports`).
    sections: Vec<PortSection>,
    /// What each owner made, in creation order.
    owned: Vec<(String, Owned)>,
    /// VXLAN tunnels (interfaces without a port).
    tunnels: Vec<TunnelEntry>,
    /// WireGuard tunnels and their handshakes (`wg_tunnels`).
    wireguard: Vec<wg_tunnels::tunnel::WgEntry>,
    workers: usize,
    /// When housekeeping next ages the learned IPv6 neighbours.
    next_nd_aging: std::time::Instant,
    /// The memif control thread, once there is a memif port (stopped on drop, after the
    /// workers).
    memif: Option<MemifControl>,
    /// The EAL and the mempool, when DPDK ports were configured at start.
    dpdk: Option<dpdk_ports::Dpdk>,
    /// Packet captures (`quiver ctl capture`), their files closed when the forwarder stops.
    captures: Vec<crate::capture::Capture>,
    /// Cut-throughs on (receiving, transmitting interface), each with the flag that ends it:
    /// see `cut_through`.
    cut_throughs: Vec<((IfIndex, IfIndex), Arc<std::sync::atomic::AtomicBool>)>,
    /// What changes left to close that may wait in the kernel to close (see `closing`), kept
    /// for the owner to close off its thread; `None`: closed at once.
    closing: Option<Vec<closing::Closing>>,
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
    ) -> Result<Forwarder, StartError> {
        let nworkers = workers.cores.len();
        // This thread is the control plane: it and every thread it starts from here on (the
        // memif control thread, the admin and NSM services, housekeeping) run off the workers'
        // cores, so neither waits for the other's time slice.
        match dataplane::keep_off_worker_cores(&workers.cores) {
            Ok(Some(cpus)) => tracing::debug!(?cpus, "control plane CPUs"),
            Ok(None) => {
                tracing::info!("the workers take every CPU: the control plane shares their cores")
            }
            Err(e) => tracing::warn!("cannot keep the control plane off the workers' cores: {e}"),
        }
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
        .map_err(StartError::Fib)?;
        let mut ports = Vec::new();
        for p in &cfg.port {
            let common = p.common();
            let name = common.name;
            if ports.iter().any(|e: &PortEntry| e.name == name) {
                return Err(StartError::DuplicatePort { name: name.into() });
            }
            let port = open_port(p, nworkers, &mut memif, dpdk.as_ref()).map_err(|source| {
                StartError::OpenPort {
                    name: name.into(),
                    source,
                }
            })?;
            let added = forwarding
                .add_port(name, port.mac(), common.mtu)
                .and_then(|i| {
                    forwarding
                        .set_point_to_point(i, port.point_to_point())
                        .and_then(|()| {
                            forwarding.set_neighbours_from_kernel(i, port.neighbours_from_kernel())
                        })
                        .map(|()| i)
                });
            let interface = added.map_err(|source| StartError::AddPort {
                name: name.into(),
                source,
            })?;
            ports.push(PortEntry {
                name: name.to_string(),
                interface,
                port,
                memif: memif.as_ref().and_then(|c| c.port(name)),
            });
        }
        let tunnels = configure(cfg, &ports, &mut forwarding)?;
        forwarding
            .commit(&LocalState::default())
            .map_err(StartError::Commit)?;

        let graph_ports: Vec<(IfIndex, Arc<dyn Port>)> = ports
            .iter()
            .map(|e| (e.interface, e.port.clone()))
            .collect();
        let dataplane = Dataplane::start(workers, pool, forwarding.snapshot(), move |init| {
            let mut b = GraphBuilder::new();
            let mut input = PortsInput::new(PORT_INPUT, names::ETHERNET_INPUT);
            let mut tx: Vec<(IfIndex, Box<dyn TxQueue>)> = Vec::new();
            for (interface, port) in &graph_ports {
                let qp = port.queue_pair(init.index).map_err(WorkerError::other)?;
                input.attach(interface.get(), qp.rx);
                tx.push((*interface, qp.tx));
            }
            b.add(input);
            add_forwarding_nodes(&mut b, tx);
            b.build().map_err(WorkerError::from)
        })?;
        let mut forwarder = Forwarder {
            dataplane,
            forwarding,
            ports,
            sections: cfg.port.clone(),
            owned: Vec::new(),
            tunnels,
            wireguard: Vec::new(),
            workers: nworkers,
            next_nd_aging: std::time::Instant::now(),
            memif,
            dpdk,
            captures: Vec::new(),
            cut_throughs: Vec::new(),
            closing: None,
        };
        // The configured cross-connects' cut-throughs.
        forwarder.commit().map_err(StartError::CutThroughs)?;
        forwarder.configure_wireguard(cfg)?;
        forwarder.configure_next_table_routes(cfg)?;
        Ok(forwarder)
    }

    /// The running data plane.
    pub fn dataplane(&self) -> &Dataplane<ForwardingState> {
        &self.dataplane
    }

    /// The forwarding configuration (interfaces, routes, neighbours, cross-connects).
    pub fn forwarding(&self) -> &Forwarding {
        &self.forwarding
    }

    /// The ports.
    pub fn ports(&self) -> &[PortEntry] {
        &self.ports
    }

    /// The port called `name`.
    pub fn port(&self, name: &str) -> Option<&PortEntry> {
        self.ports.iter().find(|e| e.name == name)
    }

    /// Each port's configuration, in the order of [`Forwarder::ports`].
    pub fn port_sections(&self) -> &[PortSection] {
        &self.sections
    }

    /// What each owner made, in creation order.
    pub fn owned(&self) -> &[(String, Owned)] {
        &self.owned
    }

    /// The configuration port `name` was opened with (for `quiver ctl show memif`).
    pub fn port_section(&self, name: &str) -> Option<&PortSection> {
        let k = self.ports.iter().position(|e| e.name == name)?;
        self.sections.get(k)
    }

    fn interface(&self, name: &str) -> Result<IfIndex, ForwarderError> {
        self.port(name)
            .map(|e| e.interface)
            .or_else(|| {
                let t = self.tunnels.iter().find(|t| t.name == name)?;
                Some(t.interface)
            })
            .or_else(|| self.wireguard_interface(name))
            .or_else(|| self.vlan_interface(name))
            .ok_or_else(|| ForwarderError::NotFound(format!("no port named `{name}`")))
    }

    /// The name of the port or tunnel that is interface `i`.
    fn interface_name(&self, i: IfIndex) -> Option<&str> {
        let port = self.ports.iter().find(|e| e.interface == i);
        port.map(|e| e.name.as_str())
            .or_else(|| {
                let t = self.tunnels.iter().find(|t| t.interface == i)?;
                Some(t.name.as_str())
            })
            .or_else(|| self.wireguard_name(i))
            .or_else(|| {
                let v = self.forwarding.interfaces().find(|x| x.index == i)?;
                matches!(v.kind, graph_nodes::state::InterfaceKind::Vlan { .. })
                    .then_some(v.name.as_str())
            })
    }

    fn record(&mut self, owner: Option<&str>, object: Owned) {
        if let Some(o) = owner {
            if !self.owned.iter().any(|(x, ob)| x == o && *ob == object) {
                self.owned.push((o.to_string(), object));
            }
        }
    }

    fn forget(&mut self, keep: impl Fn(&Owned) -> bool) {
        self.owned.retain(|(_, o)| keep(o));
    }

    /// Control-side housekeeping, called often (every few milliseconds): applies what the data
    /// path learned (ARP), runs WireGuard's handshakes and timers (`wg_tunnels`), publishes it through the one commit path every change takes, and
    /// frees retired state. True when it committed a change.
    pub fn housekeeping(&mut self) -> Result<bool, ForwarderError> {
        let mut learned = self.forwarding.take_events() > 0;
        learned |= self.age_neighbors(std::time::Instant::now());
        learned |= self.wireguard_housekeeping();
        if learned {
            self.commit()?;
        }
        self.dataplane.reclaim();
        Ok(learned)
    }

    /// Frames sent by every port.
    pub fn tx_packets(&self) -> u64 {
        self.ports.iter().map(|e| e.port.stats().tx_packets).sum()
    }

    /// `show interfaces`: link and counters per port, with the non-zero driver details.
    pub fn format_interfaces(&self) -> String {
        format_interfaces(&self.ports)
    }

    /// Stops the workers (draining the graph) and returns their last counters.
    pub fn stop(self) -> RuntimeSnapshot {
        let runtime = self.dataplane.runtime();
        self.dataplane.stop();
        runtime
    }
}

/// `show interfaces` as text: link and counters of each of `ports`, with the non-zero driver
/// details.
pub fn format_interfaces(ports: &[PortEntry]) -> String {
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
    for e in ports {
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

/// Applies the VXLAN tunnels, tables, cross-connects, addresses, routes and neighbours, as
/// the file's typed [`Topology`](crate::config::Topology) (checked when the file was read);
/// returns the tunnels made.
fn configure(
    cfg: &Config,
    ports: &[PortEntry],
    f: &mut Forwarding,
) -> Result<Vec<TunnelEntry>, StartError> {
    let topology = cfg.topology()?;
    let tunnels = configure_vxlan(&topology, f)?;
    let port = |name: &str| {
        ports
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.interface)
            .or_else(|| tunnels.iter().find(|t| t.name == name).map(|t| t.interface))
            .ok_or_else(|| StartError::UnknownPort { name: name.into() })
    };
    for t in &topology.tables {
        let refused = |source| StartError::Table {
            name: t.name.clone(),
            source,
        };
        let id = f.add_table(&t.name).map_err(refused)?;
        for p in &t.interfaces {
            if cfg.wireguard.iter().any(|w| w.name == *p) {
                // Moved once the tunnel exists (`Forwarder::configure_wireguard`).
                continue;
            }
            f.set_interface_table(port(p)?, id).map_err(refused)?;
        }
    }
    for x in &topology.xconnects {
        let (a, b) = (port(&x.a)?, port(&x.b)?);
        if a == b {
            return Err(StartError::XconnectToItself {
                port: x.a.to_string(),
            });
        }
        let refused = |source| StartError::Xconnect {
            a: x.a.to_string(),
            b: x.b.to_string(),
            source,
        };
        f.cross_connect(a, b).map_err(refused)?;
        f.cross_connect(b, a).map_err(refused)?;
    }
    for a in &topology.addresses {
        let i = port(&a.section.port)?;
        match a.ip {
            IpAddr::V4(ip) => f.add_address(i, u32::from(ip), a.len),
            IpAddr::V6(ip) => f.add_address6(i, u128::from(ip), a.len),
        }
        .map_err(|source| StartError::Address {
            ip: a.section.ip.clone(),
            source,
        })?;
    }
    for n in &topology.neighbors {
        let i = port(&n.section.port)?;
        match n.ip {
            IpAddr::V4(ip) => f.add_neighbor(i, u32::from(ip), n.mac),
            IpAddr::V6(ip) => f.add_neighbor6(i, u128::from(ip), n.mac),
        }
        .map_err(|source| StartError::Neighbor {
            ip: n.section.ip.clone(),
            source,
        })?;
    }
    for r in &topology.routes {
        if cfg.route_through_wireguard(r.section) || r.next_table.is_some() {
            // Added once the tunnel exists (`Forwarder::configure_wireguard`); next-table
            // routes last, once every route they are checked against is there.
            continue;
        }
        let refused = |source| StartError::Route {
            prefix: r.section.prefix.clone(),
            source,
        };
        // The file's check made the table defined.
        let table = match r.table {
            Some(name) => f.table_by_name(name).unwrap_or_default(),
            None => TableId::DEFAULT,
        };
        match r.prefix {
            IpAddr::V4(p) if r.via.is_empty() => f
                .add_drop_route_in(table, u32::from(p), r.len)
                .map_err(|source| StartError::DropRoute {
                    prefix: r.section.prefix.clone(),
                    source,
                })?,
            IpAddr::V6(p) if r.via.is_empty() => f
                .add_drop_route6_in(table, u128::from(p), r.len)
                .map_err(|source| StartError::DropRoute {
                    prefix: r.section.prefix.clone(),
                    source,
                })?,
            IpAddr::V4(p) => {
                let mut paths = Vec::new();
                for &(next_hop, name) in &r.via {
                    // The file's check made every next hop of the prefix's family.
                    if let IpAddr::V4(nh) = next_hop {
                        paths.push(Path {
                            next_hop: u32::from(nh),
                            interface: port(name)?,
                        });
                    }
                }
                f.add_route_in(table, u32::from(p), r.len, &paths)
                    .map_err(refused)?;
            }
            IpAddr::V6(p) => {
                let mut paths = Vec::new();
                for &(next_hop, name) in &r.via {
                    if let IpAddr::V6(nh) = next_hop {
                        paths.push(Path6 {
                            next_hop: u128::from(nh),
                            interface: port(name)?,
                        });
                    }
                }
                f.add_route6_in(table, u128::from(p), r.len, &paths)
                    .map_err(refused)?;
            }
        }
    }
    Ok(tunnels)
}

/// Makes the `[[vxlan]]` tunnels (routed ones as L3 interfaces).
fn configure_vxlan(
    topology: &crate::config::Topology<'_>,
    f: &mut Forwarding,
) -> Result<Vec<TunnelEntry>, StartError> {
    let mut made = Vec::new();
    for v in &topology.vxlans {
        let s = v.section;
        let refused = |source| StartError::Vxlan {
            name: s.name.clone(),
            source,
        };
        let interface = match (v.local, v.remote) {
            (IpAddr::V4(l), IpAddr::V4(r)) => {
                f.add_vxlan_tunnel(&s.name, u32::from(l), u32::from(r), s.vni, s.port)
            }
            (IpAddr::V6(l), IpAddr::V6(r)) => {
                f.add_vxlan6_tunnel(&s.name, u128::from(l), u128::from(r), s.vni, s.port)
            }
            // The file's check made both ends of one family.
            _ => continue,
        }
        .map_err(refused)?;
        if let Some((mac, mtu)) = v.routed {
            f.set_vxlan_routed(interface, mac, mtu).map_err(refused)?;
        }
        made.push(TunnelEntry {
            name: s.name.clone(),
            interface,
            local: v.local,
            remote: v.remote,
            vni: s.vni,
            dst_port: s.port,
        });
    }
    Ok(made)
}

/// The next hops `addrs` as an [`L3Peer`]: at most one of each family (`what` names them in
/// the refusal); none is [`L3Peer::NONE`].
pub fn l3_peer(what: &str, addrs: &[IpAddr]) -> Result<L3Peer, ForwarderError> {
    let mut peer = L3Peer::NONE;
    for &a in addrs {
        let taken = match a {
            IpAddr::V4(x) => peer.v4.replace(x).is_some(),
            IpAddr::V6(x) => peer.v6.replace(x).is_some(),
        };
        if taken {
            return Err(ForwarderError::InvalidArgument(format!(
                "{what}: two next hops of one family ({}): an L3 cross-connect's peer has at \
                 most one IPv4 and one IPv6 next hop",
                addrs
                    .iter()
                    .map(IpAddr::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(peer)
}
