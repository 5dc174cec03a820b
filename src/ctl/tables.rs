//! `quiver ctl trace|clear|route|table|neighbor|address|xconnect …`: changes to the forwarding tables and
//! the counters, each one admin call answered with nothing but success.

use clap::Subcommand;
use quiver_admin_api::proto as pb;
use quiver_admin_api::AdminClient;

use super::reply::change;

#[derive(Subcommand)]
pub enum Trace {
    /// Trace the next COUNT packets input node NODE produces (`port-input` for the ports).
    Add { node: String, count: u32 },
}

#[derive(Subcommand)]
pub enum Clear {
    /// Zero runtime, error and interface counters.
    Counters,
    /// Forget traced packets and stop tracing.
    Trace,
}

#[derive(Subcommand)]
pub enum Route {
    /// Add (or replace) a route: `route add 10.2.0.0/16 --via 10.0.1.2@memif1`, `route add
    /// 2001:db8:2::/48 --via fe80::1@memif1` (several `--via`: ECMP; none: drop), or a
    /// next-table route, `route add 0.0.0.0/0 --table red --next-table default` (what it
    /// matches is looked up again in that table; refused when a packet would cross tables
    /// twice).
    Add {
        /// Destination prefix, a.b.c.d/len or x:y::z/len.
        prefix: String,
        /// Next hop as address@interface, of the prefix's family (IPv6: global or
        /// link-local).
        #[arg(long)]
        via: Vec<String>,
        /// The routing table (default: the default table).
        #[arg(long)]
        table: Option<String>,
        /// Look what the route matches up again in this table (another one; no --via).
        #[arg(long, conflicts_with = "via")]
        next_table: Option<String>,
    },
    /// Delete the route to a prefix.
    #[command(alias = "delete")]
    Del {
        prefix: String,
        /// The routing table (default: the default table).
        #[arg(long)]
        table: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum RoutingTable {
    /// `table add NAME`: a routing table (VRF) with its own IPv4 and IPv6 routes.
    Add { name: String },
    /// `table del NAME`: a table no interface is in and no next-table route names, with its
    /// routes.
    #[command(alias = "delete")]
    Del { name: String },
    /// `table set INTERFACE NAME`: moves an interface (before it has addresses or routes) into
    /// a table; its packets are routed by that table's routes.
    Set { interface: String, name: String },
}

#[derive(Subcommand)]
pub enum Neighbor {
    /// `neighbor add <interface> <ip> <mac>`: a static ARP entry, or for an IPv6 address a
    /// static neighbour-discovery entry (never aged).
    Add {
        interface: String,
        ip: String,
        mac: String,
    },
    /// `neighbor del <interface> <ip>`.
    #[command(alias = "delete")]
    Del { interface: String, ip: String },
}

#[derive(Subcommand)]
pub enum Address {
    /// `address add <interface> <ip/len>`: an address of ours (answers ARP or neighbour
    /// discovery and ping; its subnet becomes connected). The first IPv6 address also gives
    /// the interface its EUI-64 link-local address.
    Add { interface: String, address: String },
    /// `address del <interface> <ip/len>`.
    #[command(alias = "delete")]
    Del { interface: String, address: String },
}

#[derive(Subcommand)]
pub enum Xconnect {
    /// Cross-connect two interfaces: L2 (every frame, untouched), or L3 with both peers.
    Add {
        a: String,
        b: String,
        /// L3: where packets from B leave A to: a next hop, or an IPv4 and an IPv6 one with a
        /// comma between (`10.0.0.2,fd00::2`); each packet goes to the one of its family.
        #[arg(long, requires = "peer_b")]
        peer_a: Option<String>,
        /// L3: where packets from A leave B to (as --peer-a).
        #[arg(long, requires = "peer_a")]
        peer_b: Option<String>,
    },
    /// Remove the cross-connect of an interface (either end).
    #[command(alias = "delete")]
    Del { interface: String },
}

/// `trace add NODE COUNT`.
pub fn trace(client: &AdminClient, cmd: Trace, json: bool) -> Result<(), String> {
    let mut s = client.stub();
    match cmd {
        Trace::Add { node, count } => {
            change!(
                client,
                json,
                s.trace_add(pb::TraceAddRequest { node, count })
            )
        }
    }
    Ok(())
}

/// `clear counters|trace`.
pub fn clear(client: &AdminClient, cmd: Clear, json: bool) -> Result<(), String> {
    let mut s = client.stub();
    match cmd {
        Clear::Counters => change!(client, json, s.clear_counters(pb::Empty {})),
        Clear::Trace => change!(client, json, s.trace_clear(pb::Empty {})),
    }
    Ok(())
}

/// `route add|del`.
pub fn route(client: &AdminClient, cmd: Route, json: bool) -> Result<(), String> {
    let mut s = client.stub();
    match cmd {
        Route::Add {
            prefix,
            via,
            table,
            next_table,
        } => {
            let via = via
                .iter()
                .map(|v| {
                    v.split_once('@')
                        .map(|(ip, i)| pb::NextHop {
                            next_hop: ip.into(),
                            interface: i.into(),
                        })
                        .ok_or_else(|| format!("--via `{v}` is not address@interface"))
                })
                .collect::<Result<Vec<_>, String>>()?;
            change!(
                client,
                json,
                s.add_route(pb::AddRouteRequest {
                    prefix,
                    via,
                    table: table.unwrap_or_default(),
                    next_table: next_table.unwrap_or_default(),
                })
            )
        }
        Route::Del { prefix, table } => {
            change!(
                client,
                json,
                s.delete_route(pb::DeleteRouteRequest {
                    prefix,
                    table: table.unwrap_or_default(),
                })
            )
        }
    }
    Ok(())
}

/// `neighbor add|del`.
pub fn neighbor(client: &AdminClient, cmd: Neighbor, json: bool) -> Result<(), String> {
    let mut s = client.stub();
    match cmd {
        Neighbor::Add { interface, ip, mac } => change!(
            client,
            json,
            s.add_neighbor(pb::AddNeighborRequest { interface, ip, mac })
        ),
        Neighbor::Del { interface, ip } => change!(
            client,
            json,
            s.delete_neighbor(pb::DeleteNeighborRequest { interface, ip })
        ),
    }
    Ok(())
}

/// `table add|del|set`.
pub fn table(client: &AdminClient, cmd: RoutingTable, json: bool) -> Result<(), String> {
    let mut s = client.stub();
    match cmd {
        RoutingTable::Add { name } => {
            change!(client, json, s.add_table(pb::TableRequest { name }))
        }
        RoutingTable::Del { name } => {
            change!(client, json, s.delete_table(pb::TableRequest { name }))
        }
        RoutingTable::Set { interface, name } => change!(
            client,
            json,
            s.set_interface_table(pb::SetInterfaceTableRequest {
                interface,
                table: name
            })
        ),
    }
    Ok(())
}

/// `address add|del`.
pub fn address(client: &AdminClient, cmd: Address, json: bool) -> Result<(), String> {
    let mut s = client.stub();
    match cmd {
        Address::Add { interface, address } => change!(
            client,
            json,
            s.add_address(pb::AddressRequest { interface, address })
        ),
        Address::Del { interface, address } => change!(
            client,
            json,
            s.delete_address(pb::AddressRequest { interface, address })
        ),
    }
    Ok(())
}

/// `xconnect add|del`.
pub fn xconnect(client: &AdminClient, cmd: Xconnect, json: bool) -> Result<(), String> {
    let mut s = client.stub();
    match cmd {
        Xconnect::Add {
            a,
            b,
            peer_a,
            peer_b,
        } => change!(
            client,
            json,
            s.add_cross_connect(pb::AddCrossConnectRequest {
                a,
                b,
                peer_a: peer_a.unwrap_or_default(),
                peer_b: peer_b.unwrap_or_default(),
            })
        ),
        Xconnect::Del { interface } => change!(
            client,
            json,
            s.delete_cross_connect(pb::DeleteCrossConnectRequest { interface })
        ),
    }
    Ok(())
}
