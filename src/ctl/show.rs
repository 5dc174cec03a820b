//! `quiver ctl show …`: one admin call each, printed as a table or as JSON.

use clap::Subcommand;
use quiver_admin_api::proto as pb;
use quiver_admin_api::AdminClient;

use super::reply::{print_json, status};
use super::{capture, render, wireguard};

#[derive(Subcommand)]
pub enum Show {
    /// Every interface: link, mode, addresses, counters.
    Interfaces,
    /// Per-node calls, vectors, packets, clocks/packet, vectors/call (summed over workers).
    Runtime {
        /// One table per worker.
        #[arg(long)]
        per_worker: bool,
    },
    /// Error counters by node and reason (non-zero ones).
    Errors {
        /// Zero counters too.
        #[arg(long)]
        all: bool,
    },
    /// Routes and their paths, of every table.
    Fib,
    /// Routing tables (VRFs) and the interfaces in each.
    Tables,
    /// Neighbours (configured or learned by ARP).
    #[command(alias = "neighbours")]
    Neighbors,
    /// Cross-connects.
    #[command(alias = "xconnects")]
    CrossConnects,
    /// memif ports: role, socket, id, link, rings, counters.
    Memif,
    /// NSM connections.
    Connections,
    /// Packets traced so far.
    Trace,
    /// Packet captures: state, packets written, file.
    Captures,
    /// WireGuard tunnels: peers, last handshake, handshakes, rekeys, replays, bytes.
    Wireguard,
}

/// Runs `show WHAT` and prints the reply.
pub fn run(client: &AdminClient, what: Show, json: bool) -> Result<(), String> {
    let mut s = client.stub();
    // Prints a reply as a table or as JSON.
    macro_rules! show {
        ($call:expr, $table:expr, $json:path) => {{
            let reply = client.block_on($call).map_err(status)?.into_inner();
            if json {
                print_json(&$json(&reply));
            } else {
                print!("{}", $table(&reply));
            }
        }};
    }
    match what {
        Show::Interfaces => show!(
            s.show_interfaces(pb::Empty {}),
            render::interfaces,
            render::interfaces_json
        ),
        Show::Runtime { per_worker } => show!(
            s.show_runtime(pb::ShowRuntimeRequest { per_worker }),
            render::runtime,
            render::runtime_json
        ),
        Show::Errors { all } => show!(
            s.show_errors(pb::Empty {}),
            |r| render::errors(r, all),
            render::errors_json
        ),
        Show::Fib => show!(s.show_fib(pb::Empty {}), render::fib, render::fib_json),
        Show::Tables => show!(
            s.show_tables(pb::Empty {}),
            render::tables,
            render::tables_json
        ),
        Show::Neighbors => show!(
            s.show_neighbors(pb::Empty {}),
            render::neighbors,
            render::neighbors_json
        ),
        Show::CrossConnects => show!(
            s.show_cross_connects(pb::Empty {}),
            render::cross_connects,
            render::cross_connects_json
        ),
        Show::Memif => show!(
            s.show_memif(pb::Empty {}),
            render::memif,
            render::memif_json
        ),
        Show::Connections => show!(
            s.show_connections(pb::Empty {}),
            render::connections,
            render::connections_json
        ),
        Show::Trace => show!(
            s.show_trace(pb::Empty {}),
            render::trace,
            render::trace_json
        ),
        Show::Captures => show!(
            s.show_captures(pb::Empty {}),
            capture::table,
            capture::table_json
        ),
        Show::Wireguard => show!(
            s.show_wireguard(pb::Empty {}),
            wireguard::table,
            wireguard::table_json
        ),
    }
    Ok(())
}
