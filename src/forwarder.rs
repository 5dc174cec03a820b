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

use std::net::Ipv4Addr;
use std::sync::Arc;

use dataplane::{
    BufferPool, CommandError, Dataplane, GraphBuilder, PortsInput, RuntimeSnapshot, TxQueue,
    WorkerCommand, PORT_INPUT,
};
use drivers::af_packet::{AfPacketConfig, AfPacketPort};
use drivers::memif_port::{MemifControl, MemifPortConfig};
use drivers::netns::{NetNs, NetNsError};
use drivers::tap::{TapConfig, TapPort};
use drivers::{LinkStatus, Port, PortError};
use graph_nodes::nodes::InterfaceOutput;
use graph_nodes::{
    add_forwarding_nodes, names, FibConfig, Forwarding, ForwardingError, ForwardingState, IfIndex,
    LocalState, Path,
};
use memif::{Mode, Role, SocketAddress};

use crate::config::topology::{parse_ip, parse_mac, parse_prefix};
use crate::config::{Config, MemifMode, MemifRole, MemifSection, PortSection};

/// One port and the interface it is in the forwarding state.
pub struct PortEntry {
    /// The port's name.
    pub name: String,
    /// Its interface index.
    pub interface: IfIndex,
    /// The driver's port.
    pub port: Arc<dyn Port>,
}

/// Why a runtime change was refused. Each variant maps to one gRPC status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwarderError {
    /// The named port, cross-connect, route, neighbour or address does not exist
    /// (`NOT_FOUND`).
    #[error("not found: {0}")]
    NotFound(String),
    /// A port of that name (or an object in the way) exists (`ALREADY_EXISTS`).
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The request cannot work as given (`INVALID_ARGUMENT`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The data path or a device could not do it now (`UNAVAILABLE`).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A bug or an exhausted table (`INTERNAL`).
    #[error("internal: {0}")]
    Internal(String),
}

impl From<CommandError> for ForwarderError {
    fn from(e: CommandError) -> Self {
        ForwarderError::Unavailable(e.to_string())
    }
}

impl From<ForwardingError> for ForwarderError {
    fn from(e: ForwardingError) -> Self {
        match e {
            ForwardingError::NoSuchInterface(_) => ForwarderError::NotFound(e.to_string()),
            ForwardingError::NameTaken(_) | ForwardingError::DuplicateTunnel { .. } => {
                ForwarderError::AlreadyExists(e.to_string())
            }
            ForwardingError::BadPrefixLength(_)
            | ForwardingError::NoPaths
            | ForwardingError::BadVni(_)
            | ForwardingError::WrongMode(_) => ForwarderError::InvalidArgument(e.to_string()),
            ForwardingError::TooManyInterfaces | ForwardingError::Lpm(_) => {
                ForwarderError::Internal(e.to_string())
            }
        }
    }
}

fn port_error(name: &str, e: PortError) -> ForwarderError {
    let msg = format!("port {name}: {e}");
    match e {
        PortError::Config(_) => ForwarderError::InvalidArgument(msg),
        PortError::Sys {
            source: nix::Error::ENODEV,
            ..
        } => ForwarderError::NotFound(msg),
        PortError::Sys { .. } | PortError::Device(_) => ForwarderError::Unavailable(msg),
    }
}

/// Something the control plane made, as [`Forwarder::owned_by`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    /// A port, by name.
    Port(String),
    /// An L2 cross-connect between two ports (both ways).
    CrossConnect(String, String),
    /// An L3 cross-connect between two ports (both ways).
    L3CrossConnect(String, String),
    /// A route: prefix and length.
    Route(Ipv4Addr, u8),
    /// A neighbour: port and address.
    Neighbor(String, Ipv4Addr),
    /// An address of ours: port, address, prefix length.
    Address(String, Ipv4Addr, u8),
}

impl Owned {
    /// Whether this object involves port `name`.
    fn uses_port(&self, name: &str) -> bool {
        match self {
            Owned::Port(p) | Owned::Neighbor(p, _) | Owned::Address(p, _, _) => p == name,
            Owned::CrossConnect(a, b) | Owned::L3CrossConnect(a, b) => a == name || b == name,
            Owned::Route(..) => false,
        }
    }
}

/// The forwarder: ports, forwarding state, workers. Wrap it in a `Mutex` to share it with a
/// control plane: every method that changes something blocks until the data path applies it
/// (a few milliseconds), and [`Forwarder::housekeeping`] must keep being called.
pub struct Forwarder {
    dataplane: Dataplane<ForwardingState>,
    forwarding: Forwarding,
    ports: Vec<PortEntry>,
    /// Each port's configuration, by port name (in the order of `ports`).
    sections: Vec<PortSection>,
    /// What each owner made, in creation order.
    owned: Vec<(String, Owned)>,
    /// Neighbours made for L3 cross-connects out of IP-mode memif ports (point to point: no
    /// ARP, any destination MAC), by interface, removed with the cross-connect.
    p2p_peers: Vec<(IfIndex, u32)>,
    workers: usize,
    /// The memif control thread, once there is a memif port (stopped on drop, after the
    /// workers).
    memif: Option<MemifControl>,
    /// The EAL and the mempool, when DPDK ports were configured at start.
    dpdk: Option<dpdk_ports::Dpdk>,
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

/// Worker command: attach `port` as `interface` (queue pair taken on the worker's thread).
fn attach_command(port: Arc<dyn Port>, interface: IfIndex) -> WorkerCommand<ForwardingState> {
    Box::new(move |w| {
        let qp = port
            .queue_pair(w.worker)
            .map_err(|e| format!("{}: {e}", port.name()))?;
        let input = w
            .graph
            .node_mut::<PortsInput>(PORT_INPUT)
            .ok_or("the graph has no port-input node")?;
        if !input.attach(interface, qp.rx) {
            return Err(format!("interface {interface} is attached already"));
        }
        let output = w
            .graph
            .node_mut::<InterfaceOutput>(names::INTERFACE_OUTPUT)
            .ok_or("the graph has no interface-output node")?;
        drop(output.attach(interface, qp.tx));
        Ok(())
    })
}

/// Worker command: detach `interface`. Receiving stops first; then what the graph still has
/// pending is run through (so nothing for the interface stays queued), and only then is its
/// transmit queue taken away. Both queues are dropped on the worker's thread.
fn detach_command(interface: IfIndex) -> WorkerCommand<ForwardingState> {
    Box::new(move |w| {
        let rx = w
            .graph
            .node_mut::<PortsInput>(PORT_INPUT)
            .and_then(|n| n.detach(interface));
        drop(rx);
        w.graph.drain(w.buffers, w.state, 64);
        let tx = w
            .graph
            .node_mut::<InterfaceOutput>(names::INTERFACE_OUTPUT)
            .and_then(|n| n.detach(interface));
        drop(tx);
        Ok(())
    })
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
            let mut input = PortsInput::new(PORT_INPUT, names::ETHERNET_INPUT);
            let mut tx: Vec<(IfIndex, Box<dyn TxQueue>)> = Vec::new();
            for (interface, port) in &graph_ports {
                let qp = port.queue_pair(init.index).map_err(|e| e.to_string())?;
                input.attach(*interface, qp.rx);
                tx.push((*interface, qp.tx));
            }
            b.add(input);
            add_forwarding_nodes(&mut b, tx);
            b.build().map_err(|e| e.to_string())
        })
        .map_err(|e| e.to_string())?;
        Ok(Forwarder {
            dataplane,
            forwarding,
            ports,
            sections: cfg.port.clone(),
            owned: Vec::new(),
            p2p_peers: Vec::new(),
            workers: nworkers,
            memif,
            dpdk,
        })
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

    /// The configuration port `name` was opened with (for `quiver ctl show memif`).
    pub fn port_section(&self, name: &str) -> Option<&PortSection> {
        let k = self.ports.iter().position(|e| e.name == name)?;
        self.sections.get(k)
    }

    fn interface(&self, name: &str) -> Result<IfIndex, ForwarderError> {
        self.port(name)
            .map(|e| e.interface)
            .ok_or_else(|| ForwarderError::NotFound(format!("no port named `{name}`")))
    }

    fn commit(&mut self) -> Result<(), ForwarderError> {
        self.forwarding.commit(&self.dataplane)?;
        Ok(())
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

    /// Opens a port and attaches it to every worker; returns its interface index. When this
    /// returns, every worker polls its receive queue and can transmit on it (a memif port's link
    /// comes up when its peer connects). On error nothing of it is left.
    pub fn add_port(
        &mut self,
        section: &PortSection,
        owner: Option<&str>,
    ) -> Result<IfIndex, ForwarderError> {
        let common = section.common();
        let name = common.name;
        if name.is_empty() || name.len() > 64 || name.chars().any(char::is_whitespace) {
            return Err(ForwarderError::InvalidArgument(format!(
                "port name `{name}`: 1 to 64 characters, no spaces"
            )));
        }
        if self.port(name).is_some() || self.forwarding.interface_by_name(name).is_some() {
            return Err(ForwarderError::AlreadyExists(format!(
                "a port named `{name}` exists"
            )));
        }
        if common.mtu < 68 {
            return Err(ForwarderError::InvalidArgument(format!(
                "port {name}: MTU {} is below 68",
                common.mtu
            )));
        }
        if let PortSection::Memif(m) = section {
            let clash = self.sections.iter().find_map(|s| match s {
                PortSection::Memif(o)
                    if o.socket == m.socket && o.id == m.id && o.netns == m.netns =>
                {
                    Some(&o.name)
                }
                _ => None,
            });
            if let Some(other) = clash {
                return Err(ForwarderError::AlreadyExists(format!(
                    "port {other} uses memif socket {} id {}",
                    m.socket, m.id
                )));
            }
        }
        let port = self.open(section)?;
        let interface = match self.forwarding.add_port(name, port.mac(), common.mtu) {
            Ok(i) => i,
            Err(e) => {
                self.close(section, port);
                return Err(e.into());
            }
        };
        // The interface is in every worker's snapshot before its first frame arrives.
        let attached = self.commit().and_then(|()| {
            self.dataplane.synchronize();
            self.dataplane
                .command(|_| attach_command(port.clone(), interface))
                .map_err(ForwarderError::from)
        });
        if let Err(e) = attached {
            let _ = self.dataplane.command(|_| detach_command(interface));
            let _ = self.forwarding.remove_interface(interface);
            let _ = self.commit();
            self.close(section, port);
            return Err(e);
        }
        tracing::info!(port = name, interface, owner, "port added");
        self.ports.push(PortEntry {
            name: name.to_string(),
            interface,
            port,
        });
        self.sections.push(section.clone());
        self.record(owner, Owned::Port(name.to_string()));
        Ok(interface)
    }

    /// Removes a port and everything that refers to it (its cross-connects, addresses,
    /// neighbours, routes through it). When this returns no worker touches the port, no frame
    /// for it is queued anywhere (later ones are dropped as `interface-output.no-queue`), its
    /// buffers are back in the pool and the port is closed (a memif master's socket is
    /// removed with its last interface).
    pub fn remove_port(&mut self, name: &str) -> Result<(), ForwarderError> {
        let k = self
            .ports
            .iter()
            .position(|e| e.name == name)
            .ok_or_else(|| ForwarderError::NotFound(format!("no port named `{name}`")))?;
        let interface = self.ports[k].interface;
        // First nothing is sent to it or accepted from it any more, then the workers let go.
        if let Some((b, _)) = self.forwarding.l3_cross_connect_of(interface) {
            self.forget_p2p_peers(&[interface, b]);
        }
        self.forwarding.remove_interface(interface)?;
        self.commit()?;
        self.dataplane.command(|_| detach_command(interface))?;
        let entry = self.ports.remove(k);
        let section = self.sections.remove(k);
        self.close(&section, entry.port);
        let routes: Vec<(Ipv4Addr, u8)> = self
            .forwarding
            .routes()
            .iter()
            .map(|r| (Ipv4Addr::from(r.prefix), r.len))
            .collect();
        self.forget(|o| match o {
            Owned::Route(p, l) => routes.contains(&(*p, *l)),
            o => !o.uses_port(name),
        });
        tracing::info!(port = name, interface, "port removed");
        Ok(())
    }

    fn check_free(&self, name: &str, i: IfIndex) -> Result<(), ForwarderError> {
        if self.forwarding.cross_connect_of(i).is_some()
            || self.forwarding.l3_cross_connect_of(i).is_some()
        {
            return Err(ForwarderError::AlreadyExists(format!(
                "port {name} is cross-connected already"
            )));
        }
        Ok(())
    }

    fn pair(&self, a: &str, b: &str) -> Result<(IfIndex, IfIndex), ForwarderError> {
        if a == b {
            return Err(ForwarderError::InvalidArgument(format!(
                "cannot cross-connect {a} to itself"
            )));
        }
        let (ia, ib) = (self.interface(a)?, self.interface(b)?);
        self.check_free(a, ia)?;
        self.check_free(b, ib)?;
        Ok((ia, ib))
    }

    /// L2 cross-connects ports `a` and `b` both ways: every frame received on one leaves on the
    /// other, untouched.
    pub fn cross_connect(
        &mut self,
        a: &str,
        b: &str,
        owner: Option<&str>,
    ) -> Result<(), ForwarderError> {
        let (ia, ib) = self.pair(a, b)?;
        self.forwarding.cross_connect(ia, ib)?;
        if let Err(e) = self.commit() {
            self.forwarding.disconnect(ia);
            return Err(e);
        }
        self.record(owner, Owned::CrossConnect(a.into(), b.into()));
        Ok(())
    }

    /// L3 cross-connects ports `a` and `b`: every IPv4 packet received on `a` (checked by
    /// `ip4-input`) leaves by `b` toward `peer_b`, and every one received on `b` leaves by `a`
    /// toward `peer_a`, TTL decremented, whatever their destinations. The peers' MACs come
    /// from [`Forwarder::add_neighbor`], or from ARP when the port has an address
    /// ([`Forwarder::add_address`]) in the peer's subnet. IP-mode memif ports work as they are
    /// (they deliver IP packets behind a synthetic Ethernet header).
    pub fn l3_cross_connect(
        &mut self,
        a: &str,
        b: &str,
        peer_b: Ipv4Addr,
        peer_a: Ipv4Addr,
        owner: Option<&str>,
    ) -> Result<(), ForwarderError> {
        let (ia, ib) = self.pair(a, b)?;
        self.forwarding
            .l3_cross_connect(ia, ib, u32::from(peer_b), u32::from(peer_a))?;
        // An IP-mode memif link is point to point: its peer gets a neighbour entry instead of
        // ARP (the Ethernet header is not sent).
        for (port, i, peer) in [(a, ia, peer_a), (b, ib, peer_b)] {
            let peer = u32::from(peer);
            let known = self
                .forwarding
                .neighbors()
                .iter()
                .any(|&(x, ip, _)| x == i && ip == peer);
            if self.is_ip_memif(port) && !known {
                self.forwarding.add_neighbor(i, peer, IP_MODE_PEER_MAC)?;
                self.p2p_peers.push((i, peer));
            }
        }
        if let Err(e) = self.commit() {
            self.forwarding.l3_disconnect(ia);
            self.forget_p2p_peers(&[ia, ib]);
            return Err(e);
        }
        self.record(owner, Owned::L3CrossConnect(a.into(), b.into()));
        Ok(())
    }

    /// Removes the L2 or L3 cross-connect of port `a` (both ways); the ports go back to
    /// routing.
    pub fn disconnect(&mut self, a: &str) -> Result<(), ForwarderError> {
        let ia = self.interface(a)?;
        let peer = match (
            self.forwarding.cross_connect_of(ia),
            self.forwarding.l3_cross_connect_of(ia),
        ) {
            (Some(b), _) => {
                self.forwarding.disconnect(ia);
                b
            }
            (None, Some((b, _))) => {
                self.forwarding.l3_disconnect(ia);
                self.forget_p2p_peers(&[ia, b]);
                b
            }
            (None, None) => {
                return Err(ForwarderError::NotFound(format!(
                    "port {a} is not cross-connected"
                )))
            }
        };
        self.commit()?;
        let b = self
            .ports
            .iter()
            .find(|e| e.interface == peer)
            .map(|e| e.name.clone())
            .unwrap_or_default();
        self.forget(|o| match o {
            Owned::CrossConnect(x, y) | Owned::L3CrossConnect(x, y) => {
                !((x == a && *y == b) || (x == &b && y == a))
            }
            _ => true,
        });
        Ok(())
    }

    fn is_ip_memif(&self, port: &str) -> bool {
        self.sections.iter().any(
            |s| matches!(s, PortSection::Memif(m) if m.name == port && m.mode == MemifMode::Ip),
        )
    }

    /// Removes the neighbours made for point-to-point L3 cross-connects on `interfaces`.
    fn forget_p2p_peers(&mut self, interfaces: &[IfIndex]) {
        let (gone, kept): (Vec<_>, Vec<_>) = self
            .p2p_peers
            .iter()
            .partition(|(i, _)| interfaces.contains(i));
        for (i, peer) in gone {
            self.forwarding.remove_neighbor(i, peer);
        }
        self.p2p_peers = kept;
    }

    /// Adds (or replaces) a route to `prefix/len` over `via` (next hop, port) pairs — ECMP
    /// when several, a blackhole when none.
    pub fn add_route(
        &mut self,
        prefix: Ipv4Addr,
        len: u8,
        via: &[(Ipv4Addr, &str)],
        owner: Option<&str>,
    ) -> Result<(), ForwarderError> {
        if len > 32 {
            return Err(ForwarderError::InvalidArgument(format!(
                "prefix length {len} is over 32"
            )));
        }
        let paths = via
            .iter()
            .map(|&(nh, port)| {
                Ok(Path {
                    next_hop: u32::from(nh),
                    interface: self.interface(port)?,
                })
            })
            .collect::<Result<Vec<Path>, ForwarderError>>()?;
        if paths.is_empty() {
            self.forwarding.add_drop_route(u32::from(prefix), len)?;
        } else {
            self.forwarding.add_route(u32::from(prefix), len, &paths)?;
        }
        self.commit()?;
        let masked = Ipv4Addr::from(u32::from(prefix) & mask(len));
        self.record(owner, Owned::Route(masked, len));
        Ok(())
    }

    /// Removes the route to `prefix/len`.
    pub fn remove_route(&mut self, prefix: Ipv4Addr, len: u8) -> Result<(), ForwarderError> {
        if len > 32 {
            return Err(ForwarderError::InvalidArgument(format!(
                "prefix length {len} is over 32"
            )));
        }
        if !self.forwarding.remove_route(u32::from(prefix), len) {
            return Err(ForwarderError::NotFound(format!("no route {prefix}/{len}")));
        }
        self.commit()?;
        let masked = Ipv4Addr::from(u32::from(prefix) & mask(len));
        self.forget(|o| *o != Owned::Route(masked, len));
        Ok(())
    }

    /// Records that `ip` is at `mac` on `port`.
    pub fn add_neighbor(
        &mut self,
        port: &str,
        ip: Ipv4Addr,
        mac: [u8; 6],
        owner: Option<&str>,
    ) -> Result<(), ForwarderError> {
        let i = self.interface(port)?;
        self.forwarding.add_neighbor(i, u32::from(ip), mac)?;
        self.commit()?;
        self.record(owner, Owned::Neighbor(port.into(), ip));
        Ok(())
    }

    /// Forgets the neighbour `ip` on `port`.
    pub fn remove_neighbor(&mut self, port: &str, ip: Ipv4Addr) -> Result<(), ForwarderError> {
        let i = self.interface(port)?;
        if !self
            .forwarding
            .neighbors()
            .iter()
            .any(|&(x, a, _)| x == i && a == u32::from(ip))
        {
            return Err(ForwarderError::NotFound(format!(
                "no neighbour {ip} on {port}"
            )));
        }
        self.forwarding.remove_neighbor(i, u32::from(ip));
        self.commit()?;
        self.forget(|o| *o != Owned::Neighbor(port.into(), ip));
        Ok(())
    }

    /// Adds an address of ours, `ip/len`, on `port` (answers ARP and ping; a connected route).
    pub fn add_address(
        &mut self,
        port: &str,
        ip: Ipv4Addr,
        len: u8,
        owner: Option<&str>,
    ) -> Result<(), ForwarderError> {
        let i = self.interface(port)?;
        self.forwarding.add_address(i, u32::from(ip), len)?;
        self.commit()?;
        self.record(owner, Owned::Address(port.into(), ip, len));
        Ok(())
    }

    /// Removes the address `ip/len` from `port`.
    pub fn remove_address(
        &mut self,
        port: &str,
        ip: Ipv4Addr,
        len: u8,
    ) -> Result<(), ForwarderError> {
        let i = self.interface(port)?;
        let has = self
            .forwarding
            .interfaces()
            .any(|x| x.index == i && x.addresses.contains(&(u32::from(ip), len)));
        if !has {
            return Err(ForwarderError::NotFound(format!(
                "no address {ip}/{len} on {port}"
            )));
        }
        self.forwarding.remove_address(i, u32::from(ip), len)?;
        self.commit()?;
        self.forget(|o| *o != Owned::Address(port.into(), ip, len));
        Ok(())
    }

    /// Everything `owner` made that still exists, in creation order.
    pub fn owned_by(&self, owner: &str) -> Vec<Owned> {
        self.owned
            .iter()
            .filter(|(o, _)| o == owner)
            .map(|(_, x)| x.clone())
            .collect()
    }

    /// Removes everything `owner` made, newest first (cross-connects and routes before the
    /// ports they use); returns how many objects went. Owning nothing is not an error.
    pub fn remove_owned(&mut self, owner: &str) -> Result<usize, ForwarderError> {
        let objects = self.owned_by(owner);
        let mut removed = 0;
        for o in objects.iter().rev() {
            let r = match o {
                Owned::Port(p) => self.remove_port(p),
                Owned::CrossConnect(a, _) | Owned::L3CrossConnect(a, _) => self.disconnect(a),
                Owned::Route(p, l) => self.remove_route(*p, *l),
                Owned::Neighbor(p, ip) => self.remove_neighbor(p, *ip),
                Owned::Address(p, ip, l) => self.remove_address(p, *ip, *l),
            };
            match r {
                Ok(()) => removed += 1,
                // Gone already (with a port removed before it, say).
                Err(ForwarderError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.owned.retain(|(o, _)| o != owner);
        Ok(removed)
    }

    fn open(&mut self, p: &PortSection) -> Result<Arc<dyn Port>, ForwarderError> {
        let name = p.common().name;
        if matches!(p, PortSection::Dpdk(_)) && self.dpdk.is_none() {
            return Err(ForwarderError::Unavailable(format!(
                "port {name}: DPDK ports can be added at run time only when some were configured at start (the EAL and the buffer layout are set up then)"
            )));
        }
        open_port(p, self.workers, &mut self.memif, self.dpdk.as_ref()).map_err(|e| match e {
            OpenError::Config(m) => ForwarderError::InvalidArgument(format!("port {name}: {m}")),
            OpenError::Port(e) => port_error(name, e),
            OpenError::Netns(e) if e.is_not_found() => {
                ForwarderError::NotFound(format!("port {name}: {e}"))
            }
            OpenError::Netns(e) => ForwarderError::Unavailable(format!("port {name}: {e}")),
        })
    }

    /// Closes a port no worker holds any more.
    fn close(&mut self, section: &PortSection, port: Arc<dyn Port>) {
        if let (PortSection::Memif(m), Some(control)) = (section, &self.memif) {
            control.remove_port(&m.name);
        }
        drop(port);
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

/// The destination MAC of packets sent to the peer of an IP-mode memif port (never sent: the
/// port strips the Ethernet header).
const IP_MODE_PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len.min(32))
    }
}

/// Why a port could not be opened.
enum OpenError {
    /// The configuration is wrong.
    Config(String),
    /// The driver refused.
    Port(PortError),
    /// The network namespace cannot be used.
    Netns(NetNsError),
}

impl From<PortError> for OpenError {
    fn from(e: PortError) -> Self {
        OpenError::Port(e)
    }
}

impl From<String> for OpenError {
    fn from(e: String) -> Self {
        OpenError::Config(e)
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Config(m) => f.write_str(m),
            OpenError::Port(e) => e.fmt(f),
            OpenError::Netns(e) => e.fmt(f),
        }
    }
}

fn open_port(
    p: &PortSection,
    workers: usize,
    memif: &mut Option<MemifControl>,
    dpdk: Option<&dpdk_ports::Dpdk>,
) -> Result<Arc<dyn Port>, OpenError> {
    let common = p.common();
    let mac = common.mac.map(parse_mac).transpose()?;
    Ok(match p {
        PortSection::Memif(m) => {
            if memif.is_none() {
                *memif = Some(MemifControl::start(workers)?);
            }
            let control = memif.as_ref().expect("started above");
            let mut c = memif_config(common.name, m)?;
            if let Some(path) = &m.netns {
                c.netns = Some(NetNs::open_path(path).map_err(OpenError::Netns)?);
            }
            if let Some(mac) = mac {
                c.mac = mac;
            }
            control.add_port(c)?
        }
        PortSection::AfPacket(a) => {
            if mac.is_some() {
                return Err(OpenError::Config(
                    "an af_packet port uses its kernel interface's MAC".into(),
                ));
            }
            let mut c = AfPacketConfig::new(&a.interface, workers);
            c.promiscuous = a.promiscuous;
            Arc::new(AfPacketPort::open(&c)?)
        }
        PortSection::Dpdk(d) => {
            if mac.is_some() {
                return Err(OpenError::Config(
                    "a dpdk port uses its device's MAC".into(),
                ));
            }
            let dpdk = dpdk.ok_or_else(|| OpenError::Config("the EAL is not running".into()))?;
            dpdk.open(d, workers)
                .map_err(|e| OpenError::Port(PortError::Device(e)))?
        }
        PortSection::Tap(t) => {
            let mut c = TapConfig::new(t.device.as_deref().unwrap_or(common.name), workers);
            c.mac = mac;
            Arc::new(TapPort::open(&c)?)
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
