//! The data-path side of the NSM server: what it asks of the forwarder, as a trait.
//!
//! Every method is synchronous (it may take locks or do netlink work) and the server calls it
//! from `spawn_blocking`. Every object is created on behalf of an *owner* — the NSM connection
//! id — so that `remove_owned` can remove all of it at Close, expiry or after a failed
//! Request, and `owners` lets a restarted Quiver remove what no connection owns.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use crate::addr::{IpPrefix, MacAddr};

/// One side's next hops for an L3 cross-connect, from its addresses in the IP context: its
/// first IPv4 address and its first IPv6 one (either may be missing; both, on a side without
/// addresses).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct L3NextHops {
    /// Where IPv4 packets go.
    pub v4: Option<Ipv4Addr>,
    /// Where IPv6 packets go.
    pub v6: Option<Ipv6Addr>,
}

impl L3NextHops {
    /// Its addresses, IPv4's first.
    pub fn addrs(&self) -> impl Iterator<Item = IpAddr> {
        let v4 = self.v4.map(IpAddr::V4);
        v4.into_iter().chain(self.v6.map(IpAddr::V6))
    }
}

/// A port's name in Quiver's interface table (chosen by the server, unique per connection).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PortName(pub String);

impl std::fmt::Display for PortName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which end of the memif control protocol Quiver plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemifRole {
    /// Quiver listens on the socket (toward an NSC).
    Master,
    /// Quiver connects to the peer's socket (toward an NSE).
    Slave,
}

/// What a memif carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameMode {
    /// Ethernet frames (payload `ETHERNET`).
    Ethernet,
    /// Bare IP packets (payload `IP`).
    Ip,
}

/// A memif port to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemifSpec {
    /// Quiver's name for the port.
    pub name: PortName,
    /// Master (listen) or slave (connect).
    pub role: MemifRole,
    /// The control socket: `@name` for an abstract socket, else a path.
    pub socket: String,
    /// The network namespace the socket lives in (`None`: Quiver's own).
    pub netns: Option<PathBuf>,
    /// Ethernet or IP frames.
    pub mode: FrameMode,
    /// MTU, when the connection names one.
    pub mtu: Option<u32>,
}

/// A route to add inside a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    /// Destination prefix.
    pub prefix: IpPrefix,
    /// Next hop (`None`: on-link through the interface).
    pub via: Option<IpAddr>,
}

/// A static neighbour to add inside a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighborSpec {
    /// The neighbour's address.
    pub ip: IpAddr,
    /// Its MAC address.
    pub mac: MacAddr,
}

/// A policy route (NSM's `PolicyRoute`): traffic selected by source prefix, protocol and
/// ports is routed by a table of its own holding `routes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    /// Source prefix (`None`: any source).
    pub from: Option<IpPrefix>,
    /// IP protocol number (`None`: any).
    pub proto: Option<u8>,
    /// Source port range, inclusive (`None`: any).
    pub src_port: Option<(u16, u16)>,
    /// Destination port range, inclusive (`None`: any).
    pub dst_port: Option<(u16, u16)>,
    /// The routes of the policy's table.
    pub routes: Vec<RouteSpec>,
}

impl PolicySpec {
    /// What the policy's rule matches on (two policies alike would collide).
    pub fn selector(&self) -> impl PartialEq + '_ {
        (
            self.from.map(|f| (f.addr, f.len)),
            self.proto,
            self.src_port,
            self.dst_port,
            self.is_ipv6(),
        )
    }

    /// Whether the policy is IPv6: its source's family, else its routes'.
    pub fn is_ipv6(&self) -> bool {
        self.from
            .map(|f| f.addr.is_ipv6())
            .or_else(|| self.routes.first().map(|r| r.prefix.addr.is_ipv6()))
            .unwrap_or(false)
    }
}

/// Addresses, routes, neighbours and policy routes for one side of a connection (IPv4 and
/// IPv6).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpConfig {
    /// Addresses to put on the interface (`a.b.c.d/len` or `x::y/len`).
    pub addresses: Vec<IpPrefix>,
    /// Routes through the interface.
    pub routes: Vec<RouteSpec>,
    /// Static neighbours on the interface.
    pub neighbors: Vec<NeighborSpec>,
    /// Policy routes (the client side's; sdk-kernel applies them in the client's namespace).
    pub policies: Vec<PolicySpec>,
    /// The other side's addresses, with their prefix lengths as the context has them: a KERNEL
    /// interface gets a route to each one's prefix that this side's own prefixes do not hold
    /// (as sdk-kernel's `routes` element does), and for an L3 cross-connect they resolve to
    /// Quiver inside this side's namespace (static neighbours; nothing answers ARP or neighbour
    /// discovery there).
    pub peers: Vec<IpPrefix>,
}

/// A kernel interface to create: a veth pair with one end moved into `netns` and named
/// `ifname` there, configured with `ip`; Quiver's end becomes the port `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSpec {
    /// Quiver's name for its end of the pair.
    pub name: PortName,
    /// The namespace that receives the other end.
    pub netns: PathBuf,
    /// The interface's name in that namespace (at most 15 bytes).
    pub ifname: String,
    /// MTU, when the connection names one.
    pub mtu: Option<u32>,
    /// Addresses, routes and neighbours to apply inside the namespace.
    pub ip: IpConfig,
}

/// A VXLAN tunnel to create toward a forwarder on another node (NSM's VXLAN mechanism):
/// frames cross-connected to it leave from `local` to `remote` inside VXLAN with `vni`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanSpec {
    /// Quiver's name for the tunnel.
    pub name: PortName,
    /// Quiver's tunnel address (`NSM_TUNNEL_IP`), IPv4 or IPv6.
    pub local: IpAddr,
    /// The other forwarder's tunnel address (of `local`'s family).
    pub remote: IpAddr,
    /// The VXLAN network identifier (24 bits).
    pub vni: u32,
    /// The UDP port the other forwarder receives VXLAN on.
    pub dst_port: u16,
}

/// A WireGuard tunnel to create toward a forwarder on another node (NSM's WIREGUARD mechanism,
/// IP payload): Quiver receives on `local:port` with its own key; its one peer is `remote_key`
/// at `remote:remote_port`, allowed every address (the tunnel is the connection's alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireguardSpec {
    /// Quiver's name for the tunnel.
    pub name: PortName,
    /// Quiver's tunnel address (`NSM_TUNNEL_IP`).
    pub local: IpAddr,
    /// The UDP port Quiver receives the tunnel's datagrams on (one per connection).
    pub port: u16,
    /// The other forwarder's tunnel address.
    pub remote: IpAddr,
    /// The UDP port it receives on.
    pub remote_port: u16,
    /// Its public key.
    pub remote_key: [u8; 32],
    /// The MTU of the uplink the tunnel's datagrams leave by (the tunnel carries 60 bytes
    /// less over IPv4, 80 over IPv6).
    pub underlay_mtu: u32,
}

/// An 802.1Q sub-interface to create on a host interface (NSM's VLAN mechanism, toward an
/// external network): frames cross-connected to it leave `host` tagged with `vlan`, and
/// frames `host` receives tagged with `vlan` are its own, untagged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VlanSpec {
    /// Quiver's name for the sub-interface.
    pub name: PortName,
    /// The host interface (in Quiver's namespace) the device selector names for the
    /// connection's `via` label.
    pub host: String,
    /// The VLAN (1 to 4094), the endpoint's `vlan-id`.
    pub vlan: u16,
}

/// One side of a connection as built in the data path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSpec {
    /// A memif port.
    Memif(MemifSpec),
    /// A kernel (veth) interface.
    Kernel(KernelSpec),
    /// A VXLAN tunnel to another node.
    Vxlan(VxlanSpec),
    /// A WireGuard tunnel to another node.
    Wireguard(WireguardSpec),
    /// A VLAN sub-interface on a host interface.
    Vlan(VlanSpec),
}

impl PortSpec {
    /// Quiver's name for the port.
    pub fn name(&self) -> &PortName {
        match self {
            PortSpec::Memif(m) => &m.name,
            PortSpec::Kernel(k) => &k.name,
            PortSpec::Vxlan(v) => &v.name,
            PortSpec::Wireguard(w) => &w.name,
            PortSpec::Vlan(v) => &v.name,
        }
    }
}

/// Why the data path refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// Something named does not exist (a namespace, a port).
    #[error("not found: {0}")]
    NotFound(String),
    /// Something with that name exists already.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The request cannot be carried out as given.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Any other failure (netlink, sockets, the forwarder).
    #[error("{0}")]
    Failed(String),
}

/// A port's link went up or down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkEvent {
    /// The connection that owns the port.
    pub owner: String,
    /// The port.
    pub port: PortName,
    /// The new state.
    pub up: bool,
    /// Why (for logs), e.g. "peer disconnected".
    pub reason: String,
}

/// Where the data path reports link changes; cheap to clone, callable from any thread.
#[derive(Debug, Clone)]
pub struct LinkEvents(tokio::sync::mpsc::UnboundedSender<LinkEvent>);

impl LinkEvents {
    /// A sender and the receiver the server reads.
    pub fn channel() -> (LinkEvents, tokio::sync::mpsc::UnboundedReceiver<LinkEvent>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (LinkEvents(tx), rx)
    }

    /// Reports `event`; returns false once nobody listens any more.
    pub fn send(&self, event: LinkEvent) -> bool {
        self.0.send(event).is_ok()
    }
}

/// A port's counters since it was made, as NSM's path segment metrics report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Bytes received from the port's peer.
    pub rx_bytes: u64,
    /// Bytes sent to the port's peer.
    pub tx_bytes: u64,
    /// Packets received from the port's peer.
    pub rx_packets: u64,
    /// Packets sent to the port's peer.
    pub tx_packets: u64,
    /// Packets lost on the port, either way.
    pub drops: u64,
}

/// What the NSM server needs from the data path. Implemented by Quiver's forwarder
/// (`quiver::control::nsm`) and by in-memory fakes in tests.
pub trait NsmBackend: Send + Sync + 'static {
    /// Creates a memif port for `owner`.
    fn create_memif(&self, owner: &str, spec: &MemifSpec) -> Result<(), BackendError>;
    /// Creates a kernel interface (veth into a namespace) and Quiver's port on it for `owner`.
    fn create_kernel(&self, owner: &str, spec: &KernelSpec) -> Result<(), BackendError>;
    /// Creates a VXLAN tunnel for `owner`. A data path without tunnels refuses.
    fn create_vxlan(&self, owner: &str, spec: &VxlanSpec) -> Result<(), BackendError> {
        let _ = owner;
        Err(BackendError::InvalidArgument(format!(
            "{}: this data path has no VXLAN tunnels",
            spec.name
        )))
    }
    /// Creates a WireGuard tunnel for `owner` with Quiver's own key. A data path without
    /// WireGuard refuses.
    fn create_wireguard(&self, owner: &str, spec: &WireguardSpec) -> Result<(), BackendError> {
        let _ = owner;
        Err(BackendError::InvalidArgument(format!(
            "{}: this data path has no WireGuard tunnels",
            spec.name
        )))
    }
    /// The MTU of host interface `host` for VLAN sub-interfaces on it (what a connection over
    /// them carries), readying it for them if it is not yet (Quiver attaches a port to it).
    /// A data path without VLANs refuses.
    fn vlan_host(&self, host: &str) -> Result<u32, BackendError> {
        Err(BackendError::InvalidArgument(format!(
            "{host}: this data path has no VLAN sub-interfaces"
        )))
    }
    /// Creates a VLAN sub-interface for `owner` on its host interface (readied by
    /// [`NsmBackend::vlan_host`]). A data path without VLANs refuses.
    fn create_vlan(&self, owner: &str, spec: &VlanSpec) -> Result<(), BackendError> {
        let _ = owner;
        Err(BackendError::InvalidArgument(format!(
            "{}: this data path has no VLAN sub-interfaces",
            spec.name
        )))
    }
    /// Removes one port or tunnel of `owner` (and any cross-connect from it).
    fn remove_port(&self, owner: &str, port: &PortName) -> Result<(), BackendError>;
    /// Cross-connects `a` and `b` at layer 2, both ways.
    fn l2_cross_connect(&self, owner: &str, a: &PortName, b: &PortName)
        -> Result<(), BackendError>;
    /// Cross-connects `a` and `b` at layer 3, both ways: every IP packet received on `a`
    /// leaves by `b` toward `peer_b`'s next hop of its family, every one received on `b`
    /// leaves by `a` toward `peer_a`'s (none at all: the link is point to point, as a memif in
    /// IP mode). Inside a kernel interface's namespace, the other side's addresses and the
    /// interface's routes' next hops then resolve to Quiver's end (nothing answers ARP or
    /// neighbour solicitations for them there).
    fn l3_cross_connect(
        &self,
        owner: &str,
        a: &PortName,
        b: &PortName,
        peer_b: L3NextHops,
        peer_a: L3NextHops,
    ) -> Result<(), BackendError>;
    /// Removes the cross-connect of `port` (both directions).
    fn disconnect(&self, owner: &str, port: &PortName) -> Result<(), BackendError>;
    /// Removes everything `owner` owns: cross-connects, ports, veths, sockets. Removing
    /// nothing is not an error.
    fn remove_owned(&self, owner: &str) -> Result<(), BackendError>;
    /// Every owner that owns something now (for reconciliation at startup).
    fn owners(&self) -> Result<Vec<String>, BackendError>;
    /// Where to report link changes of owned ports from now on.
    fn watch_links(&self, events: LinkEvents);
    /// The counters of `port` now (`None`: no such port, or one without counters, as a
    /// tunnel). The default has none.
    fn port_counters(&self, port: &PortName) -> Option<PortCounters> {
        let _ = port;
        None
    }
}
