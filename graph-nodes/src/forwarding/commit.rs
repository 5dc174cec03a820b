//! The one commit path: what the data path learned comes in ([`Forwarding::take_events`]),
//! the parts' staged changes go out as a snapshot and in-place FIB writes for both families
//! ([`Forwarding::commit`]; see the module docs of `forwarding` for the order).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use dataplane::Dataplane;

use super::objects::AdjKey;
use super::{Forwarding, ForwardingError};
use crate::index::AdjIndex;
use crate::state::{
    Adjacency, AdjacencyKind, DataplaneEvent, ForwardingState, InterfaceKind, L3xconnect,
    LoadBalance, SinglePath, TxClass, POINT_TO_POINT_PEER_MAC,
};
use crate::wire::{self, ethernet};

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
    /// Applies what the data path reported (neighbours learned from ARP and neighbour
    /// discovery); returns how many events there were. Commit afterwards.
    pub fn take_events(&mut self) -> usize {
        let now = Instant::now();
        let mut n = 0;
        while let Some(e) = self.events.pop() {
            n += 1;
            match e {
                DataplaneEvent::NeighborLearned { interface, ip, mac } => {
                    let learnable = self
                        .interfaces
                        .get(interface)
                        .is_ok_and(|i| i.address_for(ip).is_some());
                    if learnable && self.neighbors.get4(interface, ip) != Some(mac) {
                        let _ = self.add_neighbor(interface, ip, mac);
                    }
                }
                DataplaneEvent::Neighbor6Learned { interface, ip, mac } => {
                    self.learn_neighbor6(interface, u128::from_be_bytes(ip), mac, now);
                }
            }
        }
        n
    }

    /// The adjacency `key` is, as the data path sees it now.
    fn adjacency(&self, key: Option<AdjKey>) -> Adjacency {
        let Some(key) = key else {
            return Adjacency::DROP;
        };
        let (kind, tx, next_hop, next_hop6, mac, ethertype) = match key {
            AdjKey::Drop => return Adjacency::DROP,
            AdjKey::Local => {
                return Adjacency {
                    kind: AdjacencyKind::Local,
                    ..Adjacency::DROP
                }
            }
            AdjKey::NextTable(t) => {
                return Adjacency {
                    kind: AdjacencyKind::NextTable,
                    next_table: t.0,
                    ..Adjacency::DROP
                }
            }
            AdjKey::Glean(i) => (AdjacencyKind::Glean, i, 0, 0, None, wire::ETHERTYPE_IP4),
            AdjKey::Glean6(i) => (AdjacencyKind::Glean, i, 0, 0, None, wire::ETHERTYPE_IP6),
            AdjKey::Neighbor(i, ip) => {
                let mac = self.neighbors.get4(i, ip);
                let kind = mac.map_or(AdjacencyKind::Arp, |_| AdjacencyKind::Rewrite);
                (kind, i, ip, 0, mac, wire::ETHERTYPE_IP4)
            }
            AdjKey::Neighbor6(i, ip) => {
                let mac = self.neighbors.get6(i, ip);
                let kind = mac.map_or(AdjacencyKind::Arp, |_| AdjacencyKind::Rewrite);
                (kind, i, 0, ip, mac, wire::ETHERTYPE_IP6)
            }
        };
        let Ok(iface) = self.interfaces.get(tx) else {
            return Adjacency::DROP;
        };
        let base = Adjacency {
            kind,
            tx,
            mtu: iface.mtu,
            next_hop,
            next_hop6: next_hop6.to_be_bytes(),
            header: [0; 18],
            header_len: 0,
            next_table: 0,
        };
        if let InterfaceKind::Wireguard { .. } = iface.kind {
            // IP payload: no neighbour, no L2 header; the tunnel picks the peer.
            return Adjacency {
                kind: AdjacencyKind::Rewrite,
                ..base
            };
        }
        let mut header = [0u8; 18];
        let mut header_len = wire::ETHERNET_HEADER as u8;
        let (kind, mac) = if iface.point_to_point {
            // The peer is the far end of the link: nothing to resolve, and the port leaves
            // the Ethernet header out.
            (AdjacencyKind::Rewrite, Some(POINT_TO_POINT_PEER_MAC))
        } else {
            (kind, mac)
        };
        if let (AdjacencyKind::Rewrite, Some(mac)) = (kind, mac) {
            let tci = match iface.kind {
                InterfaceKind::Vlan { vlan, .. } if !iface.point_to_point => Some(vlan),
                _ => None,
            };
            // 18 bytes hold a tagged header: this does not fail.
            if let Ok(len) = ethernet::write_header(&mut header, &mac, &iface.mac, tci, ethertype) {
                header_len = len as u8;
            }
        }
        Adjacency {
            kind,
            header,
            header_len,
            ..base
        }
    }

    /// The state as it would be published now.
    pub fn snapshot(&self) -> ForwardingState {
        let interfaces = self.interfaces.slots();
        let tx_class = interfaces
            .iter()
            .map(|i| match i.as_ref().map(|i| (i.index, i.kind)) {
                Some((i, InterfaceKind::Port)) => TxClass::port(i),
                Some((_, InterfaceKind::Vlan { parent, .. })) => TxClass::vlan(parent),
                Some((_, InterfaceKind::Vxlan { tunnel })) => TxClass::vxlan(tunnel),
                Some((_, InterfaceKind::Vxlan6 { tunnel })) => TxClass::vxlan6(tunnel),
                Some((_, InterfaceKind::Wireguard { tunnel })) => self.wireguard.tx_class(tunnel),
                None => TxClass::NONE,
            })
            .collect();
        let load_balances: Vec<LoadBalance> = self
            .objects
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
            .objects
            .adjacencies
            .keys
            .iter()
            .map(|k| self.adjacency(*k))
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
        let mut l3xconnect = vec![L3xconnect::NONE; interfaces.len()];
        for (&rx, d) in &self.xconnect.l3 {
            if let Some(slot) = l3xconnect.get_mut(rx.as_usize()) {
                *slot = L3xconnect {
                    v4: d.adj4.unwrap_or(AdjIndex::NONE),
                    v6: d.adj6.unwrap_or(AdjIndex::NONE),
                };
            }
        }
        ForwardingState {
            tx_class,
            interfaces: interfaces.to_vec(),
            xconnect: self.xconnect.l2.clone(),
            l3xconnect,
            any_l3xconnect: !self.xconnect.l3.is_empty(),
            fib: self.tables.default_table().fib4.table(),
            fib6: self.tables.default_table().fib6.table(),
            fibs: self.tables.snapshot4(),
            fibs6: self.tables.snapshot6(),
            rx_table: interfaces
                .iter()
                .map(|i| i.as_ref().map_or(0, |i| i.table.0))
                .collect(),
            multi_table: self.tables.several(),
            load_balances,
            adjacencies,
            single_paths,
            tunnels: self.vxlan.snapshot(),
            tunnel_by_key: self.vxlan.by_key(),
            tunnels6: self.vxlan.snapshot6(),
            tunnel6_by_key: self.vxlan.by_key6(),
            vxlan_port: self.vxlan.port,
            events: self.events.clone(),
            nd_probes: self.nd_probes.clone(),
            wireguard: self.wireguard.tunnels.clone(),
            wg_output: self.wireguard.output.clone(),
        }
    }

    /// Publishes the staged changes and updates every table's FIBs, without stopping any worker (see
    /// the module docs for the order). A route a FIB cannot hold is withdrawn and reported.
    pub fn commit(&mut self, to: &dyn Publisher) -> Result<(), ForwardingError> {
        to.publish(self.snapshot());
        if !self
            .tables
            .iter()
            .any(|(_, t)| t.fib4.has_pending() || t.fib6.has_pending())
        {
            return Ok(());
        }
        to.synchronize();
        let mut withdrawn = Vec::new();
        let mut failed = None;
        // Per table (in one order throughout): whether each family's flush failed.
        let mut flushed = Vec::new();
        for t in self.tables.iter_mut() {
            let (failed4, flushed4) = t.fib4.write_pending(&mut withdrawn);
            let (failed6, flushed6) = t.fib6.write_pending(&mut withdrawn);
            failed = failed.or(failed4).or(failed6);
            flushed.push((flushed4, flushed6));
        }
        for lb in withdrawn {
            self.objects.release_load_balance(lb);
        }
        if flushed.iter().any(|(a, b)| a.is_err() || b.is_err()) {
            // The node memory is full of nodes this commit replaced: reuse them and retry.
            to.synchronize();
            for (t, (flushed4, flushed6)) in self.tables.iter_mut().zip(&mut flushed) {
                t.fib4.recycle_retired();
                t.fib6.recycle_retired();
                if flushed4.is_err() {
                    *flushed4 = t.fib4.flush();
                }
                if flushed6.is_err() {
                    *flushed6 = t.fib6.flush();
                }
            }
        }
        to.synchronize();
        for t in self.tables.iter_mut() {
            t.fib4.recycle_retired();
            t.fib6.recycle_retired();
        }
        let still = flushed.into_iter().find_map(|(a, b)| a.and(b).err());
        match still {
            None => self.objects.recycle(),
            // Some parts of a table still show readers their old routes, which may use objects
            // this commit released: keep those slots until a commit gets the table written.
            Some(e) => {
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
