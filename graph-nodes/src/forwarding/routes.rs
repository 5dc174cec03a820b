//! IPv4 routes, addresses and neighbours: what [`Forwarding`] does with the IPv4 FIB, the
//! objects routes take, and ARP's neighbours.

use super::objects::AdjKey;
use super::{Forwarding, ForwardingError, Path, RouteInfo, RouteSource};
use crate::index::IfIndex;
use crate::wire::Mac;

impl Forwarding {
    /// The interfaces load-balance object `lb` (a route's, see [`Forwarding::routes`]) sends
    /// through, in path order.
    pub fn load_balance_interfaces(&self, lb: u32) -> Vec<IfIndex> {
        self.objects.interfaces_of(lb)
    }

    /// Sets IPv4 route `prefix/len` to spread over the adjacencies `keys` are.
    pub(super) fn set_route(&mut self, prefix: u32, len: u8, keys: &[AdjKey], source: RouteSource) {
        let lb = self.objects.load_balance(keys);
        if let Some(old) = self.fib4.set(prefix, len, lb, source) {
            self.objects.release_load_balance(old);
        }
    }

    /// Removes IPv4 route `prefix/len`; whether there was one.
    pub(super) fn unset_route(&mut self, prefix: u32, len: u8) -> bool {
        match self.fib4.unset(prefix, len) {
            Some(lb) => {
                self.objects.release_load_balance(lb);
                true
            }
            None => false,
        }
    }

    /// Removes every route of both families through interface `i`.
    pub(super) fn unroute_interface(&mut self, i: IfIndex) {
        for (p, l) in self
            .fib4
            .prefixes_using(|lb| self.objects.uses_interface(lb, i))
        {
            self.unset_route(p, l);
        }
        for (p, l) in self
            .fib6
            .prefixes_using(|lb| self.objects.uses_interface(lb, i))
        {
            self.unset_route6(p, l);
        }
    }

    /// Adds an address to an L3 interface: a connected route for its subnet and a local route
    /// for the address itself.
    pub fn add_address(&mut self, i: IfIndex, addr: u32, len: u8) -> Result<(), ForwardingError> {
        if len > 32 {
            return Err(ForwardingError::BadPrefixLength(len));
        }
        let iface = self.interfaces.get_mut(i)?;
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
        self.interfaces
            .get_mut(i)?
            .addresses
            .retain(|&a| a != (addr, len));
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
            self.interfaces.get(p.interface)?;
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
        let iface = self.interfaces.get(i)?;
        let connected = iface.address_for(ip).is_some();
        let is_ours = iface.addresses.iter().any(|&(a, _)| a == ip);
        self.neighbors.set4(i, ip, mac);
        if connected && !is_ours && self.fib4.get(ip, 32).is_none() {
            self.set_route(ip, 32, &[AdjKey::Neighbor(i, ip)], RouteSource::Host);
        }
        Ok(())
    }

    /// Forgets a neighbour (and its host route).
    pub fn remove_neighbor(&mut self, i: IfIndex, ip: u32) {
        self.neighbors.remove4(i, ip);
        if self
            .fib4
            .get(ip, 32)
            .is_some_and(|(_, source)| source == RouteSource::Host)
        {
            self.unset_route(ip, 32);
        }
    }

    /// Every neighbour: (interface, address, MAC).
    pub fn neighbors(&self) -> Vec<(IfIndex, u32, Mac)> {
        self.neighbors.list4()
    }

    /// Every route.
    pub fn routes(&self) -> Vec<RouteInfo> {
        self.fib4.routes()
    }

    /// A number that changes whenever either route list ([`Forwarding::routes`],
    /// [`Forwarding::routes6`]) may have.
    pub fn route_generation(&self) -> u64 {
        self.fib4.generation() + self.fib6.generation()
    }

    /// Number of IPv4 routes.
    pub fn route_count(&self) -> usize {
        self.fib4.len()
    }
}
