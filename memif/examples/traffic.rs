//! A memif traffic source and sink for tests and benchmarks.
//!
//! It sends sequence-numbered Ethernet/IPv4/UDP frames on one interface (`--tx`) and checks them
//! on another (`--rx`), or on the same one (`--loop`, for a peer that sends frames back). Every
//! byte after the MAC addresses is checkable (see `common/stream.rs`). Each interface is a master
//! or a slave on its own socket:
//!
//! ```text
//! # Through a cross-connect (Quiver, or testpmd io between two net_memif servers):
//! traffic --tx /run/a.sock --rx /run/b.sock --count 1000000 --expect-lossless
//! # One-way through memif only: our slave sends to our master on the same socket.
//! traffic --tx @rate --tx-role slave --rx @rate --rx-role master --duration 5 --json
//! # Back through a peer that swaps MACs (testpmd macswap), with at most 512 frames in flight:
//! traffic --tx /run/m.sock --loop --count 100000 --window 512
//! ```
//!
//! Sending and receiving run on two threads when they use different endpoints (`--single-loop`
//! runs both in one loop). The sink reports received, lost (sent − unique after the `--drain`
//! window), duplicated, reordered and corrupted frames, foreign frames, Mpps and busy cycles per
//! frame of both sides; `--json` prints the report as one JSON object on stdout (the summary
//! then goes to stderr). With `--expect-lossless` the exit code is 1 unless every frame sent
//! arrived once, in order and intact. Link changes print `listening …`, `connected …` and
//! `disconnected …` lines on stdout as they happen.

#[path = "common/endpoint.rs"]
mod endpoint;
#[path = "common/measure.rs"]
mod measure;
#[path = "common/stream.rs"]
mod stream;
#[path = "common/wire.rs"]
mod wire;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use memif::{Counters, InterfaceConfig, PeerFrame, SocketAddress};
use nix::poll::{PollFd, PollFlags};
use serde_json::json;

use endpoint::{Endpoint, LinkWatch, RoleArg, Stop};
use measure::{Busy, CycleClock};
use stream::{Addresses, FrameRing, Sink};

/// Largest burst (frames per tx/rx call).
const MAX_BURST: usize = 256;
/// Loop passes between control-socket and stop checks.
const CONTROL_EVERY: u32 = 1024;
/// A sender that makes no progress for this long gives up.
/// How long a sender that is done waits for the peer to take its last frames off the ring.
const TX_LINGER: Duration = Duration::from_secs(1);

const STALL: Duration = Duration::from_secs(10);

/// Sends sequence-numbered frames over memif and checks what comes back.
#[derive(Parser, Debug)]
#[command(name = "traffic")]
struct Args {
    /// Send on this control socket (a path, or `@name` for an abstract socket).
    #[arg(long, value_name = "SOCKET", value_parser = endpoint::parse_socket)]
    tx: Option<SocketAddress>,
    /// Role of the transmit interface.
    #[arg(long, value_enum, default_value = "slave")]
    tx_role: RoleArg,
    /// Interface id of the transmit interface.
    #[arg(long, default_value_t = 0)]
    tx_id: u32,
    /// Receive on this control socket.
    #[arg(long, value_name = "SOCKET", value_parser = endpoint::parse_socket, conflicts_with = "same")]
    rx: Option<SocketAddress>,
    /// Role of the receive interface.
    #[arg(long, value_enum, default_value = "slave")]
    rx_role: RoleArg,
    /// Interface id of the receive interface.
    #[arg(long, default_value_t = 0)]
    rx_id: u32,
    /// Receive on the transmit interface (the peer sends frames back).
    #[arg(long = "loop", requires = "tx")]
    same: bool,
    /// Shared secret of both interfaces (at most 23 bytes).
    #[arg(long)]
    secret: Option<String>,
    /// Descriptors per ring (power of two, ≤ 16384).
    #[arg(long, default_value = "1024", value_parser = endpoint::parse_ring_size)]
    ring_size: u8,
    /// Bytes per buffer; larger frames travel as chained descriptors.
    #[arg(long, default_value_t = 2048)]
    buffer_size: u32,
    /// Frame size in bytes, without FCS (60..=16384).
    #[arg(long, default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(stream::MIN_SIZE as i64..=stream::MAX_SIZE as i64))]
    size: u32,
    /// Frames per tx/rx burst (1..=256).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=MAX_BURST as i64))]
    burst: u32,
    /// Rate limit in frames per second (`500k`, `2M` accepted); default: as fast as possible.
    #[arg(long, value_parser = parse_rate)]
    rate: Option<f64>,
    /// Frames to send (or, with only `--rx`, to receive).
    #[arg(long)]
    count: Option<u64>,
    /// How long to send (or receive), e.g. 10, 2.5s, 500ms. Without it or `--count`: until
    /// SIGINT/SIGTERM.
    #[arg(long, value_parser = endpoint::parse_duration)]
    duration: Option<Duration>,
    /// Stream id carried in every frame; frames of other streams count as foreign.
    #[arg(long, default_value_t = 1)]
    stream: u32,
    /// Most frames in flight (sent, not yet received) when sending and receiving; 0: no limit.
    /// Keeps a lossy-when-full peer (testpmd io) lossless regardless of speed.
    #[arg(long, default_value_t = 0)]
    window: u64,
    /// After sending ends, how long to wait for frames still in flight.
    #[arg(long, default_value = "1s", value_parser = endpoint::parse_duration)]
    drain: Duration,
    /// How long to wait for the links to come up.
    #[arg(long, default_value = "30s", value_parser = endpoint::parse_duration)]
    connect_timeout: Duration,
    /// Send and receive in one loop on one thread, even on different endpoints.
    #[arg(long)]
    single_loop: bool,
    /// Pin the sending thread (or the single loop) to this CPU.
    #[arg(long)]
    tx_cpu: Option<usize>,
    /// Pin the receiving thread to this CPU.
    #[arg(long)]
    rx_cpu: Option<usize>,
    /// Only track sequence numbers; do not compare frame bytes.
    #[arg(long)]
    no_verify: bool,
    /// Destination MAC of the frames.
    #[arg(long, default_value = "02:fe:5a:00:00:02", value_parser = wire::parse_mac)]
    dst_mac: [u8; 6],
    /// Source MAC of the frames.
    #[arg(long, default_value = "02:fe:5a:00:00:01", value_parser = wire::parse_mac)]
    src_mac: [u8; 6],
    /// Print the report as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Exit with status 1 unless every frame arrived once, in order and intact (with only
    /// `--rx`: judged from the sequence numbers seen).
    #[arg(long)]
    expect_lossless: bool,
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

/// A value alone on its cache lines, so that one thread writing it does not slow another reading
/// its neighbours (128 bytes: adjacent-line prefetch pairs 64-byte lines).
#[derive(Default)]
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// State the two sides share (across threads when they have one each). Fields written while
/// traffic flows sit on their own cache lines.
#[derive(Default)]
struct Shared {
    /// Stop now (a signal, or an error on the other side).
    stop: Padded<AtomicBool>,
    tx_up: AtomicBool,
    rx_up: AtomicBool,
    /// Frames the transmit ring took; final once `tx_done` is set.
    sent: Padded<AtomicU64>,
    /// Sending is over.
    tx_done: Padded<AtomicBool>,
    /// Distinct frames received so far; published only with `--window`.
    unique: Padded<AtomicU64>,
}

/// Paces sending at a fixed rate from a start time.
struct Pacer {
    pps: f64,
    t0: Instant,
}

impl Pacer {
    /// Frames that may be sent now, `sent` having been sent.
    fn allowed(&self, sent: u64) -> u64 {
        let due = (self.t0.elapsed().as_secs_f64() * self.pps) as u64 + 1;
        due.saturating_sub(sent)
    }

    /// How long until the next frame is due.
    fn wait(&self, sent: u64) -> Duration {
        let at = Duration::from_secs_f64(sent as f64 / self.pps);
        at.saturating_sub(self.t0.elapsed())
    }
}

/// The sending side.
struct TxSide {
    id: u32,
    frames: FrameRing,
    burst: usize,
    window: u64,
    count: Option<u64>,
    duration: Option<Duration>,
    rate: Option<f64>,
    pacer: Option<Pacer>,
    /// Sequence number of the next frame (= frames sent).
    seq: u64,
    busy: Busy,
    started: Option<Instant>,
    ended: Option<Instant>,
    error: Option<String>,
    /// Progress at the last control check, for stall detection.
    checked: (u64, Instant),
    link: LinkWatch,
}

impl TxSide {
    /// Starts the clocks (duration, pacing, stall detection).
    fn start(&mut self) {
        let now = Instant::now();
        self.started = Some(now);
        self.checked = (0, now);
        self.pacer = self.rate.map(|pps| Pacer { pps, t0: now });
    }

    /// Whether sending is over (count or duration reached).
    fn finished(&self) -> bool {
        self.count.is_some_and(|c| self.seq >= c)
            || self
                .duration
                .zip(self.started)
                .is_some_and(|(d, t)| t.elapsed() >= d)
    }

    /// Frames this pass may send.
    fn budget(&self, shared: &Shared) -> usize {
        let mut n = self.burst as u64;
        if let Some(c) = self.count {
            n = n.min(c.saturating_sub(self.seq));
        }
        if self.window > 0 {
            let in_flight = self.seq - shared.unique.load(Ordering::Acquire).min(self.seq);
            n = n.min(self.window.saturating_sub(in_flight));
        }
        if let Some(p) = &self.pacer {
            n = n.min(p.allowed(self.seq));
        }
        n as usize
    }

    /// One pass: sends up to a burst; returns the frames the ring took.
    fn step(&mut self, ep: &mut Endpoint, shared: &Shared) -> usize {
        let n = self.budget(shared);
        if n == 0 {
            self.pace();
            return 0;
        }
        let c0 = measure::cycles();
        let Some(iface) = ep.interface_mut(self.id) else {
            return 0;
        };
        let mut refs: [&[u8]; MAX_BURST] = [&[]; MAX_BURST];
        self.frames.burst(self.seq, &mut refs[..n]);
        let taken = iface.tx_burst(0, &refs[..n]);
        self.busy.add(c0, taken);
        self.seq += taken as u64;
        taken
    }

    /// Sleeps when the pacer's next frame is more than a millisecond away (low rates would
    /// otherwise spin a core).
    fn pace(&self) {
        if let Some(p) = &self.pacer {
            let w = p.wait(self.seq);
            if w > Duration::from_millis(1) {
                std::thread::sleep(w - Duration::from_micros(500));
            }
        }
    }

    /// Gives up when nothing was sent for [`STALL`] although frames were due (not merely
    /// held back by the rate limit).
    fn check_stall(&mut self, shared: &Shared) {
        let now = Instant::now();
        let paced = self
            .pacer
            .as_ref()
            .is_some_and(|p| p.allowed(self.seq) == 0);
        if self.seq != self.checked.0 || paced {
            self.checked = (self.seq, now);
            return;
        }
        if now - self.checked.1 < STALL || self.error.is_some() {
            return;
        }
        let window_full = self.window > 0 && self.budget(shared) == 0;
        self.error = Some(if window_full {
            format!(
                "{} frames in flight never came back (sent {}, window {})",
                self.window, self.seq, self.window
            )
        } else {
            format!(
                "the ring took no frame for {} s (after {} frames)",
                STALL.as_secs(),
                self.seq
            )
        });
    }

    /// Ends sending and publishes the total.
    fn end(&mut self, shared: &Shared) {
        self.ended = Some(Instant::now());
        shared.sent.store(self.seq, Ordering::Release);
        shared.tx_done.store(true, Ordering::Release);
    }

    /// Seconds from the first to the last send.
    fn seconds(&self) -> f64 {
        match (self.started, self.ended) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        }
    }
}

/// The receiving side.
struct RxSide {
    id: u32,
    stream: u32,
    templates: Option<FrameRing>,
    sink: Sink,
    burst: usize,
    busy: Busy,
    /// Receive-only: stop after this many distinct frames / this long.
    count: Option<u64>,
    duration: Option<Duration>,
    started: Option<Instant>,
    first: Option<Instant>,
    last: Option<Instant>,
    drain_from: Option<Instant>,
    drain: Duration,
    /// Publish the distinct count for the sender's window.
    publish: bool,
    link: LinkWatch,
}

impl RxSide {
    /// One pass over every receive queue; returns the frames received.
    fn step(&mut self, ep: &mut Endpoint, shared: &Shared) -> usize {
        let c0 = measure::cycles();
        let Some(iface) = ep.interface_mut(self.id) else {
            return 0;
        };
        let (sink, stream, t) = (&mut self.sink, self.stream, self.templates.as_ref());
        let mut n = 0;
        for q in 0..iface.rx_queues() {
            n += match t {
                // Verifying: the whole frame is copied out and compared.
                Some(_) => iface.rx_burst(q, self.burst, &mut |f: &[u8]| sink.check(f, stream, t)),
                // Sequence numbers only: copy out just the bytes up to and including the
                // sequence number (never parsed in the peer's memory), not the whole frame.
                None => iface.rx_burst_to(q, self.burst, &mut |f: &PeerFrame<'_>| {
                    let mut head = [0u8; stream::FILL_OFF];
                    let k = f.len().min(head.len());
                    if f.copy_to(0, &mut head[..k]) {
                        sink.check(&head[..k], stream, None);
                    }
                    true
                }),
            };
        }
        self.busy.add(c0, n);
        if n > 0 {
            let now = Instant::now();
            self.first.get_or_insert(now);
            self.last = Some(now);
            if self.publish {
                shared.unique.store(self.sink.seq.unique, Ordering::Release);
            }
        }
        n
    }

    /// Whether receiving is over: everything sent arrived or the drain window passed (with a
    /// sender), or the count/duration was reached (receive only).
    fn finished(&mut self, shared: &Shared, has_tx: bool) -> bool {
        if has_tx {
            if !shared.tx_done.load(Ordering::Acquire) {
                return false;
            }
            let sent = shared.sent.load(Ordering::Acquire);
            if self.sink.seq.unique >= sent {
                return true;
            }
            let from = *self.drain_from.get_or_insert_with(Instant::now);
            return from.elapsed() >= self.drain;
        }
        self.count.is_some_and(|c| self.sink.seq.unique >= c)
            || self
                .duration
                .zip(self.started)
                .is_some_and(|(d, t)| t.elapsed() >= d)
    }

    /// Seconds from the first to the last frame received.
    fn seconds(&self) -> f64 {
        match (self.first, self.last) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        }
    }
}

/// Which endpoint (index) and interface id a side uses.
#[derive(Debug, Clone, Copy)]
struct Use {
    ep: usize,
    id: u32,
}

fn interface_config(args: &Args, id: u32, name: &str) -> InterfaceConfig {
    let mut c = InterfaceConfig::new(id);
    c.name = name.to_string();
    c.secret = args.secret.clone();
    c.log2_ring_size = args.ring_size;
    c.buffer_size = args.buffer_size;
    c
}

/// The endpoints and which of them each side uses.
struct Plan {
    eps: Vec<Endpoint>,
    tx: Option<Use>,
    rx: Option<Use>,
}

/// Opens the endpoints: one per socket, except that a master socket used by both sides serves
/// both ids. Prints `listening tx|rx SOCKET` for every master side once all are ready.
fn open(args: &Args) -> Result<Plan, String> {
    if args.tx.is_none() && args.rx.is_none() {
        return Err("nothing to do: give --tx and/or --rx".into());
    }
    if args.expect_lossless && args.rx.is_none() && !args.same {
        return Err("--expect-lossless needs a receiving side (--rx or --loop)".into());
    }
    let mut eps = Vec::new();
    let tx = match &args.tx {
        Some(addr) => {
            let cfg = interface_config(args, args.tx_id, "traffic-tx");
            eps.push(Endpoint::open(args.tx_role, addr, cfg)?);
            Some(Use {
                ep: 0,
                id: args.tx_id,
            })
        }
        None => None,
    };
    let rx = match (&args.rx, args.same) {
        (_, true) => tx,
        (Some(addr), false) => {
            let cfg = interface_config(args, args.rx_id, "traffic-rx");
            let shared = args.rx_role == RoleArg::Master
                && eps.first().is_some_and(|e| e.is_master_on(addr));
            if shared {
                eps[0].add_master_interface(cfg)?;
            } else {
                eps.push(Endpoint::open(args.rx_role, addr, cfg)?);
            }
            Some(Use {
                ep: eps.len() - 1,
                id: args.rx_id,
            })
        }
        (None, false) => None,
    };
    for (side, role, addr) in [
        ("tx", args.tx_role, &args.tx),
        ("rx", args.rx_role, &args.rx),
    ] {
        if let (RoleArg::Master, Some(a)) = (role, addr) {
            println!("listening {side} {a}");
        }
    }
    Ok(Plan { eps, tx, rx })
}

/// Blocks until a control fd of any endpoint is readable or `timeout` passes.
fn wait_control(eps: &[Endpoint], timeout: Duration) {
    let mut fds: Vec<PollFd<'_>> = eps
        .iter()
        .flat_map(|e| e.control_fds())
        .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
        .collect();
    endpoint::block(&mut fds, timeout);
}

/// Waits until every interface in `want` is up, doing the control work; `abort` ends the wait
/// early.
fn wait_up(
    eps: &mut [Endpoint],
    want: &mut [(Use, &mut LinkWatch)],
    deadline: Instant,
    abort: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    loop {
        eps.iter_mut().for_each(Endpoint::poll);
        let mut all = true;
        for (u, watch) in want.iter_mut() {
            all &= watch.update(eps[u.ep].interface(u.id));
        }
        if all {
            return Ok(());
        }
        if abort() {
            return Err("stopped before the links came up".into());
        }
        if Instant::now() >= deadline {
            let why: Vec<String> = want
                .iter()
                .filter_map(|(u, _)| eps[u.ep].interface(u.id))
                .map(|i| format!("interface {}: {:?}", i.id(), i.link()))
                .collect();
            return Err(format!("links not up in time ({})", why.join("; ")));
        }
        wait_control(eps, Duration::from_millis(10));
    }
}

/// Waits (doing control work) until `flag` is set by the other thread.
fn wait_other(
    ep: &mut Endpoint,
    flag: &AtomicBool,
    deadline: Instant,
    abort: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    while !flag.load(Ordering::Acquire) {
        if abort() {
            return Err("stopped before the links came up".into());
        }
        if Instant::now() >= deadline {
            return Err("the other link did not come up in time".into());
        }
        ep.wait_and_poll(Duration::from_millis(2));
    }
    Ok(())
}

/// The sending thread: connect, wait for the receiver, send, publish the total.
fn tx_thread(
    mut ep: Endpoint,
    mut tx: TxSide,
    u: Use,
    shared: &Shared,
    deadline: Instant,
    cpu: Option<usize>,
) -> (TxSide, Endpoint) {
    let mut abort = || shared.stop.load(Ordering::Relaxed);
    let ready = pin(cpu)
        .and_then(|()| {
            let want = &mut [(Use { ep: 0, id: u.id }, &mut tx.link)];
            wait_up(std::slice::from_mut(&mut ep), want, deadline, &mut abort)
        })
        .and_then(|()| {
            shared.tx_up.store(true, Ordering::Release);
            wait_other(&mut ep, &shared.rx_up, deadline, &mut abort)
        });
    match ready {
        Ok(()) => {
            tx.start();
            tx_loop(&mut ep, &mut tx, u.id, shared);
        }
        Err(e) => {
            tx.error = Some(e);
            shared.stop.store(true, Ordering::Release);
        }
    }
    tx.end(shared);
    (tx, ep)
}

/// Sends until done, stopped or stalled.
fn tx_loop(ep: &mut Endpoint, tx: &mut TxSide, id: u32, shared: &Shared) {
    let mut passes = 0u32;
    while !tx.finished() {
        tx.step(ep, shared);
        passes = passes.wrapping_add(1);
        if passes.is_multiple_of(CONTROL_EVERY) {
            ep.poll();
            tx.link.update(ep.interface(id));
            tx.check_stall(shared);
            if shared.stop.load(Ordering::Relaxed) || tx.error.is_some() {
                break;
            }
        }
    }
}

/// The receiving thread (the main one, which also watches for signals).
fn rx_thread(
    ep: &mut Endpoint,
    rx: &mut RxSide,
    u: Use,
    shared: &Shared,
    stop: &mut Stop,
    deadline: Instant,
    cpu: Option<usize>,
) -> Result<(), String> {
    let mut abort = || {
        if stop.requested() {
            shared.stop.store(true, Ordering::Release);
        }
        shared.stop.load(Ordering::Relaxed)
    };
    let want = &mut [(Use { ep: 0, id: u.id }, &mut rx.link)];
    let r = pin(cpu)
        .and_then(|()| wait_up(std::slice::from_mut(ep), want, deadline, &mut abort))
        .and_then(|()| {
            shared.rx_up.store(true, Ordering::Release);
            wait_other(ep, &shared.tx_up, deadline, &mut abort)
        });
    if let Err(e) = r {
        shared.stop.store(true, Ordering::Release);
        return Err(e);
    }
    rx.started = Some(Instant::now());
    let mut passes = 0u32;
    loop {
        rx.step(ep, shared);
        if rx.finished(shared, true) {
            return Ok(());
        }
        passes = passes.wrapping_add(1);
        if passes.is_multiple_of(CONTROL_EVERY) {
            ep.poll();
            rx.link.update(ep.interface(u.id));
            if stop.requested() {
                shared.stop.store(true, Ordering::Release);
            }
        }
    }
}

/// Pins the calling thread when a CPU was given.
fn pin(cpu: Option<usize>) -> Result<(), String> {
    cpu.map_or(Ok(()), measure::pin_to)
}

/// Both sides (or the only one) driven from one loop on the calling thread.
struct SingleLoop<'a> {
    eps: &'a mut [Endpoint],
    tx: Option<(Use, &'a mut TxSide)>,
    rx: Option<(Use, &'a mut RxSide)>,
    shared: &'a Shared,
}

impl SingleLoop<'_> {
    /// Waits for the links, then passes until the run is over.
    fn run(mut self, stop: &mut Stop, deadline: Instant) -> Result<(), String> {
        self.connect(stop, deadline)?;
        if let Some((_, t)) = self.tx.as_mut() {
            t.start();
        }
        if let Some((_, r)) = self.rx.as_mut() {
            r.started = Some(Instant::now());
        }
        let mut passes = 0u32;
        while !self.pass() {
            passes = passes.wrapping_add(1);
            if passes.is_multiple_of(CONTROL_EVERY) {
                self.control(stop);
            }
        }
        Ok(())
    }

    fn connect(&mut self, stop: &mut Stop, deadline: Instant) -> Result<(), String> {
        let mut want: Vec<(Use, &mut LinkWatch)> = Vec::new();
        if let Some((u, t)) = self.tx.as_mut() {
            want.push((*u, &mut t.link));
        }
        if let Some((u, r)) = self.rx.as_mut() {
            want.push((*u, &mut r.link));
        }
        wait_up(self.eps, &mut want, deadline, &mut || stop.requested())
    }

    /// One pass over both sides; returns whether the run is over.
    fn pass(&mut self) -> bool {
        let shared = self.shared;
        if let Some((u, t)) = self.tx.as_mut() {
            if !shared.tx_done.load(Ordering::Relaxed) {
                if t.finished() || t.error.is_some() || shared.stop.load(Ordering::Relaxed) {
                    t.end(shared);
                } else {
                    t.step(&mut self.eps[u.ep], shared);
                }
            }
        }
        let has_tx = self.tx.is_some();
        match self.rx.as_mut() {
            Some((u, r)) => {
                r.step(&mut self.eps[u.ep], shared);
                r.finished(shared, has_tx) || (!has_tx && shared.stop.load(Ordering::Relaxed))
            }
            None => {
                shared.tx_done.load(Ordering::Relaxed)
                    && self.tx.as_ref().is_none_or(|(u, t)| {
                        // A sender leaves once the peer took every frame off its ring (frames
                        // still there when the link goes are lost), or after TX_LINGER.
                        t.ended.is_some_and(|e| e.elapsed() >= TX_LINGER)
                            || self.eps[u.ep]
                                .interface(u.id)
                                .is_none_or(|i| i.tx_unconsumed(0) == 0)
                    })
            }
        }
    }

    /// Control work, link reports, stall and signal checks.
    fn control(&mut self, stop: &mut Stop) {
        self.eps.iter_mut().for_each(Endpoint::poll);
        if let Some((u, t)) = self.tx.as_mut() {
            t.link.update(self.eps[u.ep].interface(u.id));
            t.check_stall(self.shared);
        }
        if let Some((u, r)) = self.rx.as_mut() {
            r.link.update(self.eps[u.ep].interface(u.id));
        }
        if stop.requested() {
            self.shared.stop.store(true, Ordering::Release);
        }
    }
}

/// Everything the report needs.
struct Outcome {
    tx: Option<TxSide>,
    rx: Option<RxSide>,
    tx_counters: Option<Counters>,
    rx_counters: Option<Counters>,
    threads: bool,
    error: Option<String>,
}

impl Outcome {
    fn lost(&self) -> Option<u64> {
        let rx = self.rx.as_ref()?;
        let seq = &rx.sink.seq;
        Some(match &self.tx {
            Some(tx) => tx.seq.saturating_sub(seq.unique),
            None => seq.next().saturating_sub(seq.unique),
        })
    }

    /// Every frame sent arrived once, in order and intact.
    fn lossless(&self) -> bool {
        let Some(rx) = &self.rx else {
            return false;
        };
        let s = &rx.sink;
        self.lost() == Some(0)
            && s.seq.duplicated == 0
            && s.seq.reordered == 0
            && s.corrupted == 0
            && self.error.is_none()
    }
}

fn mpps(frames: u64, secs: f64) -> Option<f64> {
    (secs > 0.0).then(|| frames as f64 / secs / 1e6)
}

fn counters_json(c: &Counters) -> serde_json::Value {
    json!({
        "rx_packets": c.rx_packets,
        "tx_packets": c.tx_packets,
        "tx_dropped": c.tx_dropped,
        "bad_descriptors": c.bad_desc_region + c.bad_desc_offset + c.bad_desc_zero_length
            + c.bad_desc_too_long + c.bad_desc_chain,
        "ring_index_overrun": c.ring_index_overrun,
        "connects": c.connects,
        "disconnects": c.disconnects,
    })
}

fn report_json(o: &Outcome, args: &Args, hz: f64) -> serde_json::Value {
    let tx = o.tx.as_ref();
    let rx = o.rx.as_ref();
    let sink = rx.map(|r| &r.sink);
    json!({
        "frame_size": args.size,
        "burst": args.burst,
        "threads": o.threads,
        "sent": tx.map(|t| t.seq),
        "tx_seconds": tx.map(TxSide::seconds),
        "tx_mpps": tx.and_then(|t| mpps(t.seq, t.seconds())),
        "tx_busy_cycles_per_packet": tx.and_then(|t| t.busy.per_packet()),
        "received": sink.map(|s| s.received),
        "unique": sink.map(|s| s.seq.unique),
        "lost": o.lost(),
        "duplicated": sink.map(|s| s.seq.duplicated),
        "reordered": sink.map(|s| s.seq.reordered),
        "corrupted": sink.map(|s| s.corrupted),
        "foreign": sink.map(|s| s.foreign),
        "rx_seconds": rx.map(RxSide::seconds),
        "mpps": rx.and_then(|r| mpps(r.sink.seq.unique, r.seconds())),
        "rx_busy_cycles_per_packet": rx.and_then(|r| r.busy.per_packet()),
        "verified": !args.no_verify,
        "lossless": rx.is_some().then(|| o.lossless()),
        "tsc_hz": hz,
        "tx_counters": o.tx_counters.as_ref().map(counters_json),
        "rx_counters": o.rx_counters.as_ref().map(counters_json),
        "error": o.error,
    })
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

fn report_human(o: &Outcome, args: &Args) -> String {
    let mut lines = Vec::new();
    if let Some(t) = &o.tx {
        lines.push(format!(
            "traffic: sent {} frames of {} B in {:.3} s ({} Mpps, {} busy cycles/frame)",
            t.seq,
            args.size,
            t.seconds(),
            fmt_opt(mpps(t.seq, t.seconds()), 3),
            fmt_opt(t.busy.per_packet(), 1)
        ));
    }
    if let Some(r) = &o.rx {
        let s = &r.sink;
        lines.push(format!(
            "traffic: received {} ({} unique) in {:.3} s ({} Mpps, {} busy cycles/frame); \
             lost {}, duplicated {}, reordered {}, corrupted {}, foreign {}{}",
            s.received,
            s.seq.unique,
            r.seconds(),
            fmt_opt(mpps(s.seq.unique, r.seconds()), 3),
            fmt_opt(r.busy.per_packet(), 1),
            o.lost().unwrap_or(0),
            s.seq.duplicated,
            s.seq.reordered,
            s.corrupted,
            s.foreign,
            if o.lossless() { " - lossless" } else { "" }
        ));
    }
    if let Some(e) = &o.error {
        lines.push(format!("traffic: error: {e}"));
    }
    lines.join("\n")
}

fn make_sides(args: &Args) -> (TxSide, RxSide) {
    let addrs = Addresses {
        dst_mac: args.dst_mac,
        src_mac: args.src_mac,
    };
    let size = args.size as usize;
    let now = Instant::now();
    let tx = TxSide {
        id: args.tx_id,
        frames: FrameRing::new(size, args.stream, &addrs),
        burst: args.burst as usize,
        window: args.window,
        count: args.count,
        duration: args.duration,
        rate: args.rate,
        pacer: None,
        seq: 0,
        busy: Busy::default(),
        started: None,
        ended: None,
        error: None,
        checked: (0, now),
        link: LinkWatch::new("tx"),
    };
    let rx = RxSide {
        id: if args.same { args.tx_id } else { args.rx_id },
        stream: args.stream,
        templates: (!args.no_verify).then(|| FrameRing::new(size, args.stream, &addrs)),
        sink: Sink::default(),
        burst: args.burst as usize,
        busy: Busy::default(),
        count: args.count,
        duration: args.duration,
        started: None,
        first: None,
        last: None,
        drain_from: None,
        drain: args.drain,
        publish: args.window > 0,
        link: LinkWatch::new("rx"),
    };
    (tx, rx)
}

/// Both sides' errors, if any.
fn join_errors(tx: Option<String>, rx: Option<String>) -> Option<String> {
    match (tx, rx) {
        (Some(t), Some(r)) if t != r => Some(format!("tx: {t}; rx: {r}")),
        (t, r) => t.or(r),
    }
}

/// The counters of the interface a side used.
fn counters(eps: &[Endpoint], u: Option<Use>) -> Option<Counters> {
    u.and_then(|u| eps[u.ep].interface(u.id))
        .map(|i| i.counters())
}

/// Opens the interfaces, runs the traffic and gathers the outcome.
fn run(args: &Args, stop: &mut Stop) -> Result<Outcome, String> {
    let plan = open(args)?;
    let sides = make_sides(args);
    let deadline = Instant::now() + args.connect_timeout;
    match (plan.tx, plan.rx) {
        (Some(t), Some(r)) if t.ep != r.ep && !args.single_loop => {
            run_threads(args, plan.eps, (t, r), sides, stop, deadline)
        }
        _ => run_single(args, plan, sides, stop, deadline),
    }
}

/// Sends on a second thread and receives on this one (two endpoints: 0 sends, 1 receives).
fn run_threads(
    args: &Args,
    mut eps: Vec<Endpoint>,
    (tu, ru): (Use, Use),
    (tx, mut rx): (TxSide, RxSide),
    stop: &mut Stop,
    deadline: Instant,
) -> Result<Outcome, String> {
    let mut rx_ep = eps.pop().ok_or("no rx endpoint")?;
    let tx_ep = eps.pop().ok_or("no tx endpoint")?;
    let shared = Shared::default();
    let (tx, tx_ep, rx_result) = std::thread::scope(|s| {
        let shared = &shared;
        let h = s.spawn(move || tx_thread(tx_ep, tx, tu, shared, deadline, args.tx_cpu));
        let r = rx_thread(&mut rx_ep, &mut rx, ru, shared, stop, deadline, args.rx_cpu);
        let (tx, tx_ep) = h.join().expect("tx thread panicked");
        (tx, tx_ep, r)
    });
    Ok(Outcome {
        error: join_errors(tx.error.clone(), rx_result.err()),
        tx_counters: tx_ep.interface(tu.id).map(|i| i.counters()),
        rx_counters: rx_ep.interface(ru.id).map(|i| i.counters()),
        tx: Some(tx),
        rx: Some(rx),
        threads: true,
    })
}

/// Sends and receives (or only one of them) in one loop on this thread.
fn run_single(
    args: &Args,
    mut plan: Plan,
    (mut tx, mut rx): (TxSide, RxSide),
    stop: &mut Stop,
    deadline: Instant,
) -> Result<Outcome, String> {
    pin(args.tx_cpu.or(args.rx_cpu))?;
    let shared = Shared::default();
    let single = SingleLoop {
        eps: &mut plan.eps,
        tx: plan.tx.map(|u| (u, &mut tx)),
        rx: plan.rx.map(|u| (u, &mut rx)),
        shared: &shared,
    };
    let r = single.run(stop, deadline);
    Ok(Outcome {
        error: join_errors(tx.error.clone(), r.err()),
        tx_counters: counters(&plan.eps, plan.tx),
        rx_counters: counters(&plan.eps, plan.rx),
        tx: plan.tx.map(|_| tx),
        rx: plan.rx.map(|_| rx),
        threads: false,
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let clock = CycleClock::start();
    let mut stop = match Stop::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("traffic: {e}");
            return ExitCode::from(3);
        }
    };
    let outcome = match run(&args, &mut stop) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("traffic: {e}");
            return ExitCode::from(3);
        }
    };
    let human = report_human(&outcome, &args);
    if args.json {
        eprintln!("{human}");
        println!("{}", report_json(&outcome, &args, clock.hz()));
    } else {
        println!("{human}");
    }
    if outcome.error.is_some() {
        ExitCode::from(3)
    } else if args.expect_lossless && !outcome.lossless() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
