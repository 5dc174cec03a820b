//! Routes, addresses and neighbours, and the load-balance objects and adjacencies they share.

use super::*;

impl Forwarding {
    /// The interfaces load-balance object `lb` (a route's, see [`Forwarding::routes`]) sends
    /// through, in path order.
    pub fn load_balance_interfaces(&self, lb: u32) -> Vec<IfIndex> {
        let Some(Some(adjs)) = self.load_balances.keys.get(lb as usize) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for &a in adjs.iter() {
            if let Some(AdjKey::Neighbor(x, _)) | Some(AdjKey::Glean(x)) =
                self.adjacencies.keys.get(a.as_usize()).cloned().flatten()
            {
                if !out.contains(&x) {
                    out.push(x);
                }
            }
        }
        out
    }

    pub(super) fn lb_uses_interface(&self, lb: u32, i: IfIndex) -> bool {
        self.load_balances.keys[lb as usize]
            .as_ref()
            .is_some_and(|adjs| {
                adjs.iter()
                    .any(|&a| match self.adjacencies.keys[a.as_usize()] {
                        Some(AdjKey::Neighbor(x, _)) | Some(AdjKey::Glean(x)) => x == i,
                        _ => false,
                    })
            })
    }

    pub(super) fn lb_for(&mut self, keys: &[AdjKey]) -> u32 {
        let adjs: Vec<AdjIndex> = keys
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

    pub(super) fn release_lb(&mut self, lb: u32) {
        if let Some(adjs) = self.load_balances.release(lb) {
            for a in adjs {
                self.adjacencies.release(a);
            }
        }
    }

    pub(super) fn set_route(&mut self, prefix: u32, len: u8, keys: &[AdjKey], source: RouteSource) {
        let prefix = prefix & mask(len);
        let lb = self.lb_for(keys);
        self.route_changes += 1;
        if let Some((old, _)) = self.routes.insert((prefix, len), (lb, source)) {
            self.release_lb(old);
        }
        self.pending_fib.push((prefix, len, Some(lb)));
    }

    pub(super) fn unset_route(&mut self, prefix: u32, len: u8) -> bool {
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

    /// Number of routes.
    pub fn route_count(&self) -> usize {
        self.routes.len()
    }
}
