//! Routes, neighbours and addresses of both families on the [`Forwarder`]: each checked,
//! staged in the forwarding state, committed, and recorded for its owner; and the aging of
//! IPv6 neighbours that housekeeping runs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use graph_nodes::forwarding::Path6;
use graph_nodes::Path;
use graph_nodes::TableId;

use super::{Forwarder, ForwarderError, Owned, StartError, DEFAULT_TABLE};
use crate::config::Config;

/// How often housekeeping ages the learned IPv6 neighbours.
pub(super) const ND_AGING_EVERY: Duration = Duration::from_millis(500);

/// `prefix` masked to `len` bits (the form routes are recorded in); an invalid argument when
/// `len` is longer than the family's addresses.
fn masked(prefix: IpAddr, len: u8) -> Result<IpAddr, ForwarderError> {
    match prefix {
        IpAddr::V4(p) if len <= 32 => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            Ok(IpAddr::V4(Ipv4Addr::from(u32::from(p) & m)))
        }
        IpAddr::V6(p) if len <= 128 => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            Ok(IpAddr::V6(Ipv6Addr::from(u128::from(p) & m)))
        }
        IpAddr::V4(_) => Err(ForwarderError::InvalidArgument(format!(
            "prefix length {len} is over 32"
        ))),
        IpAddr::V6(_) => Err(ForwarderError::InvalidArgument(format!(
            "prefix length {len} is over 128"
        ))),
    }
}

impl Forwarder {
    /// Adds (or replaces) a route of the default table to `prefix/len` over `via` (next hop,
    /// port) pairs — ECMP when several, a blackhole when none. Next hops are of the prefix's
    /// family (an IPv6 one may be link-local: it names a router on the port).
    pub fn add_route(
        &mut self,
        prefix: IpAddr,
        len: u8,
        via: &[(IpAddr, &str)],
        owner: Option<&str>,
    ) -> Result<(), ForwarderError> {
        let recorded = masked(prefix, len)?;
        self.stage_route(TableId::DEFAULT, prefix, len, via)?;
        self.commit()?;
        self.record(owner, Owned::Route(recorded, len));
        Ok(())
    }

    /// Adds (or replaces) a route of table `table` (see [`Forwarder::add_route`]); its
    /// next hops are on ports of that table.
    pub fn add_route_in(
        &mut self,
        table: &str,
        prefix: IpAddr,
        len: u8,
        via: &[(IpAddr, &str)],
    ) -> Result<(), ForwarderError> {
        masked(prefix, len)?;
        let t = self.table(table)?;
        self.stage_route(t, prefix, len, via)?;
        self.commit()
    }

    /// Adds (or replaces) a next-table route to `prefix/len` of table `table`: its packets
    /// are looked up again in table `next_table`, another one. Refused, nothing changed, when
    /// it would make a packet cross tables twice (a loop or a chain; see
    /// `graph_nodes::forwarding`'s `next_table`).
    pub fn add_next_table_route(
        &mut self,
        table: &str,
        prefix: IpAddr,
        len: u8,
        next_table: &str,
    ) -> Result<(), ForwarderError> {
        masked(prefix, len)?;
        let t = self.table(table)?;
        let target = self.table(next_table)?;
        match prefix {
            IpAddr::V4(p) => {
                self.forwarding
                    .add_next_table_route_in(t, u32::from(p), len, target)?
            }
            IpAddr::V6(p) => {
                self.forwarding
                    .add_next_table_route6_in(t, u128::from(p), len, target)?
            }
        }
        self.commit()
    }

    /// Adds `cfg`'s next-table routes, after every other route (each is checked against the
    /// routes of the table it names).
    pub(super) fn configure_next_table_routes(&mut self, cfg: &Config) -> Result<(), StartError> {
        let topology = cfg.topology()?;
        for r in &topology.routes {
            let Some(next) = r.next_table else { continue };
            let table = r.table.unwrap_or(DEFAULT_TABLE);
            self.add_next_table_route(table, r.prefix, r.len, next)
                .map_err(|source| StartError::NextTableRoute {
                    prefix: r.section.prefix.clone(),
                    source,
                })?;
        }
        Ok(())
    }

    /// Stages route `prefix/len` of table `t` over `via` (a blackhole when empty).
    fn stage_route(
        &mut self,
        t: TableId,
        prefix: IpAddr,
        len: u8,
        via: &[(IpAddr, &str)],
    ) -> Result<(), ForwarderError> {
        for &(_, port) in via {
            // An unknown port is refused below, with the rest of the path's checks.
            let Ok(i) = self.interface(port) else {
                continue;
            };
            let in_t = self
                .forwarding
                .interfaces()
                .any(|x| x.index == i && x.table == t);
            if !in_t {
                return Err(ForwarderError::InvalidArgument(format!(
                    "{port} is in another table than the route {prefix}/{len}"
                )));
            }
        }
        match prefix {
            IpAddr::V4(p) => {
                let paths = via
                    .iter()
                    .map(|&(nh, port)| match nh {
                        IpAddr::V4(nh) => Ok(Path {
                            next_hop: u32::from(nh),
                            interface: self.interface(port)?,
                        }),
                        IpAddr::V6(nh) => Err(ForwarderError::InvalidArgument(format!(
                            "next hop {nh} is IPv6, the prefix {p}/{len} IPv4"
                        ))),
                    })
                    .collect::<Result<Vec<Path>, ForwarderError>>()?;
                if paths.is_empty() {
                    self.forwarding.add_drop_route_in(t, u32::from(p), len)?;
                } else {
                    self.forwarding.add_route_in(t, u32::from(p), len, &paths)?;
                }
            }
            IpAddr::V6(p) => {
                let paths = via
                    .iter()
                    .map(|&(nh, port)| match nh {
                        IpAddr::V6(nh) => Ok(Path6 {
                            next_hop: u128::from(nh),
                            interface: self.interface(port)?,
                        }),
                        IpAddr::V4(nh) => Err(ForwarderError::InvalidArgument(format!(
                            "next hop {nh} is IPv4, the prefix {p}/{len} IPv6"
                        ))),
                    })
                    .collect::<Result<Vec<Path6>, ForwarderError>>()?;
                if paths.is_empty() {
                    self.forwarding.add_drop_route6_in(t, u128::from(p), len)?;
                } else {
                    self.forwarding
                        .add_route6_in(t, u128::from(p), len, &paths)?;
                }
            }
        }
        Ok(())
    }

    /// Removes the route to `prefix/len` of the default table.
    pub fn remove_route(&mut self, prefix: IpAddr, len: u8) -> Result<(), ForwarderError> {
        let recorded = masked(prefix, len)?;
        self.unstage_route(TableId::DEFAULT, prefix, len)?;
        self.commit()?;
        self.forget(|o| *o != Owned::Route(recorded, len));
        Ok(())
    }

    /// Removes the route to `prefix/len` of table `table`.
    pub fn remove_route_in(
        &mut self,
        table: &str,
        prefix: IpAddr,
        len: u8,
    ) -> Result<(), ForwarderError> {
        masked(prefix, len)?;
        let t = self.table(table)?;
        self.unstage_route(t, prefix, len)?;
        self.commit()
    }

    /// Stages the removal of route `prefix/len` of table `t`; not found when there is none.
    fn unstage_route(&mut self, t: TableId, prefix: IpAddr, len: u8) -> Result<(), ForwarderError> {
        let removed = match prefix {
            IpAddr::V4(p) => self.forwarding.remove_route_in(t, u32::from(p), len),
            IpAddr::V6(p) => self.forwarding.remove_route6_in(t, u128::from(p), len),
        };
        if !removed {
            return Err(ForwarderError::NotFound(format!("no route {prefix}/{len}")));
        }
        Ok(())
    }

    /// Records that `ip` is at `mac` on `port` (a static ARP or neighbour discovery entry).
    pub fn add_neighbor(
        &mut self,
        port: &str,
        ip: IpAddr,
        mac: [u8; 6],
        owner: Option<&str>,
    ) -> Result<(), ForwarderError> {
        let i = self.interface(port)?;
        match ip {
            IpAddr::V4(a) => self.forwarding.add_neighbor(i, u32::from(a), mac)?,
            IpAddr::V6(a) => self.forwarding.add_neighbor6(i, u128::from(a), mac)?,
        }
        self.commit()?;
        self.record(owner, Owned::Neighbor(port.into(), ip));
        Ok(())
    }

    /// Forgets the neighbour `ip` on `port`.
    pub fn remove_neighbor(&mut self, port: &str, ip: IpAddr) -> Result<(), ForwarderError> {
        let i = self.interface(port)?;
        let known = match ip {
            IpAddr::V4(a) => self
                .forwarding
                .neighbors()
                .iter()
                .any(|&(x, n, _)| x == i && n == u32::from(a)),
            IpAddr::V6(a) => self
                .forwarding
                .neighbors6(Instant::now())
                .iter()
                .any(|n| n.interface == i && n.ip == u128::from(a)),
        };
        if !known {
            return Err(ForwarderError::NotFound(format!(
                "no neighbour {ip} on {port}"
            )));
        }
        match ip {
            IpAddr::V4(a) => self.forwarding.remove_neighbor(i, u32::from(a)),
            IpAddr::V6(a) => self.forwarding.remove_neighbor6(i, u128::from(a)),
        }
        self.commit()?;
        self.forget(|o| *o != Owned::Neighbor(port.into(), ip));
        Ok(())
    }

    /// Adds an address of ours, `ip/len`, on `port`: it answers ARP or neighbour discovery,
    /// and ping, and its subnet is connected. The first IPv6 address gives the port its
    /// link-local address too.
    pub fn add_address(
        &mut self,
        port: &str,
        ip: IpAddr,
        len: u8,
        owner: Option<&str>,
    ) -> Result<(), ForwarderError> {
        masked(ip, len)?;
        let i = self.interface(port)?;
        match ip {
            IpAddr::V4(a) => self.forwarding.add_address(i, u32::from(a), len)?,
            IpAddr::V6(a) => self.forwarding.add_address6(i, u128::from(a), len)?,
        }
        self.commit()?;
        self.record(owner, Owned::Address(port.into(), ip, len));
        Ok(())
    }

    /// Removes the address `ip/len` from `port`.
    pub fn remove_address(
        &mut self,
        port: &str,
        ip: IpAddr,
        len: u8,
    ) -> Result<(), ForwarderError> {
        let i = self.interface(port)?;
        let has = self.forwarding.interfaces().any(|x| {
            x.index == i
                && match ip {
                    IpAddr::V4(a) => x.addresses.contains(&(u32::from(a), len)),
                    IpAddr::V6(a) => x.addresses6.contains(&(u128::from(a), len)),
                }
        });
        if !has {
            return Err(ForwarderError::NotFound(format!(
                "no address {ip}/{len} on {port}"
            )));
        }
        match ip {
            IpAddr::V4(a) => self.forwarding.remove_address(i, u32::from(a), len)?,
            IpAddr::V6(a) => self.forwarding.remove_address6(i, u128::from(a), len)?,
        }
        self.commit()?;
        self.forget(|o| *o != Owned::Address(port.into(), ip, len));
        Ok(())
    }

    /// Ages the learned IPv6 neighbours, at most every [`ND_AGING_EVERY`]: stale ones get a
    /// unicast solicitation from the data path, those that never answer go. Whether anything
    /// changed that needs a commit.
    pub(super) fn age_neighbors(&mut self, now: Instant) -> bool {
        if now < self.next_nd_aging {
            return false;
        }
        self.next_nd_aging = now + ND_AGING_EVERY;
        let (_, forgotten) = self.forwarding.age_neighbors6(now);
        forgotten > 0
    }

    /// Every route of both families, as recorded for owners (prefix, length).
    pub(super) fn route_keys(&self) -> Vec<(IpAddr, u8)> {
        let v4 = self
            .forwarding
            .routes()
            .into_iter()
            .map(|r| (IpAddr::V4(Ipv4Addr::from(r.prefix)), r.len));
        let v6 = self
            .forwarding
            .routes6()
            .into_iter()
            .map(|r| (IpAddr::V6(Ipv6Addr::from(r.prefix)), r.len));
        v4.chain(v6).collect()
    }
}
