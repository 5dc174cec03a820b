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

/// Where commits go: a running data plane, or a [`LocalState`] for graphs driven by hand.
pub trait Publisher {
    /// Makes `state` the one workers read from their next loop pass.
    fn publish(&self, state: ForwardingState);
    /// Returns once every worker has started a loop pass since the call.
    fn synchronize(&self);
}

impl Publisher for Dataplane<ForwardingState> {
    fn publish(&self, state: ForwardingState) {
        Dataplane::publish(self, state);
    }
    fn synchronize(&self) {
        Dataplane::synchronize(self);
    }
}

/// The latest snapshot, for a graph that a test or benchmark runs on its own thread.
#[derive(Default)]
pub struct LocalState {
    current: Mutex<Option<Arc<ForwardingState>>>,
}

impl LocalState {
    /// The latest published state.
    ///
    /// # Panics
    /// If nothing has been published yet.
    pub fn current(&self) -> Arc<ForwardingState> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .expect("nothing published yet")
    }
}

impl Publisher for LocalState {
    fn publish(&self, state: ForwardingState) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(state));
    }
    fn synchronize(&self) {}
}

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

/// Slots with reference counts, interned by key. A slot whose last reference goes keeps its
/// content (the FIB may still point at it until the commit's FIB writes are done) and becomes
/// reusable only when the commit recycles it.
struct Interned<K> {
    keys: Vec<Option<K>>,
    index: HashMap<K, u32>,
    refs: Vec<u32>,
    free: Vec<u32>,
    freed_uncommitted: Vec<u32>,
}

impl<K: Clone + Eq + std::hash::Hash> Interned<K> {
    fn new() -> Self {
        Interned {
            keys: Vec::new(),
            index: HashMap::new(),
            refs: Vec::new(),
            free: Vec::new(),
            freed_uncommitted: Vec::new(),
        }
    }

    /// Takes a reference to `key`'s slot (creating it); returns the index and whether it is new.
    fn acquire(&mut self, key: K) -> (u32, bool) {
        if let Some(&i) = self.index.get(&key) {
            self.refs[i as usize] += 1;
            return (i, false);
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.keys[i as usize] = Some(key.clone());
                self.refs[i as usize] = 1;
                i
            }
            None => {
                self.keys.push(Some(key.clone()));
                self.refs.push(1);
                (self.keys.len() - 1) as u32
            }
        };
        self.index.insert(key, i);
        (i, true)
    }

    /// Drops a reference; returns the key when it was the last. The slot keeps its content
    /// until [`Interned::recycle`].
    fn release(&mut self, i: u32) -> Option<K> {
        let r = &mut self.refs[i as usize];
        *r = r
            .checked_sub(1)
            .expect("released an object with no references");
        if *r > 0 {
            return None;
        }
        let key = self.keys[i as usize].clone()?;
        self.index.remove(&key);
        self.freed_uncommitted.push(i);
        Some(key)
    }

    /// Empties the slots released since the last call and makes them reusable (call once the
    /// FIB no longer points at them and every worker has moved on).
    fn recycle(&mut self) {
        for &i in &self.freed_uncommitted {
            self.keys[i as usize] = None;
        }
        self.free.append(&mut self.freed_uncommitted);
    }

    fn live(&self) -> usize {
        self.index.len()
    }
}

/// The control side's forwarding configuration and the FIB writer.
pub struct Forwarding {
    lpm: Lpm,
    interfaces: Vec<Option<Interface>>,
    neighbors: HashMap<(IfIndex, u32), Mac>,
    adjacencies: Interned<AdjKey>,
    load_balances: Interned<Vec<u32>>,
    routes: HashMap<(u32, u8), (u32, RouteSource)>,
    /// Changes to `routes` so far, so readers can tell when a copy of the list is stale.
    route_changes: u64,
    xconnect: Vec<IfIndex>,
    /// L3 cross-connects: receiving interface → (sending interface, next hop, adjacency held).
    l3xconnect: HashMap<IfIndex, (IfIndex, u32, u32)>,
    tunnels: Vec<Option<VxlanTunnel>>,
    vxlan_port: u16,
    events: Arc<ArrayQueue<DataplaneEvent>>,
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
            pending_fib: Vec::new(),
        })
    }

    fn iface(&self, i: IfIndex) -> Result<&Interface, ForwardingError> {
        self.interfaces
            .get(i as usize)
            .and_then(Option::as_ref)
            .ok_or(ForwardingError::NoSuchInterface(i))
    }

    fn iface_mut(&mut self, i: IfIndex) -> Result<&mut Interface, ForwardingError> {
        self.interfaces
            .get_mut(i as usize)
            .and_then(Option::as_mut)
            .ok_or(ForwardingError::NoSuchInterface(i))
    }

    /// The interface called `name`.
    pub fn interface_by_name(&self, name: &str) -> Option<&Interface> {
        self.interfaces.iter().flatten().find(|i| i.name == name)
    }

    /// Every interface.
    pub fn interfaces(&self) -> impl Iterator<Item = &Interface> {
        self.interfaces.iter().flatten()
    }

    fn add_interface(
        &mut self,
        name: &str,
        mac: Mac,
        mtu: u16,
        mode: InterfaceMode,
        kind: InterfaceKind,
    ) -> Result<IfIndex, ForwardingError> {
        if self.interface_by_name(name).is_some() {
            return Err(ForwardingError::NameTaken(name.into()));
        }
        let index = match self.interfaces.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.interfaces.len() < MAX_INTERFACES => {
                self.interfaces.push(None);
                self.interfaces.len() - 1
            }
            None => return Err(ForwardingError::TooManyInterfaces),
        } as IfIndex;
        self.interfaces[index as usize] = Some(Interface {
            index,
            name: name.into(),
            mac,
            mtu,
            mode,
            kind,
            addresses: Vec::new(),
            vlans: Vec::new(),
        });
        if self.xconnect.len() <= index as usize {
            self.xconnect.resize(index as usize + 1, u32::MAX);
        }
        Ok(index)
    }

    /// Adds a port (its transmit queues are given to `interface-output` when graphs are built).
    pub fn add_port(&mut self, name: &str, mac: Mac, mtu: u16) -> Result<IfIndex, ForwardingError> {
        self.add_interface(name, mac, mtu, InterfaceMode::L3, InterfaceKind::Port)
    }

    /// Adds an 802.1Q sub-interface of `parent` for tag `vlan` (routed).
    pub fn add_vlan(
        &mut self,
        parent: IfIndex,
        vlan: u16,
        name: &str,
    ) -> Result<IfIndex, ForwardingError> {
        let p = self.iface(parent)?;
        let (mac, mtu) = (p.mac, p.mtu);
        let i = self.add_interface(
            name,
            mac,
            mtu,
            InterfaceMode::L3,
            InterfaceKind::Vlan {
                parent,
                vlan: vlan & 0xfff,
            },
        )?;
        self.iface_mut(parent)?.vlans.push((vlan & 0xfff, i));
        Ok(i)
    }

    /// Adds a VXLAN tunnel from our `src` to `dst` with `vni`, sending to UDP port `dst_port`;
    /// returns its L2 interface.
    pub fn add_vxlan_tunnel(
        &mut self,
        name: &str,
        src: u32,
        dst: u32,
        vni: u32,
        dst_port: u16,
    ) -> Result<IfIndex, ForwardingError> {
        if vni >= 1 << 24 {
            return Err(ForwardingError::BadVni(vni));
        }
        if self
            .tunnels
            .iter()
            .flatten()
            .any(|t| t.src == src && t.dst == dst && t.vni == vni)
        {
            return Err(ForwardingError::DuplicateTunnel {
                src: wire::ip4_to_string(src),
                dst: wire::ip4_to_string(dst),
                vni,
            });
        }
        let slot = self
            .tunnels
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.tunnels.len());
        let interface = self.add_interface(
            name,
            [0; 6],
            9000,
            InterfaceMode::L2,
            InterfaceKind::Vxlan {
                tunnel: slot as u32,
            },
        )?;
        let mut header = [0u8; 36];
        header[0] = 0x45;
        header[8] = 64;
        header[9] = wire::PROTO_UDP;
        wire::put32(&mut header, 12, src);
        wire::put32(&mut header, 16, dst);
        wire::put16(&mut header, 22, dst_port);
        header[28] = 0x08;
        wire::put32(&mut header, 32, vni << 8);
        let ip_sum = wire::sum16(&header[..20]);
        let t = VxlanTunnel {
            interface,
            src,
            dst,
            vni,
            dst_port,
            header,
            ip_sum,
        };
        if slot == self.tunnels.len() {
            self.tunnels.push(Some(t));
        } else {
            self.tunnels[slot] = Some(t);
        }
        Ok(interface)
    }

    /// Sets the UDP port VXLAN is received on (default 4789).
    pub fn set_vxlan_port(&mut self, port: u16) {
        self.vxlan_port = port;
    }

    /// Removes an interface and everything that refers to it: addresses, every route through it,
    /// neighbours, cross-connects, its tunnel and sub-interfaces.
    pub fn remove_interface(&mut self, i: IfIndex) -> Result<(), ForwardingError> {
        let iface = self.iface(i)?.clone();
        for (a, l) in iface.addresses.clone() {
            self.remove_address(i, a, l)?;
        }
        for (_, sub) in iface.vlans.clone() {
            self.remove_interface(sub)?;
        }
        if let InterfaceKind::Vlan { parent, .. } = iface.kind {
            if let Ok(p) = self.iface_mut(parent) {
                p.vlans.retain(|&(_, s)| s != i);
            }
        }
        if let InterfaceKind::Vxlan { tunnel } = iface.kind {
            self.tunnels[tunnel as usize] = None;
        }
        // Every route through the interface goes with it: its index may be given to a new
        // interface, which must not inherit them.
        let through: Vec<(u32, u8)> = self
            .routes
            .iter()
            .filter(|(_, (lb, _))| self.lb_uses_interface(*lb, i))
            .map(|(k, _)| *k)
            .collect();
        for (p, l) in through {
            self.unset_route(p, l);
        }
        self.neighbors.retain(|(ifx, _), _| *ifx != i);
        self.disconnect(i);
        self.l3_disconnect(i);
        self.interfaces[i as usize] = None;
        Ok(())
    }

    /// The interfaces load-balance object `lb` (a route's, see [`Forwarding::routes`]) sends
    /// through, in path order.
    pub fn load_balance_interfaces(&self, lb: u32) -> Vec<IfIndex> {
        let Some(Some(adjs)) = self.load_balances.keys.get(lb as usize) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for &a in adjs.iter() {
            if let Some(AdjKey::Neighbor(x, _)) | Some(AdjKey::Glean(x)) =
                self.adjacencies.keys.get(a as usize).cloned().flatten()
            {
                if !out.contains(&x) {
                    out.push(x);
                }
            }
        }
        out
    }

    fn lb_uses_interface(&self, lb: u32, i: IfIndex) -> bool {
        self.load_balances.keys[lb as usize]
            .as_ref()
            .is_some_and(|adjs| {
                adjs.iter()
                    .any(|&a| match self.adjacencies.keys[a as usize] {
                        Some(AdjKey::Neighbor(x, _)) | Some(AdjKey::Glean(x)) => x == i,
                        _ => false,
                    })
            })
    }

    /// Puts two interfaces in L2 mode and cross-connects them both ways.
    pub fn cross_connect(&mut self, a: IfIndex, b: IfIndex) -> Result<(), ForwardingError> {
        self.iface(a)?;
        self.iface(b)?;
        self.iface_mut(a)?.mode = InterfaceMode::L2;
        self.iface_mut(b)?.mode = InterfaceMode::L2;
        self.xconnect[a as usize] = b;
        self.xconnect[b as usize] = a;
        Ok(())
    }

    /// Removes the cross-connect of `a` (both ways). Ports go back to L3 mode.
    pub fn disconnect(&mut self, a: IfIndex) {
        if let Some(&b) = self.xconnect.get(a as usize) {
            if b != u32::MAX {
                self.xconnect[b as usize] = u32::MAX;
                if let Some(Some(i)) = self.interfaces.get_mut(b as usize) {
                    if i.kind == InterfaceKind::Port {
                        i.mode = InterfaceMode::L3;
                    }
                }
            }
            self.xconnect[a as usize] = u32::MAX;
        }
        if let Some(Some(i)) = self.interfaces.get_mut(a as usize) {
            if i.kind == InterfaceKind::Port {
                i.mode = InterfaceMode::L3;
            }
        }
    }

    /// L3 cross-connects two routed ports: every IPv4 packet received on `a` leaves by `b`
    /// toward `next_hop_b` (B's peer), and every one received on `b` by `a` toward `next_hop_a`,
    /// TTL decremented, whatever their destinations (after `ip4-input`'s checks). The next
    /// hops' MACs come from neighbours (configured, or learned by ARP when the interface has
    /// an address in the next hop's subnet). ARP and packets for our own addresses still work
    /// on both. Replaces an L3 cross-connect either had.
    pub fn l3_cross_connect(
        &mut self,
        a: IfIndex,
        b: IfIndex,
        next_hop_b: u32,
        next_hop_a: u32,
    ) -> Result<(), ForwardingError> {
        for i in [a, b] {
            let iface = self.iface(i)?;
            if iface.mode != InterfaceMode::L3 || iface.kind != InterfaceKind::Port {
                return Err(ForwardingError::WrongMode(i));
            }
        }
        self.l3_disconnect(a);
        self.l3_disconnect(b);
        for (rx, tx, nh) in [(a, b, next_hop_b), (b, a, next_hop_a)] {
            let (adj, _) = self.adjacencies.acquire(AdjKey::Neighbor(tx, nh));
            self.l3xconnect.insert(rx, (tx, nh, adj));
        }
        Ok(())
    }

    /// Removes the L3 cross-connect of `a` (both ways); `false` when it had none.
    pub fn l3_disconnect(&mut self, a: IfIndex) -> bool {
        let Some((b, _, adj)) = self.l3xconnect.remove(&a) else {
            return false;
        };
        self.adjacencies.release(adj);
        if let Some((_, _, back)) = self.l3xconnect.remove(&b) {
            self.adjacencies.release(back);
        }
        true
    }

    /// The L3 cross-connect of `a`: (the interface its packets leave by, the next hop).
    pub fn l3_cross_connect_of(&self, a: IfIndex) -> Option<(IfIndex, u32)> {
        self.l3xconnect.get(&a).map(|&(b, nh, _)| (b, nh))
    }

    /// The cross-connect peer of `a`.
    pub fn cross_connect_of(&self, a: IfIndex) -> Option<IfIndex> {
        self.xconnect
            .get(a as usize)
            .copied()
            .filter(|&b| b != u32::MAX)
    }

    fn lb_for(&mut self, keys: &[AdjKey]) -> u32 {
        let adjs: Vec<u32> = keys
            .iter()
            .map(|&k| self.adjacencies.acquire(k).0)
            .collect();
        let (lb, new) = self.load_balances.acquire(adjs.clone());
        if !new {
            for a in adjs {
                self.adjacencies.release(a);
            }
        }
        lb
    }

    fn release_lb(&mut self, lb: u32) {
        if let Some(adjs) = self.load_balances.release(lb) {
            for a in adjs {
                self.adjacencies.release(a);
            }
        }
    }

    fn set_route(&mut self, prefix: u32, len: u8, keys: &[AdjKey], source: RouteSource) {
        let prefix = prefix & mask(len);
        let lb = self.lb_for(keys);
        self.route_changes += 1;
        if let Some((old, _)) = self.routes.insert((prefix, len), (lb, source)) {
            self.release_lb(old);
        }
        self.pending_fib.push((prefix, len, Some(lb)));
    }

    fn unset_route(&mut self, prefix: u32, len: u8) -> bool {
        let prefix = prefix & mask(len);
        self.route_changes += 1;
        match self.routes.remove(&(prefix, len)) {
            Some((lb, _)) => {
                self.release_lb(lb);
                self.pending_fib.push((prefix, len, None));
                true
            }
            None => false,
        }
    }

    /// Adds an address to an L3 interface: a connected route for its subnet and a local route
    /// for the address itself.
    pub fn add_address(&mut self, i: IfIndex, addr: u32, len: u8) -> Result<(), ForwardingError> {
        if len > 32 {
            return Err(ForwardingError::BadPrefixLength(len));
        }
        let iface = self.iface_mut(i)?;
        if !iface.addresses.contains(&(addr, len)) {
            iface.addresses.push((addr, len));
        }
        if len < 32 {
            self.set_route(addr, len, &[AdjKey::Glean(i)], RouteSource::Connected);
        }
        self.set_route(addr, 32, &[AdjKey::Local], RouteSource::Local);
        Ok(())
    }

    /// Removes an address and its connected and local routes.
    pub fn remove_address(
        &mut self,
        i: IfIndex,
        addr: u32,
        len: u8,
    ) -> Result<(), ForwardingError> {
        self.iface_mut(i)?.addresses.retain(|&a| a != (addr, len));
        if len < 32 {
            self.unset_route(addr, len);
        }
        self.unset_route(addr, 32);
        Ok(())
    }

    /// Adds (or replaces) a route spreading flows over `paths` (ECMP when several).
    pub fn add_route(
        &mut self,
        prefix: u32,
        len: u8,
        paths: &[Path],
    ) -> Result<(), ForwardingError> {
        if len > 32 {
            return Err(ForwardingError::BadPrefixLength(len));
        }
        if paths.is_empty() {
            return Err(ForwardingError::NoPaths);
        }
        for p in paths {
            self.iface(p.interface)?;
        }
        let keys: Vec<AdjKey> = paths
            .iter()
            .map(|p| AdjKey::Neighbor(p.interface, p.next_hop))
            .collect();
        self.set_route(prefix, len, &keys, RouteSource::Static);
        Ok(())
    }

    /// Adds a route that drops everything it matches.
    pub fn add_drop_route(&mut self, prefix: u32, len: u8) -> Result<(), ForwardingError> {
        if len > 32 {
            return Err(ForwardingError::BadPrefixLength(len));
        }
        self.set_route(prefix, len, &[AdjKey::Drop], RouteSource::Static);
        Ok(())
    }

    /// Removes a route; `false` when there was none.
    pub fn remove_route(&mut self, prefix: u32, len: u8) -> bool {
        self.unset_route(prefix, len)
    }

    /// Records that `ip` is at `mac` on interface `i` (configured, or learned from ARP). When
    /// `ip` is in one of the interface's subnets, a host route makes packets for it go there.
    pub fn add_neighbor(&mut self, i: IfIndex, ip: u32, mac: Mac) -> Result<(), ForwardingError> {
        let iface = self.iface(i)?;
        let connected = iface.address_for(ip).is_some();
        let is_ours = iface.addresses.iter().any(|&(a, _)| a == ip);
        self.neighbors.insert((i, ip), mac);
        if connected && !is_ours && !self.routes.contains_key(&(ip, 32)) {
            self.set_route(ip, 32, &[AdjKey::Neighbor(i, ip)], RouteSource::Host);
        }
        Ok(())
    }

    /// Forgets a neighbour (and its host route).
    pub fn remove_neighbor(&mut self, i: IfIndex, ip: u32) {
        self.neighbors.remove(&(i, ip));
        if self
            .routes
            .get(&(ip, 32))
            .is_some_and(|r| r.1 == RouteSource::Host)
        {
            self.unset_route(ip, 32);
        }
    }

    /// Every neighbour: (interface, address, MAC).
    pub fn neighbors(&self) -> Vec<(IfIndex, u32, Mac)> {
        let mut v: Vec<_> = self
            .neighbors
            .iter()
            .map(|(&(i, ip), &m)| (i, ip, m))
            .collect();
        v.sort();
        v
    }

    /// Every route.
    pub fn routes(&self) -> Vec<RouteInfo> {
        let mut v: Vec<_> = self
            .routes
            .iter()
            .map(|(&(prefix, len), &(lb, source))| RouteInfo {
                prefix,
                len,
                source,
                load_balance: lb,
            })
            .collect();
        v.sort_by_key(|r| (r.prefix, r.len));
        v
    }

    /// A number that changes whenever the route list ([`Forwarding::routes`]) may have.
    pub fn route_generation(&self) -> u64 {
        self.route_changes
    }

    /// Adjacencies and load-balance objects in use (for leak checks).
    pub fn object_counts(&self) -> (usize, usize) {
        (self.adjacencies.live(), self.load_balances.live())
    }

    /// Applies what the data path reported (neighbours learned from ARP); returns how many
    /// events there were. Commit afterwards.
    pub fn take_events(&mut self) -> usize {
        let mut n = 0;
        while let Some(e) = self.events.pop() {
            n += 1;
            match e {
                DataplaneEvent::NeighborLearned { interface, ip, mac } => {
                    let learnable = self
                        .iface(interface)
                        .is_ok_and(|i| i.address_for(ip).is_some());
                    if learnable && self.neighbors.get(&(interface, ip)) != Some(&mac) {
                        let _ = self.add_neighbor(interface, ip, mac);
                    }
                }
            }
        }
        n
    }

    fn adjacency(&self, key: Option<&AdjKey>) -> Adjacency {
        let Some(key) = key else {
            return Adjacency::DROP;
        };
        let (kind, tx, next_hop) = match *key {
            AdjKey::Drop => return Adjacency::DROP,
            AdjKey::Local => {
                return Adjacency {
                    kind: AdjacencyKind::Local,
                    ..Adjacency::DROP
                }
            }
            AdjKey::Glean(i) => (AdjacencyKind::Glean, i, 0),
            AdjKey::Neighbor(i, ip) => match self.neighbors.get(&(i, ip)) {
                Some(_) => (AdjacencyKind::Rewrite, i, ip),
                None => (AdjacencyKind::Arp, i, ip),
            },
        };
        let Ok(iface) = self.iface(tx) else {
            return Adjacency::DROP;
        };
        let mut header = [0u8; 18];
        let mut header_len = 14u8;
        if kind == AdjacencyKind::Rewrite {
            let mac = self.neighbors[&(tx, next_hop)];
            header[..6].copy_from_slice(&mac);
            header[6..12].copy_from_slice(&iface.mac);
            if let InterfaceKind::Vlan { vlan, .. } = iface.kind {
                wire::put16(&mut header, 12, wire::ETHERTYPE_VLAN);
                wire::put16(&mut header, 14, vlan);
                wire::put16(&mut header, 16, wire::ETHERTYPE_IP4);
                header_len = 18;
            } else {
                wire::put16(&mut header, 12, wire::ETHERTYPE_IP4);
            }
        }
        Adjacency {
            kind,
            tx,
            mtu: iface.mtu,
            next_hop,
            header,
            header_len,
        }
    }

    /// The state as it would be published now.
    pub fn snapshot(&self) -> ForwardingState {
        let mut tunnel_by_key = FastMap::default();
        for (i, t) in self.tunnels.iter().enumerate() {
            if let Some(t) = t {
                // Received packets come from the far end to us.
                tunnel_by_key.insert((t.dst, t.src, t.vni), i as u32);
            }
        }
        let tx_class = self
            .interfaces
            .iter()
            .map(|i| match i.as_ref().map(|i| (i.index, i.kind)) {
                Some((i, InterfaceKind::Port)) => TxClass::port(i),
                Some((_, InterfaceKind::Vlan { parent, .. })) => TxClass::vlan(parent),
                Some((_, InterfaceKind::Vxlan { tunnel })) => TxClass::vxlan(tunnel),
                None => TxClass::NONE,
            })
            .collect();
        let load_balances: Vec<LoadBalance> = self
            .load_balances
            .keys
            .iter()
            .map(|k| LoadBalance {
                // A recycled slot: no FIB entry points here; make any use of it a drop.
                buckets: k
                    .clone()
                    .unwrap_or_else(|| vec![u32::MAX])
                    .into_boxed_slice(),
            })
            .collect();
        let adjacencies: Vec<Adjacency> = self
            .adjacencies
            .keys
            .iter()
            .map(|k| self.adjacency(k.as_ref()))
            .collect();
        let single_paths = load_balances
            .iter()
            .map(|lb| match *lb.buckets {
                [a] => adjacencies
                    .get(a as usize)
                    .map_or(SinglePath::NONE, |adj| SinglePath::new(a, adj.kind)),
                _ => SinglePath::NONE,
            })
            .collect();
        ForwardingState {
            tx_class,
            interfaces: self.interfaces.clone(),
            xconnect: self.xconnect.clone(),
            l3xconnect: {
                let mut v = vec![u32::MAX; self.interfaces.len()];
                for (&rx, &(_, _, adj)) in &self.l3xconnect {
                    if let Some(slot) = v.get_mut(rx as usize) {
                        *slot = adj;
                    }
                }
                v
            },
            any_l3xconnect: !self.l3xconnect.is_empty(),
            fib: self.lpm.table().clone(),
            load_balances,
            adjacencies,
            single_paths,
            tunnels: self
                .tunnels
                .iter()
                .map(|t| {
                    t.clone().unwrap_or(VxlanTunnel {
                        interface: u32::MAX,
                        src: 0,
                        dst: 0,
                        vni: 0,
                        dst_port: 0,
                        header: [0; 36],
                        ip_sum: 0,
                    })
                })
                .collect(),
            tunnel_by_key,
            vxlan_port: self.vxlan_port,
            events: self.events.clone(),
        }
    }

    /// Publishes the staged changes and updates the FIB, without stopping any worker (see the
    /// module docs for the order). A route the FIB cannot hold is withdrawn and reported.
    pub fn commit(&mut self, to: &dyn Publisher) -> Result<(), ForwardingError> {
        to.publish(self.snapshot());
        if self.pending_fib.is_empty() {
            return Ok(());
        }
        to.synchronize();
        let mut failed = None;
        // Each changed /17 of the FIB is re-encoded once, at the flush.
        self.lpm.defer_updates();
        for (prefix, len, lb) in std::mem::take(&mut self.pending_fib) {
            match lb {
                Some(lb) => {
                    if let Err(e) = self.lpm.insert(prefix, len, lb) {
                        failed.get_or_insert(e);
                        // Withdraw the route entirely: the FIB may still hold the route it
                        // replaced, whose objects were released.
                        self.lpm.remove(prefix, len);
                        self.route_changes += 1;
                        if let Some((lb, _)) = self.routes.remove(&(prefix, len)) {
                            self.release_lb(lb);
                        }
                    }
                }
                None => {
                    self.lpm.remove(prefix, len);
                }
            }
        }
        let mut flushed = self.lpm.flush();
        if flushed.is_err() {
            // The node memory is full of blocks this commit replaced: reuse them and retry.
            to.synchronize();
            self.lpm.recycle_retired();
            flushed = self.lpm.flush();
        }
        to.synchronize();
        self.lpm.recycle_retired();
        match flushed {
            Ok(()) => {
                self.adjacencies.recycle();
                self.load_balances.recycle();
            }
            // Some /17s still show readers their old routes, which may use objects this commit
            // released: keep those slots until a commit gets the FIB written.
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Number of routes.
    pub fn route_count(&self) -> usize {
        self.routes.len()
    }
}
