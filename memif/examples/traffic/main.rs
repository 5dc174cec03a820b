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
//!
//! The program's parts: `args.rs` (the command line), `endpoints.rs` (opening the interfaces
//! and waiting for their links), `tx.rs` and `rx.rs` (the sending and receiving sides),
//! `shared.rs` (what the two sides share), `threads.rs` (a thread per side), `single.rs` (both
//! sides in one loop) and `report.rs` (the outcome, as text or JSON).

#[path = "../common/endpoint.rs"]
mod endpoint;
#[path = "../common/measure.rs"]
mod measure;
#[path = "../common/stream.rs"]
mod stream;
#[path = "../common/wire.rs"]
mod wire;

mod args;
mod endpoints;
mod report;
mod rx;
mod shared;
mod single;
mod threads;
mod tx;

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;

use args::Args;
use endpoint::{LinkWatch, Stop};
use endpoints::open;
use measure::{Busy, CycleClock};
use report::{report_human, report_json, Outcome};
use rx::RxSide;
use single::run_single;
use stream::{Addresses, FrameRing, Sink};
use threads::run_threads;
use tx::TxSide;

/// Largest burst (frames per tx/rx call).
const MAX_BURST: usize = 256;
/// Loop passes between control-socket and stop checks.
const CONTROL_EVERY: u32 = 1024;

/// Pins the calling thread when a CPU was given.
fn pin(cpu: Option<usize>) -> Result<(), String> {
    cpu.map_or(Ok(()), measure::pin_to)
}

/// Both sides as the command line describes them (only those the plan uses run).
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

/// Runs the traffic and reports; exit 3 on an error, 1 if `--expect-lossless` failed.
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
