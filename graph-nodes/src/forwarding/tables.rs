//! [`Tables`]: the routing tables (VRFs). Each has its own IPv4 and IPv6 FIB; every interface
//! is in exactly one (the default table, [`TableId::DEFAULT`], unless moved), and its
//! connected, local and host routes go there. A lookup uses the table of the interface the
//! packet arrived on; what Quiver sends itself (tunnel underlays) is looked up in the default
//! table. No lookup crosses tables but by a next-table route (`next_table`).

use std::sync::Arc;

use super::fib::Fib;
use super::{FibConfig, Forwarding, ForwardingError, Route6Info, RouteInfo};
use crate::fib::lpm::Lpm;
use crate::fib::LpmTable;
use crate::fib6::{Lpm6, Lpm6Table};
use crate::index::{IfIndex, TableId};

/// The most tables (the default one included).
pub const MAX_TABLES: usize = 256;

/// The name of the default table.
pub const DEFAULT_TABLE_NAME: &str = "default";

/// One table: its name and its two FIBs.
pub(super) struct Table {
    pub(super) name: String,
    pub(super) fib4: Fib<Lpm>,
    pub(super) fib6: Fib<Lpm6>,
}

impl Table {
    fn new(name: &str, config: &FibConfig) -> Result<Table, ForwardingError> {
        Ok(Table {
            name: name.into(),
            fib4: Fib::new(Lpm::new(config.long_prefix_groups, config.hugepages)?),
            fib6: Fib::new(Lpm6::new(config.ipv6_node_bytes, config.hugepages)?),
        })
    }
}

/// The tables by number; a removed one's slot is free. Slot 0 always holds the default table.
pub(super) struct Tables {
    slots: Vec<Option<Table>>,
    /// How large a table other than the default one is.
    vrf_config: FibConfig,
    /// Grows with every table added or removed (by more than the removed table's route
    /// changes), so that [`Forwarding::route_generation`] never repeats a value.
    pub(super) changes: u64,
}

impl Tables {
    /// The default table sized by `config`; other tables get smaller FIBs (4096 IPv4 groups
    /// of long prefixes, 8 MiB of IPv6 nodes, at most `config`'s).
    pub(super) fn new(config: &FibConfig) -> Result<Tables, ForwardingError> {
        let vrf_config = FibConfig {
            long_prefix_groups: config.long_prefix_groups.min(4096),
            ipv6_node_bytes: config.ipv6_node_bytes.min(8 << 20),
            hugepages: config.hugepages,
        };
        Ok(Tables {
            slots: vec![Some(Table::new(DEFAULT_TABLE_NAME, config)?)],
            vrf_config,
            changes: 0,
        })
    }

    /// Table `t`.
    pub(super) fn get(&self, t: TableId) -> Result<&Table, ForwardingError> {
        self.slots
            .get(usize::from(t.0))
            .and_then(Option::as_ref)
            .ok_or(ForwardingError::NoSuchTable(t.0))
    }

    /// Table `t`, to change.
    pub(super) fn get_mut(&mut self, t: TableId) -> Result<&mut Table, ForwardingError> {
        self.slots
            .get_mut(usize::from(t.0))
            .and_then(Option::as_mut)
            .ok_or(ForwardingError::NoSuchTable(t.0))
    }

    /// The default table (always there).
    pub(super) fn default_table(&self) -> &Table {
        self.slots[0]
            .as_ref()
            .expect("the default table is never removed")
    }

    /// Every table with its number.
    pub(super) fn iter(&self) -> impl Iterator<Item = (TableId, &Table)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some((TableId(i as u16), t.as_ref()?)))
    }

    /// Every table, to change.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Table> {
        self.slots.iter_mut().flatten()
    }

    /// Whether any table besides the default one exists.
    pub(super) fn several(&self) -> bool {
        self.slots.iter().skip(1).any(Option::is_some)
    }

    /// The IPv4 tables workers read, by number (`None`: a free slot).
    pub(super) fn snapshot4(&self) -> Vec<Option<Arc<LpmTable>>> {
        self.slots
            .iter()
            .map(|t| t.as_ref().map(|t| t.fib4.table()))
            .collect()
    }

    /// The IPv6 tables workers read, by number.
    pub(super) fn snapshot6(&self) -> Vec<Option<Arc<Lpm6Table>>> {
        self.slots
            .iter()
            .map(|t| t.as_ref().map(|t| t.fib6.table()))
            .collect()
    }
}

impl Forwarding {
    /// Adds a table called `name`; its number. Names are unique (`default` is taken).
    pub fn add_table(&mut self, name: &str) -> Result<TableId, ForwardingError> {
        if name.is_empty() || self.table_by_name(name).is_some() {
            return Err(ForwardingError::TableNameTaken(name.into()));
        }
        let slots = &self.tables.slots;
        let at = match slots.iter().position(Option::is_none) {
            Some(at) => at,
            None if slots.len() < MAX_TABLES => slots.len(),
            None => return Err(ForwardingError::TooManyTables),
        };
        let table = Table::new(name, &self.tables.vrf_config)?;
        if at == slots.len() {
            self.tables.slots.push(Some(table));
        } else {
            self.tables.slots[at] = Some(table);
        }
        self.tables.changes += 1;
        Ok(TableId(at as u16))
    }

    /// Removes table `t`, which must hold no interface and be named by no next-table route
    /// (of another table); its routes go with it. The default table stays.
    pub fn remove_table(&mut self, t: TableId) -> Result<(), ForwardingError> {
        if t == TableId::DEFAULT {
            return Err(ForwardingError::TableInUse(DEFAULT_TABLE_NAME.into()));
        }
        let name = self.tables.get(t)?.name.clone();
        if self.interfaces.iter().any(|i| i.table == t) {
            return Err(ForwardingError::TableInUse(name));
        }
        if let Some(by) = self.next_table_user(t) {
            return Err(ForwardingError::TableTargeted { table: name, by });
        }
        let table = self.tables.slots[usize::from(t.0)]
            .take()
            .ok_or(ForwardingError::NoSuchTable(t.0))?;
        for r in table.fib4.routes() {
            self.objects.release_load_balance(r.load_balance);
        }
        for r in table.fib6.routes() {
            self.objects.release_load_balance(r.load_balance);
        }
        self.tables.changes += table.fib4.generation() + table.fib6.generation() + 1;
        // The table's memory goes when the last snapshot that holds it does.
        Ok(())
    }

    /// The number of the table called `name`.
    pub fn table_by_name(&self, name: &str) -> Option<TableId> {
        self.tables
            .iter()
            .find(|(_, t)| t.name == name)
            .map(|(id, _)| id)
    }

    /// Every table: number and name, in number order.
    pub fn tables(&self) -> Vec<(TableId, String)> {
        self.tables
            .iter()
            .map(|(id, t)| (id, t.name.clone()))
            .collect()
    }

    /// Moves interface `i` into table `t`. It must have no address yet (its connected and
    /// local routes would be in the table it leaves) and no route through it.
    pub fn set_interface_table(&mut self, i: IfIndex, t: TableId) -> Result<(), ForwardingError> {
        self.tables.get(t)?;
        let iface = self.interfaces.get_mut(i)?;
        if iface.table == t {
            return Ok(());
        }
        if !iface.addresses.is_empty() || !iface.addresses6.is_empty() {
            return Err(ForwardingError::HasAddresses(i));
        }
        // Routes through it are its table's: moved, they would send that table's packets
        // into another without a next-table route.
        let old = self.tables.get(iface.table)?;
        let uses = |lb| self.objects.uses_interface(lb, i);
        if !old.fib4.prefixes_using(uses).is_empty() || !old.fib6.prefixes_using(uses).is_empty() {
            return Err(ForwardingError::HasRoutes(i));
        }
        self.interfaces.get_mut(i)?.table = t;
        Ok(())
    }

    /// Table `t`'s IPv4 routes.
    pub fn routes_in(&self, t: TableId) -> Result<Vec<RouteInfo>, ForwardingError> {
        Ok(self.tables.get(t)?.fib4.routes())
    }

    /// Table `t`'s IPv6 routes.
    pub fn routes6_in(&self, t: TableId) -> Result<Vec<Route6Info>, ForwardingError> {
        Ok(self.tables.get(t)?.fib6.routes())
    }

    /// The table interface `i` is in.
    pub(super) fn table_of(&self, i: IfIndex) -> Result<TableId, ForwardingError> {
        Ok(self.interfaces.get(i)?.table)
    }
}
