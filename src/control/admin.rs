//! The admin API's backend over the running forwarder: what `quiver ctl` shows and changes.
//!
//! [`ForwarderAdmin`] implements [`AdminBackend`] for a `Forwarder` shared with the housekeeping
//! loop (`Arc<Mutex<Forwarder>>`); [`start`] serves it on the admin socket and [`stop`] ends
//! that and hands the forwarder back.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use ctl_api::admin::{
    format_mac, AdminBackend, AdminError, AdminResult, AdminServer, AfPacketSpec, L3Peers,
    MemifSpec,
};
use ctl_api::proto::quiver_admin as pb;
use dataplane::{NodeKind, WorkerRuntime};
use drivers::{LinkStatus, PortStats};
use graph_nodes::state::{AdjacencyKind, InterfaceKind};
use graph_nodes::InterfaceMode;

use crate::config::{AfPacketSection, MemifMode, MemifRole, MemifSection, PortSection};
use crate::forwarder::{Forwarder, ForwarderError, PortEntry};

/// Lists NSM connections (the NSM service's table).
pub type ConnectionSource = Box<dyn Fn() -> Vec<pb::Connection> + Send + Sync>;

/// Where `show connections` finds NSM connections: empty until the NSM service, started after
/// the admin service, [`ConnectionSlot::set`]s its table's lister.
#[derive(Clone, Default)]
pub struct ConnectionSlot(Arc<Mutex<Option<ConnectionSource>>>);

impl ConnectionSlot {
    /// From now on, connections come from `source`.
    pub fn set(&self, source: ConnectionSource) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(source);
    }

    /// The connections now (none without a source).
    pub fn list(&self) -> Vec<pb::Connection> {
        let source = self.0.lock().unwrap_or_else(|p| p.into_inner());
        source.as_ref().map(|c| c()).unwrap_or_default()
    }
}

/// What `quiver ctl show connections` lists: the connections of the NSM service `nsm` runs,
/// none once it has stopped. A reader: it holds the service weakly, so that stopping NSM lets
/// go of everything the service holds (the forwarder among it).
pub fn nsm_connections(nsm: &ctl_api::nsm::NsmHandle) -> ConnectionSource {
    let core = Arc::downgrade(nsm.core());
    Box::new(move || {
        let Some(core) = core.upgrade() else {
            return Vec::new();
        };
        core.summaries()
            .into_iter()
            .map(|c| pb::Connection {
                id: c.id,
                network_service: c.network_service,
                state: if c.up { "up" } else { "down" }.to_string(),
                client_mechanism: c.client.0,
                client_interface: c.client.1,
                endpoint_mechanism: c.endpoint.0,
                endpoint_interface: c.endpoint.1,
                expires_unix: c
                    .expires
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs()),
            })
            .collect()
    })
}

/// The admin backend over a shared forwarder.
pub struct ForwarderAdmin {
    forwarder: Arc<Mutex<Forwarder>>,
    connections: ConnectionSlot,
    /// Port counters as of the last `clear counters`, by port (the driver's counters only
    /// grow; what is shown is the difference).
    baselines: Mutex<HashMap<usize, PortStats>>,
}

impl ForwarderAdmin {
    /// A backend over `forwarder`, listing NSM connections from `connections`.
    pub fn new(forwarder: Arc<Mutex<Forwarder>>, connections: ConnectionSlot) -> ForwarderAdmin {
        ForwarderAdmin {
            forwarder,
            connections,
            baselines: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Forwarder> {
        lock(&self.forwarder)
    }

    /// A port's counters since the last `clear counters`.
    fn stats(&self, p: &PortEntry) -> PortStats {
        let mut s = p.port.stats();
        let baselines = self.baselines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = baselines.get(&port_key(p)) {
            s.rx_packets = s.rx_packets.saturating_sub(b.rx_packets);
            s.rx_bytes = s.rx_bytes.saturating_sub(b.rx_bytes);
            s.tx_packets = s.tx_packets.saturating_sub(b.tx_packets);
            s.tx_bytes = s.tx_bytes.saturating_sub(b.tx_bytes);
            s.rx_dropped = s.rx_dropped.saturating_sub(b.rx_dropped);
            s.tx_dropped = s.tx_dropped.saturating_sub(b.tx_dropped);
            for (k, v) in s.detail.iter_mut() {
                if let Some((_, old)) = b.detail.iter().find(|(n, _)| n == k) {
                    *v = v.saturating_sub(*old);
                }
            }
        }
        s
    }
}

/// Identifies a port object (a port removed and added again under its name is another one).
fn port_key(p: &PortEntry) -> usize {
    Arc::as_ptr(&p.port) as *const () as usize
}

/// The admin socket `quiver run` serves and `quiver ctl` talks to unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/quiver/admin.sock";

/// Starts the admin service for `forwarder` on the unix socket `socket` (see
/// [`AdminServer::start`]); it runs until the returned server is dropped. An empty path: no
/// admin service. `None`: [`DEFAULT_SOCKET`], where a failure (a live quiver serves it, no
/// permission) is a warning and Quiver runs without the admin service.
pub fn start(
    forwarder: &Arc<Mutex<Forwarder>>,
    socket: Option<&Path>,
) -> Result<Option<AdminServer>, String> {
    start_with(forwarder, socket, ConnectionSlot::default())
}

/// [`start`], with `show connections` reading `connections`.
pub fn start_with(
    forwarder: &Arc<Mutex<Forwarder>>,
    socket: Option<&Path>,
    connections: ConnectionSlot,
) -> Result<Option<AdminServer>, String> {
    let path = socket.unwrap_or(Path::new(DEFAULT_SOCKET));
    if path.as_os_str().is_empty() {
        return Ok(None);
    }
    let backend = Arc::new(ForwarderAdmin::new(forwarder.clone(), connections));
    match AdminServer::start(backend, path) {
        Ok(server) => Ok(Some(server)),
        Err(e) if socket.is_none() => {
            tracing::warn!("{e}: running without the admin API (choose one with --admin-socket)");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Locks the shared forwarder (a panic while it was locked does not make it unusable: every
/// change it makes is complete or rolled back before it returns).
pub fn lock(forwarder: &Mutex<Forwarder>) -> MutexGuard<'_, Forwarder> {
    forwarder.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long [`stop`] waits for a reader still finishing a look (the NSM link watcher polls
/// every 100 ms) to let go of the forwarder.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Stops the admin service (waiting for calls in progress) and returns the forwarder, no
/// longer shared. Every other service must have been stopped first.
pub fn stop(
    admin: Option<AdminServer>,
    mut forwarder: Arc<Mutex<Forwarder>>,
) -> Result<Forwarder, String> {
    drop(admin);
    let deadline = std::time::Instant::now() + RELEASE_WAIT;
    loop {
        match Arc::try_unwrap(forwarder) {
            Ok(m) => return Ok(m.into_inner().unwrap_or_else(|p| p.into_inner())),
            Err(shared) if std::time::Instant::now() < deadline => {
                forwarder = shared;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(shared) => {
                return Err(format!(
                    "the forwarder is still shared ({} holders) after the control plane stopped",
                    Arc::strong_count(&shared)
                ))
            }
        }
    }
}

fn admin_error(e: ForwarderError) -> AdminError {
    match e {
        ForwarderError::NotFound(m) => AdminError::NotFound(m),
        ForwarderError::AlreadyExists(m) => AdminError::AlreadyExists(m),
        ForwarderError::InvalidArgument(m) => AdminError::InvalidArgument(m),
        ForwarderError::Unavailable(m) => AdminError::Unavailable(m),
        ForwarderError::Internal(m) => AdminError::Internal(m),
    }
}

fn port_type(section: Option<&PortSection>) -> &'static str {
    match section {
        Some(PortSection::Memif(_)) => "memif",
        Some(PortSection::AfPacket(_)) => "af_packet",
        Some(PortSection::Tap(_)) => "tap",
        Some(PortSection::Dpdk(_)) => "dpdk",
        None => "port",
    }
}

fn link(l: LinkStatus) -> (bool, String) {
    match l {
        LinkStatus::Up => (true, String::new()),
        LinkStatus::Down(why) => (false, why),
    }
}

fn detail(s: &PortStats) -> Vec<pb::Counter> {
    s.detail
        .iter()
        .map(|(name, value)| pb::Counter {
            name: name.clone(),
            value: *value,
        })
        .collect()
}

fn prefix(ip: u32, len: u8) -> String {
    format!("{}/{len}", Ipv4Addr::from(ip))
}

fn worker_runtime(w: &WorkerRuntime) -> pb::WorkerRuntime {
    let l = &w.worker_loop;
    pb::WorkerRuntime {
        worker: w.worker.map(|x| x as u32),
        core: w.core.map(|x| x as u32),
        nodes: w
            .nodes
            .iter()
            .map(|n| pb::NodeRuntime {
                name: n.name.clone(),
                state: match n.kind {
                    NodeKind::Input => "polling",
                    NodeKind::Internal => "active",
                }
                .into(),
                calls: n.calls,
                vectors: n.vectors,
                packets: n.packets,
                clocks: n.cycles,
                clocks_per_packet: n.clocks_per_packet(),
                vectors_per_call: n.packets_per_call(),
            })
            .collect(),
        busy_passes: l.busy_passes,
        busy_packets: l.busy_packets,
        busy_clocks: l.busy_cycles,
        idle_passes: l.idle_passes,
        idle_clocks: l.idle_cycles,
    }
}

impl AdminBackend for ForwarderAdmin {
    fn interfaces(&self) -> AdminResult<Vec<pb::Interface>> {
        let f = self.lock();
        let fw = f.forwarding();
        let mut out = Vec::new();
        for i in fw.interfaces() {
            let mut x = pb::Interface {
                index: i.index,
                name: i.name.clone(),
                mac: format_mac(i.mac),
                mtu: u32::from(i.mtu),
                mode: match i.mode {
                    InterfaceMode::L3 => "l3",
                    InterfaceMode::L2 => "l2",
                }
                .into(),
                addresses: i.addresses.iter().map(|&(a, l)| prefix(a, l)).collect(),
                ..Default::default()
            };
            match i.kind {
                InterfaceKind::Port => {
                    x.r#type = port_type(f.port_section(&i.name)).into();
                    if let Some(p) = f.port(&i.name) {
                        let s = self.stats(p);
                        (x.link_up, x.link_reason) = link(p.port.link());
                        x.rx_packets = s.rx_packets;
                        x.rx_bytes = s.rx_bytes;
                        x.tx_packets = s.tx_packets;
                        x.tx_bytes = s.tx_bytes;
                        x.rx_dropped = s.rx_dropped;
                        x.tx_dropped = s.tx_dropped;
                        x.detail = detail(&s);
                    }
                }
                InterfaceKind::Vlan { .. } => x.r#type = "vlan".into(),
                InterfaceKind::Vxlan { .. } => x.r#type = "vxlan".into(),
            }
            out.push(x);
        }
        Ok(out)
    }

    fn runtime(&self, per_worker: bool) -> AdminResult<pb::ShowRuntimeReply> {
        let rt = self.lock().dataplane().runtime();
        let workers = if per_worker {
            rt.workers.iter().map(worker_runtime).collect()
        } else {
            vec![worker_runtime(&rt.summed())]
        };
        Ok(pb::ShowRuntimeReply {
            tsc_hz: rt.tsc_hz,
            workers,
        })
    }

    fn errors(&self) -> AdminResult<Vec<pb::ErrorCounter>> {
        let sum = self.lock().dataplane().runtime().summed();
        Ok(sum
            .errors
            .into_iter()
            .map(|e| pb::ErrorCounter {
                node: e.node,
                reason: e.name,
                description: e.description,
                count: e.count,
            })
            .collect())
    }

    fn fib(&self) -> AdminResult<Vec<pb::Route>> {
        let f = self.lock();
        let fw = f.forwarding();
        let state = fw.snapshot();
        let name = |i: u32| {
            state
                .interface(i)
                .map(|x| x.name.clone())
                .unwrap_or_default()
        };
        Ok(fw
            .routes()
            .iter()
            .map(|r| {
                let buckets = state
                    .load_balances
                    .get(r.load_balance as usize)
                    .map(|lb| lb.buckets.to_vec())
                    .unwrap_or_default();
                let mut paths: Vec<pb::RoutePath> = Vec::new();
                for a in buckets {
                    let Some(adj) = state.adjacencies.get(a as usize) else {
                        continue;
                    };
                    let (kind, next_hop, interface) = match adj.kind {
                        AdjacencyKind::Rewrite => ("rewrite", adj.next_hop, name(adj.tx)),
                        AdjacencyKind::Arp => ("arp", adj.next_hop, name(adj.tx)),
                        AdjacencyKind::Glean => ("glean", 0, name(adj.tx)),
                        AdjacencyKind::Local => ("local", 0, String::new()),
                        AdjacencyKind::Drop => ("drop", 0, String::new()),
                    };
                    let p = pb::RoutePath {
                        kind: kind.into(),
                        next_hop: if next_hop == 0 {
                            String::new()
                        } else {
                            Ipv4Addr::from(next_hop).to_string()
                        },
                        interface,
                    };
                    // An ECMP object may list a path in several buckets.
                    if !paths.contains(&p) {
                        paths.push(p);
                    }
                }
                pb::Route {
                    prefix: prefix(r.prefix, r.len),
                    source: format!("{:?}", r.source).to_lowercase(),
                    paths,
                }
            })
            .collect())
    }

    fn neighbors(&self) -> AdminResult<Vec<pb::Neighbor>> {
        let f = self.lock();
        let fw = f.forwarding();
        let names: Vec<(u32, String)> =
            fw.interfaces().map(|i| (i.index, i.name.clone())).collect();
        Ok(fw
            .neighbors()
            .into_iter()
            .map(|(i, ip, mac)| pb::Neighbor {
                interface: names
                    .iter()
                    .find(|(x, _)| *x == i)
                    .map(|(_, n)| n.clone())
                    .unwrap_or_default(),
                ip: Ipv4Addr::from(ip).to_string(),
                mac: format_mac(mac),
            })
            .collect())
    }

    fn cross_connects(&self) -> AdminResult<Vec<pb::CrossConnect>> {
        let f = self.lock();
        let fw = f.forwarding();
        let name = |i: u32| {
            fw.interfaces()
                .find(|x| x.index == i)
                .map(|x| x.name.clone())
                .unwrap_or_default()
        };
        let cut = f.cut_throughs();
        let mut out = Vec::new();
        for i in fw.interfaces() {
            let a = i.index;
            if let Some(b) = fw.cross_connect_of(a).filter(|&b| a < b) {
                let path = if cut.contains(&(a, b)) && cut.contains(&(b, a)) {
                    "cut-through"
                } else {
                    "graph"
                };
                out.push(pb::CrossConnect {
                    a: i.name.clone(),
                    b: name(b),
                    kind: "l2".into(),
                    path: path.into(),
                    ..Default::default()
                });
            }
            if let Some((b, peer_b)) = fw.l3_cross_connect_of(a).filter(|&(b, _)| a < b) {
                let peer_a = fw.l3_cross_connect_of(b).map(|(_, p)| p);
                out.push(pb::CrossConnect {
                    a: i.name.clone(),
                    b: name(b),
                    kind: "l3".into(),
                    peer_a: peer_a
                        .map(|p| Ipv4Addr::from(p).to_string())
                        .unwrap_or_default(),
                    peer_b: Ipv4Addr::from(peer_b).to_string(),
                    path: "graph".into(),
                });
            }
        }
        Ok(out)
    }

    fn memifs(&self) -> AdminResult<Vec<pb::Memif>> {
        let f = self.lock();
        let mut out = Vec::new();
        for p in f.ports() {
            let Some(PortSection::Memif(m)) = f.port_section(&p.name) else {
                continue;
            };
            let s = self.stats(p);
            let (link_up, link_reason) = link(p.port.link());
            out.push(pb::Memif {
                name: p.name.clone(),
                index: p.interface,
                role: match m.role {
                    MemifRole::Master => "master",
                    MemifRole::Slave => "slave",
                }
                .into(),
                socket: m.socket.clone(),
                id: m.id,
                mode: match m.mode {
                    MemifMode::Ethernet => "ethernet",
                    MemifMode::Ip => "ip",
                }
                .into(),
                link_up,
                link_reason,
                ring_size: m.ring_size,
                buffer_size: m.buffer_size,
                rx_packets: s.rx_packets,
                rx_bytes: s.rx_bytes,
                tx_packets: s.tx_packets,
                tx_bytes: s.tx_bytes,
                rx_dropped: s.rx_dropped,
                tx_dropped: s.tx_dropped,
                detail: detail(&s),
            });
        }
        Ok(out)
    }

    fn connections(&self) -> AdminResult<Vec<pb::Connection>> {
        Ok(self.connections.list())
    }

    fn trace_add(&self, node: &str, count: u32) -> AdminResult<()> {
        self.lock()
            .dataplane()
            .trace_add(node, count)
            .map_err(|e| AdminError::NotFound(e.to_string()))
    }

    fn trace_show(&self) -> AdminResult<Vec<pb::TracedPacket>> {
        Ok(self
            .lock()
            .dataplane()
            .trace_show()
            .into_iter()
            .map(|t| pb::TracedPacket {
                id: t.id,
                worker: t.worker.map(|w| w as u32),
                nodes: t.nodes,
                lines: t.lines,
            })
            .collect())
    }

    fn trace_clear(&self) -> AdminResult<()> {
        self.lock().dataplane().trace_clear();
        Ok(())
    }

    fn add_route(&self, prefix: Ipv4Addr, len: u8, via: &[(Ipv4Addr, String)]) -> AdminResult<()> {
        let via: Vec<(Ipv4Addr, &str)> = via.iter().map(|(ip, p)| (*ip, p.as_str())).collect();
        self.lock()
            .add_route(prefix, len, &via, None)
            .map_err(admin_error)
    }

    fn delete_route(&self, prefix: Ipv4Addr, len: u8) -> AdminResult<()> {
        self.lock().remove_route(prefix, len).map_err(admin_error)
    }

    fn add_neighbor(&self, interface: &str, ip: Ipv4Addr, mac: [u8; 6]) -> AdminResult<()> {
        self.lock()
            .add_neighbor(interface, ip, mac, None)
            .map_err(admin_error)
    }

    fn delete_neighbor(&self, interface: &str, ip: Ipv4Addr) -> AdminResult<()> {
        self.lock()
            .remove_neighbor(interface, ip)
            .map_err(admin_error)
    }

    fn add_cross_connect(&self, a: &str, b: &str, l3: Option<L3Peers>) -> AdminResult<()> {
        let mut f = self.lock();
        match l3 {
            None => f.cross_connect(a, b, None),
            Some(p) => f.l3_cross_connect(a, b, p.peer_b, p.peer_a, None),
        }
        .map_err(admin_error)
    }

    fn delete_cross_connect(&self, interface: &str) -> AdminResult<()> {
        self.lock().disconnect(interface).map_err(admin_error)
    }

    fn add_memif(&self, spec: &MemifSpec) -> AdminResult<u32> {
        let section = PortSection::Memif(MemifSection {
            name: spec.name.clone(),
            mac: spec.mac.map(format_mac),
            mtu: spec.mtu,
            role: if spec.master {
                MemifRole::Master
            } else {
                MemifRole::Slave
            },
            socket: spec.socket.clone(),
            id: spec.id,
            secret: spec.secret.clone(),
            mode: if spec.ip_mode {
                MemifMode::Ip
            } else {
                MemifMode::Ethernet
            },
            ring_size: spec.ring_size,
            buffer_size: spec.buffer_size,
            netns: None,
        });
        self.lock().add_port(&section, None).map_err(admin_error)
    }

    fn add_af_packet(&self, spec: &AfPacketSpec) -> AdminResult<u32> {
        let section = PortSection::AfPacket(AfPacketSection {
            name: spec.name.clone(),
            mac: None,
            mtu: spec.mtu,
            interface: spec.host_interface.clone(),
            promiscuous: spec.promiscuous,
            netns: None,
        });
        self.lock().add_port(&section, None).map_err(admin_error)
    }

    fn delete_interface(&self, name: &str) -> AdminResult<()> {
        self.lock().remove_port(name).map_err(admin_error)
    }

    fn clear_counters(&self) -> AdminResult<()> {
        let f = self.lock();
        f.dataplane().clear_counters();
        let mut baselines = self.baselines.lock().unwrap_or_else(|e| e.into_inner());
        baselines.clear();
        for p in f.ports() {
            baselines.insert(port_key(p), p.port.stats());
        }
        Ok(())
    }

    fn capture_start(&self, spec: &ctl_api::admin::CaptureSpec) -> AdminResult<pb::Capture> {
        self.lock()
            .capture_start(spec.into())
            .map(|c| c.to_proto())
            .map_err(admin_error)
    }

    fn capture_stop(&self, interface: &str) -> AdminResult<pb::Capture> {
        self.lock()
            .capture_stop(interface)
            .map(|c| c.to_proto())
            .map_err(admin_error)
    }

    fn captures(&self) -> AdminResult<Vec<pb::Capture>> {
        Ok(self
            .lock()
            .captures()
            .iter()
            .map(|c| c.to_proto())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, HugepageMode};

    /// A forwarder with no ports, one worker on core 0.
    fn forwarder() -> Arc<Mutex<Forwarder>> {
        let mut cfg = Config::default();
        cfg.buffers.count = 2048;
        cfg.buffers.hugepages = HugepageMode::Never;
        let pool = dataplane::BufferPool::new(&crate::forwarder::pool_config(&cfg)).unwrap();
        let workers = dataplane::WorkerConfig {
            cores: vec![0],
            idle: crate::config::IdleMode::Adaptive.into(),
        };
        Arc::new(Mutex::new(Forwarder::start(&cfg, &workers, pool).unwrap()))
    }

    #[test]
    fn the_backend_shows_what_it_changed_and_refuses_what_cannot_be() {
        let fwd = forwarder();
        let slot = ConnectionSlot::default();
        let admin = ForwarderAdmin::new(fwd.clone(), slot.clone());
        assert!(admin.interfaces().unwrap().is_empty());
        assert!(admin.fib().unwrap().is_empty());

        admin
            .add_route(Ipv4Addr::new(192, 0, 2, 0), 24, &[])
            .unwrap();
        let fib = admin.fib().unwrap();
        assert_eq!(fib.len(), 1);
        assert_eq!(fib[0].prefix, "192.0.2.0/24");
        assert_eq!(fib[0].source, "static");
        assert_eq!(fib[0].paths[0].kind, "drop");
        assert_eq!(
            admin.add_route(
                Ipv4Addr::new(10, 0, 0, 0),
                8,
                &[(Ipv4Addr::new(10, 0, 0, 1), "nosuch".into())]
            ),
            Err(AdminError::NotFound("no port named `nosuch`".into()))
        );
        assert!(matches!(
            admin.delete_route(Ipv4Addr::new(10, 0, 0, 0), 8),
            Err(AdminError::NotFound(_))
        ));
        admin.delete_route(Ipv4Addr::new(192, 0, 2, 0), 24).unwrap();
        assert!(admin.fib().unwrap().is_empty());
        assert!(matches!(
            admin.trace_add("nosuch", 1),
            Err(AdminError::NotFound(_))
        ));
        admin.trace_add(dataplane::PORT_INPUT, 1).unwrap();
        let rt = admin.runtime(true).unwrap();
        assert_eq!(rt.workers.len(), 1);
        assert_eq!(rt.workers[0].worker, Some(0));
        assert!(rt.workers[0]
            .nodes
            .iter()
            .any(|n| n.name == dataplane::PORT_INPUT && n.state == "polling"));
        let summed = admin.runtime(false).unwrap();
        assert_eq!(summed.workers[0].worker, None);

        assert!(admin.connections().unwrap().is_empty());
        slot.set(Box::new(|| {
            vec![pb::Connection {
                id: "c1".into(),
                ..Default::default()
            }]
        }));
        assert_eq!(admin.connections().unwrap()[0].id, "c1");

        drop(admin);
        stop(None, fwd).unwrap().stop();
    }
}
