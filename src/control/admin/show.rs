//! What `quiver ctl show …` reads, as the admin API's messages: the owner's view (interfaces,
//! routes, neighbours, cross-connects, memifs), the data path's counters and WireGuard status.

use std::net::{Ipv4Addr, Ipv6Addr};

use dataplane::{NodeKind, WorkerRuntime};
use drivers::{LinkStatus, PortStats};
use graph_nodes::forwarding::{Neighbor6State, Route6Info, RouteInfo, RouteSource};
use graph_nodes::state::{Adjacency, AdjacencyKind, Interface, InterfaceKind};
use graph_nodes::{IfIndex, InterfaceMode, L3Peer};
use quiver_admin_api::format_mac;
use quiver_admin_api::proto as pb;

use crate::config::{MemifMode, MemifRole, PortSection};
use crate::control::owner::ForwarderView;
use crate::forwarder::{PortEntry, WgTunnelStatus, DEFAULT_TABLE};

/// Every interface of `f`, ports with their counters as `stats` gives them.
pub(super) fn interfaces(
    f: &ForwarderView,
    stats: impl Fn(&PortEntry) -> PortStats,
) -> Vec<pb::Interface> {
    let mut out = Vec::new();
    for i in &f.interfaces {
        let mut x = pb::Interface {
            index: i.index.get(),
            name: i.name.clone(),
            mac: format_mac(i.mac),
            mtu: u32::from(i.mtu),
            mode: match i.mode {
                InterfaceMode::L3 => "l3",
                InterfaceMode::L2 => "l2",
            }
            .into(),
            addresses: addresses(i),
            ..Default::default()
        };
        match i.kind {
            InterfaceKind::Port => {
                let section = f.port_section(&i.name);
                x.r#type = port_type(section).into();
                if let Some(PortSection::AfPacket(a)) = section {
                    x.ring_kb = a.ring_kb;
                }
                if let Some(p) = f.port(&i.name) {
                    let s = stats(p);
                    (x.link_up, x.link_reason) = link(p.port.link());
                    x.rx_packets = s.rx_packets;
                    x.rx_bytes = s.rx_bytes;
                    x.tx_packets = s.tx_packets;
                    x.tx_bytes = s.tx_bytes;
                    x.rx_dropped = s.rx_dropped;
                    x.tx_dropped = s.tx_dropped;
                    x.detail = detail(&s);
                    x.rx_modes = p.port.rx_modes().iter().map(|m| m.name().into()).collect();
                }
            }
            InterfaceKind::Vlan { .. } => x.r#type = "vlan".into(),
            InterfaceKind::Vxlan { .. } | InterfaceKind::Vxlan6 { .. } => x.r#type = "vxlan".into(),
            InterfaceKind::Wireguard { .. } => x.r#type = "wireguard".into(),
        }
        out.push(x);
    }
    out
}

/// The routes of `f`, each with its distinct paths: the default table's IPv4 and IPv6 routes,
/// then each other table's.
pub(super) fn fib(f: &ForwarderView) -> Vec<pb::Route> {
    let mut out = table_fib(f, DEFAULT_TABLE, &f.routes, &f.routes6);
    for (name, v4, v6) in f.table_routes.iter() {
        out.extend(table_fib(f, name, v4, v6));
    }
    out
}

/// Table `table`'s routes `v4` and `v6`.
fn table_fib(
    f: &ForwarderView,
    table: &str,
    v4: &[RouteInfo],
    v6: &[Route6Info],
) -> Vec<pb::Route> {
    let v4 = v4.iter().map(|r| {
        let prefix = format!("{}/{}", Ipv4Addr::from(r.prefix), r.len);
        route(f, prefix, r.source, r.load_balance)
    });
    let v6 = v6.iter().map(|r| {
        let prefix = format!("{}/{}", Ipv6Addr::from(r.prefix), r.len);
        route(f, prefix, r.source, r.load_balance)
    });
    v4.chain(v6)
        .map(|r| pb::Route {
            table: table.into(),
            ..r
        })
        .collect()
}

/// The tables of `f` and the interfaces in each.
pub(super) fn tables(f: &ForwarderView) -> Vec<pb::RoutingTable> {
    f.tables
        .iter()
        .map(|(name, interfaces)| pb::RoutingTable {
            name: name.clone(),
            interfaces: interfaces.clone(),
        })
        .collect()
}

/// One route: `prefix`, where it came from and the distinct paths of load balance `lb`.
fn route(f: &ForwarderView, prefix: String, source: RouteSource, lb: u32) -> pb::Route {
    let state = &f.state;
    let name = |i: IfIndex| {
        state
            .interface(i)
            .map(|x| x.name.clone())
            .unwrap_or_default()
    };
    let buckets = state
        .load_balances
        .get(lb as usize)
        .map(|lb| lb.buckets.to_vec())
        .unwrap_or_default();
    let mut paths: Vec<pb::RoutePath> = Vec::new();
    for a in buckets {
        let Some(adj) = state.adjacencies.get(a.as_usize()) else {
            continue;
        };
        let (kind, interface) = match adj.kind {
            AdjacencyKind::Rewrite => ("rewrite", name(adj.tx)),
            AdjacencyKind::Arp => ("arp", name(adj.tx)),
            AdjacencyKind::Glean => ("glean", name(adj.tx)),
            AdjacencyKind::Local => ("local", String::new()),
            AdjacencyKind::Drop => ("drop", String::new()),
            AdjacencyKind::NextTable => ("next-table", String::new()),
        };
        let next_table = match adj.kind {
            AdjacencyKind::NextTable => f
                .table_names
                .iter()
                .find(|(t, _)| t.0 == adj.next_table)
                .map(|(_, name)| name.clone())
                .unwrap_or_default(),
            _ => String::new(),
        };
        let next_hop = match adj.kind {
            AdjacencyKind::Rewrite | AdjacencyKind::Arp => next_hop(adj),
            _ => String::new(),
        };
        let p = pb::RoutePath {
            kind: kind.into(),
            next_hop,
            interface,
            next_table,
        };
        // An ECMP object may list a path in several buckets.
        if !paths.contains(&p) {
            paths.push(p);
        }
    }
    pb::Route {
        prefix,
        source: format!("{source:?}").to_lowercase(),
        paths,
        table: String::new(),
    }
}

/// An adjacency's next hop as text: its IPv6 address for an IPv6 adjacency, else its IPv4
/// address; empty for a point-to-point or unnumbered one.
fn next_hop(adj: &Adjacency) -> String {
    if adj.next_hop6 != [0; 16] {
        Ipv6Addr::from(adj.next_hop6).to_string()
    } else if adj.next_hop != 0 {
        Ipv4Addr::from(adj.next_hop).to_string()
    } else {
        String::new()
    }
}

/// The neighbours of `f`: IPv4's, then IPv6's with where their aging stands.
pub(super) fn neighbors(f: &ForwarderView) -> Vec<pb::Neighbor> {
    let name = |i: IfIndex| f.interface_name(i).unwrap_or_default().to_string();
    let v4 = f.neighbors.iter().map(|&(i, ip, mac)| pb::Neighbor {
        interface: name(i),
        ip: Ipv4Addr::from(ip).to_string(),
        mac: format_mac(mac),
        state: String::new(),
    });
    let v6 = f.neighbors6.iter().map(|n| pb::Neighbor {
        interface: name(n.interface),
        ip: Ipv6Addr::from(n.ip).to_string(),
        mac: format_mac(n.mac),
        state: match n.state {
            Neighbor6State::Static => "static".into(),
            Neighbor6State::Reachable => "reachable".into(),
            Neighbor6State::Probing(k) => format!("probing {k}"),
        },
    });
    v4.chain(v6).collect()
}

/// The L2 and L3 cross-connects of `f`, each once (from its lower interface index).
pub(super) fn cross_connects(f: &ForwarderView) -> Vec<pb::CrossConnect> {
    let name = |i: IfIndex| f.interface_name(i).unwrap_or_default().to_string();
    let cut = &f.cut_throughs;
    let mut out = Vec::new();
    for i in &f.interfaces {
        let a = i.index;
        if let Some(b) = f.cross_connect_of(a).filter(|&b| a < b) {
            let path = if cut.contains(&(a, b)) && cut.contains(&(b, a)) {
                "cut-through"
            } else {
                "graph"
            };
            out.push(pb::CrossConnect {
                a: i.name.clone(),
                b: name(b),
                kind: "l2".into(),
                path: path.into(),
                ..Default::default()
            });
        }
        if let Some((b, peer_b)) = f.l3_cross_connect_of(a).filter(|&(b, _)| a < b) {
            let peer_a = f.l3_cross_connect_of(b).map(|(_, p)| p);
            // Each peer's next hops, IPv4's first, a comma between (as AddCrossConnect takes
            // them); empty: none (a point-to-point or WireGuard side).
            let hops = |p: L3Peer| {
                p.addrs()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            out.push(pb::CrossConnect {
                a: i.name.clone(),
                b: name(b),
                kind: "l3".into(),
                peer_a: peer_a.map(hops).unwrap_or_default(),
                peer_b: hops(peer_b),
                path: "graph".into(),
            });
        }
    }
    out
}

/// The memif ports of `f`, with their configuration and their counters as `stats` gives them.
pub(super) fn memifs(f: &ForwarderView, stats: impl Fn(&PortEntry) -> PortStats) -> Vec<pb::Memif> {
    let mut out = Vec::new();
    for p in &f.ports {
        let Some(PortSection::Memif(m)) = f.port_section(&p.name) else {
            continue;
        };
        let s = stats(p);
        let (link_up, link_reason) = link(p.port.link());
        let status = p.memif.as_ref().map(|m| m.status()).unwrap_or_default();
        let agreed = status.negotiated;
        out.push(pb::Memif {
            name: p.name.clone(),
            index: p.interface.get(),
            role: match m.role {
                MemifRole::Master => "master",
                MemifRole::Slave => "slave",
            }
            .into(),
            socket: m.socket.clone(),
            id: m.id,
            mode: match m.mode {
                MemifMode::Ethernet => "ethernet",
                MemifMode::Ip => "ip",
            }
            .into(),
            link_up,
            link_reason,
            ring_size: agreed.map_or(m.ring_size, |n| u32::from(n.ring_size)),
            buffer_size: agreed.and_then(|n| n.buffer_size).unwrap_or(m.buffer_size),
            queues: u32::from(m.queues),
            rx_queues: agreed.map_or(0, |n| n.rx_queues as u32),
            tx_queues: agreed.map_or(0, |n| n.tx_queues as u32),
            configured_ring_size: m.ring_size,
            configured_buffer_size: m.buffer_size,
            last_refusal: status
                .refusals
                .last()
                .map(ToString::to_string)
                .unwrap_or_default(),
            rx_packets: s.rx_packets,
            rx_bytes: s.rx_bytes,
            tx_packets: s.tx_packets,
            tx_bytes: s.tx_bytes,
            rx_dropped: s.rx_dropped,
            tx_dropped: s.tx_dropped,
            detail: detail(&s),
        });
    }
    out
}

/// A worker's (or the workers' summed) node runtime.
pub(super) fn worker_runtime(w: &WorkerRuntime) -> pb::WorkerRuntime {
    let l = &w.worker_loop;
    pb::WorkerRuntime {
        worker: w.worker.map(|x| x as u32),
        core: w.core.map(|x| x as u32),
        nodes: w
            .nodes
            .iter()
            .map(|n| pb::NodeRuntime {
                name: n.name.clone(),
                state: match n.kind {
                    NodeKind::Input => "polling",
                    NodeKind::Internal => "active",
                }
                .into(),
                calls: n.calls,
                vectors: n.vectors,
                packets: n.packets,
                clocks: n.cycles,
                clocks_per_packet: n.clocks_per_packet(),
                vectors_per_call: n.packets_per_call(),
            })
            .collect(),
        busy_passes: l.busy_passes,
        busy_packets: l.busy_packets,
        busy_clocks: l.busy_cycles,
        idle_passes: l.idle_passes,
        idle_clocks: l.idle_cycles,
    }
}

/// A WireGuard tunnel's status as the admin API reports it.
pub(super) fn wireguard_tunnel(t: &WgTunnelStatus) -> pb::WireguardTunnel {
    let unix = |at: Option<std::time::SystemTime>| {
        at.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs())
    };
    pb::WireguardTunnel {
        name: t.name.clone(),
        public_key: t.public_key.clone(),
        listen: t.listen.to_string(),
        bad_macs: t.bad_macs,
        refused: t.refused,
        punts: t.punts,
        peers: t
            .peers
            .iter()
            .map(|p| pb::WireguardPeer {
                public_key: p.public_key.clone(),
                endpoint: p.endpoint.map(|e| e.to_string()).unwrap_or_default(),
                allowed_ips: p.allowed_ips.clone(),
                last_handshake_unix: unix(p.last_handshake),
                handshakes: p.handshakes,
                rekeys: p.rekeys,
                initiations_sent: p.initiations_sent,
                replays: p.replays,
                bad_tags: p.bad_tags,
                rx_bytes: p.rx_bytes,
                tx_bytes: p.tx_bytes,
                rx_packets: p.rx_packets,
                tx_packets: p.tx_packets,
            })
            .collect(),
    }
}

/// The type `show interfaces` gives a port of this configuration.
fn port_type(section: Option<&PortSection>) -> &'static str {
    match section {
        Some(PortSection::Memif(_)) => "memif",
        Some(PortSection::AfPacket(_)) => "af_packet",
        Some(PortSection::AfXdp(_)) => "af_xdp",
        Some(PortSection::Tap(_)) => "tap",
        Some(PortSection::Dpdk(_)) => "dpdk",
        None => "port",
    }
}

/// A link's state as (up, the reason it is down).
fn link(l: LinkStatus) -> (bool, String) {
    match l {
        LinkStatus::Up => (true, String::new()),
        LinkStatus::Down(why) => (false, why),
    }
}

/// A driver's own counters.
fn detail(s: &PortStats) -> Vec<pb::Counter> {
    s.detail
        .iter()
        .map(|(name, value)| pb::Counter {
            name: name.clone(),
            value: *value,
        })
        .collect()
}

/// `i`'s addresses as `address/len`: IPv4's, IPv6's, then its IPv6 link-local address.
fn addresses(i: &Interface) -> Vec<String> {
    let v4 = i
        .addresses
        .iter()
        .map(|&(a, l)| format!("{}/{l}", Ipv4Addr::from(a)));
    let v6 = i
        .addresses6
        .iter()
        .map(|&(a, l)| format!("{}/{l}", Ipv6Addr::from(a)));
    let ll = i.link_local.map(|a| format!("{}/64", Ipv6Addr::from(a)));
    v4.chain(v6).chain(ll).collect()
}
