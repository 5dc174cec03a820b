//! [`Objects`]: the adjacencies and load-balance objects routes and cross-connects share,
//! interned by what they are so that equal ones are one object, reference-counted so that the
//! last user frees it (reusable only once a commit is past it; see `interned`).

use super::interned::Interned;
use crate::index::{AdjIndex, IfIndex, TableId};

/// What an adjacency is: the key it is interned by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum AdjKey {
    /// An IPv4 next hop on an interface (resolved by ARP).
    Neighbor(IfIndex, u32),
    /// An IPv6 next hop on an interface (resolved by neighbour discovery).
    Neighbor6(IfIndex, u128),
    /// An IPv4 connected subnet: each packet's destination is its next hop.
    Glean(IfIndex),
    /// An IPv6 connected subnet.
    Glean6(IfIndex),
    /// One of our addresses (either family: the lookup node knows which local node).
    Local,
    /// A blackhole.
    Drop,
    /// Look the packet up again in this table (a next-table route).
    NextTable(TableId),
}

impl AdjKey {
    /// The interface it sends through, if it sends.
    pub(super) fn interface(self) -> Option<IfIndex> {
        match self {
            AdjKey::Neighbor(i, _)
            | AdjKey::Neighbor6(i, _)
            | AdjKey::Glean(i)
            | AdjKey::Glean6(i) => Some(i),
            AdjKey::Local | AdjKey::Drop | AdjKey::NextTable(_) => None,
        }
    }
}

/// Adjacencies and the load-balance objects (sets of adjacencies, for ECMP) made of them.
pub(super) struct Objects {
    pub(super) adjacencies: Interned<AdjKey, AdjIndex>,
    pub(super) load_balances: Interned<Vec<AdjIndex>>,
}

impl Objects {
    pub(super) fn new() -> Self {
        Objects {
            adjacencies: Interned::new(),
            load_balances: Interned::new(),
        }
    }

    /// Takes a reference to the adjacency `key` is (making it).
    pub(super) fn adjacency(&mut self, key: AdjKey) -> AdjIndex {
        self.adjacencies.acquire(key).0
    }

    /// Drops a reference to adjacency `a`.
    pub(super) fn release_adjacency(&mut self, a: AdjIndex) {
        self.adjacencies.release(a);
    }

    /// Takes a reference to the load-balance object over the adjacencies `keys` are (making
    /// them).
    pub(super) fn load_balance(&mut self, keys: &[AdjKey]) -> u32 {
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

    /// Drops a reference to load-balance object `lb` (and, with its last, to its adjacencies).
    pub(super) fn release_load_balance(&mut self, lb: u32) {
        if let Some(adjs) = self.load_balances.release(lb) {
            for a in adjs {
                self.adjacencies.release(a);
            }
        }
    }

    /// The key of adjacency `a`, while it exists.
    pub(super) fn key(&self, a: AdjIndex) -> Option<AdjKey> {
        self.adjacencies.keys.get(a.as_usize()).copied().flatten()
    }

    /// The interfaces load-balance object `lb` sends through, in path order.
    pub(super) fn interfaces_of(&self, lb: u32) -> Vec<IfIndex> {
        let Some(Some(adjs)) = self.load_balances.keys.get(lb as usize) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for &a in adjs.iter() {
            if let Some(x) = self.key(a).and_then(AdjKey::interface) {
                if !out.contains(&x) {
                    out.push(x);
                }
            }
        }
        out
    }

    /// The table load-balance object `lb` looks packets up in again, if it is a next-table
    /// route's.
    pub(super) fn next_table_of(&self, lb: u32) -> Option<TableId> {
        match self.load_balances.keys.get(lb as usize)?.as_deref()? {
            [a] => match self.key(*a)? {
                AdjKey::NextTable(t) => Some(t),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether load-balance object `lb` sends through interface `i`.
    pub(super) fn uses_interface(&self, lb: u32, i: IfIndex) -> bool {
        self.load_balances
            .keys
            .get(lb as usize)
            .and_then(Option::as_ref)
            .is_some_and(|adjs| {
                adjs.iter()
                    .any(|&a| self.key(a).and_then(AdjKey::interface) == Some(i))
            })
    }

    /// Makes what the last commit freed reusable (every reader is past it).
    pub(super) fn recycle(&mut self) {
        self.adjacencies.recycle();
        self.load_balances.recycle();
    }

    /// Adjacencies and load-balance objects in use.
    pub(super) fn counts(&self) -> (usize, usize) {
        (self.adjacencies.live(), self.load_balances.live())
    }
}
