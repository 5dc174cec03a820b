//! [`Fib`]: one address family's routes and the longest-prefix-match table workers read, with
//! the writes staged until the commit ([`super::commit`]). The same code serves IPv4 (over
//! [`crate::fib::lpm::Lpm`]) and IPv6 (over [`crate::fib6::Lpm6`]) through [`LpmWriter`].

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use super::{ForwardingError, RouteSource};
use crate::fib::lpm::Lpm;
use crate::fib::LpmTable;
use crate::fib6::{Lpm6, Lpm6Table};

/// What a family's longest-prefix-match writer offers the FIB: the same contract for both
/// (changes visible to readers with atomic stores, memory reused after `recycle_retired`).
pub(crate) trait LpmWriter {
    /// An address of the family (its bits in a word, most significant first).
    type Addr: Copy + Eq + Hash + Ord + std::fmt::Debug;
    /// The table workers read.
    type Table;
    /// The mask of a prefix length.
    fn mask(len: u8) -> Self::Addr;
    /// `addr & mask`.
    fn and(addr: Self::Addr, mask: Self::Addr) -> Self::Addr;
    /// Adds or replaces a route.
    fn insert(&mut self, prefix: Self::Addr, len: u8, value: u32) -> Result<(), ForwardingError>;
    /// Removes a route.
    fn remove(&mut self, prefix: Self::Addr, len: u8);
    /// Records changes without showing them, until [`LpmWriter::flush`].
    fn defer_updates(&mut self);
    /// Shows what was recorded.
    fn flush(&mut self) -> Result<(), ForwardingError>;
    /// Reuses what earlier changes unlinked (every reader has moved on).
    fn recycle_retired(&mut self);
    /// The table workers read.
    fn table(&self) -> Arc<Self::Table>;
}

impl LpmWriter for Lpm {
    type Addr = u32;
    type Table = LpmTable;
    fn mask(len: u8) -> u32 {
        crate::fib::lpm::mask(len)
    }
    fn and(addr: u32, mask: u32) -> u32 {
        addr & mask
    }
    fn insert(&mut self, prefix: u32, len: u8, value: u32) -> Result<(), ForwardingError> {
        Lpm::insert(self, prefix, len, value).map_err(ForwardingError::from)
    }
    fn remove(&mut self, prefix: u32, len: u8) {
        Lpm::remove(self, prefix, len);
    }
    fn defer_updates(&mut self) {
        Lpm::defer_updates(self);
    }
    fn flush(&mut self) -> Result<(), ForwardingError> {
        Lpm::flush(self).map_err(ForwardingError::from)
    }
    fn recycle_retired(&mut self) {
        Lpm::recycle_retired(self);
    }
    fn table(&self) -> Arc<LpmTable> {
        Lpm::table(self).clone()
    }
}

impl LpmWriter for Lpm6 {
    type Addr = u128;
    type Table = Lpm6Table;
    fn mask(len: u8) -> u128 {
        crate::fib6::mask(len)
    }
    fn and(addr: u128, mask: u128) -> u128 {
        addr & mask
    }
    fn insert(&mut self, prefix: u128, len: u8, value: u32) -> Result<(), ForwardingError> {
        Lpm6::insert(self, prefix, len, value).map_err(ForwardingError::from)
    }
    fn remove(&mut self, prefix: u128, len: u8) {
        Lpm6::remove(self, prefix, len);
    }
    fn defer_updates(&mut self) {
        Lpm6::defer_updates(self);
    }
    fn flush(&mut self) -> Result<(), ForwardingError> {
        Lpm6::flush(self).map_err(ForwardingError::from)
    }
    fn recycle_retired(&mut self) {
        Lpm6::recycle_retired(self);
    }
    fn table(&self) -> Arc<Lpm6Table> {
        Lpm6::table(self).clone()
    }
}

/// A route of one family as the control side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route<A> {
    /// The prefix (masked).
    pub prefix: A,
    /// Its length.
    pub len: u8,
    /// Where it came from.
    pub source: RouteSource,
    /// The load-balance object it uses.
    pub load_balance: u32,
}

/// One family's routes: each prefix's load-balance object and source, the writer of the table
/// workers read, and the table writes the next commit makes.
pub(crate) struct Fib<L: LpmWriter> {
    lpm: L,
    routes: HashMap<(L::Addr, u8), (u32, RouteSource)>,
    /// Changes to `routes` so far, so readers can tell when a copy of the list is stale.
    changes: u64,
    /// Table writes staged for the commit: `Some(lb)` to set, `None` to remove.
    pending: Vec<(L::Addr, u8, Option<u32>)>,
}

impl<L: LpmWriter> Fib<L> {
    pub(crate) fn new(lpm: L) -> Self {
        Fib {
            lpm,
            routes: HashMap::new(),
            changes: 0,
            pending: Vec::new(),
        }
    }

    /// `prefix` masked to `len` bits.
    pub(crate) fn masked(prefix: L::Addr, len: u8) -> L::Addr {
        L::and(prefix, L::mask(len))
    }

    /// Sets `prefix/len` to load-balance object `lb` from `source`; returns the object it
    /// replaced (for the caller to release).
    pub(crate) fn set(
        &mut self,
        prefix: L::Addr,
        len: u8,
        lb: u32,
        source: RouteSource,
    ) -> Option<u32> {
        let prefix = Self::masked(prefix, len);
        self.changes += 1;
        self.pending.push((prefix, len, Some(lb)));
        self.routes
            .insert((prefix, len), (lb, source))
            .map(|(old, _)| old)
    }

    /// Removes `prefix/len`; returns its object (for the caller to release), `None` when there
    /// was no such route.
    pub(crate) fn unset(&mut self, prefix: L::Addr, len: u8) -> Option<u32> {
        let prefix = Self::masked(prefix, len);
        self.changes += 1;
        let (lb, _) = self.routes.remove(&(prefix, len))?;
        self.pending.push((prefix, len, None));
        Some(lb)
    }

    /// The route for exactly `prefix/len`: its object and source.
    pub(crate) fn get(&self, prefix: L::Addr, len: u8) -> Option<(u32, RouteSource)> {
        self.routes.get(&(Self::masked(prefix, len), len)).copied()
    }

    /// The longest route that holds the whole of `prefix/len` (`prefix/len` itself
    /// included): its length and object. What every address of the prefix takes unless a
    /// longer route holds it.
    pub(crate) fn covering(&self, prefix: L::Addr, len: u8) -> Option<(u8, u32)> {
        (0..=len)
            .rev()
            .find_map(|l| self.get(prefix, l).map(|(lb, _)| (l, lb)))
    }

    /// Every route, unsorted: prefix, length, object.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (L::Addr, u8, u32)> + '_ {
        self.routes.iter().map(|(&(p, l), &(lb, _))| (p, l, lb))
    }

    /// Every route, sorted by prefix.
    pub(crate) fn routes(&self) -> Vec<Route<L::Addr>> {
        let mut v: Vec<_> = self
            .routes
            .iter()
            .map(|(&(prefix, len), &(load_balance, source))| Route {
                prefix,
                len,
                source,
                load_balance,
            })
            .collect();
        v.sort_by_key(|r| (r.prefix, r.len));
        v
    }

    /// The prefixes whose object `uses` says yes to.
    pub(crate) fn prefixes_using(&self, uses: impl Fn(u32) -> bool) -> Vec<(L::Addr, u8)> {
        self.routes
            .iter()
            .filter(|(_, (lb, _))| uses(*lb))
            .map(|(k, _)| *k)
            .collect()
    }

    /// A number that changes whenever the route list may have.
    pub(crate) fn generation(&self) -> u64 {
        self.changes
    }

    /// Number of routes.
    pub(crate) fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether a commit has table writes to make.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The table workers read.
    pub(crate) fn table(&self) -> Arc<L::Table> {
        self.lpm.table()
    }

    /// Makes the staged table writes (each changed part of the table written once, at the
    /// flush). A route the table cannot hold is withdrawn, its object returned in `withdrawn`
    /// for the caller to release; the first failure is returned.
    pub(crate) fn write_pending(
        &mut self,
        withdrawn: &mut Vec<u32>,
    ) -> (Option<ForwardingError>, Result<(), ForwardingError>) {
        let mut failed = None;
        self.lpm.defer_updates();
        for (prefix, len, lb) in std::mem::take(&mut self.pending) {
            match lb {
                Some(lb) => {
                    if let Err(e) = self.lpm.insert(prefix, len, lb) {
                        failed.get_or_insert(e);
                        // Withdraw the route entirely: the table may still hold the route it
                        // replaced, whose objects were released.
                        self.lpm.remove(prefix, len);
                        self.changes += 1;
                        if let Some((lb, _)) = self.routes.remove(&(prefix, len)) {
                            withdrawn.push(lb);
                        }
                    }
                }
                None => self.lpm.remove(prefix, len),
            }
        }
        (failed, self.lpm.flush())
    }

    /// Flushes again what the last [`Fib::write_pending`] could not (after a recycle).
    pub(crate) fn flush(&mut self) -> Result<(), ForwardingError> {
        self.lpm.flush()
    }

    /// Reuses what earlier changes unlinked (every reader has moved on).
    pub(crate) fn recycle_retired(&mut self) {
        self.lpm.recycle_retired();
    }
}
