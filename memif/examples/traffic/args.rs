//! The command line.

use std::time::Duration;

use clap::Parser;
use memif::{InterfaceConfig, SocketAddress};

use crate::endpoint::{self, RoleArg};
use crate::{stream, wire, MAX_BURST};

/// Sends sequence-numbered frames over memif and checks what comes back.
#[derive(Parser, Debug)]
#[command(name = "traffic")]
pub struct Args {
    /// Send on this control socket (a path, or `@name` for an abstract socket).
    #[arg(long, value_name = "SOCKET", value_parser = endpoint::parse_socket)]
    pub tx: Option<SocketAddress>,
    /// Role of the transmit interface.
    #[arg(long, value_enum, default_value = "slave")]
    pub tx_role: RoleArg,
    /// Interface id of the transmit interface.
    #[arg(long, default_value_t = 0)]
    pub tx_id: u32,
    /// Receive on this control socket.
    #[arg(long, value_name = "SOCKET", value_parser = endpoint::parse_socket, conflicts_with = "same")]
    pub rx: Option<SocketAddress>,
    /// Role of the receive interface.
    #[arg(long, value_enum, default_value = "slave")]
    pub rx_role: RoleArg,
    /// Interface id of the receive interface.
    #[arg(long, default_value_t = 0)]
    pub rx_id: u32,
    /// Receive on the transmit interface (the peer sends frames back).
    #[arg(long = "loop", requires = "tx")]
    pub same: bool,
    /// Shared secret of both interfaces (at most 23 bytes).
    #[arg(long)]
    pub secret: Option<String>,
    /// Descriptors per ring (power of two, ≤ 16384).
    #[arg(long, default_value = "1024", value_parser = endpoint::parse_ring_size)]
    pub ring_size: u8,
    /// Bytes per buffer; larger frames travel as chained descriptors.
    #[arg(long, default_value_t = 2048)]
    pub buffer_size: u32,
    /// Frame size in bytes, without FCS (60..=16384).
    #[arg(long, default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(stream::MIN_SIZE as i64..=stream::MAX_SIZE as i64))]
    pub size: u32,
    /// Frames per tx/rx burst (1..=256).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=MAX_BURST as i64))]
    pub burst: u32,
    /// Rate limit in frames per second (`500k`, `2M` accepted); default: as fast as possible.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Frames to send (or, with only `--rx`, to receive).
    #[arg(long)]
    pub count: Option<u64>,
    /// How long to send (or receive), e.g. 10, 2.5s, 500ms. Without it or `--count`: until
    /// SIGINT/SIGTERM.
    #[arg(long, value_parser = endpoint::parse_duration)]
    pub duration: Option<Duration>,
    /// Stream id carried in every frame; frames of other streams count as foreign.
    #[arg(long, default_value_t = 1)]
    pub stream: u32,
    /// Most frames in flight (sent, not yet received) when sending and receiving; 0: no limit.
    /// Keeps a lossy-when-full peer (testpmd io) lossless regardless of speed.
    #[arg(long, default_value_t = 0)]
    pub window: u64,
    /// After sending ends, how long to wait for frames still in flight.
    #[arg(long, default_value = "1s", value_parser = endpoint::parse_duration)]
    pub drain: Duration,
    /// How long to wait for the links to come up.
    #[arg(long, default_value = "30s", value_parser = endpoint::parse_duration)]
    pub connect_timeout: Duration,
    /// Send and receive in one loop on one thread, even on different endpoints.
    #[arg(long)]
    pub single_loop: bool,
    /// Pin the sending thread (or the single loop) to this CPU.
    #[arg(long)]
    pub tx_cpu: Option<usize>,
    /// Pin the receiving thread to this CPU.
    #[arg(long)]
    pub rx_cpu: Option<usize>,
    /// Only track sequence numbers; do not compare frame bytes.
    #[arg(long)]
    pub no_verify: bool,
    /// Destination MAC of the frames.
    #[arg(long, default_value = "02:fe:5a:00:00:02", value_parser = wire::parse_mac)]
    pub dst_mac: [u8; 6],
    /// Source MAC of the frames.
    #[arg(long, default_value = "02:fe:5a:00:00:01", value_parser = wire::parse_mac)]
    pub src_mac: [u8; 6],
    /// Print the report as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 1 unless every frame arrived once, in order and intact (with only
    /// `--rx`: judged from the sequence numbers seen).
    #[arg(long)]
    pub expect_lossless: bool,
}

/// Parses a rate: a number with an optional `k`/`M`/`G` suffix.
fn parse_rate(s: &str) -> Result<f64, String> {
    let (num, scale) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1e3),
        Some('M') => (&s[..s.len() - 1], 1e6),
        Some('G') => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    num.parse::<f64>()
        .ok()
        .map(|v| v * scale)
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or_else(|| format!("`{s}` is not a rate (e.g. 100000, 500k, 2M)"))
}

/// The configuration of the interface with `id` called `name`.
pub fn interface_config(args: &Args, id: u32, name: &str) -> InterfaceConfig {
    let mut c = InterfaceConfig::new(id);
    c.name = name.to_string();
    c.secret = args.secret.clone();
    c.log2_ring_size = args.ring_size;
    c.buffer_size = args.buffer_size;
    c
}
