//! [`ForwarderView`]: what readers (`show …`, metrics, the NSM link watcher) see of the running
//! configuration. The owner publishes a new one after every change it applies; a reader takes
//! the current one (an `Arc` clone) and never waits for a change in progress. Counters are live:
//! ports, the workers and captures are read through handles, not copied.

use std::net::Ipv4Addr;
use std::sync::Arc;

use graph_nodes::forwarding::RouteInfo;
use graph_nodes::state::Interface;
use graph_nodes::{ForwardingState, IfIndex};

use crate::capture::CaptureWatch;
use crate::config::PortSection;
use crate::forwarder::{format_interfaces, Forwarder, Owned, PortEntry, TunnelEntry};

/// The running configuration as of the last applied change.
pub struct ForwarderView {
    /// The ports (their counters and link are live).
    pub ports: Vec<PortEntry>,
    /// Each port's configuration, in the order of `ports`.
    pub sections: Vec<PortSection>,
    /// Every interface (ports, VLAN sub-interfaces, tunnels) of the forwarding state.
    pub interfaces: Vec<Interface>,
    /// Every neighbour: (interface, address, MAC).
    pub neighbors: Vec<(IfIndex, u32, [u8; 6])>,
    /// L2 cross-connects, one entry per direction: (receiving, transmitting) interface.
    pub cross_connects: Vec<(IfIndex, IfIndex)>,
    /// L3 cross-connects, one entry per direction: (receiving, transmitting, peer address).
    pub l3_cross_connects: Vec<(IfIndex, IfIndex, u32)>,
    /// The directions of cross-connects that memif ports cut through.
    pub cut_throughs: Vec<(IfIndex, IfIndex)>,
    /// VXLAN tunnels.
    pub tunnels: Vec<TunnelEntry>,
    /// Every route, sorted by prefix.
    pub routes: Arc<Vec<RouteInfo>>,
    /// [`graph_nodes::Forwarding::route_generation`] as of `routes`.
    route_generation: u64,
    /// The forwarding state as workers read it (adjacencies, load balances).
    pub state: Arc<ForwardingState>,
    /// The captures (their progress is live).
    pub captures: Vec<CaptureWatch>,
    /// What each owner made, in creation order.
    pub owned: Vec<(String, Owned)>,
}

impl ForwarderView {
    /// The view of `f`, reusing `previous`'s route list when no route changed since.
    pub fn of(f: &Forwarder, previous: Option<&ForwarderView>) -> ForwarderView {
        let fw = f.forwarding();
        let generation = fw.route_generation();
        let routes = match previous {
            Some(p) if p.route_generation == generation => p.routes.clone(),
            _ => Arc::new(fw.routes()),
        };
        let interfaces: Vec<Interface> = fw.interfaces().cloned().collect();
        let cross_connects = interfaces
            .iter()
            .filter_map(|i| Some((i.index, fw.cross_connect_of(i.index)?)))
            .collect();
        let l3_cross_connects = interfaces
            .iter()
            .filter_map(|i| {
                let (b, peer) = fw.l3_cross_connect_of(i.index)?;
                Some((i.index, b, peer))
            })
            .collect();
        ForwarderView {
            ports: f.ports().to_vec(),
            sections: f.port_sections().to_vec(),
            interfaces,
            neighbors: fw.neighbors(),
            cross_connects,
            l3_cross_connects,
            cut_throughs: f.cut_throughs(),
            tunnels: f.tunnels().to_vec(),
            routes,
            route_generation: generation,
            state: Arc::new(fw.snapshot()),
            captures: f.capture_watches(),
            owned: f.owned().to_vec(),
        }
    }

    /// The ports (as [`Forwarder::ports`]).
    pub fn ports(&self) -> &[PortEntry] {
        &self.ports
    }

    /// The VXLAN tunnels (as [`Forwarder::tunnels`]).
    pub fn tunnels(&self) -> &[TunnelEntry] {
        &self.tunnels
    }

    /// The port called `name`.
    pub fn port(&self, name: &str) -> Option<&PortEntry> {
        self.ports.iter().find(|e| e.name == name)
    }

    /// The configuration port `name` was opened with.
    pub fn port_section(&self, name: &str) -> Option<&PortSection> {
        let k = self.ports.iter().position(|e| e.name == name)?;
        self.sections.get(k)
    }

    /// The name of interface `i`.
    pub fn interface_name(&self, i: IfIndex) -> Option<&str> {
        self.interfaces
            .iter()
            .find(|x| x.index == i)
            .map(|x| x.name.as_str())
    }

    /// The interface port `a` is L2 cross-connected to.
    pub fn cross_connect_of(&self, a: IfIndex) -> Option<IfIndex> {
        self.cross_connects
            .iter()
            .find(|(x, _)| *x == a)
            .map(|&(_, b)| b)
    }

    /// The interface and peer address port `a` is L3 cross-connected to.
    pub fn l3_cross_connect_of(&self, a: IfIndex) -> Option<(IfIndex, u32)> {
        self.l3_cross_connects
            .iter()
            .find(|(x, _, _)| *x == a)
            .map(|&(_, b, peer)| (b, peer))
    }

    /// What `owner` made, in creation order.
    pub fn owned_by(&self, owner: &str) -> Vec<Owned> {
        self.owned
            .iter()
            .filter(|(o, _)| o == owner)
            .map(|(_, x)| x.clone())
            .collect()
    }

    /// Whether `ip` is an address of one of the interfaces.
    pub fn is_own_address(&self, ip: Ipv4Addr) -> bool {
        self.interfaces
            .iter()
            .any(|i| i.addresses.iter().any(|&(a, _)| a == u32::from(ip)))
    }

    /// Frames sent by every port.
    pub fn tx_packets(&self) -> u64 {
        self.ports.iter().map(|e| e.port.stats().tx_packets).sum()
    }

    /// `show interfaces` as text: link and counters per port.
    pub fn format_interfaces(&self) -> String {
        format_interfaces(&self.ports)
    }
}
