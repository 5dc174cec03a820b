//! The admin API's backend over the running forwarder: what `quiver ctl` shows and changes.
//!
//! [`ForwarderAdmin`] implements [`AdminBackend`] over a [`Control`]: what it shows comes from
//! the owner's published view (never waiting for a change in progress), what it changes goes to
//! the owner as a [`Change`]. [`start`] serves it on the admin socket.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use dataplane::{NodeKind, WorkerRuntime};
use drivers::{LinkStatus, PortStats};
use graph_nodes::state::{AdjacencyKind, InterfaceKind};
use graph_nodes::InterfaceMode;
use quiver_admin_api::proto as pb;
use quiver_admin_api::{
    format_mac, AdminBackend, AdminError, AdminResult, AdminServer, AfPacketSpec, L3Peers,
    MemifSpec,
};

use crate::config::{AfPacketSection, MemifMode, MemifRole, MemifSection, PortSection};
use crate::control::owner::{Applied, Change, Control};
use crate::forwarder::{ForwarderError, PortEntry};

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
pub fn nsm_connections(nsm: &nsm_forwarder::NsmHandle) -> ConnectionSource {
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

/// The admin backend over the configuration's owner.
pub struct ForwarderAdmin {
    control: Control,
    connections: ConnectionSlot,
    /// Port counters as of the last `clear counters`, by port (the driver's counters only
    /// grow; what is shown is the difference).
    baselines: Mutex<HashMap<usize, PortStats>>,
}

impl ForwarderAdmin {
    /// A backend over `control`, listing NSM connections from `connections`.
    pub fn new(control: Control, connections: ConnectionSlot) -> ForwarderAdmin {
        ForwarderAdmin {
            control,
            connections,
            baselines: Mutex::new(HashMap::new()),
        }
    }

    /// Applies `change`, its error as the admin API's.
    fn apply(&self, change: Change) -> AdminResult<Applied> {
        self.control.apply(change).map_err(admin_error)
    }

    /// Applies a change that makes an interface; its index.
    fn add_interface(&self, change: Change) -> AdminResult<u32> {
        match self.apply(change)? {
            Applied::Interface(i) => Ok(i),
            other => Err(AdminError::Internal(format!(
                "made {other:?}, not an interface"
            ))),
        }
    }

    /// Applies a capture change; the capture.
    fn capture(&self, change: Change) -> AdminResult<pb::Capture> {
        match self.apply(change)? {
            Applied::Capture(c) => Ok(c.to_proto()),
            other => Err(AdminError::Internal(format!(
                "made {other:?}, not a capture"
            ))),
        }
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
pub fn start(control: &Control, socket: Option<&Path>) -> Result<Option<AdminServer>, String> {
    start_with(control, socket, ConnectionSlot::default())
}

/// [`start`], with `show connections` reading `connections`.
pub fn start_with(
    control: &Control,
    socket: Option<&Path>,
    connections: ConnectionSlot,
) -> Result<Option<AdminServer>, String> {
    let path = socket.unwrap_or(Path::new(DEFAULT_SOCKET));
    if path.as_os_str().is_empty() {
        return Ok(None);
    }
    let backend = Arc::new(ForwarderAdmin::new(control.clone(), connections));
    match AdminServer::start(backend, path) {
        Ok(server) => Ok(Some(server)),
        Err(e) if socket.is_none() => {
            tracing::warn!("{e}: running without the admin API (choose one with --admin-socket)");
            Ok(None)
        }
        Err(e) => Err(e.to_string()),
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
        let f = self.control.view();
        let mut out = Vec::new();
        for i in &f.interfaces {
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
                InterfaceKind::Wireguard { .. } => x.r#type = "wireguard".into(),
            }
            out.push(x);
        }
        Ok(out)
    }

    fn runtime(&self, per_worker: bool) -> AdminResult<pb::ShowRuntimeReply> {
        let rt = self.control.dataplane().runtime();
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
        let sum = self.control.dataplane().runtime().summed();
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
        let f = self.control.view();
        let state = &f.state;
        let name = |i: u32| {
            state
                .interface(i)
                .map(|x| x.name.clone())
                .unwrap_or_default()
        };
        Ok(f.routes
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
        let f = self.control.view();
        Ok(f.neighbors
            .iter()
            .map(|&(i, ip, mac)| pb::Neighbor {
                interface: f.interface_name(i).unwrap_or_default().to_string(),
                ip: Ipv4Addr::from(ip).to_string(),
                mac: format_mac(mac),
            })
            .collect())
    }

    fn cross_connects(&self) -> AdminResult<Vec<pb::CrossConnect>> {
        let f = self.control.view();
        let name = |i: u32| f.interface_name(i).unwrap_or_default().to_string();
        let cut = &f.cut_throughs;
        let mut out = Vec::new();
        for i in &f.interfaces {
            let a = i.index;
            if let Some(b) = f.cross_connect_of(a).filter(|&b| a < b) {
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
            if let Some((b, peer_b)) = f.l3_cross_connect_of(a).filter(|&(b, _)| a < b) {
                let peer_a = f.l3_cross_connect_of(b).map(|(_, p)| p);
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
        let f = self.control.view();
        let mut out = Vec::new();
        for p in &f.ports {
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
        self.control
            .dataplane()
            .trace_add(node, count)
            .map_err(|e| AdminError::NotFound(e.to_string()))
    }

    fn trace_show(&self) -> AdminResult<Vec<pb::TracedPacket>> {
        Ok(self
            .control
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
        self.control.dataplane().trace_clear();
        Ok(())
    }

    fn add_route(&self, prefix: Ipv4Addr, len: u8, via: &[(Ipv4Addr, String)]) -> AdminResult<()> {
        self.apply(Change::AddRoute {
            prefix,
            len,
            via: via.to_vec(),
            owner: None,
        })
        .map(drop)
    }

    fn delete_route(&self, prefix: Ipv4Addr, len: u8) -> AdminResult<()> {
        self.apply(Change::RemoveRoute { prefix, len }).map(drop)
    }

    fn add_neighbor(&self, interface: &str, ip: Ipv4Addr, mac: [u8; 6]) -> AdminResult<()> {
        self.apply(Change::AddNeighbor {
            port: interface.into(),
            ip,
            mac,
            owner: None,
        })
        .map(drop)
    }

    fn delete_neighbor(&self, interface: &str, ip: Ipv4Addr) -> AdminResult<()> {
        self.apply(Change::RemoveNeighbor {
            port: interface.into(),
            ip,
        })
        .map(drop)
    }

    fn add_cross_connect(&self, a: &str, b: &str, l3: Option<L3Peers>) -> AdminResult<()> {
        let (a, b) = (a.to_string(), b.to_string());
        let change = match l3 {
            None => Change::CrossConnect { a, b, owner: None },
            Some(p) => Change::L3CrossConnect {
                a,
                b,
                peer_b: p.peer_b,
                peer_a: p.peer_a,
                owner: None,
            },
        };
        self.apply(change).map(drop)
    }

    fn delete_cross_connect(&self, interface: &str) -> AdminResult<()> {
        self.apply(Change::Disconnect {
            port: interface.into(),
        })
        .map(drop)
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
        self.add_interface(Change::AddPort {
            port: section,
            owner: None,
        })
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
        self.add_interface(Change::AddPort {
            port: section,
            owner: None,
        })
    }

    fn add_wireguard(&self, r: &pb::AddWireguardRequest) -> AdminResult<u32> {
        let port = |n: u32, what: &str| {
            u16::try_from(n).map_err(|_| AdminError::InvalidArgument(format!("{what} {n}")))
        };
        let tunnel = crate::config::WireguardSection {
            name: r.name.clone(),
            private_key: r.private_key.clone(),
            private_key_file: r.private_key_file.clone(),
            listen_port: port(r.listen_port, "listen_port")?,
            address: r.address.clone(),
            underlay_mtu: port(r.underlay_mtu, "underlay_mtu")?,
            peers: r
                .peers
                .iter()
                .map(|p| {
                    Ok(crate::config::WireguardPeerSection {
                        public_key: p.public_key.clone(),
                        endpoint: p.endpoint.clone(),
                        allowed_ips: p.allowed_ips.clone(),
                        persistent_keepalive: port(p.persistent_keepalive, "persistent_keepalive")?,
                    })
                })
                .collect::<AdminResult<Vec<_>>>()?,
        };
        self.add_interface(Change::AddWireguard {
            tunnel,
            owner: None,
        })
    }

    fn delete_interface(&self, name: &str) -> AdminResult<()> {
        self.apply(Change::RemoveInterface { name: name.into() })
            .map(drop)
    }

    fn clear_counters(&self) -> AdminResult<()> {
        let f = self.control.view();
        self.control.dataplane().clear_counters();
        let mut baselines = self.baselines.lock().unwrap_or_else(|e| e.into_inner());
        baselines.clear();
        for p in &f.ports {
            baselines.insert(port_key(p), p.port.stats());
        }
        Ok(())
    }

    fn capture_start(&self, spec: &quiver_admin_api::CaptureSpec) -> AdminResult<pb::Capture> {
        self.capture(Change::CaptureStart(spec.into()))
    }

    fn capture_stop(&self, interface: &str) -> AdminResult<pb::Capture> {
        self.capture(Change::CaptureStop {
            interface: interface.into(),
        })
    }

    fn captures(&self) -> AdminResult<Vec<pb::Capture>> {
        Ok(self
            .control
            .view()
            .captures
            .iter()
            .map(|c| c.info().to_proto())
            .collect())
    }

    fn wireguard(&self) -> AdminResult<Vec<pb::WireguardTunnel>> {
        // Asked of the owner in turn with changes: the handshakes' state lives there.
        let tunnels = self
            .control
            .inspect(|f| f.wireguard_status())
            .map_err(admin_error)?;
        Ok(tunnels.iter().map(wireguard_proto).collect())
    }
}

/// A WireGuard tunnel's status as the admin API reports it.
fn wireguard_proto(t: &crate::forwarder::WgTunnelStatus) -> pb::WireguardTunnel {
    let unix = |at: Option<std::time::SystemTime>| {
        at.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs())
    };
    pb::WireguardTunnel {
        name: t.name.clone(),
        public_key: t.public_key.clone(),
        listen: t.listen.to_string(),
        bad_macs: t.bad_macs,
        refused: t.refused,
        punts: t.punts,
        peers: t
            .peers
            .iter()
            .map(|p| pb::WireguardPeer {
                public_key: p.public_key.clone(),
                endpoint: p.endpoint.map(|e| e.to_string()).unwrap_or_default(),
                allowed_ips: p.allowed_ips.clone(),
                last_handshake_unix: unix(p.last_handshake),
                handshakes: p.handshakes,
                rekeys: p.rekeys,
                initiations_sent: p.initiations_sent,
                replays: p.replays,
                bad_tags: p.bad_tags,
                rx_bytes: p.rx_bytes,
                tx_bytes: p.tx_bytes,
                rx_packets: p.rx_packets,
                tx_packets: p.tx_packets,
            })
            .collect(),
    }
}

#[cfg(test)]
#[path = "admin_tests.rs"]
mod tests;
