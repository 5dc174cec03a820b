//! Cut-throughs: each direction of an L2 cross-connect between two ETHERNET-mode memif ports
//! is done by the ports' own queues. On every worker, what one port receives goes straight to
//! the other's transmit queue (the memif driver's [`MemifPort::cut_through`]): the frame is
//! copied once, from one peer's buffer into the other's, with no Quiver buffer and no graph
//! node in between. The cross-connect's counters and both ports' counters count it as the
//! graph would (the port's `rx-cut-through` tells how many went this way).
//!
//! While `port-input` is traced or any capture is on, the graph sees every packet: the
//! cut-through steps aside on its own, burst by burst. Here the forwarder keeps the workers'
//! cut-throughs in line with its cross-connects: on every commit, those no longer wanted end
//! with the new configuration (their flag is cleared before it is published, so a worker that
//! sees it sees the cut-through ended: no frame of a later pass bypasses a cross-connect that is
//! gone, and no worker command is waited for), and new ones start after it, in one command.

use std::sync::atomic::{AtomicBool, Ordering};

use drivers::memif_port::MemifPort;
use graph_nodes::nodes::L2Xconnect;

use super::*;

/// A cut-through to start: the receiving interface, its memif port, the transmitting memif
/// port, and the flag that ends it.
type Start = (IfIndex, Arc<MemifPort>, Arc<MemifPort>, Arc<AtomicBool>);

/// Worker command: interface `from`'s frames straight to interface `to`'s transmit queue,
/// for each (from, to) of a commit's new cut-throughs, each for as long as its flag stays
/// set (one command for the commit, so the control plane waits for the workers once). A
/// worker without a transmit queue for `to`, or whose queues cannot pair, keeps using the
/// graph.
fn cut_through_command(starts: Vec<Start>) -> WorkerCommand<ForwardingState> {
    Box::new(move |w| {
        for (from, a, b, on) in &starts {
            let from = *from;
            let stats = w
                .graph
                .node_mut::<L2Xconnect>(names::L2_XCONNECT)
                .ok_or_else(|| WorkerError::no_node(names::L2_XCONNECT))?
                .stats();
            let count = Box::new(move |packets, bytes| stats.add(from, packets, bytes));
            a.cut_through(w.worker, b, count, on.clone());
        }
        Ok(())
    })
}

impl Forwarder {
    /// The cut-throughs the configuration calls for: (receiving, transmitting) interface, both
    /// ways of every L2 cross-connect between two ETHERNET-mode memif ports.
    fn wanted_cut_throughs(&self) -> Vec<(IfIndex, IfIndex)> {
        let ethernet_memif: Vec<IfIndex> = self
            .ports
            .iter()
            .zip(&self.sections)
            .filter(|(_, s)| matches!(s, PortSection::Memif(m) if m.mode == MemifMode::Ethernet))
            .map(|(p, _)| p.interface)
            .collect();
        ethernet_memif
            .iter()
            .filter_map(|&a| {
                let b = self.forwarding.cross_connect_of(a)?;
                ethernet_memif.contains(&b).then_some((a, b))
            })
            .collect()
    }

    /// Publishes the forwarding configuration, the workers' cut-throughs following it: those
    /// it no longer calls for end first, new ones start once it is published.
    pub(super) fn commit(&mut self) -> Result<(), ForwarderError> {
        let wanted = self.wanted_cut_throughs();
        // Those no longer wanted end with their flag, cleared before the configuration is
        // published: a worker that sees the new configuration sees the flag cleared too.
        self.cut_throughs.retain(|(pair, on)| {
            let keep = wanted.contains(pair);
            if !keep {
                on.store(false, Ordering::Release);
            }
            keep
        });
        self.forwarding.commit(&self.dataplane)?;
        let starts: Vec<_> = wanted
            .into_iter()
            .filter(|p| !self.cut_throughs.iter().any(|(q, _)| q == p))
            .map(|(from, to)| (from, to, Arc::new(AtomicBool::new(true))))
            .collect();
        if !starts.is_empty() {
            let ports: Vec<_> = (starts.iter())
                .filter_map(|(from, to, on)| {
                    let entry = |i| self.ports.iter().find(|p| p.interface == i);
                    let port = |i| self.memif.as_ref()?.port(&entry(i)?.name);
                    Some((*from, port(*from)?, port(*to)?, on.clone()))
                })
                .collect();
            let started = self
                .dataplane
                .command(|_| cut_through_command(ports.clone()));
            // Kept even when a worker failed: the others may have started, and the next
            // commit must be able to end them.
            self.cut_throughs
                .extend(starts.into_iter().map(|(from, to, on)| ((from, to), on)));
            started?;
        }
        Ok(())
    }

    /// The cut-throughs on (receiving, transmitting interface), as the workers were told.
    pub fn cut_throughs(&self) -> Vec<(IfIndex, IfIndex)> {
        self.cut_throughs.iter().map(|(pair, _)| *pair).collect()
    }
}
