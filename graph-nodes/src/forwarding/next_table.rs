//! Next-table routes: a route of one table whose packets are looked up again in another
//! (VRF route leaking: a tenant's default route into the default table, the default table's
//! route for the tenant's subnet back into the tenant's). `ip4-lookup` and `ip6-lookup` make
//! at most one such extra lookup per packet; a packet whose second lookup meets another
//! next-table route is dropped as `next-table-loop`.
//!
//! Checked when such a route is added (each family on its own), so that what is configured
//! never needs that drop: it names another table that exists, and no packet it sends there
//! meets a next-table route of that table (on to a third table, or back: a loop), nor does
//! it send on what an existing next-table route sends into its own table. Two next-table
//! routes, A's `p` into B and B's `q`, make such a chain when their prefixes overlap and, for
//! the more specific of the two, `p` is the longest of A's routes that holds it whole and
//! `q` the longest of B's (so a tenant's default route into the default table and the
//! default table's route for the tenant's connected subnet back are no chain: the tenant's
//! connected route holds that subnet). A later change of other routes (a route removed so
//! that a next-table route takes more) is not checked: the data path's bound holds. A table
//! that next-table routes name cannot be removed until they are.

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
        let next_table_routes = |table: &Table| {
            fib(table)
                .iter()
                .filter_map(|(p, l, lb)| Some((p, l, self.objects.next_table_of(lb)?)))
                .collect::<Vec<_>>()
        };
        // Where the target sends on what this route sends it.
        for (q, ql, next) in next_table_routes(to) {
            if chain(fib(from), (prefix, len), fib(to), (q, ql), true) {
                let shown = format!("{}/{ql}", show(q));
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
        for (x, table) in self.tables.iter() {
            for (p, l, next) in next_table_routes(table) {
                if next != t || !chain(fib(table), (p, l), fib(from), (prefix, len), false) {
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

/// Whether some packet that table `a`'s next-table route `p` sends to table `b` meets `b`'s
/// next-table route `q` there: the prefixes overlap, and for the more specific of them, `r`,
/// `p` is the longest of `a`'s routes that hold all of `r` and `q` the longest of `b`'s (a
/// longer route holding part of `r` only leaves the rest to `p` or `q`). The new route, `p`
/// when `new_first` else `q`, is not in its table yet.
fn chain<L: LpmWriter>(
    a: &Fib<L>,
    (p, pl): (L::Addr, u8),
    b: &Fib<L>,
    (q, ql): (L::Addr, u8),
    new_first: bool,
) -> bool {
    let shorter = pl.min(ql);
    if Fib::<L>::masked(p, shorter) != Fib::<L>::masked(q, shorter) {
        return false;
    }
    let r = if pl >= ql { (p, pl) } else { (q, ql) };
    // Whether `len` is the longest route of `fib` holding all of `r` (`new`: no longer one).
    let longest = |fib: &Fib<L>, len: u8, new: bool| match fib.covering(r.0, r.1) {
        Some((l, _)) if new => l <= len,
        Some((l, _)) => l == len,
        None => new,
    };
    longest(a, pl, new_first) && longest(b, ql, !new_first)
}
