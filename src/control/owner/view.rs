//! [`ForwarderView`]: what readers (`show …`, metrics, the NSM link watcher) see of the running
//! configuration. The owner publishes a new one after every change it applies; a reader takes
//! the current one (an `Arc` clone) and never waits for a change in progress. Counters are live:
//! ports, the workers and captures are read through handles, not copied.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use graph_nodes::forwarding::{Neighbor6, Route6Info, RouteInfo};
use graph_nodes::state::Interface;
use graph_nodes::{ForwardingState, IfIndex, L3Peer};

use crate::capture::CaptureWatch;
use crate::config::PortSection;
use crate::forwarder::{format_interfaces, has_address, Forwarder, Owned, PortEntry, TunnelEntry};

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
    /// Every IPv6 neighbour, with its state as of the view.
    pub neighbors6: Vec<Neighbor6>,
    /// L2 cross-connects, one entry per direction: (receiving, transmitting) interface.
    pub cross_connects: Vec<(IfIndex, IfIndex)>,
    /// L3 cross-connects, one entry per direction: (receiving, transmitting, peer address).
    pub l3_cross_connects: Vec<(IfIndex, IfIndex, L3Peer)>,
    /// The directions of cross-connects that memif ports cut through.
    pub cut_throughs: Vec<(IfIndex, IfIndex)>,
    /// VXLAN tunnels.
    pub tunnels: Vec<TunnelEntry>,
    /// Every route, sorted by prefix. With more than [`EAGER_ROUTES`] routes the list is made
    /// again at most every [`ROUTE_LIST_EVERY`] (a large table changed route by route must not
    /// be copied whole at every change), so it may lag that much behind.
    pub routes: Arc<Vec<RouteInfo>>,
    /// Every IPv6 route, sorted by prefix, made again when `routes` is.
    pub routes6: Arc<Vec<Route6Info>>,
    /// The other tables' routes (VRFs): name, IPv4 routes, IPv6 routes; made again when
    /// `routes` is.
    pub table_routes: Arc<Vec<TableRoutes>>,
    /// Every table with the interfaces in it (the default table first).
    pub tables: Vec<(String, Vec<String>)>,
    /// Every table's number and name (what next-table routes name by number).
    pub table_names: Vec<(graph_nodes::TableId, String)>,
    /// [`graph_nodes::Forwarding::route_generation`] as of `routes`.
    route_generation: u64,
    /// When `routes` was made.
    routes_made: Instant,
    /// The forwarding state as workers read it (adjacencies, load balances).
    pub state: Arc<ForwardingState>,
    /// The captures (their progress is live).
    pub captures: Vec<CaptureWatch>,
    /// What each owner made, in creation order.
    pub owned: Vec<(String, Owned)>,
}

/// Up to this many routes, the route list is made again at every change.
pub const EAGER_ROUTES: usize = 65_536;

/// How often, at most, a larger route list is made again.
pub const ROUTE_LIST_EVERY: Duration = Duration::from_secs(1);

/// One table other than the default one: its name, IPv4 routes and IPv6 routes.
pub type TableRoutes = (String, Vec<RouteInfo>, Vec<Route6Info>);

/// Every table but the default one, with its routes.
fn table_routes(fw: &graph_nodes::Forwarding) -> Vec<TableRoutes> {
    fw.tables()
        .into_iter()
        .filter(|(t, _)| *t != graph_nodes::TableId::DEFAULT)
        .map(|(t, name)| {
            let v4 = fw.routes_in(t).unwrap_or_default();
            let v6 = fw.routes6_in(t).unwrap_or_default();
            (name, v4, v6)
        })
        .collect()
}

impl ForwarderView {
    /// The view of `f`, reusing `previous`'s route list when no route changed since (or, for a
    /// large table, when it was made less than [`ROUTE_LIST_EVERY`] ago).
    pub fn of(f: &Forwarder, previous: Option<&ForwarderView>) -> ForwarderView {
        Self::of_with(f, previous, EAGER_ROUTES)
    }

    /// [`ForwarderView::of`], `eager` routes at most made again at every change.
    fn of_with(f: &Forwarder, previous: Option<&ForwarderView>, eager: usize) -> ForwarderView {
        let fw = f.forwarding();
        let (routes, routes6, table_routes, route_generation, routes_made) = match previous {
            Some(p) if !p.routes_due_with(f, eager) => (
                p.routes.clone(),
                p.routes6.clone(),
                p.table_routes.clone(),
                p.route_generation,
                p.routes_made,
            ),
            _ => (
                Arc::new(fw.routes()),
                Arc::new(fw.routes6()),
                Arc::new(table_routes(fw)),
                fw.route_generation(),
                Instant::now(),
            ),
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
            neighbors6: fw.neighbors6(Instant::now()),
            cross_connects,
            l3_cross_connects,
            cut_throughs: f.cut_throughs(),
            tunnels: f.tunnels().to_vec(),
            routes,
            routes6,
            table_routes,
            tables: f.tables(),
            table_names: fw.tables(),
            route_generation,
            routes_made,
            state: Arc::new(fw.snapshot()),
            captures: f.capture_watches(),
            owned: f.owned().to_vec(),
        }
    }

    /// This view without its ports: what a stopped owner leaves published, so that a handle
    /// kept after the stop pins no port (and none of the buffers a port's rings hold).
    pub fn without_ports(&self) -> ForwarderView {
        ForwarderView {
            ports: Vec::new(),
            sections: Vec::new(),
            interfaces: self.interfaces.clone(),
            neighbors: self.neighbors.clone(),
            neighbors6: self.neighbors6.clone(),
            cross_connects: self.cross_connects.clone(),
            l3_cross_connects: self.l3_cross_connects.clone(),
            cut_throughs: self.cut_throughs.clone(),
            tunnels: self.tunnels.clone(),
            routes: self.routes.clone(),
            routes6: self.routes6.clone(),
            table_routes: self.table_routes.clone(),
            tables: self.tables.clone(),
            table_names: self.table_names.clone(),
            route_generation: self.route_generation,
            routes_made: self.routes_made,
            state: self.state.clone(),
            captures: Vec::new(),
            owned: self.owned.clone(),
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

    /// Whether the route list should be made again for `f`: a route changed, and the table is
    /// small or the list is older than [`ROUTE_LIST_EVERY`].
    pub fn routes_due(&self, f: &Forwarder) -> bool {
        self.routes_due_with(f, EAGER_ROUTES)
    }

    fn routes_due_with(&self, f: &Forwarder, eager: usize) -> bool {
        let fw = f.forwarding();
        self.route_generation != fw.route_generation()
            && (fw.route_count() + fw.route_count6() <= eager
                || self.routes_made.elapsed() >= ROUTE_LIST_EVERY)
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

    /// The interface and peer (its next hops) port `a` is L3 cross-connected to.
    pub fn l3_cross_connect_of(&self, a: IfIndex) -> Option<(IfIndex, L3Peer)> {
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
    pub fn is_own_address(&self, ip: IpAddr) -> bool {
        self.interfaces.iter().any(|i| has_address(i, ip))
    }

    /// The MTU of the interface holding `ip`, if one does.
    pub fn mtu_of_address(&self, ip: IpAddr) -> Option<u16> {
        self.interfaces
            .iter()
            .find(|i| has_address(i, ip))
            .map(|i| i.mtu)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn drop_route(f: &mut Forwarder, third: u8) {
        f.add_route(
            std::net::Ipv4Addr::new(192, 0, third, 0).into(),
            24,
            &[],
            None,
        )
        .unwrap();
    }

    #[test]
    fn a_large_route_list_is_made_again_at_most_every_second() {
        let mut f = super::super::test_forwarder();
        drop_route(&mut f, 1);
        // Tables of up to one route are "small" here.
        let first = ForwarderView::of_with(&f, None, 1);
        assert_eq!(first.routes.len(), 1);
        drop_route(&mut f, 2);
        assert!(first.routes_due_with(&f, 2), "a small table: made again");
        assert!(
            !first.routes_due_with(&f, 1),
            "a large one, made just now: not yet"
        );
        let lagging = ForwarderView::of_with(&f, Some(&first), 1);
        assert!(Arc::ptr_eq(&lagging.routes, &first.routes));
        // Once the list is old enough, the next view has the route.
        let old = ForwarderView {
            routes_made: Instant::now() - ROUTE_LIST_EVERY,
            ..lagging
        };
        assert!(old.routes_due_with(&f, 1));
        let caught_up = ForwarderView::of_with(&f, Some(&old), 1);
        assert_eq!(caught_up.routes.len(), 2);
        assert!(!caught_up.routes_due_with(&f, 1));
        f.stop();
    }
}
