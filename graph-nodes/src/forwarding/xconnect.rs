//! [`CrossConnects`]: L2 cross-connects (every frame from one interface leaves by the other)
//! and L3 ones (every IP packet from one leaves by the other toward its peer), and the
//! [`Forwarding`] methods that make and remove them.

use std::collections::HashMap;

use super::objects::AdjKey;
use super::{Forwarding, ForwardingError};
use crate::index::{AdjIndex, IfIndex};
use crate::state::{InterfaceKind, InterfaceMode};

/// The cross-connects, both ways of each.
pub(super) struct CrossConnects {
    /// L2: `l2[rx] = tx` ([`IfIndex::NONE`]: none), one slot per interface index.
    pub(super) l2: Vec<IfIndex>,
    /// L3: receiving interface → (sending interface, next hop, adjacency held).
    pub(super) l3: HashMap<IfIndex, (IfIndex, u32, AdjIndex)>,
}

impl CrossConnects {
    pub(super) fn new() -> Self {
        CrossConnects {
            l2: Vec::new(),
            l3: HashMap::new(),
        }
    }

    /// Gives every interface index below `interfaces` a slot.
    pub(super) fn make_room(&mut self, interfaces: usize) {
        if self.l2.len() < interfaces {
            self.l2.resize(interfaces, IfIndex::NONE);
        }
    }
}

impl Forwarding {
    /// Puts two interfaces in L2 mode and cross-connects them both ways.
    pub fn cross_connect(&mut self, a: IfIndex, b: IfIndex) -> Result<(), ForwardingError> {
        self.interfaces.get(a)?;
        self.interfaces.get(b)?;
        self.interfaces.get_mut(a)?.mode = InterfaceMode::L2;
        self.interfaces.get_mut(b)?.mode = InterfaceMode::L2;
        self.xconnect.l2[a.as_usize()] = b;
        self.xconnect.l2[b.as_usize()] = a;
        Ok(())
    }

    /// Removes the cross-connect of `a` (both ways). Ports go back to L3 mode.
    pub fn disconnect(&mut self, a: IfIndex) {
        if let Some(&b) = self.xconnect.l2.get(a.as_usize()) {
            if !b.is_none() {
                self.xconnect.l2[b.as_usize()] = IfIndex::NONE;
                self.back_to_l3(b);
            }
            self.xconnect.l2[a.as_usize()] = IfIndex::NONE;
        }
        self.back_to_l3(a);
    }

    /// A port (not a tunnel's or a sub-interface's side) goes back to routing.
    fn back_to_l3(&mut self, i: IfIndex) {
        if let Ok(iface) = self.interfaces.get_mut(i) {
            if iface.kind == InterfaceKind::Port {
                iface.mode = InterfaceMode::L3;
            }
        }
    }

    /// L3 cross-connects two routed ports: every IPv4 packet received on `a` leaves by `b`
    /// toward `next_hop_b` (B's peer), and every one received on `b` by `a` toward `next_hop_a`,
    /// TTL decremented, whatever their destinations (after `ip4-input`'s checks); IPv6 goes the
    /// same way (`ip6-l3xc`). The next hops' MACs come from neighbours (configured, or learned
    /// by ARP when the interface has an address in the next hop's subnet). ARP and packets for
    /// our own addresses still work on both. Replaces an L3 cross-connect either had.
    pub fn l3_cross_connect(
        &mut self,
        a: IfIndex,
        b: IfIndex,
        next_hop_b: u32,
        next_hop_a: u32,
    ) -> Result<(), ForwardingError> {
        for i in [a, b] {
            let iface = self.interfaces.get(i)?;
            let kind_ok = matches!(
                iface.kind,
                InterfaceKind::Port | InterfaceKind::Wireguard { .. }
            );
            if iface.mode != InterfaceMode::L3 || !kind_ok {
                return Err(ForwardingError::WrongMode(i));
            }
        }
        self.l3_disconnect(a);
        self.l3_disconnect(b);
        for (rx, tx, nh) in [(a, b, next_hop_b), (b, a, next_hop_a)] {
            let adj = self.objects.adjacency(AdjKey::Neighbor(tx, nh));
            self.xconnect.l3.insert(rx, (tx, nh, adj));
        }
        Ok(())
    }

    /// Removes the L3 cross-connect of `a` (both ways); `false` when it had none.
    pub fn l3_disconnect(&mut self, a: IfIndex) -> bool {
        let Some((b, _, adj)) = self.xconnect.l3.remove(&a) else {
            return false;
        };
        self.objects.release_adjacency(adj);
        if let Some((_, _, back)) = self.xconnect.l3.remove(&b) {
            self.objects.release_adjacency(back);
        }
        true
    }

    /// The L3 cross-connect of `a`: (the interface its packets leave by, the next hop).
    pub fn l3_cross_connect_of(&self, a: IfIndex) -> Option<(IfIndex, u32)> {
        self.xconnect.l3.get(&a).map(|&(b, nh, _)| (b, nh))
    }

    /// The cross-connect peer of `a`.
    pub fn cross_connect_of(&self, a: IfIndex) -> Option<IfIndex> {
        self.xconnect
            .l2
            .get(a.as_usize())
            .copied()
            .filter(|&b| !b.is_none())
    }
}
