//! Next-table routes: a route of one table whose packets are looked up again in another
//! (VRF route leaking: a tenant's default route into the default table, the default table's
//! route for the tenant's subnet back into the tenant's). `ip4-lookup` and `ip6-lookup` make
//! at most one such extra lookup per packet; a packet whose second lookup meets another
//! next-table route is dropped as `next-table-loop`.
//!
//! Checked when such a route is added (each family on its own), so that what is configured
//! never needs that drop: it names another table that exists, and for its whole prefix the
//! table it names does not send the packet on again (the route that table has for the
//! prefix is not a next-table route), nor does it become the route by which an existing
//! next-table route's packets would be sent on again. A later change of other routes (one
//! removed so that a next-table route covers more) is not checked: the data path's bound
//! holds. A table that next-table routes name cannot be removed until they are.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::fib::{Fib, LpmWriter};
use super::objects::AdjKey;
use super::tables::Table;
use super::{Forwarding, ForwardingError, RouteSource};
use crate::index::TableId;

impl Forwarding {
    /// Adds (or replaces) IPv4 route `prefix/len` of table `t` whose packets are looked up
    /// again in table `target`.
    pub fn add_next_table_route_in(
        &mut self,
        t: TableId,
        prefix: u32,
        len: u8,
        target: TableId,
    ) -> Result<(), ForwardingError> {
        if len > 32 {
            return Err(ForwardingError::BadPrefixLength(len));
        }
        self.check_next_table(
            t,
            prefix,
            len,
            target,
            |x| &x.fib4,
            |p| Ipv4Addr::from(p).to_string(),
        )?;
        let keys = [AdjKey::NextTable(target)];
        self.set_route(t, prefix, len, &keys, RouteSource::Static)
    }

    /// Adds (or replaces) IPv6 route `prefix/len` of table `t` whose packets are looked up
    /// again in table `target`.
    pub fn add_next_table_route6_in(
        &mut self,
        t: TableId,
        prefix: u128,
        len: u8,
        target: TableId,
    ) -> Result<(), ForwardingError> {
        if len > 128 {
            return Err(ForwardingError::BadPrefixLength(len));
        }
        self.check_next_table(
            t,
            prefix,
            len,
            target,
            |x| &x.fib6,
            |p| Ipv6Addr::from(p).to_string(),
        )?;
        let keys = [AdjKey::NextTable(target)];
        self.set_route6(t, prefix, len, &keys, RouteSource::Static)
    }

    /// The table a route's load-balance object `lb` looks packets up in again, when it is a
    /// next-table route's.
    pub fn load_balance_next_table(&self, lb: u32) -> Option<TableId> {
        self.objects.next_table_of(lb)
    }

    /// The name of a table with a next-table route (of either family) to table `t`, if any.
    pub(super) fn next_table_user(&self, t: TableId) -> Option<String> {
        let to_t = |lb| self.objects.next_table_of(lb) == Some(t);
        self.tables
            .iter()
            .find(|(_, x)| x.fib4.iter().any(|r| to_t(r.2)) || x.fib6.iter().any(|r| to_t(r.2)))
            .map(|(_, x)| x.name.clone())
    }

    /// Whether route `prefix/len` of table `t` may send its packets to table `target` (see
    /// the module's rules), in the family `fib` picks.
    fn check_next_table<L: LpmWriter>(
        &self,
        t: TableId,
        prefix: L::Addr,
        len: u8,
        target: TableId,
        fib: impl Fn(&Table) -> &Fib<L>,
        show: impl Fn(L::Addr) -> String,
    ) -> Result<(), ForwardingError> {
        let from = self.tables.get(t)?;
        let to = self.tables.get(target)?;
        if t == target {
            return Err(ForwardingError::NextTableSelf(from.name.clone()));
        }
        let refused = |why: String| ForwardingError::NextTableChain {
            route: format!(
                "route {}/{len} of table `{}` to table `{}`",
                show(Fib::<L>::masked(prefix, len)),
                from.name,
                to.name
            ),
            why,
        };
        let name = |x: TableId| self.tables.get(x).map_or(String::new(), |x| x.name.clone());
        // What the target does with the prefix.
        if let Some((l, lb)) = fib(to).covering(prefix, len) {
            if let Some(next) = self.objects.next_table_of(lb) {
                let shown = format!("{}/{l}", show(Fib::<L>::masked(prefix, l)));
                return Err(refused(if next == t {
                    format!(
                        "`{}`'s route {shown} leads back to `{}` (a loop)",
                        to.name, from.name
                    )
                } else {
                    format!(
                        "`{}`'s route {shown} leads on to `{}` (a packet crosses at most one \
                         table)",
                        to.name,
                        name(next)
                    )
                }));
            }
        }
        // Next-table routes into `t` whose packets this route would send on.
        let within = |p: L::Addr, l: u8| {
            l >= len && Fib::<L>::masked(p, len) == Fib::<L>::masked(prefix, len)
        };
        for (x, table) in self.tables.iter() {
            for (p, l, lb) in fib(table).iter() {
                if self.objects.next_table_of(lb) != Some(t) || !within(p, l) {
                    continue;
                }
                // Taken unless `t` holds a longer route for that prefix.
                if fib(from).covering(p, l).is_some_and(|(cl, _)| cl > len) {
                    continue;
                }
                let shown = format!("{}/{l}", show(p));
                return Err(refused(if x == target {
                    format!(
                        "`{}`'s route {shown} leads to `{}`, which would send it back (a loop)",
                        table.name, from.name
                    )
                } else {
                    format!(
                        "`{}`'s route {shown} leads to `{}`, which would send it on (a packet \
                         crosses at most one table)",
                        table.name, from.name
                    )
                }));
            }
        }
        Ok(())
    }
}
