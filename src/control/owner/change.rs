//! [`Change`]: every change to the running configuration, as a value. The admin API, NSM and
//! tests build one, [`super::Control::apply`] hands it to the owner, and the owner applies it
//! with [`Change::apply`] — the only place a client's change meets the [`Forwarder`].

use std::net::IpAddr;

use graph_nodes::IfIndex;

use crate::capture::{CaptureInfo, CaptureRequest};
use crate::config::{PortSection, WireguardSection};
use crate::forwarder::{Forwarder, ForwarderError, L3Peer};

/// One change to the running configuration. `owner`: the connection id (NSM's) that owns what
/// is made, so that [`Change::RemoveOwned`] takes it all away.
#[derive(Debug, Clone)]
pub enum Change {
    /// Open a port and attach it to every worker ([`Applied::Interface`]).
    AddPort {
        /// The port.
        port: PortSection,
        /// Its owner.
        owner: Option<String>,
    },
    /// Remove a port, a VXLAN or a WireGuard tunnel or a VLAN sub-interface by name.
    RemoveInterface {
        /// Its name.
        name: String,
    },
    /// L2 cross-connect two ports both ways.
    CrossConnect {
        /// One port.
        a: String,
        /// The other.
        b: String,
        /// Its owner.
        owner: Option<String>,
    },
    /// L3 cross-connect two ports (see [`Forwarder::l3_cross_connect`]).
    L3CrossConnect {
        /// One port.
        a: String,
        /// The other.
        b: String,
        /// Where packets received on `a` go, out of `b` (a next hop per family).
        peer_b: L3Peer,
        /// Where packets received on `b` go, out of `a`.
        peer_a: L3Peer,
        /// Its owner.
        owner: Option<String>,
    },
    /// Remove the L2 or L3 cross-connect of a port (both ways).
    Disconnect {
        /// The port.
        port: String,
    },
    /// Add (or replace) a route of either family through `via` (next hop, port) paths.
    AddRoute {
        /// Destination.
        prefix: IpAddr,
        /// Prefix length.
        len: u8,
        /// Paths (ECMP when several).
        via: Vec<(IpAddr, String)>,
        /// Its owner.
        owner: Option<String>,
    },
    /// Remove a route.
    RemoveRoute {
        /// Destination.
        prefix: IpAddr,
        /// Prefix length.
        len: u8,
    },
    /// Add (or replace) a route of a named table (a VRF's), owned by no one.
    AddRouteIn {
        /// The table.
        table: String,
        /// Destination.
        prefix: IpAddr,
        /// Prefix length.
        len: u8,
        /// Paths (ECMP when several; none: drop), through ports of the table.
        via: Vec<(IpAddr, String)>,
    },
    /// Add (or replace) a next-table route of a table: its packets are looked up again in
    /// `next_table`.
    AddNextTableRoute {
        /// The table (`default` for the default table).
        table: String,
        /// Destination.
        prefix: IpAddr,
        /// Prefix length.
        len: u8,
        /// The table its packets are looked up in again.
        next_table: String,
    },
    /// Remove a route of a named table.
    RemoveRouteIn {
        /// The table.
        table: String,
        /// Destination.
        prefix: IpAddr,
        /// Prefix length.
        len: u8,
    },
    /// Add a routing table (a VRF).
    AddTable {
        /// Its name.
        name: String,
    },
    /// Remove a routing table that no interface is in, with its routes.
    RemoveTable {
        /// Its name.
        name: String,
    },
    /// Move an interface (without addresses) into a table.
    SetInterfaceTable {
        /// The interface.
        interface: String,
        /// The table.
        table: String,
    },
    /// Add a static neighbour (ARP's, or neighbour discovery's).
    AddNeighbor {
        /// The port.
        port: String,
        /// Its address.
        ip: IpAddr,
        /// Its MAC.
        mac: [u8; 6],
        /// Its owner.
        owner: Option<String>,
    },
    /// Remove a neighbour.
    RemoveNeighbor {
        /// The port.
        port: String,
        /// Its address.
        ip: IpAddr,
    },
    /// Add an address to a port.
    AddAddress {
        /// The port.
        port: String,
        /// The address.
        ip: IpAddr,
        /// Its prefix length.
        len: u8,
        /// Its owner.
        owner: Option<String>,
    },
    /// Remove an address from a port.
    RemoveAddress {
        /// The port.
        port: String,
        /// The address.
        ip: IpAddr,
        /// Its prefix length.
        len: u8,
    },
    /// Add a VXLAN tunnel ([`Applied::Interface`]).
    AddVxlanTunnel {
        /// Its interface name.
        name: String,
        /// Source address (one of Quiver's).
        local: IpAddr,
        /// Destination address (of `local`'s family).
        remote: IpAddr,
        /// VXLAN network identifier.
        vni: u32,
        /// Destination UDP port.
        dst_port: u16,
        /// Its owner.
        owner: Option<String>,
    },
    /// The UDP port VXLAN is received on.
    SetVxlanPort(u16),
    /// Add a VLAN sub-interface of a port ([`Applied::Interface`]).
    AddVlan {
        /// Its interface name.
        name: String,
        /// The port it is a sub-interface of.
        parent: String,
        /// Its VLAN (1 to 4094).
        vlan: u16,
        /// Its owner.
        owner: Option<String>,
    },
    /// Add a WireGuard tunnel ([`Applied::Interface`]).
    AddWireguard {
        /// The tunnel, as `[[wireguard]]` gives it.
        tunnel: WireguardSection,
        /// Its owner.
        owner: Option<String>,
    },
    /// Remove a WireGuard tunnel by name.
    RemoveWireguard {
        /// Its name.
        name: String,
    },
    /// Start a handshake with every peer of a WireGuard tunnel now: a rekey on demand.
    RekeyWireguard {
        /// The tunnel's name.
        name: String,
    },
    /// Remove everything an owner made, newest first ([`Applied::Removed`]).
    RemoveOwned {
        /// The owner.
        owner: String,
    },
    /// Start capturing a port ([`Applied::Capture`]).
    CaptureStart(CaptureRequest),
    /// Stop capturing a port ([`Applied::Capture`]).
    CaptureStop {
        /// The port.
        interface: String,
    },
    /// Several changes in order, none from another client in between; stops at the first
    /// that fails (those before it stay, owned as they were).
    All(Vec<Change>),
}

/// What an applied [`Change`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Done; nothing to report.
    Done,
    /// The new interface.
    Interface(IfIndex),
    /// How many objects were removed.
    Removed(usize),
    /// The capture.
    Capture(CaptureInfo),
    /// What each change of [`Change::All`] made.
    All(Vec<Applied>),
}

impl Change {
    /// Applies the change; on error nothing of it is left (for [`Change::All`]: of the change
    /// that failed).
    pub fn apply(self, f: &mut Forwarder) -> Result<Applied, ForwarderError> {
        let interface = |r: Result<IfIndex, ForwarderError>| r.map(Applied::Interface);
        match self {
            Change::AddPort { port, owner } => interface(f.add_port(&port, owner.as_deref())),
            Change::RemoveInterface { name } => done(remove_interface(f, &name)),
            Change::CrossConnect { a, b, owner } => done(f.cross_connect(&a, &b, owner.as_deref())),
            Change::L3CrossConnect {
                a,
                b,
                peer_b,
                peer_a,
                owner,
            } => done(f.l3_cross_connect(&a, &b, peer_b, peer_a, owner.as_deref())),
            Change::Disconnect { port } => done(f.disconnect(&port)),
            Change::AddRoute {
                prefix,
                len,
                via,
                owner,
            } => {
                let via: Vec<(IpAddr, &str)> =
                    via.iter().map(|(ip, port)| (*ip, port.as_str())).collect();
                done(f.add_route(prefix, len, &via, owner.as_deref()))
            }
            Change::RemoveRoute { prefix, len } => done(f.remove_route(prefix, len)),
            Change::AddRouteIn {
                table,
                prefix,
                len,
                via,
            } => {
                let via: Vec<(IpAddr, &str)> =
                    via.iter().map(|(ip, port)| (*ip, port.as_str())).collect();
                done(f.add_route_in(&table, prefix, len, &via))
            }
            Change::AddNextTableRoute {
                table,
                prefix,
                len,
                next_table,
            } => done(f.add_next_table_route(&table, prefix, len, &next_table)),
            Change::RemoveRouteIn { table, prefix, len } => {
                done(f.remove_route_in(&table, prefix, len))
            }
            Change::AddTable { name } => done(f.add_table(&name)),
            Change::RemoveTable { name } => done(f.remove_table(&name)),
            Change::SetInterfaceTable { interface, table } => {
                done(f.set_interface_table(&interface, &table))
            }
            Change::AddNeighbor {
                port,
                ip,
                mac,
                owner,
            } => done(f.add_neighbor(&port, ip, mac, owner.as_deref())),
            Change::RemoveNeighbor { port, ip } => done(f.remove_neighbor(&port, ip)),
            Change::AddAddress {
                port,
                ip,
                len,
                owner,
            } => done(f.add_address(&port, ip, len, owner.as_deref())),
            Change::RemoveAddress { port, ip, len } => done(f.remove_address(&port, ip, len)),
            Change::AddVxlanTunnel {
                name,
                local,
                remote,
                vni,
                dst_port,
                owner,
            } => {
                interface(f.add_vxlan_tunnel(&name, local, remote, vni, dst_port, owner.as_deref()))
            }
            Change::SetVxlanPort(port) => done(f.set_vxlan_port(port)),
            Change::AddVlan {
                name,
                parent,
                vlan,
                owner,
            } => interface(f.add_vlan(&name, &parent, vlan, owner.as_deref())),
            Change::AddWireguard { tunnel, owner } => {
                interface(f.add_wireguard(&tunnel, owner.as_deref()))
            }
            Change::RemoveWireguard { name } => done(f.remove_wireguard(&name)),
            Change::RekeyWireguard { name } => done(f.rekey_wireguard(&name)),
            Change::RemoveOwned { owner } => f.remove_owned(&owner).map(Applied::Removed),
            Change::CaptureStart(request) => f.capture_start(request).map(Applied::Capture),
            Change::CaptureStop { interface } => f.capture_stop(&interface).map(Applied::Capture),
            Change::All(changes) => {
                let mut applied = Vec::with_capacity(changes.len());
                for c in changes {
                    applied.push(c.apply(f)?);
                }
                Ok(Applied::All(applied))
            }
        }
    }
}

/// A change that made nothing to report (what the call returns is not): [`Applied::Done`].
fn done<T>(r: Result<T, ForwarderError>) -> Result<Applied, ForwarderError> {
    r.map(|_| Applied::Done)
}

/// Removes a port, a VXLAN or a WireGuard tunnel or a VLAN sub-interface by name.
fn remove_interface(f: &mut Forwarder, name: &str) -> Result<(), ForwarderError> {
    if f.is_vlan(name) {
        f.remove_vlan(name)
    } else if f.tunnels().iter().any(|t| t.name == name) {
        f.remove_vxlan_tunnel(name)
    } else if f.wireguard_status().iter().any(|t| t.name == name) {
        f.remove_wireguard(name)
    } else {
        f.remove_port(name)
    }
}
