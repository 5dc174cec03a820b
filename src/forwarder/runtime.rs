//! Changes to a running forwarder: ports attached and detached on every worker, cross-connects,
//! routes, neighbours and addresses, each tagged with its owner.

use std::sync::mpsc;

use dataplane::RxQueue;
use drivers::QueuePair;

use super::closing::closes_slowly;

use super::*;

/// Worker command: attach `port` as `interface`, with the queue pair `made` for this worker off
/// it, or one taken now on the worker's thread when the port needs that
/// ([`Port::queue_pair_on_worker`]).
fn attach_command(
    port: Arc<dyn Port>,
    interface: IfIndex,
    made: Option<QueuePair>,
) -> WorkerCommand<ForwardingState> {
    Box::new(move |w| {
        let qp = match made {
            Some(qp) => qp,
            None => port
                .queue_pair(w.worker)
                .map_err(|e| WorkerError::queues(port.name(), e))?,
        };
        let input = w
            .graph
            .node_mut::<PortsInput>(PORT_INPUT)
            .ok_or_else(|| WorkerError::no_node(PORT_INPUT))?;
        if !input.attach(interface.get(), qp.rx) {
            return Err(WorkerError::AttachedAlready {
                interface: interface.get(),
            });
        }
        let output = w
            .graph
            .node_mut::<InterfaceOutput>(names::INTERFACE_OUTPUT)
            .ok_or_else(|| WorkerError::no_node(names::INTERFACE_OUTPUT))?;
        drop(output.attach(interface, qp.tx));
        Ok(())
    })
}

/// `port`'s queue pair for each of `workers` workers, made on the calling thread (see
/// [`Port::queue_pair_on_worker`]); none when the workers must make their own.
fn queue_pairs_off_workers(
    port: &dyn Port,
    workers: usize,
) -> Result<Vec<Option<QueuePair>>, ForwarderError> {
    if port.queue_pair_on_worker() {
        return Ok(Vec::new());
    }
    (0..workers)
        .map(|w| {
            port.queue_pair(w).map(Some).map_err(|e| {
                ForwarderError::Unavailable(format!("{}: worker {w}'s queues: {e}", port.name()))
            })
        })
        .collect()
}

/// A worker's queues of one interface, taken off it by [`detach_command`].
type Detached = (Option<Box<dyn RxQueue>>, Option<Box<dyn TxQueue>>);

/// Worker command: detach `interface`. Receiving stops first; then what the graph still has
/// pending is run through (so nothing for the interface stays queued), and only then is its
/// transmit queue taken away. Both queues go to `closed`, to be dropped off the worker (see
/// [`detach_everywhere`]).
fn detach_command(
    interface: IfIndex,
    closed: mpsc::Sender<Detached>,
) -> WorkerCommand<ForwardingState> {
    Box::new(move |w| {
        let rx = w
            .graph
            .node_mut::<PortsInput>(PORT_INPUT)
            .and_then(|n| n.detach(interface.get()));
        // A receive queue cut through to this port lets go once its transmit queue is dropped.
        w.graph.drain(w.buffers, w.state, 64);
        let tx = w
            .graph
            .node_mut::<InterfaceOutput>(names::INTERFACE_OUTPUT)
            .and_then(|n| n.detach(interface));
        // The caller gone (it gave up on this worker), they are dropped here after all.
        let _ = closed.send((rx, tx));
        Ok(())
    })
}

/// Detaches `interface` from every worker and returns its queues, to be dropped off the workers,
/// then has each worker let go of a memif connection's memory no buffer holds any more (rather
/// than at its next connection; memif queues, which close at once, are dropped first).
/// Closing a kernel queue's descriptor (an AF_PACKET socket, a TAP queue) waits in the kernel
/// for an RCU grace period (`synchronize_net`), which on a busy machine takes seconds: on a
/// worker, that stopped its forwarding meanwhile and, past the command's 10 s, failed the
/// port's removal (an NSM Close then left the port behind); see also `closing`.
pub(super) fn detach_everywhere(
    dataplane: &Dataplane<ForwardingState>,
    interface: IfIndex,
    slow: bool,
) -> Result<Vec<Detached>, CommandError> {
    let (closed, detached) = mpsc::channel();
    let done = dataplane.command(|_| detach_command(interface, closed.clone()));
    drop(closed);
    let mut queues: Vec<Detached> = detached.try_iter().collect();
    if !slow {
        queues.clear();
    }
    done?;
    dataplane.command(|_| {
        Box::new(|w| {
            w.buffers.prune_external();
            Ok(())
        })
    })?;
    Ok(queues)
}

impl Forwarder {
    /// Opens a port and attaches it to every worker; returns its interface index. When this
    /// returns, every worker polls its receive queue and can transmit on it (a memif port's link
    /// comes up when its peer connects). On error nothing of it is left.
    pub fn add_port(
        &mut self,
        section: &PortSection,
        owner: Option<&str>,
    ) -> Result<IfIndex, ForwarderError> {
        let common = section.common();
        let name = common.name;
        if name.is_empty() || name.len() > 64 || name.chars().any(char::is_whitespace) {
            return Err(ForwarderError::InvalidArgument(format!(
                "port name `{name}`: 1 to 64 characters, no spaces"
            )));
        }
        if self.port(name).is_some() || self.forwarding.interface_by_name(name).is_some() {
            return Err(ForwarderError::AlreadyExists(format!(
                "a port named `{name}` exists"
            )));
        }
        if common.mtu < 68 {
            return Err(ForwarderError::InvalidArgument(format!(
                "port {name}: MTU {} is below 68",
                common.mtu
            )));
        }
        if let PortSection::Memif(m) = section {
            let clash = self.sections.iter().find_map(|s| match s {
                PortSection::Memif(o)
                    if o.socket == m.socket && o.id == m.id && o.netns == m.netns =>
                {
                    Some(&o.name)
                }
                _ => None,
            });
            if let Some(other) = clash {
                return Err(ForwarderError::AlreadyExists(format!(
                    "port {other} uses memif socket {} id {}",
                    m.socket, m.id
                )));
            }
        }
        let port = self.open(section)?;
        let added = self.forwarding.add_port(name, port.mac(), common.mtu);
        let added = added.and_then(|i| {
            self.forwarding
                .set_point_to_point(i, port.point_to_point())
                .and_then(|()| {
                    self.forwarding
                        .set_neighbours_from_kernel(i, port.neighbours_from_kernel())
                })
                .map(|()| i)
        });
        let interface = match added {
            Ok(i) => i,
            Err(e) => {
                self.close(section, port);
                return Err(e.into());
            }
        };
        // The interface is in every worker's snapshot before its first frame arrives.
        let attached = self.commit().and_then(|()| {
            self.dataplane.synchronize();
            let mut made = queue_pairs_off_workers(&*port, self.dataplane.worker_count())?;
            self.dataplane
                .command(|w| {
                    attach_command(
                        port.clone(),
                        interface,
                        made.get_mut(w).and_then(Option::take),
                    )
                })
                .map_err(ForwarderError::from)
        });
        if let Err(e) = attached {
            if let Ok(queues) =
                detach_everywhere(&self.dataplane, interface, closes_slowly(section))
            {
                self.dispose_all(queues);
            }
            let _ = self.forwarding.remove_interface(interface);
            let _ = self.commit();
            self.close(section, port);
            return Err(e);
        }
        tracing::info!(
            port = name,
            interface = interface.get(),
            owner,
            "port added"
        );
        self.ports.push(PortEntry {
            name: name.to_string(),
            interface,
            port,
            memif: self.memif.as_ref().and_then(|c| c.port(name)),
        });
        self.sections.push(section.clone());
        self.record(owner, Owned::Port(name.to_string()));
        Ok(interface)
    }

    /// Removes a port and everything that refers to it (its cross-connects, addresses,
    /// neighbours, routes through it). When this returns no worker touches the port, no frame
    /// for it is queued anywhere (later ones are dropped as `interface-output.no-queue`), its
    /// buffers are back in the pool and the port is closed (a memif master's socket is
    /// removed with its last interface).
    pub fn remove_port(&mut self, name: &str) -> Result<(), ForwarderError> {
        let k = self
            .ports
            .iter()
            .position(|e| e.name == name)
            .ok_or_else(|| ForwarderError::NotFound(format!("no port named `{name}`")))?;
        let interface = self.ports[k].interface;
        // Its capture ends (file closed) before its index can be reused.
        let _ = self.capture_stop(name);
        // First nothing is sent to it or accepted from it any more, then the workers let go.
        self.forwarding.remove_interface(interface)?;
        self.commit()?;
        let slow = closes_slowly(&self.sections[k]);
        let queues = detach_everywhere(&self.dataplane, interface, slow)?;
        self.dispose_all(queues);
        let entry = self.ports.remove(k);
        let section = self.sections.remove(k);
        self.close(&section, entry.port);
        let routes = self.route_keys();
        self.forget(|o| match o {
            Owned::Route(p, l) => routes.contains(&(*p, *l)),
            o => !o.uses_port(name),
        });
        tracing::info!(port = name, interface = interface.get(), "port removed");
        Ok(())
    }

    fn check_free(&self, name: &str, i: IfIndex) -> Result<(), ForwarderError> {
        if self.forwarding.cross_connect_of(i).is_some()
            || self.forwarding.l3_cross_connect_of(i).is_some()
        {
            return Err(ForwarderError::AlreadyExists(format!(
                "port {name} is cross-connected already"
            )));
        }
        Ok(())
    }

    fn pair(&self, a: &str, b: &str) -> Result<(IfIndex, IfIndex), ForwarderError> {
        if a == b {
            return Err(ForwarderError::InvalidArgument(format!(
                "cannot cross-connect {a} to itself"
            )));
        }
        let (ia, ib) = (self.interface(a)?, self.interface(b)?);
        self.check_free(a, ia)?;
        self.check_free(b, ib)?;
        Ok((ia, ib))
    }

    /// L2 cross-connects ports `a` and `b` both ways: every frame received on one leaves on the
    /// other, untouched.
    pub fn cross_connect(
        &mut self,
        a: &str,
        b: &str,
        owner: Option<&str>,
    ) -> Result<(), ForwarderError> {
        let (ia, ib) = self.pair(a, b)?;
        self.forwarding.cross_connect(ia, ib)?;
        if let Err(e) = self.commit() {
            self.forwarding.disconnect(ia);
            return Err(e);
        }
        self.record(owner, Owned::CrossConnect(a.into(), b.into()));
        Ok(())
    }

    /// L3 cross-connects ports `a` and `b`: every IP packet received on `a` (checked by
    /// `ip4-input` or `ip6-input`) leaves by `b` toward `peer_b`, and every one received on `b`
    /// leaves by `a` toward `peer_a`, TTL or hop limit decremented, whatever their
    /// destinations: IPv4 toward the peer's IPv4 next hop (none: dropped as `no-next-hop`),
    /// IPv6 toward its IPv6 one, else its IPv4 one (one station). The peers' MACs come from
    /// [`Forwarder::add_neighbor`], or from ARP or neighbour discovery when the port has an
    /// address ([`Forwarder::add_address`]) in the peer's subnet. A point-to-point port
    /// (IP-mode memif) or a WireGuard tunnel needs no next hop ([`L3Peer::NONE`]): its peer is
    /// the far end of the link, or the tunnel's peer for each packet.
    pub fn l3_cross_connect(
        &mut self,
        a: &str,
        b: &str,
        peer_b: L3Peer,
        peer_a: L3Peer,
        owner: Option<&str>,
    ) -> Result<(), ForwarderError> {
        let (ia, ib) = self.pair(a, b)?;
        self.forwarding.l3_cross_connect(ia, ib, peer_b, peer_a)?;
        if let Err(e) = self.commit() {
            self.forwarding.l3_disconnect(ia);
            return Err(e);
        }
        self.record(owner, Owned::L3CrossConnect(a.into(), b.into()));
        Ok(())
    }

    /// Removes the L2 or L3 cross-connect of port `a` (both ways); the ports go back to
    /// routing.
    pub fn disconnect(&mut self, a: &str) -> Result<(), ForwarderError> {
        let ia = self.interface(a)?;
        let peer = match (
            self.forwarding.cross_connect_of(ia),
            self.forwarding.l3_cross_connect_of(ia),
        ) {
            (Some(b), _) => {
                self.forwarding.disconnect(ia);
                b
            }
            (None, Some((b, _))) => {
                self.forwarding.l3_disconnect(ia);
                b
            }
            (None, None) => {
                return Err(ForwarderError::NotFound(format!(
                    "port {a} is not cross-connected"
                )))
            }
        };
        self.commit()?;
        let b = self.interface_name(peer).unwrap_or_default().to_string();
        self.forget(|o| match o {
            Owned::CrossConnect(x, y) | Owned::L3CrossConnect(x, y) => {
                !((x == a && *y == b) || (x == &b && y == a))
            }
            _ => true,
        });
        Ok(())
    }

    /// Everything `owner` made that still exists, in creation order.
    pub fn owned_by(&self, owner: &str) -> Vec<Owned> {
        self.owned
            .iter()
            .filter(|(o, _)| o == owner)
            .map(|(_, x)| x.clone())
            .collect()
    }

    /// Removes everything `owner` made, newest first (cross-connects and routes before the
    /// ports they use); returns how many objects went. Owning nothing is not an error.
    pub fn remove_owned(&mut self, owner: &str) -> Result<usize, ForwarderError> {
        let objects = self.owned_by(owner);
        let mut removed = 0;
        for o in objects.iter().rev() {
            let r = match o {
                Owned::Port(p) => self.remove_port(p),
                Owned::Tunnel(t) if self.wireguard_interface(t).is_some() => {
                    self.remove_wireguard(t)
                }
                Owned::Tunnel(t) => self.remove_vxlan_tunnel(t),
                Owned::Vlan(v) => self.remove_vlan(v),
                Owned::CrossConnect(a, _) | Owned::L3CrossConnect(a, _) => self.disconnect(a),
                Owned::Route(p, l) => self.remove_route(*p, *l),
                Owned::Neighbor(p, ip) => self.remove_neighbor(p, *ip),
                Owned::Address(p, ip, l) => self.remove_address(p, *ip, *l),
            };
            match r {
                Ok(()) => removed += 1,
                // Gone already (with a port removed before it, say).
                Err(ForwarderError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.owned.retain(|(o, _)| o != owner);
        Ok(removed)
    }

    fn open(&mut self, p: &PortSection) -> Result<Arc<dyn Port>, ForwarderError> {
        let name = p.common().name;
        if matches!(p, PortSection::Dpdk(_)) && self.dpdk.is_none() {
            return Err(ForwarderError::Unavailable(format!(
                "port {name}: DPDK ports can be added at run time only when some were configured at start (the EAL and the buffer layout are set up then)"
            )));
        }
        open_port(p, self.workers, &mut self.memif, self.dpdk.as_ref()).map_err(|e| match e {
            OpenError::Port(e) => port_error(name, e),
            OpenError::Netns(e) if e.is_not_found() => {
                ForwarderError::NotFound(format!("port {name}: {e}"))
            }
            OpenError::Netns(e) => ForwarderError::Unavailable(format!("port {name}: {e}")),
            config => ForwarderError::InvalidArgument(format!("port {name}: {config}")),
        })
    }

    /// Closes a port no worker holds any more.
    /// Closes `port`: a memif port's socket at once, a kernel port when the owner says (see
    /// `closing`).
    fn close(&mut self, section: &PortSection, port: Arc<dyn Port>) {
        if let (PortSection::Memif(m), Some(control)) = (section, &self.memif) {
            control.remove_port(&m.name);
        }
        if closes_slowly(section) {
            self.dispose(Box::new(port));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use dataplane::{
        BufferIndex, BufferPoolConfig, HugepagePolicy, IdlePolicy, WorkerBuffers, WorkerConfig,
    };

    use super::*;

    /// The names of the threads queues were dropped on.
    type Drops = Arc<Mutex<Vec<String>>>;

    fn note(drops: &Drops) {
        let name = std::thread::current().name().unwrap_or("").to_string();
        drops.lock().unwrap_or_else(|e| e.into_inner()).push(name);
    }

    struct Rx(Drops);

    impl RxQueue for Rx {
        fn receive(&mut self, _: &mut WorkerBuffers, _: &mut [BufferIndex]) -> usize {
            0
        }
    }

    impl Drop for Rx {
        fn drop(&mut self) {
            note(&self.0);
        }
    }

    struct Tx(Drops);

    impl TxQueue for Tx {
        fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
            buffers.free(packets);
            packets.len()
        }
    }

    impl Drop for Tx {
        fn drop(&mut self) {
            note(&self.0);
        }
    }

    /// A detached interface's queues are dropped on the thread that detaches it, never on a
    /// worker (closing a kernel queue can wait there for seconds), and the workers go on.
    #[test]
    fn detached_queues_are_dropped_off_the_workers() {
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers: 4096,
            hugepages: HugepagePolicy::Never,
            ..Default::default()
        })
        .unwrap();
        let mut forwarding = Forwarding::new(FibConfig {
            hugepages: HugepagePolicy::Never,
            ..FibConfig::default()
        })
        .unwrap();
        let interface = forwarding
            .add_port("fake", [2, 0, 0, 0, 0, 1], 1500)
            .unwrap();
        forwarding.commit(&LocalState::default()).unwrap();
        let drops = Drops::default();
        let d = drops.clone();
        let workers = WorkerConfig {
            cores: vec![0, 0],
            idle: IdlePolicy::ADAPTIVE,
        };
        let dp = Dataplane::start(&workers, pool.clone(), forwarding.snapshot(), move |_| {
            let mut b = GraphBuilder::new();
            let mut input = PortsInput::new(PORT_INPUT, names::ETHERNET_INPUT);
            input.attach(interface.get(), Box::new(Rx(d.clone())));
            b.add(input);
            let tx: Vec<(IfIndex, Box<dyn TxQueue>)> = vec![(interface, Box::new(Tx(d.clone())))];
            add_forwarding_nodes(&mut b, tx);
            b.build()
        })
        .unwrap();
        detach_everywhere(&dp, interface, false).unwrap();
        let me = std::thread::current().name().unwrap_or("").to_string();
        let dropped = drops.lock().unwrap().clone();
        assert_eq!(
            dropped,
            vec![me; 4],
            "2 workers' receive and transmit queues"
        );
        // Detaching again finds nothing; the workers still answer.
        detach_everywhere(&dp, interface, false).unwrap();
        assert_eq!(drops.lock().unwrap().len(), 4);
        dp.stop();
    }
}
