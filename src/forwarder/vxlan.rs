//! VXLAN tunnels at run time (NSM's VXLAN mechanism toward a forwarder on another node).
//!
//! A tunnel is an L2 interface with no port of its own: a frame sent to it leaves through
//! `vxlan4-encap` inside IPv4/UDP/VXLAN (or `vxlan6-encap`, IPv6/UDP/VXLAN, when the addresses
//! are IPv6) from one of Quiver's addresses to the remote VTEP, and
//! is routed like any packet Quiver originates (so the remote must be reachable: a connected
//! subnet or a route on an uplink port). A VXLAN packet arriving for that address from the
//! remote with the tunnel's VNI comes out of the tunnel decapsulated. Cross-connect it to a
//! port like any other interface.

use super::*;

impl Forwarder {
    /// Adds a VXLAN tunnel `name` from `local` (an address of one of Quiver's interfaces) to
    /// `remote` (of the same family) with `vni`, sending to UDP port `dst_port`; returns its
    /// interface. When this returns the data path encapsulates and decapsulates for it. On
    /// error nothing is left.
    pub fn add_vxlan_tunnel(
        &mut self,
        name: &str,
        local: IpAddr,
        remote: IpAddr,
        vni: u32,
        dst_port: u16,
        owner: Option<&str>,
    ) -> Result<IfIndex, ForwarderError> {
        if name.is_empty() || name.len() > 64 || name.chars().any(char::is_whitespace) {
            return Err(ForwarderError::InvalidArgument(format!(
                "tunnel name {name:?}: 1 to 64 characters, no spaces"
            )));
        }
        if self.interface(name).is_ok() {
            return Err(ForwarderError::AlreadyExists(format!(
                "an interface named `{name}` exists"
            )));
        }
        if !self.is_own_address(local) {
            return Err(ForwarderError::InvalidArgument(format!(
                "tunnel {name}: {local} is not an address of Quiver's (add it to an uplink port first)"
            )));
        }
        let unicast = match remote {
            IpAddr::V4(r) => !(r.is_unspecified() || r.is_multicast() || r.is_broadcast()),
            IpAddr::V6(r) => !(r.is_unspecified() || r.is_multicast()),
        };
        if !unicast {
            return Err(ForwarderError::InvalidArgument(format!(
                "tunnel {name}: {remote} cannot be a remote VTEP"
            )));
        }
        if dst_port == 0 {
            return Err(ForwarderError::InvalidArgument(format!(
                "tunnel {name}: UDP port 0"
            )));
        }
        let interface = match (local, remote) {
            (IpAddr::V4(l), IpAddr::V4(r)) => {
                self.forwarding
                    .add_vxlan_tunnel(name, u32::from(l), u32::from(r), vni, dst_port)?
            }
            (IpAddr::V6(l), IpAddr::V6(r)) => self.forwarding.add_vxlan6_tunnel(
                name,
                u128::from(l),
                u128::from(r),
                vni,
                dst_port,
            )?,
            _ => {
                return Err(ForwarderError::InvalidArgument(format!(
                    "tunnel {name}: {local} and {remote} are not of one family"
                )))
            }
        };
        if let Err(e) = self.commit() {
            // Nothing refers to the new interface yet: removing it cannot fail.
            let _ = self.forwarding.remove_interface(interface);
            return Err(e);
        }
        self.tunnels.push(TunnelEntry {
            name: name.into(),
            interface,
            local,
            remote,
            vni,
            dst_port,
        });
        self.record(owner, Owned::Tunnel(name.into()));
        Ok(interface)
    }

    /// Removes tunnel `name` and its cross-connect.
    pub fn remove_vxlan_tunnel(&mut self, name: &str) -> Result<(), ForwarderError> {
        let at = self
            .tunnels
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| ForwarderError::NotFound(format!("no tunnel named `{name}`")))?;
        let interface = self.tunnels[at].interface;
        self.forwarding.remove_interface(interface)?;
        self.commit()?;
        self.tunnels.remove(at);
        self.forget(|o| !o.uses_port(name));
        Ok(())
    }

    /// The tunnels, in creation order.
    pub fn tunnels(&self) -> &[TunnelEntry] {
        &self.tunnels
    }

    /// Sets the UDP port VXLAN is received on (default 4789).
    pub fn set_vxlan_port(&mut self, port: u16) -> Result<(), ForwarderError> {
        if port == 0 {
            return Err(ForwarderError::InvalidArgument(
                "VXLAN on UDP port 0".into(),
            ));
        }
        self.forwarding.set_vxlan_port(port);
        self.commit()
    }
}

impl Forwarder {
    /// Whether `ip` is an address of one of Quiver's interfaces.
    pub fn is_own_address(&self, ip: IpAddr) -> bool {
        self.forwarding.interfaces().any(|i| has_address(i, ip))
    }

    /// The IPv4 address of the interface the default route (0.0.0.0/0) leaves by, if there is
    /// one with an address: NSM's tunnel address when `NSM_TUNNEL_IP` is not set.
    pub fn default_route_address(&self) -> Option<Ipv4Addr> {
        let route = self.forwarding.routes().into_iter().find(|r| r.len == 0)?;
        let via = self.forwarding.load_balance_interfaces(route.load_balance);
        via.iter().find_map(|&i| {
            let iface = self.forwarding.interfaces().find(|x| x.index == i)?;
            iface.addresses.first().map(|&(a, _)| Ipv4Addr::from(a))
        })
    }

    /// Whether the default table has a default route of IPv6 (`v6`) or IPv4.
    pub fn has_default_route(&self, v6: bool) -> bool {
        if v6 {
            self.forwarding.routes6().iter().any(|r| r.len == 0)
        } else {
            self.forwarding.routes().iter().any(|r| r.len == 0)
        }
    }
}

/// Whether `ip` is one of interface `i`'s addresses (its link-local one too).
pub(crate) fn has_address(i: &graph_nodes::state::Interface, ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => i.addresses.iter().any(|&(x, _)| x == u32::from(a)),
        IpAddr::V6(a) => i.has_address6(u128::from(a)),
    }
}
