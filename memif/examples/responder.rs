//! An ICMP/ARP responder on one memif interface: a minimal CNF, in the spirit of libmemif's
//! example. It answers ARP requests for its address and ICMP echo requests to it, and counts
//! everything else by the reason it was ignored.
//!
//! ```text
//! responder --socket /run/vpp/memif.sock --ip 192.168.1.2/24            # slave, id 0
//! responder --role master --socket @memif-demo --id 3 --secret s3cret --ip 10.0.0.1/24
//! ```
//!
//! It polls while traffic flows and, after `--idle-us` without any, switches its receive queues
//! to interrupt mode and sleeps in poll(2) on their eventfds, the control socket and a signalfd.
//! A slave reconnects when its master goes away. On SIGINT/SIGTERM or after `--duration` it
//! prints a summary (`--json`: one JSON object) and exits. Link changes are printed as
//! `connected …` / `disconnected …` lines on stdout as they happen.

#[path = "common/endpoint.rs"]
mod endpoint;
#[path = "common/reply.rs"]
mod reply;
#[path = "common/reply6.rs"]
mod reply6;
#[path = "common/wire.rs"]
mod wire;

use std::process::ExitCode;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use memif::{Interface, InterfaceConfig, SocketAddress};
use nix::poll::{PollFd, PollFlags};

use endpoint::{Endpoint, LinkWatch, RoleArg, Stop};
use reply::{respond, Host, Ignored, Outcome};

/// Frames taken from a receive queue per burst.
const BURST: usize = 32;
/// How long an idle responder sleeps at most before re-checking its deadline and (as a slave)
/// retrying a connection.
const MAX_SLEEP: Duration = Duration::from_millis(100);
/// How long a responder whose link is down sleeps at most (a slave reconnects meanwhile).
const RETRY_SLEEP: Duration = Duration::from_millis(20);
/// Busy loop passes between control-socket checks.
const CONTROL_EVERY: u32 = 1024;

/// Answers ARP and ICMP echo requests on a memif interface.
#[derive(Parser, Debug)]
#[command(name = "responder")]
struct Args {
    /// Connect to a master (slave) or listen (master).
    #[arg(long, value_enum, default_value = "slave")]
    role: RoleArg,
    /// Control socket: a path, or `@name` for a Linux abstract socket.
    #[arg(long, default_value = "/run/vpp/memif.sock", value_parser = endpoint::parse_socket)]
    socket: SocketAddress,
    /// Interface id on that socket.
    #[arg(long, default_value_t = 0)]
    id: u32,
    /// Shared secret (at most 23 bytes).
    #[arg(long)]
    secret: Option<String>,
    /// Descriptors per ring (power of two, ≤ 16384).
    #[arg(long, default_value = "1024", value_parser = endpoint::parse_ring_size)]
    ring_size: u8,
    /// Bytes per buffer.
    #[arg(long, default_value_t = 2048)]
    buffer_size: u32,
    /// Our address and prefix, e.g. 192.168.1.2/24.
    #[arg(long, value_parser = reply::parse_ip_prefix)]
    ip: (std::net::Ipv4Addr, u8),
    /// Our IPv6 address too, e.g. fd00::2 (answers neighbour solicitations and ICMPv6 echoes).
    #[arg(long, value_parser = reply6::parse_ip6)]
    ip6: Option<std::net::Ipv6Addr>,
    /// Our MAC address (default: a locally administered one).
    #[arg(long, default_value = "02:fe:5a:00:00:01", value_parser = wire::parse_mac)]
    mac: [u8; 6],
    /// Interface name sent to the peer.
    #[arg(long, default_value = "responder")]
    name: String,
    /// Exit after this long (e.g. 30s, 500ms); default: until SIGINT/SIGTERM.
    #[arg(long, value_parser = endpoint::parse_duration)]
    duration: Option<Duration>,
    /// Empty-poll time after which the responder sleeps on the rx eventfds.
    #[arg(long, default_value_t = 1000)]
    idle_us: u64,
    /// Never sleep: poll the rings all the time.
    #[arg(long)]
    busy_poll: bool,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
}

/// What the responder did.
#[derive(Debug, Default)]
struct Stats {
    received: u64,
    arp_replies: u64,
    echo_replies: u64,
    /// ICMPv6 echo replies and neighbour advertisements.
    ipv6_replies: u64,
    ignored: [u64; Ignored::ALL.len()],
    /// Replies the transmit ring had no room for.
    replies_dropped: u64,
    /// Times it went to sleep in interrupt mode.
    sleeps: u64,
    /// Times a peer's interrupt woke it.
    wakeups: u64,
}

impl Stats {
    fn count(&mut self, o: Outcome) {
        self.received += 1;
        match o {
            Outcome::ArpReply => self.arp_replies += 1,
            Outcome::EchoReply => self.echo_replies += 1,
            Outcome::Ipv6Reply => self.ipv6_replies += 1,
            Outcome::Ignored(why) => self.ignored[why.index()] += 1,
        }
    }

    fn ignored_total(&self) -> u64 {
        self.ignored.iter().sum()
    }

    fn json(&self, iface: Option<&Interface>) -> serde_json::Value {
        let by_reason: serde_json::Map<String, serde_json::Value> = Ignored::ALL
            .iter()
            .map(|r| (r.name().to_string(), self.ignored[r.index()].into()))
            .collect();
        let c = iface.map(|i| i.counters()).unwrap_or_default();
        serde_json::json!({
            "received": self.received,
            "arp_replies": self.arp_replies,
            "echo_replies": self.echo_replies,
            "ipv6_replies": self.ipv6_replies,
            "ignored": self.ignored_total(),
            "ignored_by_reason": by_reason,
            "replies_dropped": self.replies_dropped,
            "sleeps": self.sleeps,
            "wakeups": self.wakeups,
            "connects": c.connects,
            "disconnects": c.disconnects,
            "bad_descriptors": iface.map_or(0, |i| i.bad_descriptors()),
        })
    }

    fn human(&self, iface: Option<&Interface>) -> String {
        let reasons: Vec<String> = Ignored::ALL
            .iter()
            .filter(|r| self.ignored[r.index()] > 0)
            .map(|r| format!("{} {}", r.name(), self.ignored[r.index()]))
            .collect();
        let c = iface.map(|i| i.counters()).unwrap_or_default();
        format!(
            "responder: {} frames received, {} ARP replies, {} echo replies, {} IPv6 replies, \
             {} ignored ({}), \
             {} replies dropped; {} sleeps, {} wakeups; {} connects, {} disconnects",
            self.received,
            self.arp_replies,
            self.echo_replies,
            self.ipv6_replies,
            self.ignored_total(),
            if reasons.is_empty() {
                "none".to_string()
            } else {
                reasons.join(", ")
            },
            self.replies_dropped,
            self.sleeps,
            self.wakeups,
            c.connects,
            c.disconnects
        )
    }
}

/// Reply frames of one burst, reused from burst to burst.
struct Replies {
    bufs: Vec<Vec<u8>>,
    len: usize,
}

impl Replies {
    fn new() -> Replies {
        Replies {
            bufs: (0..BURST).map(|_| Vec::with_capacity(2048)).collect(),
            len: 0,
        }
    }
}

/// The responder: its host identity, interface, counters and buffers.
struct Responder {
    host: Host,
    ep: Endpoint,
    id: u32,
    stats: Stats,
    replies: Replies,
    link: LinkWatch,
}

impl Responder {
    /// Receives one burst from every rx queue and answers what deserves it; returns the frames
    /// received.
    fn serve(&mut self) -> usize {
        let Some(iface) = self.ep.interface_mut(self.id) else {
            return 0;
        };
        let mut total = 0;
        for q in 0..iface.rx_queues() {
            let (host, stats, replies) = (&self.host, &mut self.stats, &mut self.replies);
            replies.len = 0;
            total += iface.rx_burst(q, BURST, &mut |frame: &[u8]| {
                let Some(out) = replies.bufs.get_mut(replies.len) else {
                    return;
                };
                let o = respond(host, frame, out);
                stats.count(o);
                if !matches!(o, Outcome::Ignored(_)) {
                    replies.len += 1;
                }
            });
            send_replies(iface, q, replies, stats);
        }
        total
    }

    /// Switches every rx queue between interrupt and polling mode.
    fn set_interrupts(&mut self, on: bool) {
        if let Some(iface) = self.ep.interface_mut(self.id) {
            for q in 0..iface.rx_queues() {
                iface.set_rx_interrupt(q, on);
                if !on {
                    iface.clear_rx_event(q);
                }
            }
        }
    }

    /// Sleeps in interrupt mode until a peer signals, a control message or a signal arrives, or
    /// `timeout` passes. Returns early (without sleeping) if frames arrived meanwhile.
    fn sleep(&mut self, stop: &Stop, timeout: Duration) {
        self.set_interrupts(true);
        // The peer checks our MASK_INT flag after publishing: look at the rings once more after
        // clearing it, or a frame published just before would wait for the next one.
        fence(Ordering::SeqCst);
        if self.serve() > 0 {
            self.set_interrupts(false);
            return;
        }
        self.stats.sleeps += 1;
        let woke = {
            let iface = self.ep.interface(self.id);
            let rx_fds: Vec<_> = iface
                .map(|i| {
                    (0..i.rx_queues())
                        .filter_map(|q| i.rx_event_fd(q))
                        .collect()
                })
                .unwrap_or_default();
            let mut fds: Vec<PollFd<'_>> = std::iter::once(stop.fd())
                .chain(rx_fds.iter().copied())
                .chain(self.ep.control_fds())
                .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
                .collect();
            endpoint::block(&mut fds, timeout);
            fds[1..=rx_fds.len()]
                .iter()
                .any(|p| p.revents().is_some_and(|r| r.contains(PollFlags::POLLIN)))
        };
        if woke {
            self.stats.wakeups += 1;
        }
        self.set_interrupts(false);
    }

    /// Control work and link reporting.
    fn control(&mut self) {
        self.ep.poll();
        self.link.update(self.ep.interface(self.id));
    }
}

/// Sends the replies of one burst on the tx queue paired with rx queue `q`; counts what did not
/// fit.
fn send_replies(iface: &mut Interface, q: usize, replies: &Replies, stats: &mut Stats) {
    if replies.len == 0 {
        return;
    }
    let tx_queues = iface.tx_queues().max(1);
    let mut refs: [&[u8]; BURST] = [&[]; BURST];
    for (r, b) in refs.iter_mut().zip(&replies.bufs[..replies.len]) {
        *r = b;
    }
    let taken = iface.tx_burst(q % tx_queues, &refs[..replies.len]);
    stats.replies_dropped += (replies.len - taken) as u64;
}

fn run(args: Args) -> Result<(), String> {
    let mut stop = Stop::install()?;
    let mut cfg = InterfaceConfig::new(args.id);
    cfg.name = args.name.clone();
    cfg.secret = args.secret.clone();
    cfg.log2_ring_size = args.ring_size;
    cfg.buffer_size = args.buffer_size;
    let ep = Endpoint::open(args.role, &args.socket, cfg)?;
    let (ip, prefix) = args.ip;
    let host = Host {
        mac: args.mac,
        ip,
        prefix,
        ip6: args.ip6,
    };
    println!(
        "responder {} {ip}/{prefix} on {} ({:?}, id {})",
        wire::format_mac(&host.mac),
        args.socket,
        args.role,
        args.id
    );
    if args.role == RoleArg::Master {
        println!("listening {}", args.socket);
    }
    let mut r = Responder {
        host,
        ep,
        id: args.id,
        stats: Stats::default(),
        replies: Replies::new(),
        link: LinkWatch::new("memif"),
    };
    let deadline = args.duration.map(|d| Instant::now() + d);
    let idle = Duration::from_micros(args.idle_us);
    event_loop(&mut r, &mut stop, deadline, idle, args.busy_poll);
    let iface = r.ep.interface(args.id);
    if args.json {
        println!("{}", r.stats.json(iface));
    } else {
        println!("{}", r.stats.human(iface));
    }
    Ok(())
}

/// Polls while frames arrive; sleeps on the eventfds once idle; stops on a signal or deadline.
fn event_loop(
    r: &mut Responder,
    stop: &mut Stop,
    deadline: Option<Instant>,
    idle: Duration,
    busy_poll: bool,
) {
    let over = |stop: &mut Stop| stop.requested() || deadline.is_some_and(|d| Instant::now() >= d);
    let mut passes = 0u32;
    let mut last_frame = Instant::now();
    loop {
        passes = passes.wrapping_add(1);
        let up = r.ep.is_up(r.id);
        if passes.is_multiple_of(CONTROL_EVERY) || !up {
            r.control();
            if over(stop) {
                return;
            }
        }
        if r.serve() > 0 {
            last_frame = Instant::now();
            continue;
        }
        if up && (busy_poll || last_frame.elapsed() < idle) {
            continue;
        }
        r.sleep(stop, sleep_timeout(up, deadline));
        r.control();
        if over(stop) {
            return;
        }
    }
}

/// How long to sleep: long while up (a peer's interrupt wakes us), short while down (a slave
/// reconnects meanwhile), never past the deadline.
fn sleep_timeout(up: bool, deadline: Option<Instant>) -> Duration {
    let t = if up { MAX_SLEEP } else { RETRY_SLEEP };
    deadline.map_or(t, |d| t.min(d.saturating_duration_since(Instant::now())))
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("responder: {e}");
            ExitCode::from(3)
        }
    }
}
