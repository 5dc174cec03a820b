//! L2 and L3 cross-connects.

use super::*;

impl Forwarding {
    /// Puts two interfaces in L2 mode and cross-connects them both ways.
    pub fn cross_connect(&mut self, a: IfIndex, b: IfIndex) -> Result<(), ForwardingError> {
        self.iface(a)?;
        self.iface(b)?;
        self.iface_mut(a)?.mode = InterfaceMode::L2;
        self.iface_mut(b)?.mode = InterfaceMode::L2;
        self.xconnect[a.as_usize()] = b;
        self.xconnect[b.as_usize()] = a;
        Ok(())
    }

    /// Removes the cross-connect of `a` (both ways). Ports go back to L3 mode.
    pub fn disconnect(&mut self, a: IfIndex) {
        if let Some(&b) = self.xconnect.get(a.as_usize()) {
            if !b.is_none() {
                self.xconnect[b.as_usize()] = IfIndex::NONE;
                if let Some(Some(i)) = self.interfaces.get_mut(b.as_usize()) {
                    if i.kind == InterfaceKind::Port {
                        i.mode = InterfaceMode::L3;
                    }
                }
            }
            self.xconnect[a.as_usize()] = IfIndex::NONE;
        }
        if let Some(Some(i)) = self.interfaces.get_mut(a.as_usize()) {
            if i.kind == InterfaceKind::Port {
                i.mode = InterfaceMode::L3;
            }
        }
    }

    /// L3 cross-connects two routed ports: every IPv4 packet received on `a` leaves by `b`
    /// toward `next_hop_b` (B's peer), and every one received on `b` by `a` toward `next_hop_a`,
    /// TTL decremented, whatever their destinations (after `ip4-input`'s checks). The next
    /// hops' MACs come from neighbours (configured, or learned by ARP when the interface has
    /// an address in the next hop's subnet). ARP and packets for our own addresses still work
    /// on both. Replaces an L3 cross-connect either had.
    pub fn l3_cross_connect(
        &mut self,
        a: IfIndex,
        b: IfIndex,
        next_hop_b: u32,
        next_hop_a: u32,
    ) -> Result<(), ForwardingError> {
        for i in [a, b] {
            let iface = self.iface(i)?;
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
            let (adj, _) = self.adjacencies.acquire(AdjKey::Neighbor(tx, nh));
            self.l3xconnect.insert(rx, (tx, nh, adj));
        }
        Ok(())
    }

    /// Removes the L3 cross-connect of `a` (both ways); `false` when it had none.
    pub fn l3_disconnect(&mut self, a: IfIndex) -> bool {
        let Some((b, _, adj)) = self.l3xconnect.remove(&a) else {
            return false;
        };
        self.adjacencies.release(adj);
        if let Some((_, _, back)) = self.l3xconnect.remove(&b) {
            self.adjacencies.release(back);
        }
        true
    }

    /// The L3 cross-connect of `a`: (the interface its packets leave by, the next hop).
    pub fn l3_cross_connect_of(&self, a: IfIndex) -> Option<(IfIndex, u32)> {
        self.l3xconnect.get(&a).map(|&(b, nh, _)| (b, nh))
    }

    /// The cross-connect peer of `a`.
    pub fn cross_connect_of(&self, a: IfIndex) -> Option<IfIndex> {
        self.xconnect
            .get(a.as_usize())
            .copied()
            .filter(|&b| !b.is_none())
    }
}
