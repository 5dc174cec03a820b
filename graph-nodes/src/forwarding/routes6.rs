//! IPv6 routes, addresses and neighbours: what [`Forwarding`] does with the IPv6 FIB, the
//! objects routes take, and neighbour discovery's neighbours. An interface with an IPv6
//! address also has a link-local one (fe80::/64 and the EUI-64 of its MAC, unless one is
//! configured): neighbour discovery speaks from it, and routes may name a link-local next hop
//! on an interface, as routers advertise themselves. Link-local addresses are never in the FIB:
//! their traffic stays on its link (`ip6-input` delivers ours, drops the rest).

use std::time::Instant;

use super::neighbors::Neighbor6;
use super::objects::AdjKey;
use super::{Forwarding, ForwardingError, Path6, Route6Info, RouteSource};
use crate::index::{IfIndex, TableId};
use crate::wire::ipv6;
use crate::wire::Mac;

/// Whether `a` is link-local (fe80::/10).
fn link_local(a: u128) -> bool {
    ipv6::is_link_local(&a.to_be_bytes())
}

/// Refuses what cannot be an interface's address or a next hop: multicast and unspecified.
fn unicast(a: u128, what: &str) -> Result<(), ForwardingError> {
    let b = a.to_be_bytes();
    if ipv6::is_multicast(&b) || ipv6::is_unspecified(&b) {
        return Err(ForwardingError::BadAddress(format!(
            "{what} {} is not a unicast address",
            std::net::Ipv6Addr::from(a)
        )));
    }
    Ok(())
}

impl Forwarding {
    /// Sets IPv6 route `prefix/len` of table `t` to spread over the adjacencies `keys` are.
    pub(super) fn set_route6(
        &mut self,
        t: TableId,
        prefix: u128,
        len: u8,
        keys: &[AdjKey],
        source: RouteSource,
    ) -> Result<(), ForwardingError> {
        self.tables.get(t)?;
        let lb = self.objects.load_balance(keys);
        if let Some(old) = self.tables.get_mut(t)?.fib6.set(prefix, len, lb, source) {
            self.objects.release_load_balance(old);
        }
        Ok(())
    }

    /// Removes IPv6 route `prefix/len` of table `t`; whether there was one.
    pub(super) fn unset_route6(&mut self, t: TableId, prefix: u128, len: u8) -> bool {
        let Ok(table) = self.tables.get_mut(t) else {
            return false;
        };
        match table.fib6.unset(prefix, len) {
            Some(lb) => {
                self.objects.release_load_balance(lb);
                true
            }
            None => false,
        }
    }

    /// Adds an IPv6 address to an L3 interface: a connected route for its subnet (below /128)
    /// and a local route for the address itself; the interface gets its EUI-64 link-local
    /// address with its first. A link-local `addr` is the interface's link-local address
    /// instead (no route).
    pub fn add_address6(&mut self, i: IfIndex, addr: u128, len: u8) -> Result<(), ForwardingError> {
        if len > 128 {
            return Err(ForwardingError::BadPrefixLength(len));
        }
        unicast(addr, "address")?;
        let iface = self.interfaces.get_mut(i)?;
        if link_local(addr) {
            iface.link_local = Some(addr);
            return Ok(());
        }
        if !iface.addresses6.contains(&(addr, len)) {
            iface.addresses6.push((addr, len));
        }
        if iface.link_local.is_none() && !iface.point_to_point && iface.mac != [0; 6] {
            iface.link_local = Some(u128::from_be_bytes(ipv6::link_local(&iface.mac)));
        }
        let t = iface.table;
        if len < 128 {
            self.set_route6(t, addr, len, &[AdjKey::Glean6(i)], RouteSource::Connected)?;
        }
        self.set_route6(t, addr, 128, &[AdjKey::Local], RouteSource::Local)
    }

    /// Removes an IPv6 address and its connected and local routes (and the link-local address
    /// with the last of them).
    pub fn remove_address6(
        &mut self,
        i: IfIndex,
        addr: u128,
        len: u8,
    ) -> Result<(), ForwardingError> {
        let iface = self.interfaces.get_mut(i)?;
        if link_local(addr) {
            if iface.link_local == Some(addr) {
                iface.link_local = None;
            }
            return Ok(());
        }
        iface.addresses6.retain(|&a| a != (addr, len));
        if iface.addresses6.is_empty() {
            iface.link_local = None;
        }
        let t = iface.table;
        if len < 128 {
            self.unset_route6(t, addr, len);
        }
        self.unset_route6(t, addr, 128);
        Ok(())
    }

    /// Adds (or replaces) an IPv6 route of the default table spreading flows over `paths`
    /// (ECMP when several).
    pub fn add_route6(
        &mut self,
        prefix: u128,
        len: u8,
        paths: &[Path6],
    ) -> Result<(), ForwardingError> {
        self.add_route6_in(TableId::DEFAULT, prefix, len, paths)
    }

    /// Adds (or replaces) an IPv6 route of table `t`; each path's interface must be in `t`.
    pub fn add_route6_in(
        &mut self,
        t: TableId,
        prefix: u128,
        len: u8,
        paths: &[Path6],
    ) -> Result<(), ForwardingError> {
        if len > 128 {
            return Err(ForwardingError::BadPrefixLength(len));
        }
        if paths.is_empty() {
            return Err(ForwardingError::NoPaths);
        }
        for p in paths {
            unicast(p.next_hop, "next hop")?;
        }
        self.check_paths_in(t, paths.iter().map(|p| p.interface))?;
        let keys: Vec<AdjKey> = paths
            .iter()
            .map(|p| AdjKey::Neighbor6(p.interface, p.next_hop))
            .collect();
        self.set_route6(t, prefix, len, &keys, RouteSource::Static)
    }

    /// Adds an IPv6 route of the default table that drops everything it matches.
    pub fn add_drop_route6(&mut self, prefix: u128, len: u8) -> Result<(), ForwardingError> {
        self.add_drop_route6_in(TableId::DEFAULT, prefix, len)
    }

    /// Adds an IPv6 route of table `t` that drops everything it matches.
    pub fn add_drop_route6_in(
        &mut self,
        t: TableId,
        prefix: u128,
        len: u8,
    ) -> Result<(), ForwardingError> {
        if len > 128 {
            return Err(ForwardingError::BadPrefixLength(len));
        }
        self.set_route6(t, prefix, len, &[AdjKey::Drop], RouteSource::Static)
    }

    /// Removes an IPv6 route of the default table; `false` when there was none.
    pub fn remove_route6(&mut self, prefix: u128, len: u8) -> bool {
        self.unset_route6(TableId::DEFAULT, prefix, len)
    }

    /// Removes an IPv6 route of table `t`; `false` when there was none.
    pub fn remove_route6_in(&mut self, t: TableId, prefix: u128, len: u8) -> bool {
        self.unset_route6(t, prefix, len)
    }

    /// A host route for neighbour `ip` on `i` when it is in one of `i`'s subnets and not ours
    /// (link-local neighbours need none: their traffic stays on the link).
    fn host_route6(&mut self, i: IfIndex, ip: u128) -> Result<(), ForwardingError> {
        let iface = self.interfaces.get(i)?;
        let connected = !link_local(ip) && iface.address6_for(ip).is_some();
        let t = iface.table;
        if connected && !iface.has_address6(ip) && self.tables.get(t)?.fib6.get(ip, 128).is_none() {
            self.set_route6(t, ip, 128, &[AdjKey::Neighbor6(i, ip)], RouteSource::Host)?;
        }
        Ok(())
    }

    /// Configures IPv6 neighbour `ip` at `mac` on interface `i` (never aged); in one of the
    /// interface's subnets, a host route makes packets for it go there.
    pub fn add_neighbor6(&mut self, i: IfIndex, ip: u128, mac: Mac) -> Result<(), ForwardingError> {
        self.interfaces.get(i)?;
        unicast(ip, "neighbour")?;
        self.neighbors.set6(i, ip, mac);
        self.host_route6(i, ip)
    }

    /// Records what neighbour discovery learned: `ip` at `mac` on `i`, `now`; returns whether
    /// anything changed for the data path. Only addresses the interface can reach are
    /// learned: link-local ones and those in its subnets.
    pub(super) fn learn_neighbor6(&mut self, i: IfIndex, ip: u128, mac: Mac, now: Instant) -> bool {
        let Ok(iface) = self.interfaces.get(i) else {
            return false;
        };
        let reachable = link_local(ip) || iface.address6_for(ip).is_some();
        if !reachable || iface.has_address6(ip) || unicast(ip, "neighbour").is_err() {
            return false;
        }
        let changed = self.neighbors.learn6(i, ip, mac, now);
        if changed {
            let _ = self.host_route6(i, ip);
        }
        changed
    }

    /// Forgets an IPv6 neighbour (and its host route).
    pub fn remove_neighbor6(&mut self, i: IfIndex, ip: u128) {
        self.neighbors.remove6(i, ip);
        let Ok(t) = self.table_of(i) else { return };
        let host = self.tables.get(t).is_ok_and(|table| {
            table
                .fib6
                .get(ip, 128)
                .is_some_and(|(_, source)| source == RouteSource::Host)
        });
        if host {
            self.unset_route6(t, ip, 128);
        }
    }

    /// Ages the learned IPv6 neighbours to `now` (see `neighbors`): the unicast solicitations
    /// due are handed to the data path (`ip6-nd-probe`), forgotten neighbours lose their host
    /// routes. Returns (solicitations handed over, neighbours forgotten); commit when any were
    /// forgotten.
    pub fn age_neighbors6(&mut self, now: Instant) -> (usize, usize) {
        let (probes, gone) = self.neighbors.age6(now);
        let sent = probes
            .into_iter()
            .filter(|&p| self.nd_probes.push(p).is_ok())
            .count();
        let forgotten = gone.len();
        for (i, ip) in gone {
            self.remove_neighbor6(i, ip);
        }
        (sent, forgotten)
    }

    /// Every IPv6 neighbour, with its state as of `now`.
    pub fn neighbors6(&self, now: Instant) -> Vec<Neighbor6> {
        self.neighbors.list6(now)
    }

    /// Every IPv6 route of the default table.
    pub fn routes6(&self) -> Vec<Route6Info> {
        self.tables.default_table().fib6.routes()
    }

    /// Number of IPv6 routes in every table.
    pub fn route_count6(&self) -> usize {
        self.tables.iter().map(|(_, t)| t.fib6.len()).sum()
    }
}
