//! `quiver ctl`: the admin API's command-line client.

mod capture;
mod health;
mod interface;
mod render;
mod reply;
mod show;
mod tables;
mod watch;
mod wireguard;

use std::path::PathBuf;

use clap::{Args, Subcommand};
use quiver_admin_api::AdminClient;

use quiver::control::admin::DEFAULT_SOCKET;

/// `quiver ctl`'s arguments.
#[derive(Args)]
pub struct CtlArgs {
    /// The admin socket of the `quiver run` to talk to.
    #[arg(long, global = true, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Print JSON (stable field names) instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(Subcommand)]
enum CtlCommand {
    /// Show interfaces, runtime, errors, fib, tables, neighbors, cross-connects, memif,
    /// connections, trace.
    #[command(subcommand)]
    Show(show::Show),
    /// Trace packets: `trace add <input node> <count>`, then `show trace`.
    #[command(subcommand)]
    Trace(tables::Trace),
    /// Clear counters (runtime, errors, interfaces) or the trace.
    #[command(subcommand)]
    Clear(tables::Clear),
    /// Add or delete routes (through next hops, or into another table: `--next-table`).
    #[command(subcommand)]
    Route(tables::Route),
    /// Add or delete neighbours (static ARP or IPv6 neighbour-discovery entries).
    #[command(subcommand, alias = "neighbour")]
    Neighbor(tables::Neighbor),
    /// Add or delete an interface's addresses (IPv4 or IPv6).
    #[command(subcommand)]
    Address(tables::Address),
    /// Add or delete routing tables (VRFs), or move an interface into one.
    #[command(subcommand, alias = "vrf")]
    Table(tables::RoutingTable),
    /// Add or delete cross-connects.
    #[command(subcommand, alias = "cross-connect")]
    Xconnect(tables::Xconnect),
    /// Add (memif, af-packet) or delete interfaces.
    #[command(subcommand)]
    Interface(interface::Interface),
    /// Capture a port's packets into a pcap file: `capture start IFACE --file F`, `capture
    /// stop IFACE`, `show captures`.
    #[command(subcommand)]
    Capture(capture::CaptureCmd),
    /// A live view, like `top`: rates per interface (pps, Mbit/s, drops/s), per node
    /// (packets/s, clocks/packet) and drops by reason, redrawn every `--interval` seconds.
    Watch(watch::WatchArgs),
    /// Exit 0 when Quiver answers: the admin API, or with `--nsm-socket` the NSM services'
    /// gRPC health (both SERVING) — for container health checks and Kubernetes probes.
    Health {
        /// The NSM listen socket to check instead of the admin socket (`/listen.on.sock` or
        /// `unix:///listen.on.sock`), or its TCP address (`tcp://host:port`, checked with mTLS:
        /// the SVID from `SPIFFE_ENDPOINT_SOCKET`).
        #[arg(long)]
        nsm_socket: Option<String>,
        /// Seconds to wait for an answer.
        #[arg(long, default_value_t = 3)]
        timeout: u64,
    },
}

/// Runs one `quiver ctl` command; the error is what to print.
pub fn run(args: CtlArgs) -> Result<(), String> {
    if let CtlCommand::Health {
        nsm_socket: Some(socket),
        timeout,
    } = &args.command
    {
        return health::nsm(socket, *timeout, args.json);
    }
    let client = AdminClient::connect(&args.socket)?;
    let json = args.json;
    match args.command {
        CtlCommand::Show(what) => show::run(&client, what, json),
        CtlCommand::Capture(c) => capture::run(&client, c, json),
        CtlCommand::Trace(c) => tables::trace(&client, c, json),
        CtlCommand::Clear(c) => tables::clear(&client, c, json),
        CtlCommand::Route(c) => tables::route(&client, c, json),
        CtlCommand::Neighbor(c) => tables::neighbor(&client, c, json),
        CtlCommand::Address(c) => tables::address(&client, c, json),
        CtlCommand::Table(c) => tables::table(&client, c, json),
        CtlCommand::Xconnect(c) => tables::xconnect(&client, c, json),
        CtlCommand::Interface(c) => interface::run(&client, c, json),
        CtlCommand::Watch(w) => watch::run(&client, &w, json, &args.socket),
        // With --nsm-socket it was answered above; here: the admin API answers a call.
        CtlCommand::Health { .. } => health::admin(&client, json),
    }
}

#[cfg(test)]
mod tests {
    use super::interface::{AddInterface, Interface};
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        ctl: CtlArgs,
    }

    #[test]
    fn the_command_line_is_consistent_and_global_flags_go_anywhere() {
        Cli::command().debug_assert();
        let c = Cli::try_parse_from([
            "ctl",
            "interface",
            "add",
            "memif",
            "m2",
            "--memif-socket",
            "/tmp/m.sock",
            "--json",
            "--socket",
            "/tmp/admin.sock",
        ])
        .unwrap()
        .ctl;
        assert!(c.json);
        assert_eq!(c.socket, PathBuf::from("/tmp/admin.sock"));
        assert!(matches!(
            c.command,
            CtlCommand::Interface(Interface::Add(AddInterface::Memif { ref memif_socket, id: 0, .. }))
                if memif_socket == "/tmp/m.sock"
        ));
        let c = Cli::try_parse_from(["ctl", "show", "fib"]).unwrap().ctl;
        assert_eq!(c.socket, PathBuf::from(DEFAULT_SOCKET));
        assert!(!c.json);
        assert!(
            Cli::try_parse_from(["ctl", "xconnect", "add", "a", "b", "--peer-a", "1.1.1.1"])
                .is_err()
        );
        assert!(Cli::try_parse_from(["ctl", "trace", "add", "port-input", "many"]).is_err());
    }
}
