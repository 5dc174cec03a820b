//! `quiver ctl`: the admin API's command-line client.

mod capture;
mod render;
mod watch;
mod wireguard;

use std::path::PathBuf;

use clap::{Args, Subcommand};
use quiver_admin_api::proto as pb;
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
    /// Show interfaces, runtime, errors, fib, neighbors, cross-connects, memif, connections,
    /// trace.
    #[command(subcommand)]
    Show(Show),
    /// Trace packets: `trace add <input node> <count>`, then `show trace`.
    #[command(subcommand)]
    Trace(Trace),
    /// Clear counters (runtime, errors, interfaces) or the trace.
    #[command(subcommand)]
    Clear(Clear),
    /// Add or delete routes.
    #[command(subcommand)]
    Route(Route),
    /// Add or delete neighbours (static ARP entries).
    #[command(subcommand, alias = "neighbour")]
    Neighbor(Neighbor),
    /// Add or delete cross-connects.
    #[command(subcommand, alias = "cross-connect")]
    Xconnect(Xconnect),
    /// Add (memif, af-packet) or delete interfaces.
    #[command(subcommand)]
    Interface(Interface),
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

#[derive(Subcommand)]
enum Show {
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
    /// Routes and their paths.
    Fib,
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

#[derive(Subcommand)]
enum Trace {
    /// Trace the next COUNT packets input node NODE produces (`port-input` for the ports).
    Add { node: String, count: u32 },
}

#[derive(Subcommand)]
enum Clear {
    /// Zero runtime, error and interface counters.
    Counters,
    /// Forget traced packets and stop tracing.
    Trace,
}

#[derive(Subcommand)]
enum Route {
    /// Add (or replace) a route: `route add 10.2.0.0/16 --via 10.0.1.2@memif1` (several
    /// `--via`: ECMP; none: drop).
    Add {
        /// Destination prefix, a.b.c.d/len.
        prefix: String,
        /// Next hop as address@interface.
        #[arg(long)]
        via: Vec<String>,
    },
    /// Delete the route to a prefix.
    #[command(alias = "delete")]
    Del { prefix: String },
}

#[derive(Subcommand)]
enum Neighbor {
    /// `neighbor add <interface> <ip> <mac>`.
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
enum Xconnect {
    /// Cross-connect two interfaces: L2 (every frame, untouched), or L3 with both peers.
    Add {
        a: String,
        b: String,
        /// L3: where packets from B leave A to.
        #[arg(long, requires = "peer_b")]
        peer_a: Option<String>,
        /// L3: where packets from A leave B to.
        #[arg(long, requires = "peer_a")]
        peer_b: Option<String>,
    },
    /// Remove the cross-connect of an interface (either end).
    #[command(alias = "delete")]
    Del { interface: String },
}

#[derive(Subcommand)]
enum Interface {
    /// Add an interface.
    #[command(subcommand)]
    Add(AddInterface),
    /// Delete an interface and everything that refers to it.
    #[command(alias = "delete")]
    Del { name: String },
}

#[derive(Subcommand)]
enum AddInterface {
    /// A memif port.
    Memif {
        name: String,
        /// The memif control socket: a path, or @name for an abstract socket.
        #[arg(long = "memif-socket", value_name = "SOCKET")]
        memif_socket: String,
        /// master (listen) or slave (connect).
        #[arg(long, default_value = "master")]
        role: String,
        /// Interface id on the socket.
        #[arg(long, default_value_t = 0)]
        id: u32,
        /// ethernet or ip.
        #[arg(long, default_value = "ethernet")]
        mode: String,
        /// Ring size in slots (a power of two).
        #[arg(long, default_value_t = 1024)]
        ring_size: u32,
        /// memif buffer size in bytes.
        #[arg(long, default_value_t = 2048)]
        buffer_size: u32,
        /// Shared secret.
        #[arg(long)]
        secret: Option<String>,
        /// MAC address (default: derived from the id).
        #[arg(long)]
        mac: Option<String>,
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
    },
    /// An AF_PACKET port on a kernel interface.
    AfPacket {
        name: String,
        /// The kernel interface (a veth end, say).
        #[arg(long)]
        host_interface: String,
        /// Receive only frames for the interface's MAC.
        #[arg(long)]
        no_promiscuous: bool,
        #[arg(long, default_value_t = 1500)]
        mtu: u32,
        /// KiB of each queue's receive ring and of its transmit ring, memory the kernel pins
        /// while the port is open: a power of two from 64 to 65536 (default 4096), as
        /// `ring_kb` in a `[[port]]` of type "af_packet".
        #[arg(long, value_name = "KIB")]
        ring_kb: Option<u32>,
    },
    /// A WireGuard tunnel (IP payload) with one peer; route into it with `route add`.
    Wireguard {
        name: String,
        /// Our underlay IPv4 address (one of Quiver's).
        #[arg(long)]
        address: String,
        /// The UDP port to listen on.
        #[arg(long)]
        listen_port: u32,
        /// A file holding our private key (base64, as `wg genkey` writes it).
        #[arg(long)]
        private_key_file: String,
        /// The underlay's MTU (the tunnel's is 60 less).
        #[arg(long, default_value_t = 1500)]
        underlay_mtu: u32,
        /// The peer's public key (base64).
        #[arg(long)]
        peer: String,
        /// The peer's `IPv4:port` (default: learned from its handshake).
        #[arg(long, default_value = "")]
        endpoint: String,
        /// The peer's allowed IPs, comma-separated prefixes.
        #[arg(long, value_delimiter = ',')]
        allowed_ips: Vec<String>,
        /// Seconds between keepalives to the peer (0: none).
        #[arg(long, default_value_t = 0)]
        persistent_keepalive: u32,
    },
}

/// Runs one `quiver ctl` command; the error is what to print.
pub fn run(args: CtlArgs) -> Result<(), String> {
    if let CtlCommand::Health {
        nsm_socket: Some(socket),
        timeout,
    } = &args.command
    {
        return nsm_health(socket, *timeout, args.json);
    }
    let client = AdminClient::connect(&args.socket)?;
    let mut s = client.stub();
    let json = args.json;
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
    // Makes a change; prints `{"ok": true}` with --json.
    macro_rules! change {
        ($call:expr) => {{
            client.block_on($call).map_err(status)?;
            if json {
                print_json(&serde_json::json!({ "ok": true }));
            }
        }};
    }
    match args.command {
        CtlCommand::Show(what) => match what {
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
        },
        CtlCommand::Capture(c) => {
            let reply = match c.request()? {
                capture::Request::Start(r) => client.block_on(s.capture_start(r)),
                capture::Request::Stop(r) => client.block_on(s.capture_stop(r)),
            }
            .map_err(status)?
            .into_inner();
            if json {
                print_json(&capture::json(&reply));
            } else {
                print!("{}", capture::line(&reply));
            }
        }
        CtlCommand::Trace(Trace::Add { node, count }) => {
            change!(s.trace_add(pb::TraceAddRequest { node, count }))
        }
        CtlCommand::Clear(Clear::Counters) => change!(s.clear_counters(pb::Empty {})),
        CtlCommand::Clear(Clear::Trace) => change!(s.trace_clear(pb::Empty {})),
        CtlCommand::Route(Route::Add { prefix, via }) => {
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
            change!(s.add_route(pb::AddRouteRequest { prefix, via }))
        }
        CtlCommand::Route(Route::Del { prefix }) => {
            change!(s.delete_route(pb::DeleteRouteRequest { prefix }))
        }
        CtlCommand::Neighbor(Neighbor::Add { interface, ip, mac }) => {
            change!(s.add_neighbor(pb::AddNeighborRequest { interface, ip, mac }))
        }
        CtlCommand::Neighbor(Neighbor::Del { interface, ip }) => {
            change!(s.delete_neighbor(pb::DeleteNeighborRequest { interface, ip }))
        }
        CtlCommand::Xconnect(Xconnect::Add {
            a,
            b,
            peer_a,
            peer_b,
        }) => change!(s.add_cross_connect(pb::AddCrossConnectRequest {
            a,
            b,
            peer_a: peer_a.unwrap_or_default(),
            peer_b: peer_b.unwrap_or_default(),
        })),
        CtlCommand::Xconnect(Xconnect::Del { interface }) => {
            change!(s.delete_cross_connect(pb::DeleteCrossConnectRequest { interface }))
        }
        CtlCommand::Interface(Interface::Add(add)) => {
            let reply = match add {
                AddInterface::Memif {
                    name,
                    memif_socket,
                    role,
                    id,
                    mode,
                    ring_size,
                    buffer_size,
                    secret,
                    mac,
                    mtu,
                } => client.block_on(s.add_memif(pb::AddMemifRequest {
                    name,
                    role,
                    socket: memif_socket,
                    id,
                    mode,
                    ring_size,
                    buffer_size,
                    secret: secret.unwrap_or_default(),
                    mac: mac.unwrap_or_default(),
                    mtu,
                })),
                AddInterface::AfPacket {
                    name,
                    host_interface,
                    no_promiscuous,
                    mtu,
                    ring_kb,
                } => client.block_on(s.add_af_packet(pb::AddAfPacketRequest {
                    name,
                    host_interface,
                    promiscuous: Some(!no_promiscuous),
                    mtu,
                    ring_kb,
                })),
                AddInterface::Wireguard {
                    name,
                    address,
                    listen_port,
                    private_key_file,
                    underlay_mtu,
                    peer,
                    endpoint,
                    allowed_ips,
                    persistent_keepalive,
                } => client.block_on(
                    s.add_wireguard(pb::AddWireguardRequest {
                        name,
                        private_key: String::new(),
                        // quiver run reads it: a relative path is made absolute here.
                        private_key_file: std::path::absolute(&private_key_file)
                            .map_or(private_key_file, |p| p.display().to_string()),
                        listen_port,
                        address,
                        underlay_mtu,
                        peers: vec![pb::WireguardPeerSpec {
                            public_key: peer,
                            endpoint,
                            allowed_ips,
                            persistent_keepalive,
                        }],
                    }),
                ),
            }
            .map_err(status)?
            .into_inner();
            if json {
                print_json(&serde_json::json!({ "index": reply.index }));
            } else {
                println!("interface index {}", reply.index);
            }
        }
        CtlCommand::Interface(Interface::Del { name }) => {
            change!(s.delete_interface(pb::DeleteInterfaceRequest { name }))
        }
        CtlCommand::Watch(w) => watch::run(&client, &w, json, &args.socket)?,
        // With --nsm-socket it was answered above; here: the admin API answers a call.
        CtlCommand::Health { .. } => {
            client
                .block_on(s.show_interfaces(pb::Empty {}))
                .map_err(status)?;
            if json {
                print_json(&serde_json::json!({ "serving": ["quiver.admin.Admin"] }));
            } else {
                println!("serving: quiver.admin.Admin");
            }
        }
    }
    Ok(())
}

fn print_json(v: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    );
}

/// A refusal as the user reads it: `not found: no port named `x``.
fn status(s: quiver_admin_api::Status) -> String {
    use quiver_admin_api::Code;
    let code = match s.code() {
        Code::NotFound => "not found",
        Code::InvalidArgument => "invalid argument",
        Code::AlreadyExists => "already exists",
        Code::Unavailable => "unavailable",
        Code::Internal => "internal error",
        Code::Unimplemented => "not implemented by this quiver",
        _ => "error",
    };
    format!("{code}: {}", s.message())
}

/// `quiver ctl health --nsm-socket S`: both NSM services SERVING.
fn nsm_health(socket: &str, timeout: u64, json: bool) -> Result<(), String> {
    let url = nsm_url(socket);
    let serving =
        nsm_forwarder::health::check_blocking(&url, std::time::Duration::from_secs(timeout))?;
    if json {
        print_json(&serde_json::json!({ "serving": serving }));
    } else {
        println!("serving: {}", serving.join(", "));
    }
    Ok(())
}

/// `--nsm-socket` as a URL: `unix://` and `tcp://` ones as they are, a path as `unix://path`.
fn nsm_url(socket: &str) -> String {
    if socket.starts_with("unix://") || socket.starts_with("tcp://") {
        socket.to_string()
    } else {
        format!("unix://{socket}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[test]
    fn the_nsm_socket_is_a_path_or_a_unix_or_tcp_url() {
        assert_eq!(nsm_url("/listen.on.sock"), "unix:///listen.on.sock");
        assert_eq!(nsm_url("unix:///listen.on.sock"), "unix:///listen.on.sock");
        assert_eq!(nsm_url("tcp://10.0.0.1:5001"), "tcp://10.0.0.1:5001");
    }

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
