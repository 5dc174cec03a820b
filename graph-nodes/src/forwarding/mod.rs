//! The control side's view of forwarding: interfaces, addresses, routes, neighbours,
//! cross-connects and tunnels. Changes are staged, then [`Forwarding::commit`] publishes a new
//! [`ForwardingState`] and updates the FIB in place, in an order that lets workers keep
//! forwarding throughout:
//!
//! 1. publish a snapshot holding every new adjacency and load-balance object;
//! 2. wait until every worker has moved to it ([`Publisher::synchronize`]);
//! 3. write the FIB entries that point at them (and remove deleted routes);
//! 4. wait again; only then are freed table slots, tbl8 groups and FIB node blocks reused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crossbeam_queue::ArrayQueue;
use dataplane::memory::HugepagePolicy;
use dataplane::Dataplane;

use crate::fib::lpm::{mask, Lpm, LpmError};
use crate::state::*;
use crate::wire::{self, Mac};

mod interfaces;
mod interned;
mod publish;
mod routes;
mod wireguard;
mod xconnect;

use interned::Interned;
pub use publish::{LocalState, Publisher};

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
    /// A prefix length over 32.
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
    /// The FIB refused a route.
    #[error(transparent)]
    Lpm(#[from] LpmError),
}

/// A route's next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Path {
    /// The next hop's address.
    pub next_hop: u32,
    /// The interface it is reached through.
    pub interface: IfIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum AdjKey {
    Neighbor(IfIndex, u32),
    Glean(IfIndex),
    Local,
    Drop,
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
    /// A neighbour in a connected subnet (from ARP or configuration).
    Host,
}

/// A route as the control side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteInfo {
    /// The prefix.
    pub prefix: u32,
    /// Its length.
    pub len: u8,
    /// Where it came from.
    pub source: RouteSource,
    /// The load-balance object it uses.
    pub load_balance: u32,
}
/// The control side's forwarding configuration and the FIB writer.
pub struct Forwarding {
    lpm: Lpm,
    interfaces: Vec<Option<Interface>>,
    neighbors: HashMap<(IfIndex, u32), Mac>,
    adjacencies: Interned<AdjKey, AdjIndex>,
    load_balances: Interned<Vec<AdjIndex>>,
    routes: HashMap<(u32, u8), (u32, RouteSource)>,
    /// Changes to `routes` so far, so readers can tell when a copy of the list is stale.
    route_changes: u64,
    xconnect: Vec<IfIndex>,
    /// L3 cross-connects: receiving interface → (sending interface, next hop, adjacency held).
    l3xconnect: HashMap<IfIndex, (IfIndex, u32, AdjIndex)>,
    tunnels: Vec<Option<VxlanTunnel>>,
    vxlan_port: u16,
    events: Arc<ArrayQueue<DataplaneEvent>>,
    wireguard: Vec<Option<crate::wireguard::WgTunnel>>,
    wg_output: Arc<ArrayQueue<crate::wireguard::WgDatagram>>,
    pending_fib: Vec<(u32, u8, Option<u32>)>,
}

/// How large the FIB is.
#[derive(Debug, Clone, Copy)]
pub struct FibConfig {
    /// tbl8 groups: one per /24 that holds a route longer than /24.
    pub long_prefix_groups: u32,
    /// Hugepages for the tables.
    pub hugepages: HugepagePolicy,
}

impl Default for FibConfig {
    fn default() -> Self {
        FibConfig {
            long_prefix_groups: 1 << 16,
            hugepages: HugepagePolicy::Auto,
        }
    }
}

impl Forwarding {
    /// Empty forwarding: no interfaces, no routes.
    pub fn new(fib: FibConfig) -> Result<Forwarding, ForwardingError> {
        Ok(Forwarding {
            lpm: Lpm::new(fib.long_prefix_groups, fib.hugepages)?,
            interfaces: Vec::new(),
            neighbors: HashMap::new(),
            adjacencies: Interned::new(),
            load_balances: Interned::new(),
            routes: HashMap::new(),
            route_changes: 0,
            xconnect: Vec::new(),
            l3xconnect: HashMap::new(),
            tunnels: Vec::new(),
            vxlan_port: wire::VXLAN_PORT,
            events: Arc::new(ArrayQueue::new(4096)),
            wireguard: Vec::new(),
            wg_output: Arc::new(ArrayQueue::new(crate::wireguard::OUTPUT_QUEUE_LEN)),
            pending_fib: Vec::new(),
        })
    }

    fn iface(&self, i: IfIndex) -> Result<&Interface, ForwardingError> {
        self.interfaces
            .get(i.as_usize())
            .and_then(Option::as_ref)
            .ok_or(ForwardingError::NoSuchInterface(i))
    }

    fn iface_mut(&mut self, i: IfIndex) -> Result<&mut Interface, ForwardingError> {
        self.interfaces
            .get_mut(i.as_usize())
            .and_then(Option::as_mut)
            .ok_or(ForwardingError::NoSuchInterface(i))
    }
}
