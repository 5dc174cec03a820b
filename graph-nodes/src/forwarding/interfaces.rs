//! [`Interfaces`]: the interface table (ports, VLAN sub-interfaces, tunnels' sides), and the
//! [`Forwarding`] methods that add, change and remove interfaces.

use super::{Forwarding, ForwardingError};
use crate::index::{IfIndex, TableId};
use crate::state::{Interface, InterfaceKind, InterfaceMode, MAX_INTERFACES};
use crate::wire::Mac;

/// Interfaces by index; a removed one leaves its slot free for the next.
pub(super) struct Interfaces {
    slots: Vec<Option<Interface>>,
}

impl Interfaces {
    pub(super) fn new() -> Self {
        Interfaces { slots: Vec::new() }
    }

    /// Interface `i`.
    pub(super) fn get(&self, i: IfIndex) -> Result<&Interface, ForwardingError> {
        self.slots
            .get(i.as_usize())
            .and_then(Option::as_ref)
            .ok_or(ForwardingError::NoSuchInterface(i))
    }

    /// Interface `i`, to change.
    pub(super) fn get_mut(&mut self, i: IfIndex) -> Result<&mut Interface, ForwardingError> {
        self.slots
            .get_mut(i.as_usize())
            .and_then(Option::as_mut)
            .ok_or(ForwardingError::NoSuchInterface(i))
    }

    /// The interface called `name`.
    pub(super) fn by_name(&self, name: &str) -> Option<&Interface> {
        self.slots.iter().flatten().find(|i| i.name == name)
    }

    /// Every interface.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Interface> {
        self.slots.iter().flatten()
    }

    /// The slots, as the snapshot holds them.
    pub(super) fn slots(&self) -> &[Option<Interface>] {
        &self.slots
    }

    /// Slots in use or free (interface indices are below this).
    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Adds an interface; its index.
    fn add(
        &mut self,
        name: &str,
        mac: Mac,
        mtu: u16,
        mode: InterfaceMode,
        kind: InterfaceKind,
    ) -> Result<IfIndex, ForwardingError> {
        if self.by_name(name).is_some() {
            return Err(ForwardingError::NameTaken(name.into()));
        }
        let index = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.slots.len() < MAX_INTERFACES => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return Err(ForwardingError::TooManyInterfaces),
        };
        let index = IfIndex::new(index as u32);
        self.slots[index.as_usize()] = Some(Interface {
            index,
            name: name.into(),
            mac,
            mtu,
            mode,
            kind,
            addresses: Vec::new(),
            addresses6: Vec::new(),
            link_local: None,
            vlans: Vec::new(),
            table: TableId::DEFAULT,
            point_to_point: false,
            neighbours_from_kernel: false,
        });
        Ok(index)
    }

    /// Frees interface `i`'s slot.
    fn remove(&mut self, i: IfIndex) {
        if let Some(slot) = self.slots.get_mut(i.as_usize()) {
            *slot = None;
        }
    }
}

impl Forwarding {
    /// The interface called `name`.
    pub fn interface_by_name(&self, name: &str) -> Option<&Interface> {
        self.interfaces.by_name(name)
    }

    /// Every interface.
    pub fn interfaces(&self) -> impl Iterator<Item = &Interface> {
        self.interfaces.iter()
    }

    pub(super) fn add_interface(
        &mut self,
        name: &str,
        mac: Mac,
        mtu: u16,
        mode: InterfaceMode,
        kind: InterfaceKind,
    ) -> Result<IfIndex, ForwardingError> {
        let index = self.interfaces.add(name, mac, mtu, mode, kind)?;
        self.xconnect.make_room(self.interfaces.capacity());
        Ok(index)
    }

    /// Adds a port (its transmit queues are given to `interface-output` when graphs are built).
    pub fn add_port(&mut self, name: &str, mac: Mac, mtu: u16) -> Result<IfIndex, ForwardingError> {
        self.add_interface(name, mac, mtu, InterfaceMode::L3, InterfaceKind::Port)
    }

    /// Makes port `i` a point-to-point link (or not): every packet routed or L3
    /// cross-connected out of it goes to the peer at its far end without neighbour resolution,
    /// behind an Ethernet header to [`crate::state::POINT_TO_POINT_PEER_MAC`] that the port
    /// leaves out (an IP-mode memif port). A point-to-point port has no VLAN sub-interfaces.
    pub fn set_point_to_point(&mut self, i: IfIndex, on: bool) -> Result<(), ForwardingError> {
        let iface = self.interfaces.get_mut(i)?;
        if iface.kind != InterfaceKind::Port || (on && !iface.vlans.is_empty()) {
            return Err(ForwardingError::WrongMode(i));
        }
        iface.point_to_point = on;
        Ok(())
    }

    /// Makes port `i`'s neighbours the kernel's (or not): Quiver sends no ARP request and no
    /// neighbour solicitation on it ([`crate::state::Interface::neighbours_from_kernel`]).
    pub fn set_neighbours_from_kernel(
        &mut self,
        i: IfIndex,
        on: bool,
    ) -> Result<(), ForwardingError> {
        let iface = self.interfaces.get_mut(i)?;
        if iface.kind != InterfaceKind::Port {
            return Err(ForwardingError::WrongMode(i));
        }
        iface.neighbours_from_kernel = on;
        Ok(())
    }

    /// Sets interface `i`'s MTU: the largest IP packet it sends (routed packets over it are
    /// checked against it, and so are frames an L2 cross-connect sends to it, less their L2
    /// header). Its VLAN sub-interfaces follow it.
    pub fn set_mtu(&mut self, i: IfIndex, mtu: u16) -> Result<(), ForwardingError> {
        let vlans: Vec<IfIndex> = self
            .interfaces
            .get(i)?
            .vlans
            .iter()
            .map(|&(_, s)| s)
            .collect();
        self.interfaces.get_mut(i)?.mtu = mtu;
        for sub in vlans {
            self.interfaces.get_mut(sub)?.mtu = mtu;
        }
        Ok(())
    }

    /// Adds an 802.1Q sub-interface of `parent` for tag `vlan` (routed).
    pub fn add_vlan(
        &mut self,
        parent: IfIndex,
        vlan: u16,
        name: &str,
    ) -> Result<IfIndex, ForwardingError> {
        let p = self.interfaces.get(parent)?;
        if p.point_to_point {
            return Err(ForwardingError::WrongMode(parent));
        }
        let (mac, mtu) = (p.mac, p.mtu);
        let i = self.add_interface(
            name,
            mac,
            mtu,
            InterfaceMode::L3,
            InterfaceKind::Vlan {
                parent,
                vlan: vlan & 0xfff,
            },
        )?;
        self.interfaces
            .get_mut(parent)?
            .vlans
            .push((vlan & 0xfff, i));
        Ok(i)
    }

    /// Removes an interface and everything that refers to it: addresses of both families,
    /// every route through it, neighbours, cross-connects, its tunnel and sub-interfaces.
    pub fn remove_interface(&mut self, i: IfIndex) -> Result<(), ForwardingError> {
        let iface = self.interfaces.get(i)?.clone();
        for (a, l) in iface.addresses.clone() {
            self.remove_address(i, a, l)?;
        }
        for (a, l) in iface.addresses6.clone() {
            self.remove_address6(i, a, l)?;
        }
        for (_, sub) in iface.vlans.clone() {
            self.remove_interface(sub)?;
        }
        if let InterfaceKind::Vlan { parent, .. } = iface.kind {
            if let Ok(p) = self.interfaces.get_mut(parent) {
                p.vlans.retain(|&(_, s)| s != i);
            }
        }
        match iface.kind {
            InterfaceKind::Vxlan { tunnel } => self.vxlan.remove(tunnel),
            InterfaceKind::Vxlan6 { tunnel } => self.vxlan.remove6(tunnel),
            InterfaceKind::Wireguard { tunnel } => self.wireguard.remove(tunnel),
            InterfaceKind::Port | InterfaceKind::Vlan { .. } => {}
        }
        // Every route through the interface goes with it: its index may be given to a new
        // interface, which must not inherit them.
        self.unroute_interface(i);
        self.neighbors.forget_interface(i);
        self.disconnect(i);
        self.l3_disconnect(i);
        self.interfaces.remove(i);
        Ok(())
    }
}
