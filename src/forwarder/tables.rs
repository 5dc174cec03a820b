//! Routing tables (VRFs) on the [`Forwarder`]: named tables, each with its own IPv4 and IPv6
//! routes; every interface is in one (`default` unless moved), and a packet is routed by the
//! table of the interface it arrived on. What Quiver sends itself (tunnel underlays) uses the
//! default table.

use graph_nodes::forwarding::DEFAULT_TABLE_NAME;
use graph_nodes::TableId;

use super::{Forwarder, ForwarderError};

impl Forwarder {
    /// Adds table `name` (1 to 64 characters, no spaces).
    pub fn add_table(&mut self, name: &str) -> Result<(), ForwarderError> {
        if name.is_empty() || name.len() > 64 || name.chars().any(char::is_whitespace) {
            return Err(ForwarderError::InvalidArgument(format!(
                "table name {name:?}: 1 to 64 characters, no spaces"
            )));
        }
        if self.forwarding.table_by_name(name).is_some() {
            return Err(ForwarderError::AlreadyExists(format!(
                "a table named `{name}` exists"
            )));
        }
        self.forwarding.add_table(name)?;
        self.commit()
    }

    /// Removes table `name` and its routes; no interface may be in it, no next-table route of
    /// another table may name it, and `default` stays.
    pub fn remove_table(&mut self, name: &str) -> Result<(), ForwarderError> {
        let t = self.table(name)?;
        let inside = self.interfaces_in(t);
        if t == TableId::DEFAULT || !inside.is_empty() {
            return Err(ForwarderError::InvalidArgument(format!(
                "table {name} cannot be removed: {}",
                if t == TableId::DEFAULT {
                    "it is the default table".to_string()
                } else {
                    format!(
                        "{} {} in it",
                        inside.join(", "),
                        if inside.len() == 1 { "is" } else { "are" }
                    )
                }
            )));
        }
        self.forwarding.remove_table(t)?;
        self.commit()
    }

    /// Moves interface `interface` into table `table`; it must have no address yet.
    pub fn set_interface_table(
        &mut self,
        interface: &str,
        table: &str,
    ) -> Result<(), ForwarderError> {
        let i = self.interface(interface)?;
        let t = self.table(table)?;
        let has_addresses = self
            .forwarding
            .interfaces()
            .any(|x| x.index == i && (!x.addresses.is_empty() || !x.addresses6.is_empty()));
        if has_addresses {
            return Err(ForwarderError::InvalidArgument(format!(
                "{interface} has addresses: remove them before moving it to table {table}"
            )));
        }
        self.forwarding.set_interface_table(i, t)?;
        self.commit()
    }

    /// Every table: its name and the interfaces in it, in table order.
    pub fn tables(&self) -> Vec<(String, Vec<String>)> {
        self.forwarding
            .tables()
            .into_iter()
            .map(|(t, name)| (name, self.interfaces_in(t)))
            .collect()
    }

    /// The table called `name`.
    pub(super) fn table(&self, name: &str) -> Result<TableId, ForwarderError> {
        self.forwarding
            .table_by_name(name)
            .ok_or_else(|| ForwarderError::NotFound(format!("no table named `{name}`")))
    }

    /// The names of the interfaces in table `t`.
    fn interfaces_in(&self, t: TableId) -> Vec<String> {
        self.forwarding
            .interfaces()
            .filter(|i| i.table == t)
            .map(|i| i.name.clone())
            .collect()
    }
}

/// The default table's name, as `quiver.toml` and `quiver ctl` write it.
pub const DEFAULT_TABLE: &str = DEFAULT_TABLE_NAME;
