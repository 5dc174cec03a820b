//! `quiver ctl interface add|del`: memif, AF_PACKET and WireGuard ports.

use clap::Subcommand;
use quiver_admin_api::proto as pb;
use quiver_admin_api::AdminClient;

use super::reply::{change, print_json, status};

#[derive(Subcommand)]
pub enum Interface {
    /// Add an interface.
    #[command(subcommand)]
    Add(AddInterface),
    /// Delete an interface and everything that refers to it.
    #[command(alias = "delete")]
    Del { name: String },
}

#[derive(Subcommand)]
pub enum AddInterface {
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
        /// Queue pairs (1 to 256): a slave asks for this many, a master accepts at most this
        /// many; spread over the workers.
        #[arg(long, default_value_t = 1)]
        queues: u32,
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
        /// Our underlay address (one of Quiver's), IPv4 or IPv6: the tunnel's outer family.
        #[arg(long)]
        address: String,
        /// The UDP port to listen on.
        #[arg(long)]
        listen_port: u32,
        /// A file holding our private key (base64, as `wg genkey` writes it).
        #[arg(long)]
        private_key_file: String,
        /// The underlay's MTU (the tunnel's is 60 less over IPv4, 80 over IPv6).
        #[arg(long, default_value_t = 1500)]
        underlay_mtu: u32,
        /// The peer's public key (base64).
        #[arg(long)]
        peer: String,
        /// The peer's `IPv4:port` or `[IPv6]:port`, of `--address`'s family (default: learned
        /// from its handshake).
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

/// `interface add …|del NAME`.
pub fn run(client: &AdminClient, cmd: Interface, json: bool) -> Result<(), String> {
    match cmd {
        Interface::Add(add) => {
            let reply = add_interface(client, add)?;
            if json {
                print_json(&serde_json::json!({ "index": reply.index }));
            } else {
                println!("interface index {}", reply.index);
            }
        }
        Interface::Del { name } => {
            let mut s = client.stub();
            change!(
                client,
                json,
                s.delete_interface(pb::DeleteInterfaceRequest { name })
            )
        }
    }
    Ok(())
}

/// Adds the interface; the reply holds its index.
fn add_interface(client: &AdminClient, add: AddInterface) -> Result<pb::AddInterfaceReply, String> {
    let mut s = client.stub();
    Ok(match add {
        AddInterface::Memif {
            name,
            memif_socket,
            role,
            id,
            mode,
            ring_size,
            buffer_size,
            queues,
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
            queues,
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
    .into_inner())
}
