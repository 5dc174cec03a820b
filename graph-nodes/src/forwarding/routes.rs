//! IPv4 routes, addresses and neighbours: what [`Forwarding`] does with the IPv4 FIB, the
//! objects routes take, and ARP's neighbours.

use super::objects::AdjKey;
use super::{Forwarding, ForwardingError, Path, RouteInfo, RouteSource};
use crate::index::{IfIndex, TableId};
use crate::wire::Mac;

impl Forwarding {
    /// The interfaces load-balance object `lb` (a route's, see [`Forwarding::routes`]) sends
    /// through, in path order.
    pub fn load_balance_interfaces(&self, lb: u32) -> Vec<IfIndex> {
        self.objects.interfaces_of(lb)
    }

    /// Sets IPv4 route `prefix/len` of table `t` to spread over the adjacencies `keys` are.
    pub(super) fn set_route(
        &mut self,
        t: TableId,
        prefix: u32,
        len: u8,
        keys: &[AdjKey],
        source: RouteSource,
    ) -> Result<(), ForwardingError> {
        self.tables.get(t)?;
        let lb = self.objects.load_balance(keys);
        if let Some(old) = self.tables.get_mut(t)?.fib4.set(prefix, len, lb, source) {
            self.objects.release_load_balance(old);
        }
        Ok(())
    }

    /// Removes IPv4 route `prefix/len` of table `t`; whether there was one.
    pub(super) fn unset_route(&mut self, t: TableId, prefix: u32, len: u8) -> bool {
        let Ok(table) = self.tables.get_mut(t) else {
            return false;
        };
        match table.fib4.unset(prefix, len) {
            Some(lb) => {
                self.objects.release_load_balance(lb);
                true
            }
            None => false,
        }
    }

    /// Removes every route of both families, in every table, through interface `i`.
    pub(super) fn unroute_interface(&mut self, i: IfIndex) {
        let mut gone4 = Vec::new();
        let mut gone6 = Vec::new();
        for (t, table) in self.tables.iter() {
            let uses = |lb| self.objects.uses_interface(lb, i);
            gone4.extend(table.fib4.prefixes_using(uses).into_iter().map(|p| (t, p)));
            gone6.extend(table.fib6.prefixes_using(uses).into_iter().map(|p| (t, p)));
        }
        for (t, (p, l)) in gone4 {
            self.unset_route(t, p, l);
        }
        for (t, (p, l)) in gone6 {
            self.unset_route6(t, p, l);
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
        let t = iface.table;
        if len < 32 {
            self.set_route(t, addr, len, &[AdjKey::Glean(i)], RouteSource::Connected)?;
        }
        self.set_route(t, addr, 32, &[AdjKey::Local], RouteSource::Local)
    }

    /// Removes an address and its connected and local routes.
    pub fn remove_address(
        &mut self,
        i: IfIndex,
        addr: u32,
        len: u8,
    ) -> Result<(), ForwardingError> {
        let iface = self.interfaces.get_mut(i)?;
        iface.addresses.retain(|&a| a != (addr, len));
        let t = iface.table;
        if len < 32 {
            self.unset_route(t, addr, len);
        }
        self.unset_route(t, addr, 32);
        Ok(())
    }

    /// Adds (or replaces) a route of the default table spreading flows over `paths` (ECMP
    /// when several).
    pub fn add_route(
        &mut self,
        prefix: u32,
        len: u8,
        paths: &[Path],
    ) -> Result<(), ForwardingError> {
        self.add_route_in(TableId::DEFAULT, prefix, len, paths)
    }

    /// Adds (or replaces) a route of table `t` spreading flows over `paths`; each path's
    /// interface must be in `t`.
    pub fn add_route_in(
        &mut self,
        t: TableId,
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
        self.check_paths_in(t, paths.iter().map(|p| p.interface))?;
        let keys: Vec<AdjKey> = paths
            .iter()
            .map(|p| AdjKey::Neighbor(p.interface, p.next_hop))
            .collect();
        self.set_route(t, prefix, len, &keys, RouteSource::Static)
    }

    /// Checks that every interface of `via` exists and is in table `t`.
    pub(super) fn check_paths_in(
        &self,
        t: TableId,
        via: impl Iterator<Item = IfIndex>,
    ) -> Result<(), ForwardingError> {
        self.tables.get(t)?;
        for i in via {
            if self.interfaces.get(i)?.table != t {
                return Err(ForwardingError::OtherTable(i));
            }
        }
        Ok(())
    }

    /// Adds a route of the default table that drops everything it matches.
    pub fn add_drop_route(&mut self, prefix: u32, len: u8) -> Result<(), ForwardingError> {
        self.add_drop_route_in(TableId::DEFAULT, prefix, len)
    }

    /// Adds a route of table `t` that drops everything it matches.
    pub fn add_drop_route_in(
        &mut self,
        t: TableId,
        prefix: u32,
        len: u8,
    ) -> Result<(), ForwardingError> {
        if len > 32 {
            return Err(ForwardingError::BadPrefixLength(len));
        }
        self.set_route(t, prefix, len, &[AdjKey::Drop], RouteSource::Static)
    }

    /// Removes a route of the default table; `false` when there was none.
    pub fn remove_route(&mut self, prefix: u32, len: u8) -> bool {
        self.unset_route(TableId::DEFAULT, prefix, len)
    }

    /// Removes a route of table `t`; `false` when there was none.
    pub fn remove_route_in(&mut self, t: TableId, prefix: u32, len: u8) -> bool {
        self.unset_route(t, prefix, len)
    }

    /// Records that `ip` is at `mac` on interface `i` (configured, or learned from ARP). When
    /// `ip` is in one of the interface's subnets, a host route makes packets for it go there.
    pub fn add_neighbor(&mut self, i: IfIndex, ip: u32, mac: Mac) -> Result<(), ForwardingError> {
        let iface = self.interfaces.get(i)?;
        let connected = iface.address_for(ip).is_some();
        let is_ours = iface.addresses.iter().any(|&(a, _)| a == ip);
        let t = iface.table;
        self.neighbors.set4(i, ip, mac);
        if connected && !is_ours && self.tables.get(t)?.fib4.get(ip, 32).is_none() {
            self.set_route(t, ip, 32, &[AdjKey::Neighbor(i, ip)], RouteSource::Host)?;
        }
        Ok(())
    }

    /// Forgets a neighbour (and its host route).
    pub fn remove_neighbor(&mut self, i: IfIndex, ip: u32) {
        self.neighbors.remove4(i, ip);
        let Ok(t) = self.table_of(i) else { return };
        let host = self.tables.get(t).is_ok_and(|table| {
            table
                .fib4
                .get(ip, 32)
                .is_some_and(|(_, source)| source == RouteSource::Host)
        });
        if host {
            self.unset_route(t, ip, 32);
        }
    }

    /// Every neighbour: (interface, address, MAC).
    pub fn neighbors(&self) -> Vec<(IfIndex, u32, Mac)> {
        self.neighbors.list4()
    }

    /// Every route of the default table.
    pub fn routes(&self) -> Vec<RouteInfo> {
        self.tables.default_table().fib4.routes()
    }

    /// A number that changes whenever any table's route list may have (or a table came or
    /// went).
    pub fn route_generation(&self) -> u64 {
        self.tables
            .iter()
            .map(|(_, table)| table.fib4.generation() + table.fib6.generation())
            .sum::<u64>()
            + self.tables.changes
    }

    /// Number of IPv4 routes in every table.
    pub fn route_count(&self) -> usize {
        self.tables.iter().map(|(_, t)| t.fib4.len()).sum()
    }
}
