//! The control side's view of forwarding: interfaces, addresses, routes of both families,
//! neighbours, cross-connects and tunnels. Changes are staged, then [`Forwarding::commit`]
//! (`commit`, the one commit path) publishes a new [`ForwardingState`] and updates each
//! family's FIB in place, in an order that lets workers keep forwarding throughout:
//!
//! 1. publish a snapshot holding every new adjacency and load-balance object;
//! 2. wait until every worker has moved to it ([`Publisher::synchronize`]);
//! 3. write the FIB entries that point at them (and remove deleted routes);
//! 4. wait again; only then are freed table slots and FIB nodes reused.
//!
//! [`Forwarding`] is made of parts, each owning one kind of thing and staging its own part of
//! the snapshot: `interfaces` (the interface table), `objects` (adjacencies and load-balance
//! objects, shared by routes and cross-connects), `fib` (one per family: routes and the table
//! workers read), `neighbors` (ARP's and neighbour discovery's), `xconnect` (L2 and L3
//! cross-connects), `vxlan` and `wireguard` (tunnels). What touches several parts (a route
//! takes an object, removing an interface removes its routes) is a method of [`Forwarding`] in
//! the file of the part it is about.

use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use dataplane::memory::HugepagePolicy;

use crate::fib::lpm::LpmError;
use crate::fib6::Lpm6Error;
use crate::index::IfIndex;
use crate::state::{DataplaneEvent, NdProbe, MAX_INTERFACES};

mod commit;
mod fib;
mod interfaces;
mod interned;
mod neighbors;
mod next_table;
mod objects;
mod routes;
mod routes6;
mod tables;
mod vxlan;
mod wireguard;
mod xconnect;

pub use crate::index::TableId;
pub use commit::{LocalState, Publisher};
pub use fib::Route;
pub use neighbors::{Neighbor6, Neighbor6State};
pub use tables::{DEFAULT_TABLE_NAME, MAX_TABLES};
pub use vxlan::VXLAN6_HEADER;
pub use xconnect::L3Peer;

use interfaces::Interfaces;
use neighbors::Neighbors;
use objects::Objects;
use tables::Tables;
use vxlan::VxlanTunnels;
use wireguard::WgTunnels;
use xconnect::CrossConnects;

/// A configuration change that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardingError {
    /// No interface with that index.
    #[error("no interface {0}")]
    NoSuchInterface(IfIndex),
    /// An interface of that name exists.
    #[error("an interface named `{0}` exists")]
    NameTaken(String),
    /// All interface indices are in use.
    #[error("too many interfaces (at most {MAX_INTERFACES})")]
    TooManyInterfaces,
    /// A prefix length over 32 (over 128 for IPv6).
    #[error("bad prefix length {0}")]
    BadPrefixLength(u8),
    /// A route with no next hop.
    #[error("a route needs at least one path")]
    NoPaths,
    /// A VNI over 24 bits.
    #[error("VNI {0} does not fit in 24 bits")]
    BadVni(u32),
    /// A tunnel with the same endpoints and VNI exists.
    #[error("a VXLAN tunnel {src} → {dst} VNI {vni} exists")]
    DuplicateTunnel {
        /// Source.
        src: String,
        /// Destination.
        dst: String,
        /// VNI.
        vni: u32,
    },
    /// An operation that needs an L2 or L3 interface was given the other kind.
    #[error("interface {0} is in the wrong mode for this")]
    WrongMode(IfIndex),
    /// An address that an interface cannot take or a route cannot go to (a multicast or
    /// unspecified IPv6 address, a link-local one as a prefix).
    #[error("{0}")]
    BadAddress(String),
    /// No table with that number.
    #[error("no table {0}")]
    NoSuchTable(u16),
    /// A table of that name exists (or the name is empty).
    #[error("a table named `{0}` exists (or the name is empty)")]
    TableNameTaken(String),
    /// All table numbers are in use.
    #[error("too many tables (at most {})", tables::MAX_TABLES)]
    TooManyTables,
    /// A table that interfaces are in, or the default table, cannot be removed.
    #[error("table `{0}` is in use (or is the default table)")]
    TableInUse(String),
    /// A route's path through an interface of another table.
    #[error("interface {0} is in another table than the route")]
    OtherTable(IfIndex),
    /// A next-table route naming its own table.
    #[error("a next-table route of table `{0}` cannot name its own table")]
    NextTableSelf(String),
    /// A next-table route that would send packets across tables more than once.
    #[error("{route} refused: {why}")]
    NextTableChain {
        /// The route, its table and the table it names.
        route: String,
        /// Which route would send its packets on, and where.
        why: String,
    },
    /// A table that next-table routes name cannot be removed.
    #[error("table `{table}` is the next table of routes in table `{by}`: remove them first")]
    TableTargeted {
        /// The table.
        table: String,
        /// A table with such a route.
        by: String,
    },
    /// An interface with addresses cannot change tables.
    #[error("interface {0} has addresses: remove them before moving it to another table")]
    HasAddresses(IfIndex),
    /// An interface that routes go through cannot change tables.
    #[error("routes go through interface {0}: remove them before moving it to another table")]
    HasRoutes(IfIndex),
    /// The IPv4 FIB refused a route.
    #[error(transparent)]
    Lpm(#[from] LpmError),
    /// The IPv6 FIB refused a route.
    #[error(transparent)]
    Lpm6(#[from] Lpm6Error),
}

/// A route's IPv4 next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Path {
    /// The next hop's address.
    pub next_hop: u32,
    /// The interface it is reached through.
    pub interface: IfIndex,
}

/// A route's IPv6 next hop: a global address, or a link-local one (as routers advertise
/// themselves), on the interface it is reached through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Path6 {
    /// The next hop's address.
    pub next_hop: u128,
    /// The interface it is reached through.
    pub interface: IfIndex,
}

/// Where a route came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteSource {
    /// Configured.
    Static,
    /// An interface's subnet.
    Connected,
    /// An interface's own address.
    Local,
    /// A neighbour in a connected subnet (from ARP, neighbour discovery or configuration).
    Host,
}

/// An IPv4 route as the control side sees it.
pub type RouteInfo = Route<u32>;
/// An IPv6 route as the control side sees it.
pub type Route6Info = Route<u128>;

/// The control side's forwarding configuration and the FIBs' writer.
pub struct Forwarding {
    interfaces: Interfaces,
    objects: Objects,
    tables: Tables,
    neighbors: Neighbors,
    xconnect: CrossConnects,
    vxlan: VxlanTunnels,
    wireguard: WgTunnels,
    events: Arc<ArrayQueue<DataplaneEvent>>,
    nd_probes: Arc<ArrayQueue<NdProbe>>,
}

/// How large the FIBs are.
#[derive(Debug, Clone, Copy)]
pub struct FibConfig {
    /// IPv4: tbl8 groups, one per /24 that holds a route longer than /24.
    pub long_prefix_groups: u32,
    /// IPv6: bytes of node memory (mapped at once; 1M routes of a real table's shape take
    /// about 100 MiB, a commit replacing them all twice that).
    pub ipv6_node_bytes: u64,
    /// Hugepages for the tables.
    pub hugepages: HugepagePolicy,
}

impl Default for FibConfig {
    fn default() -> Self {
        FibConfig {
            long_prefix_groups: 1 << 16,
            ipv6_node_bytes: 32 << 20,
            hugepages: HugepagePolicy::Auto,
        }
    }
}

impl Forwarding {
    /// Empty forwarding: no interfaces, no routes.
    pub fn new(fib: FibConfig) -> Result<Forwarding, ForwardingError> {
        Ok(Forwarding {
            interfaces: Interfaces::new(),
            objects: Objects::new(),
            tables: Tables::new(&fib)?,
            neighbors: Neighbors::new(),
            xconnect: CrossConnects::new(),
            vxlan: VxlanTunnels::new(),
            wireguard: WgTunnels::new(),
            events: Arc::new(ArrayQueue::new(4096)),
            nd_probes: Arc::new(ArrayQueue::new(1024)),
        })
    }

    /// Adjacencies and load-balance objects in use (for leak checks).
    pub fn object_counts(&self) -> (usize, usize) {
        self.objects.counts()
    }
}
