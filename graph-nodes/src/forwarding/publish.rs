//! Publishing: what the data path learned comes in, snapshots and FIB updates go out (see the
//! module docs of `forwarding` for the order).

use super::*;
use crate::wire::ethernet;

/// Where commits go: a running data plane, or a [`LocalState`] for graphs driven by hand.
pub trait Publisher {
    /// Makes `state` the one workers read from their next loop pass.
    fn publish(&self, state: ForwardingState);
    /// Returns once every worker has started a loop pass since the call.
    fn synchronize(&self);
}

impl Publisher for Dataplane<ForwardingState> {
    fn publish(&self, state: ForwardingState) {
        Dataplane::publish(self, state);
    }
    fn synchronize(&self) {
        Dataplane::synchronize(self);
    }
}

/// The latest snapshot, for a graph that a test or benchmark runs on its own thread.
#[derive(Default)]
pub struct LocalState {
    current: Mutex<Option<Arc<ForwardingState>>>,
}

impl LocalState {
    /// The latest published state.
    ///
    /// # Panics
    /// If nothing has been published yet.
    pub fn current(&self) -> Arc<ForwardingState> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .expect("nothing published yet")
    }
}

impl Publisher for LocalState {
    fn publish(&self, state: ForwardingState) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(state));
    }
    fn synchronize(&self) {}
}

impl Forwarding {
    /// Applies what the data path reported (neighbours learned from ARP); returns how many
    /// events there were. Commit afterwards.
    pub fn take_events(&mut self) -> usize {
        let mut n = 0;
        while let Some(e) = self.events.pop() {
            n += 1;
            match e {
                DataplaneEvent::NeighborLearned { interface, ip, mac } => {
                    let learnable = self
                        .iface(interface)
                        .is_ok_and(|i| i.address_for(ip).is_some());
                    if learnable && self.neighbors.get(&(interface, ip)) != Some(&mac) {
                        let _ = self.add_neighbor(interface, ip, mac);
                    }
                }
            }
        }
        n
    }

    pub(super) fn adjacency(&self, key: Option<&AdjKey>) -> Adjacency {
        let Some(key) = key else {
            return Adjacency::DROP;
        };
        let (kind, tx, next_hop) = match *key {
            AdjKey::Drop => return Adjacency::DROP,
            AdjKey::Local => {
                return Adjacency {
                    kind: AdjacencyKind::Local,
                    ..Adjacency::DROP
                }
            }
            AdjKey::Glean(i) => (AdjacencyKind::Glean, i, 0),
            AdjKey::Neighbor(i, ip) => match self.neighbors.get(&(i, ip)) {
                Some(_) => (AdjacencyKind::Rewrite, i, ip),
                None => (AdjacencyKind::Arp, i, ip),
            },
        };
        let Ok(iface) = self.iface(tx) else {
            return Adjacency::DROP;
        };
        if let InterfaceKind::Wireguard { .. } = iface.kind {
            // IP payload: no neighbour, no L2 header; the tunnel picks the peer.
            return Adjacency {
                kind: AdjacencyKind::Rewrite,
                tx,
                mtu: iface.mtu,
                next_hop,
                header: [0; 18],
                header_len: 0,
            };
        }
        let mut header = [0u8; 18];
        let mut header_len = wire::ETHERNET_HEADER as u8;
        if iface.point_to_point {
            // The peer is the far end of the link: nothing to resolve, and the port leaves
            // the Ethernet header out.
            if let Ok(len) = ethernet::write_header(
                &mut header,
                &POINT_TO_POINT_PEER_MAC,
                &iface.mac,
                None,
                wire::ETHERTYPE_IP4,
            ) {
                header_len = len as u8;
            }
            return Adjacency {
                kind: AdjacencyKind::Rewrite,
                tx,
                mtu: iface.mtu,
                next_hop,
                header,
                header_len,
            };
        }
        if kind == AdjacencyKind::Rewrite {
            let mac = self.neighbors[&(tx, next_hop)];
            let tci = match iface.kind {
                InterfaceKind::Vlan { vlan, .. } => Some(vlan),
                _ => None,
            };
            // 18 bytes hold a tagged header: this does not fail.
            if let Ok(len) =
                ethernet::write_header(&mut header, &mac, &iface.mac, tci, wire::ETHERTYPE_IP4)
            {
                header_len = len as u8;
            }
        }
        Adjacency {
            kind,
            tx,
            mtu: iface.mtu,
            next_hop,
            header,
            header_len,
        }
    }

    /// The state as it would be published now.
    pub fn snapshot(&self) -> ForwardingState {
        let mut tunnel_by_key = FastMap::default();
        for (i, t) in self.tunnels.iter().enumerate() {
            if let Some(t) = t {
                // Received packets come from the far end to us.
                tunnel_by_key.insert((t.dst, t.src, t.vni), i as u32);
            }
        }
        let tx_class = self
            .interfaces
            .iter()
            .map(|i| match i.as_ref().map(|i| (i.index, i.kind)) {
                Some((i, InterfaceKind::Port)) => TxClass::port(i),
                Some((_, InterfaceKind::Vlan { parent, .. })) => TxClass::vlan(parent),
                Some((_, InterfaceKind::Vxlan { tunnel })) => TxClass::vxlan(tunnel),
                Some((_, InterfaceKind::Wireguard { tunnel })) => TxClass::wireguard(tunnel),
                None => TxClass::NONE,
            })
            .collect();
        let load_balances: Vec<LoadBalance> = self
            .load_balances
            .keys
            .iter()
            .map(|k| LoadBalance {
                // A recycled slot: no FIB entry points here; make any use of it a drop.
                buckets: k
                    .clone()
                    .unwrap_or_else(|| vec![AdjIndex::NONE])
                    .into_boxed_slice(),
            })
            .collect();
        let adjacencies: Vec<Adjacency> = self
            .adjacencies
            .keys
            .iter()
            .map(|k| self.adjacency(k.as_ref()))
            .collect();
        let single_paths = load_balances
            .iter()
            .map(|lb| match *lb.buckets {
                [a] => adjacencies
                    .get(a.as_usize())
                    .map_or(SinglePath::NONE, |adj| SinglePath::new(a, adj.kind)),
                _ => SinglePath::NONE,
            })
            .collect();
        ForwardingState {
            tx_class,
            interfaces: self.interfaces.clone(),
            xconnect: self.xconnect.clone(),
            l3xconnect: {
                let mut v = vec![AdjIndex::NONE; self.interfaces.len()];
                for (&rx, &(_, _, adj)) in &self.l3xconnect {
                    if let Some(slot) = v.get_mut(rx.as_usize()) {
                        *slot = adj;
                    }
                }
                v
            },
            any_l3xconnect: !self.l3xconnect.is_empty(),
            fib: self.lpm.table().clone(),
            load_balances,
            adjacencies,
            single_paths,
            tunnels: self
                .tunnels
                .iter()
                .map(|t| {
                    t.clone().unwrap_or(VxlanTunnel {
                        interface: IfIndex::NONE,
                        src: 0,
                        dst: 0,
                        vni: 0,
                        dst_port: 0,
                        header: [0; 36],
                        ip_sum: 0,
                    })
                })
                .collect(),
            tunnel_by_key,
            vxlan_port: self.vxlan_port,
            events: self.events.clone(),
            wireguard: self.wireguard.clone(),
            wg_output: self.wg_output.clone(),
        }
    }

    /// Publishes the staged changes and updates the FIB, without stopping any worker (see the
    /// module docs for the order). A route the FIB cannot hold is withdrawn and reported.
    pub fn commit(&mut self, to: &dyn Publisher) -> Result<(), ForwardingError> {
        to.publish(self.snapshot());
        if self.pending_fib.is_empty() {
            return Ok(());
        }
        to.synchronize();
        let mut failed = None;
        // Each changed /17 of the FIB is re-encoded once, at the flush.
        self.lpm.defer_updates();
        for (prefix, len, lb) in std::mem::take(&mut self.pending_fib) {
            match lb {
                Some(lb) => {
                    if let Err(e) = self.lpm.insert(prefix, len, lb) {
                        failed.get_or_insert(e);
                        // Withdraw the route entirely: the FIB may still hold the route it
                        // replaced, whose objects were released.
                        self.lpm.remove(prefix, len);
                        self.route_changes += 1;
                        if let Some((lb, _)) = self.routes.remove(&(prefix, len)) {
                            self.release_lb(lb);
                        }
                    }
                }
                None => {
                    self.lpm.remove(prefix, len);
                }
            }
        }
        let mut flushed = self.lpm.flush();
        if flushed.is_err() {
            // The node memory is full of blocks this commit replaced: reuse them and retry.
            to.synchronize();
            self.lpm.recycle_retired();
            flushed = self.lpm.flush();
        }
        to.synchronize();
        self.lpm.recycle_retired();
        match flushed {
            Ok(()) => {
                self.adjacencies.recycle();
                self.load_balances.recycle();
            }
            // Some /17s still show readers their old routes, which may use objects this commit
            // released: keep those slots until a commit gets the FIB written.
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}
