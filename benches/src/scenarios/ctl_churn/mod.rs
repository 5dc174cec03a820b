//! `ctl-churn`: NSM Request/Close pairs through the real forwarder while traffic flows through
//! another, long-lived NSM connection.
//!
//! In one process: `quiver::Forwarder` (one worker) with `quiver::control::nsm` served on a unix
//! socket in a temp dir, two test endpoints (NSEs) and the memif peers, all built on our `memif`
//! crate, in this process's own network namespace (`file:///proc/<pid>/ns/net`, so no
//! namespace is created):
//!
//! - the *steady* connection: Requested once, MEMIF on both sides. Its NSC is a memif slave on
//!   the socket Quiver answers with; its NSE is a memif master on the socket the steady
//!   endpoint names. The NSC sends numbered 64-byte frames at a paced rate for the whole
//!   churn; the NSE checks every frame (loss, duplicates, order).
//! - the *churn*: N pairs (1,000; `--quick` 100), each a Request of a new connection id with
//!   MEMIF on both sides (Quiver master toward the client, slave toward the churn endpoint's
//!   memif master, which accepts each one in turn) and then its Close, one after another from
//!   a blocking client, each call timed.
//!
//! Figures: Request and Close latency (p50/p99/max), pairs per second, the steady
//! connection's frames (sent, received, lost), and what the churn left behind, each of which
//! must be 0: file descriptors (`/proc/self/fd` before and after), memif sockets (abstract
//! names in `/proc/net/unix`), ports and owned objects (the forwarder's port list and
//! `owned_by` of every churned id), buffers (the pool's free count before the forwarder
//! forwarded anything and after it stopped). The goal (p99 ≤ 5 ms per Request, ≥ 500 pairs/s,
//! no frame lost) is printed beside the figures, never asserted.
//!
//! Where the time goes: every data-path call the server makes is timed through a wrapper
//! (`breakdown`), and after the churn, with traffic still flowing, the pieces are timed alone
//! (`probe`): a gRPC round trip that builds nothing, an empty worker command, `synchronize`,
//! and a memif master port added and removed straight on the forwarder, with and without a
//! namespace.

pub(crate) mod nsm;
mod peers;
mod timed;
pub(crate) mod util;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, IdlePolicy, WorkerConfig};
use nsm_forwarder::testing::{BlockingClient, TestEndpoint};
use nsm_forwarder::{NsmConfig, NsmHandle};
use nsm_proto::connection::State;
use quiver::config::{MemifMode, MemifRole as QuiverMemifRole, MemifSection, PortSection};
use quiver::control::nsm::ForwarderDataplane;
use quiver::control::owner::{Change, ConfigOwner, Control};
use quiver::{Config, Forwarder};
use serde_json::json;

use nsm::{mech, request};
use peers::{run_peers, PeerStats, RATE};
use timed::{summary, ByName, Timed};
use util::{fd_count, quantile_ms, round3, sockets_named, wait_until, TempDir};

/// The goal, printed beside the figures.
const GOAL_P99_MS: f64 = 5.0;
/// The goal, printed beside the figures.
const GOAL_PAIRS_PER_S: f64 = 500.0;

/// Runs the scenario; returns its JSON line.
pub fn run(quick: bool) -> Result<String, String> {
    // /proc/self belongs to the process's effective user.
    let euid = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata("/proc/self").map_err(|e| e.to_string())?,
    );
    if euid != 0 {
        return Err(
            "ctl-churn needs root: Quiver makes each memif socket inside the client's \
                    network namespace (setns, CAP_SYS_ADMIN)"
                .into(),
        );
    }
    let pairs: usize = if quick { 100 } else { 1000 };
    let pid = std::process::id();
    let dir = TempDir(std::env::temp_dir().join(format!("quiver-ctl-churn-{pid}")));
    std::fs::create_dir_all(&dir.0).map_err(|e| e.to_string())?;
    let netns = format!("file:///proc/{pid}/ns/net");

    // The forwarder: one worker, ordinary pages.
    let cfg = Config::parse("[buffers]\nhugepages = \"never\"\n").map_err(|e| e.to_string())?;
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 16384,
        hugepages: HugepagePolicy::Never,
        ..BufferPoolConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let start_free = pool.free_count();
    let workers = WorkerConfig {
        cores: vec![0],
        idle: IdlePolicy::ADAPTIVE,
    };
    // Owned as in the daemon, housekeeping every millisecond.
    let owner = ConfigOwner::start(
        Forwarder::start(&cfg, &workers, pool.clone())?,
        Duration::from_millis(1),
    );
    let fwd = owner.control();
    let port_names = |f: &Control| {
        f.view()
            .ports()
            .iter()
            .map(|p| p.name.clone())
            .collect::<Vec<_>>()
    };

    // The endpoints (NSEs) and the NSM server.
    let steady_memif = format!("@quiver-bench-steady-nse-{pid}");
    let churn_memif = format!("@quiver-bench-churn-nse-{pid}");
    let steady_sock = dir.0.join("steady-nse.sock");
    let churn_sock = dir.0.join("churn-nse.sock");
    let endpoint = |sock: &Path, name: &str, memif: &str| {
        TestEndpoint::start(
            sock,
            name,
            vec![mech(
                "MEMIF",
                &[("inodeURL", &netns), ("socketfile", memif)],
            )],
        )
        .map_err(|e| format!("endpoint {name}: {e}"))
    };
    let steady_nse = endpoint(&steady_sock, "steady-nse", &steady_memif)?;
    let churn_nse = endpoint(&churn_sock, "churn-nse", &churn_memif)?;
    let discovery = ByName(HashMap::from([
        (
            "steady-nse".to_string(),
            format!("unix://{}", steady_sock.display()),
        ),
        (
            "churn-nse".to_string(),
            format!("unix://{}", churn_sock.display()),
        ),
    ]));
    let listen = format!("unix://{}", dir.0.join("quiver.sock").display());
    let dp = Arc::new(Timed {
        inner: ForwarderDataplane::new(fwd.clone()),
        times: Mutex::new(HashMap::new()),
        client_side_done: Mutex::new(None),
    });
    let server = NsmHandle::spawn(
        NsmConfig {
            name: "quiver".into(),
            listen_on: listen.clone(),
            // Reconciliation removes every quiver-tagged veth host-wide: not in a benchmark.
            reconcile_at_start: false,
            ..NsmConfig::default()
        },
        dp.clone(),
        Arc::new(discovery),
        2,
    )
    .map_err(|e| e.to_string())?;
    let mut client = BlockingClient::connect(&listen).map_err(|e| e.to_string())?;

    // The steady connection and its traffic.
    let steady_id = format!("steady-{pid}");
    let steady = client
        .request(request(&steady_id, "steady-nse", &netns))
        .map_err(|e| format!("steady Request: {e}"))?;
    if steady.state != State::Up as i32 {
        return Err(format!("steady connection not UP: {steady:?}"));
    }
    let nsc_socket = steady
        .mechanism
        .as_ref()
        .and_then(|m| m.parameters.get("socketfile").cloned())
        .ok_or("the steady connection's answer has no socketfile")?;
    let stats = Arc::new(PeerStats::default());
    let peers = {
        let (s, nse, churn) = (stats.clone(), steady_memif.clone(), churn_memif.clone());
        std::thread::Builder::new()
            .name("churn-peers".into())
            .spawn(move || run_peers(s, nsc_socket, nse, churn))
            .map_err(|e| e.to_string())?
    };
    if !wait_until(20, || {
        stats.up.load(Ordering::Relaxed) || peers.is_finished()
    }) {
        return Err("the steady connection's memifs did not come up in 20 s".into());
    }
    if peers.is_finished() {
        return Err(peers
            .join()
            .map_err(|_| "the memif peers panicked".to_string())?
            .err()
            .unwrap_or_else(|| "the memif peers stopped".into()));
    }
    stats.sending.store(true, Ordering::Relaxed);
    // Traffic must be flowing before the churn starts.
    wait_until(5, || stats.unique.load(Ordering::Relaxed) > 0);
    let ports_before = port_names(&fwd);
    let fds_before = fd_count();
    let socket_prefix = format!("@quiver/churn-{pid}-");
    let sent_before = stats.sent.load(Ordering::Relaxed);
    eprintln!(
        "ctl-churn: steady connection up, {RATE} frames/s flowing; {pairs} Request/Close pairs \
         (fds {fds_before}, ports {:?})",
        ports_before
    );

    // The churn.
    let mut req_times = Vec::with_capacity(pairs);
    let mut close_times = Vec::with_capacity(pairs);
    let mut failures = Vec::new();
    let ids: Vec<String> = (0..pairs).map(|i| format!("churn-{pid}-{i}")).collect();
    let churn_start = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let t0 = Instant::now();
        let answer = client.request(request(id, "churn-nse", &netns));
        let t1 = Instant::now();
        req_times.push(t1 - t0);
        match answer {
            Ok(conn) => {
                let t2 = Instant::now();
                if let Err(e) = client.close(conn) {
                    failures.push(format!("Close {id}: {e}"));
                }
                close_times.push(t2.elapsed());
            }
            Err(e) => failures.push(format!("Request {id}: {e}")),
        }
        if (i + 1) % (pairs / 10).max(1) == 0 {
            eprintln!(
                "ctl-churn: {} pairs, {:.0} pairs/s",
                i + 1,
                (i + 1) as f64 / churn_start.elapsed().as_secs_f64()
            );
        }
    }
    let churn_secs = churn_start.elapsed().as_secs_f64();
    let sent_during = stats.sent.load(Ordering::Relaxed) - sent_before;
    let breakdown = dp.report();

    // Where the time goes, probed while the traffic still flows: a gRPC round trip that
    // touches nothing (a Request with an empty id is refused at once), a worker command round
    // trip (an empty command), and a grace period (`synchronize`).
    let probes = (pairs / 2).max(50);
    let mut grpc = Vec::with_capacity(probes);
    let mut command = Vec::with_capacity(probes);
    let mut sync = Vec::with_capacity(probes);
    for _ in 0..probes {
        let t0 = Instant::now();
        let refused = client.request(request("", "churn-nse", &netns));
        grpc.push(t0.elapsed());
        if refused.is_ok() {
            return Err("a Request with an empty id was accepted".into());
        }
        // Timed on the owner's thread, where commits run.
        let (command_time, sync_time) = fwd
            .inspect(|f| {
                let t0 = Instant::now();
                let done = f.dataplane().command(|_| Box::new(|_| Ok(())));
                let command = t0.elapsed();
                let t0 = Instant::now();
                f.dataplane().synchronize();
                done.map(|()| (command, t0.elapsed()))
                    .map_err(|e| format!("empty worker command: {e:?}"))
            })
            .map_err(|e| e.to_string())??;
        command.push(command_time);
        sync.push(sync_time);
    }
    // A memif master port added and removed straight on the forwarder (no gRPC, no NSM):
    // its socket in Quiver's own namespace, then made inside a namespace (`NetNs::run`).
    let mut add_plain = Vec::with_capacity(probes);
    let mut add_netns = Vec::with_capacity(probes);
    let mut remove = Vec::with_capacity(probes);
    for i in 0..probes {
        for (ns, times) in [(None, &mut add_plain), (Some(&netns), &mut add_netns)] {
            let section = PortSection::Memif(MemifSection {
                name: format!("probe-{i}"),
                mac: None,
                mtu: 1500,
                role: QuiverMemifRole::Master,
                socket: format!("@quiver-bench-probe-{pid}-{i}"),
                id: 0,
                secret: None,
                mode: MemifMode::Ethernet,
                ring_size: 1024,
                buffer_size: 2048,
                netns: ns.map(|u| std::path::PathBuf::from(u.trim_start_matches("file://"))),
            });
            let t0 = Instant::now();
            fwd.apply(Change::AddPort {
                port: section,
                owner: Some("probe".into()),
            })
            .map_err(|e| format!("probe port: {e}"))?;
            times.push(t0.elapsed());
            let t0 = Instant::now();
            fwd.apply(Change::RemoveInterface {
                name: format!("probe-{i}"),
            })
            .map_err(|e| format!("probe port: {e}"))?;
            remove.push(t0.elapsed());
        }
    }
    for v in [
        &mut grpc,
        &mut command,
        &mut sync,
        &mut add_plain,
        &mut add_netns,
        &mut remove,
    ] {
        v.sort();
    }
    let probe = json!({
        "grpc_refused_request": summary(&grpc),
        "worker_command": summary(&command),
        "synchronize": summary(&sync),
        "add_memif_master_port": summary(&add_plain),
        "add_memif_master_port_in_netns": summary(&add_netns),
        "remove_memif_port": summary(&remove),
    });

    // Stop the traffic and let the last frames arrive.
    stats.sending.store(false, Ordering::Relaxed);
    let mut last = (u64::MAX, Instant::now());
    wait_until(5, || {
        let u = stats.unique.load(Ordering::Relaxed);
        if u == stats.sent.load(Ordering::Relaxed) - stats.sender_dropped.load(Ordering::Relaxed) {
            return true;
        }
        if u != last.0 {
            last = (u, Instant::now());
        }
        last.1.elapsed() > Duration::from_millis(500)
    });

    // What the churn left: objects and ports now; fds and sockets once closing settled (the
    // churn endpoint's master notices the last disconnect on its next poll, tonic closes the
    // endpoint channels asynchronously).
    let owned_left: usize = {
        let f = fwd.view();
        ids.iter().map(|id| f.owned_by(id).len()).sum()
    };
    let ports_after = port_names(&fwd);
    let ports_left = ports_after.len().saturating_sub(ports_before.len());
    wait_until(5, || {
        fd_count() <= fds_before && sockets_named(&socket_prefix) == 0
    });
    let fds_after = fd_count();
    let sockets_left = sockets_named(&socket_prefix);
    let churn_links = stats.churn_links.load(Ordering::Relaxed);
    let free_running = pool.free_count();

    // Tear everything down: the steady connection, the peers, the server, the forwarder.
    stats.stop.store(true, Ordering::Relaxed);
    let peers_result = peers
        .join()
        .map_err(|_| "the memif peers panicked".to_string())?;
    client
        .close(steady)
        .map_err(|e| format!("steady Close: {e}"))?;
    let ports_final = port_names(&fwd).len();
    drop(client);
    drop(server);
    drop(dp);
    drop(steady_nse);
    drop(churn_nse);
    drop(fwd);
    owner
        .stop()
        .map_err(|e| format!("the configuration owner: {e}"))?
        .stop();
    let end_free = pool.free_count();
    peers_result?;

    // Figures.
    req_times.sort();
    close_times.sort();
    let sent = stats.sent.load(Ordering::Relaxed);
    let unique = stats.unique.load(Ordering::Relaxed);
    let lost = sent - unique;
    let leaked_fds = fds_after.saturating_sub(fds_before);
    let leaked_buffers = start_free.saturating_sub(end_free);
    let leaked_total = leaked_fds + sockets_left + ports_left + owned_left + leaked_buffers;
    let p50 = quantile_ms(&req_times, 0.50);
    let p99 = quantile_ms(&req_times, 0.99);
    let pairs_per_s = (pairs - failures.len()) as f64 / churn_secs;
    let meets = json!({
        "p99_ms": p99 <= GOAL_P99_MS,
        "pairs_per_s": pairs_per_s >= GOAL_PAIRS_PER_S,
        "no_frame_lost": lost == 0,
        "nothing_leaked": leaked_total == 0,
    });
    eprintln!("ctl-churn: {pairs} Request/Close pairs in {churn_secs:.2} s");
    eprintln!(
        "  Request p50 {p50:.2} ms, p99 {p99:.2} ms, max {:.2} ms (goal p99 ≤ {GOAL_P99_MS} ms)",
        quantile_ms(&req_times, 1.0)
    );
    eprintln!(
        "  Close   p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        quantile_ms(&close_times, 0.50),
        quantile_ms(&close_times, 0.99),
        quantile_ms(&close_times, 1.0)
    );
    eprintln!(
        "  {pairs_per_s:.0} pairs/s (goal ≥ {GOAL_PAIRS_PER_S}); {} failures",
        failures.len()
    );
    eprintln!(
        "  steady connection: {sent} frames sent ({sent_during} during the churn), {} received, \
         {lost} lost ({} dropped by the sender; its ring was full in {} passes), {} duplicated, {} reordered, {} \
         foreign (goal: none lost)",
        stats.received.load(Ordering::Relaxed),
        stats.sender_dropped.load(Ordering::Relaxed),
        stats.ring_full.load(Ordering::Relaxed),
        stats.duplicated.load(Ordering::Relaxed),
        stats.reordered.load(Ordering::Relaxed),
        stats.foreign.load(Ordering::Relaxed),
    );
    eprintln!(
        "  left behind: {leaked_fds} fds ({fds_before} → {fds_after}), {sockets_left} memif \
         sockets, {ports_left} ports, {owned_left} owned objects, {leaked_buffers} buffers \
         ({start_free} free before, {end_free} after stop); churn links that came up: \
         {churn_links}"
    );
    eprintln!("  where the time goes (data-path calls during the churn): {breakdown}");
    eprintln!("  probes (traffic flowing): {probe}");
    for f in failures.iter().take(5) {
        eprintln!("  failure: {f}");
    }
    Ok(json!({
        "scenario": "ctl-churn",
        "pairs": pairs,
        "failures": failures.len(),
        "seconds": round3(churn_secs),
        "pairs_per_s": round3(pairs_per_s),
        "p50_ms": round3(p50),
        "p99_ms": round3(p99),
        "max_ms": round3(quantile_ms(&req_times, 1.0)),
        "close_p50_ms": round3(quantile_ms(&close_times, 0.50)),
        "close_p99_ms": round3(quantile_ms(&close_times, 0.99)),
        "frames": {
            "rate_per_s": RATE,
            "sent": sent,
            "sent_during_churn": sent_during,
            "received": stats.received.load(Ordering::Relaxed),
            "unique": unique,
            "sender_dropped": stats.sender_dropped.load(Ordering::Relaxed),
            "sender_ring_full_passes": stats.ring_full.load(Ordering::Relaxed),
            "duplicated": stats.duplicated.load(Ordering::Relaxed),
            "reordered": stats.reordered.load(Ordering::Relaxed),
            "foreign": stats.foreign.load(Ordering::Relaxed),
        },
        "lost_frames": lost,
        "leaked": leaked_total,
        "leaks": {
            "fds": leaked_fds,
            "fds_before": fds_before,
            "fds_after": fds_after,
            "memif_sockets": sockets_left,
            "ports": ports_left,
            "owned_objects": owned_left,
            "buffers": leaked_buffers,
            "buffers_free_before": start_free,
            "buffers_free_running_after": free_running,
            "buffers_free_after_stop": end_free,
        },
        "ports_after_steady_close": ports_final,
        "churn_links_up": churn_links,
        "breakdown": breakdown,
        "probe": probe,
        "memif_poll_errors": stats.poll_errors.load(Ordering::Relaxed),
        "goal": {
            "p99_ms_max": GOAL_P99_MS,
            "pairs_per_s_min": GOAL_PAIRS_PER_S,
            "lost_frames": 0,
            "leaked": 0,
            "met": meets,
        },
    })
    .to_string())
}
