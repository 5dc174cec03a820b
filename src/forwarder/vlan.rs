//! 802.1Q sub-interfaces at run time (NSM's VLAN mechanism: the VLAN on a host NIC toward an
//! external network).
//!
//! A sub-interface has no port of its own: frames tagged with its VLAN that its parent port
//! receives are its own, and what it sends leaves by the parent's queue with its tag. Routed
//! (its own addresses), or cross-connected like any other interface: then `ethernet-input`
//! pops the tag of what it receives and `l2-xconnect` pushes it on what it sends.

use graph_nodes::state::InterfaceKind;

use super::*;

impl Forwarder {
    /// Adds sub-interface `name` of port `parent` for VLAN `vlan` (1 to 4094), its MTU the
    /// parent's; returns its interface. On error nothing is left.
    pub fn add_vlan(
        &mut self,
        name: &str,
        parent: &str,
        vlan: u16,
        owner: Option<&str>,
    ) -> Result<IfIndex, ForwarderError> {
        if name.is_empty() || name.len() > 64 || name.chars().any(char::is_whitespace) {
            return Err(ForwarderError::InvalidArgument(format!(
                "sub-interface name {name:?}: 1 to 64 characters, no spaces"
            )));
        }
        if !(1..=4094).contains(&vlan) {
            return Err(ForwarderError::InvalidArgument(format!(
                "sub-interface {name}: VLAN {vlan} is not 1 to 4094"
            )));
        }
        if self.interface(name).is_ok() {
            return Err(ForwarderError::AlreadyExists(format!(
                "an interface named `{name}` exists"
            )));
        }
        let port = self
            .port(parent)
            .map(|e| e.interface)
            .ok_or_else(|| ForwarderError::NotFound(format!("no port named `{parent}`")))?;
        if let Some(taken) = self.vlans_of(port).find(|(v, _)| *v == vlan) {
            return Err(ForwarderError::AlreadyExists(format!(
                "port {parent} has a sub-interface for VLAN {vlan} already: {}",
                taken.1
            )));
        }
        let interface = self.forwarding.add_vlan(port, vlan, name)?;
        if let Err(e) = self.commit() {
            // Nothing refers to the new interface yet: removing it cannot fail.
            let _ = self.forwarding.remove_interface(interface);
            return Err(e);
        }
        self.record(owner, Owned::Vlan(name.into()));
        Ok(interface)
    }

    /// Removes sub-interface `name` and its cross-connect.
    pub fn remove_vlan(&mut self, name: &str) -> Result<(), ForwarderError> {
        let interface = self
            .vlan_interface(name)
            .ok_or_else(|| ForwarderError::NotFound(format!("no sub-interface named `{name}`")))?;
        self.forwarding.remove_interface(interface)?;
        self.commit()?;
        self.forget(|o| !o.uses_port(name));
        Ok(())
    }

    /// Whether `name` is a VLAN sub-interface.
    pub fn is_vlan(&self, name: &str) -> bool {
        self.vlan_interface(name).is_some()
    }

    /// The VLAN sub-interface called `name`, if there is one.
    pub(super) fn vlan_interface(&self, name: &str) -> Option<IfIndex> {
        let i = self.forwarding.interface_by_name(name)?;
        matches!(i.kind, InterfaceKind::Vlan { .. }).then_some(i.index)
    }

    /// Port `port`'s sub-interfaces: (VLAN, name).
    fn vlans_of(&self, port: IfIndex) -> impl Iterator<Item = (u16, &str)> + '_ {
        self.forwarding
            .interfaces()
            .filter_map(move |i| match i.kind {
                InterfaceKind::Vlan { parent, vlan } if parent == port => {
                    Some((vlan, i.name.as_str()))
                }
                _ => None,
            })
    }
}
