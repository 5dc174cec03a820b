//! `soak`: NSM churn through the real `quiver` binary with faults on a schedule, and exact
//! accounting after each (issue 21, part 2).
//!
//! Quiver (`quiver run --nsm`, release build) runs in a namespace of its own, finding its
//! endpoints through a test registry (`nsm_forwarder::testing`) served by the runner, which
//! also serves the test endpoints. Every client and endpoint side is in a namespace made for
//! the run: `stable` (the stable connections' clients), `c0`..`c2` (one per churn client),
//! `cnf` (the killed CNF's), `nse` (every endpoint side).
//!
//! - Two stable connections carry numbered frames the whole run (MEMIF both sides, 10k
//!   frames/s between two memif peers of ours; KERNEL both sides, 2k frames/s between two
//!   AF_PACKET sockets on the interfaces Quiver made), refreshed every 10 s; every frame must
//!   arrive once, in order, intact (`flow`, `peers`, `stable`).
//! - Three churn clients Request, refresh and Close connections, MEMIF or KERNEL on each side
//!   at random, an IP context (addresses, routes, a neighbour, a policy route) on KERNEL sides
//!   (`churn`).
//! - Faults in turn (`faults`): a memif CNF killed with SIGKILL mid-traffic, a client's
//!   namespace deleted under live connections, the endpoints refusing, then stalling past
//!   Quiver's endpoint timeout, Quiver killed with SIGKILL mid-churn and started again (with
//!   the other KERNEL backend: veth and TAP alternate), the clients healing.
//! - After each fault and at the end the churn parks and the accounting runs (`account`,
//!   `inventory`); RSS is sampled every second (`rss`).
//!
//! `--quick`: each fault once, about 3 minutes. Otherwise `--minutes` (30 by default), the
//! faults cycling, Quiver killed only in the first half so that the second half measures one
//! process's memory.

mod account;
mod churn;
mod faults;
mod flow;
mod host;
mod inventory;
mod nsm;
mod peers;
mod quiver;
mod report;
mod rss;
mod stable;
mod world;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nsm_forwarder::testing::BlockingClient;
use serde_json::Value;

use super::memif_rate::release_artifact;
use churn::{ChurnStats, Client, Ctx, Gate};
use faults::Fault;
use host::{Netns, TempDir};
use inventory::{Leaks, Snapshot};
use nsm::Endpoints;
use quiver::{Quiver, QuiverSpec};
use rss::Rss;
use stable::Stable;
use world::{backend, Namespaces, Outcome, World, CLIENTS, REFRESH_EVERY};

/// Whatever this scenario cannot run without, or `None`.
fn missing_prerequisite() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (network namespaces, veths, TAP devices, AF_PACKET)".into());
    }
    if !std::path::Path::new(super::procs::IP).exists() {
        return Some("no /usr/sbin/ip (iproute2)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun (the TAP backend needs it)".into());
    }
    None
}

/// Runs the scenario: `quick` (about 3 minutes) or `minutes` long; returns its JSON line.
pub fn run(quick: bool, minutes: Option<u64>) -> Result<String, String> {
    if let Some(why) = missing_prerequisite() {
        return Err(format!("soak {why}"));
    }
    let minutes = minutes.unwrap_or(if quick { 3 } else { 30 });
    eprintln!("soak: building quiver and the memif traffic example (release)");
    let exe = release_artifact(&["--bin", "quiver"], "quiver")?;
    let traffic = release_artifact(&["-p", "memif", "--example", "traffic"], "traffic")?;
    let mut w = setup(quick, exe, traffic)?;
    let outcome = soak(&mut w, minutes);
    report::finish(w, outcome, minutes)
}

/// Makes the namespaces, serves the registry and endpoints, starts Quiver, the stable
/// connections and the churn (parked), and takes the baselines.
fn setup(quick: bool, exe: PathBuf, traffic: PathBuf) -> Result<World, String> {
    let pid = std::process::id();
    for r in host::reap_stale_runs() {
        eprintln!("soak: removed what a killed earlier run left: {r}");
    }
    let tag = format!("qs{pid}");
    let id_prefix = format!("soak-{pid}-");
    let dir = TempDir::new(&format!("quiver-soak-{pid}"))?;
    let ns = Namespaces {
        fwd: Netns::new(&format!("{tag}-quiver"))?,
        nse: Netns::new(&format!("{tag}-nse"))?,
        st: Netns::new(&format!("{tag}-stable"))?,
        cnf: Netns::new(&format!("{tag}-cnf"))?,
        clients: (0..CLIENTS)
            .map(|k| Netns::new(&format!("{tag}-c{k}")))
            .collect::<Result<_, _>>()?,
    };
    let spec = QuiverSpec {
        exe,
        dir: dir.path.clone(),
        netns: ns.fwd.name.clone(),
        name: format!("soak-{pid}"),
    };
    let endpoints = Endpoints::start(
        &dir.path,
        &spec.registry_socket(),
        &ns.nse.url(),
        CLIENTS,
        &tag,
    )?;
    let quiver = Quiver::start(&spec, 0, backend(0))?;
    eprintln!(
        "soak: quiver #0 up (pid {}, veth backend, answered after {:.2} s)",
        quiver.pid,
        quiver.ready_after.as_secs_f64()
    );
    warm_up(&spec.nsm_url(), &ns.clients[0], &id_prefix)?;
    let rss = Arc::new(Rss::default());
    rss.set_pid(quiver.pid, 0);
    let ctx = Arc::new(Ctx {
        nsm_url: spec.nsm_url(),
        stop: AtomicBool::new(false),
        gate: Gate::default(),
        parked: AtomicUsize::new(0),
        fault: Mutex::new(None),
        id_prefix: id_prefix.clone(),
        failures: AtomicU64::new(0),
        backend: Mutex::new(backend(0)),
    });
    // Before any connection: what the end is compared with.
    let scope_ns = account::namespaces(&ns);
    let api_dir = dir.path.display().to_string();
    let base_empty = account::settled(|| {
        let scope = inventory::Scope {
            namespaces: &scope_ns,
            live_ids: &[],
            id_prefix: &id_prefix,
            quiver_ns: "quiver",
            api_dir: &api_dir,
        };
        Snapshot::take(&scope, Some(&quiver))
    })?;
    let stable = Stable::start(&spec.nsm_url(), &ns.st, &ns.nse, &tag, &id_prefix)?;
    eprintln!("soak: stable connections up, frames flowing (MEMIF 10k/s, KERNEL 2k/s)");
    Ok(World {
        quick,
        tag,
        id_prefix,
        traffic,
        spec,
        quiver,
        ns,
        endpoints,
        stable,
        stable_up: true,
        ctx,
        clients: Vec::new(),
        grpc: None,
        cnf_n: 0,
        doom_n: 0,
        rss,
        started: Instant::now(),
        next_refresh: Instant::now() + REFRESH_EVERY,
        leaks: Leaks::default(),
        base_host: Snapshot::default(),
        base_empty,
        base_process: Snapshot::default(),
        api_dir,
        crashes: Vec::new(),
        fault_calls: (2, 2),
        dir,
    })
}

/// One MEMIF and one KERNEL connection (with an IP context) Requested and Closed before the
/// first baseline: what Quiver starts only when first needed (its memif control thread, say)
/// then exists in every baseline.
fn warm_up(nsm_url: &str, ns: &Netns, id_prefix: &str) -> Result<(), String> {
    let mut c = BlockingClient::connect(nsm_url).map_err(|e| format!("warm-up: {e}"))?;
    for (i, m) in [nsm::Mech::Memif, nsm::Mech::Kernel]
        .into_iter()
        .enumerate()
    {
        let side = nsm::ClientSide {
            ns_url: ns.url(),
            mech: m,
            ifname: "c0s0".into(),
        };
        let id = format!("{id_prefix}warm-{i}");
        let req = nsm::first_request(
            &id,
            &nsm::churn_endpoint(0, 0, m),
            &side,
            Some(nsm::ip_context(100, 0)),
        );
        let answer = c
            .request_within(req, churn::DEADLINE)
            .map_err(|e| format!("warm-up Request {id}: {e}"))?;
        c.close(answer)
            .map_err(|e| format!("warm-up Close {id}: {e}"))?;
    }
    Ok(())
}

/// The run itself: churn, faults, accounting; then the end.
fn soak(w: &mut World, minutes: u64) -> Outcome {
    let mut out = Outcome {
        checkpoints: Vec::new(),
        faults: Vec::new(),
        churn: ChurnStats::default(),
        error: None,
        exit: None,
        seconds: 0.0,
    };
    if let Err(e) = schedule(w, minutes, &mut out) {
        eprintln!("soak: stopped early: {e}");
        out.error = Some(e);
    }
    // The churn stops (parked clients see it) and its figures are gathered.
    w.ctx.stop.store(true, Ordering::SeqCst);
    w.ctx.gate.set_shut(false);
    for c in w.clients.drain(..) {
        if let Ok(s) = c.join() {
            out.churn.merge(s);
        }
    }
    if out.error.is_none() {
        if let Err(e) = end(w, &mut out) {
            eprintln!("soak: the end failed: {e}");
            out.error = Some(e);
        }
    }
    out.seconds = w.started.elapsed().as_secs_f64();
    out
}

fn schedule(w: &mut World, minutes: u64, out: &mut Outcome) -> Result<(), String> {
    // The baseline with the stable connections up (`base_empty`, before they were, is the
    // end's).
    w.stable.pause(Duration::from_secs(5));
    let first = w.baseline()?;
    w.base_host = first.clone();
    w.base_process = first.clone();
    w.stable.resume();
    w.started = Instant::now();
    let t0 = Instant::now();
    w.rss.spawn(t0)?;
    for k in 0..CLIENTS {
        let client = Client::new(k, w.ns.clients[k].url(), w.ctx.clone());
        let t = std::thread::Builder::new()
            .name(format!("soak-churn-{k}"))
            .spawn(move || client.run())
            .map_err(|e| e.to_string())?;
        w.clients.push(t);
    }
    eprintln!(
        "soak: churn started ({CLIENTS} clients); {} min, a fault every {} s",
        minutes,
        if w.quick { 8 } else { 40 }
    );
    let total = Duration::from_secs(minutes * 60);
    let gap = Duration::from_secs(if w.quick { 8 } else { 40 });
    let mut i = 0usize;
    loop {
        let elapsed = t0.elapsed();
        let done_each = i >= Fault::ALL.len();
        if done_each && (w.quick || elapsed + gap + Duration::from_secs(60) > total) {
            break;
        }
        w.churn_for(gap);
        let mut fault = Fault::ALL[i % Fault::ALL.len()];
        if fault == Fault::QuiverKill && !w.quick && elapsed > total / 2 {
            // The second half is one process's, for its memory.
            fault = Fault::CnfKill;
        }
        i += 1;
        eprintln!(
            "soak: fault {i}: {} (at {} s)",
            fault.name(),
            t0.elapsed().as_secs()
        );
        let at = t0.elapsed().as_secs();
        let record = w.fault(fault);
        let (parked, drained) = w.park()?;
        let diag = (!drained).then(|| w.stable_diag());
        if fault == Fault::QuiverKill {
            w.base_process = w.baseline()?;
        }
        let (bp, bh) = (w.base_process.clone(), w.base_host.clone());
        let mut cp = w.account(fault.name(), &bp, &bh)?;
        cp["parked_s"] = serde_json::json!((parked.as_secs_f64() * 10.0).round() / 10.0);
        cp["stable_drained"] = serde_json::json!(drained);
        if let Some(d) = diag {
            eprintln!("soak:   stable traffic not drained: {d}");
            cp["stable_not_drained"] = d;
        }
        w.unpark();
        let mut rec = serde_json::json!({"fault": fault.name(), "at_s": at});
        match record {
            Ok(v) => rec["outcome"] = v,
            Err(e) => {
                eprintln!("soak: fault {} failed: {e}", fault.name());
                rec["error"] = Value::String(e);
            }
        }
        eprintln!("soak:   {}", rec);
        out.faults.push(rec);
        out.checkpoints.push(cp);
    }
    w.churn_for(gap);
    let (_, drained) = w.park()?;
    let diag = (!drained).then(|| w.stable_diag());
    let (bp, bh) = (w.base_process.clone(), w.base_host.clone());
    let mut cp = w.account("the end", &bp, &bh)?;
    cp["stable_drained"] = serde_json::json!(drained);
    if let Some(d) = diag {
        eprintln!("soak:   stable traffic not drained: {d}");
        cp["stable_not_drained"] = d;
    }
    out.checkpoints.push(cp);
    Ok(())
}

/// The end: the stable connections closed, everything accounted against the state before
/// they existed; Quiver stopped (SIGTERM), the namespaces looked at once more.
fn end(w: &mut World, out: &mut Outcome) -> Result<(), String> {
    let closed = w.stable.close();
    w.stable_up = false;
    if let Some(e) = w.stable.stop_peers() {
        eprintln!("soak: a stable peer ended with: {e}");
    }
    closed?;
    // The host as before the first connection. The process: as before it when it is still the
    // first Quiver; a restarted one (which made its lazily made parts, a worker's epoll set
    // say, in its own time) as it was with the stable connections up, which nothing may now
    // exceed.
    let empty = w.base_empty.clone();
    let process = if w.quiver.incarnation == 0 {
        empty.clone()
    } else {
        w.base_process.clone()
    };
    let cp = w.account("everything closed", &process, &empty)?;
    out.checkpoints.push(cp);
    let status = w.quiver.stop();
    out.exit = Some(status.map_or("killed after 30 s".into(), |s| s.to_string()));
    let left = w.host_extra(&empty)?;
    for (kind, items) in left {
        for item in items {
            eprintln!("soak: LEAK after quiver stopped: {kind}: {item}");
            w.leaks
                .0
                .entry(kind)
                .or_default()
                .insert(format!("after stop: {item}"), 1);
        }
    }
    Ok(())
}
