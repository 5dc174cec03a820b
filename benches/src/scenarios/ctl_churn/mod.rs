//! `ctl-churn`: NSM Request/Close pairs through the real forwarder while traffic flows through
//! another, long-lived NSM connection.
//!
//! In one process: `quiver::Forwarder` (one worker) with `quiver::control::nsm` served on a unix
//! socket in a temp dir, two test endpoints (NSEs) and the memif peers, all built on our `memif`
//! crate, the memif sides in this process's own network namespace
//! (`file:///proc/<pid>/ns/net`); the KERNEL pairs' sides in two namespaces made for the run
//! (`qcc<pid>-nsc`, `qcc<pid>-nse`, deleted at its end):
//!
//! - the *steady* connection: Requested once, MEMIF on both sides. Its NSC is a memif slave on
//!   the socket Quiver answers with; its NSE is a memif master on the socket the steady
//!   endpoint names. The NSC sends numbered 64-byte frames at a paced rate for the whole
//!   churn; the NSE checks every frame (loss, duplicates, order).
//! - the *churn*: N pairs (1,000; `--quick` 100), each a Request of a new connection id and
//!   then its Close, one after another from a blocking client, each call timed. Most have
//!   MEMIF on both sides (Quiver master toward the client, slave toward the churn endpoint's
//!   memif master, which accepts each one in turn); a share of them (`--kernel-share`, 25 % by
//!   default, every fourth pair; `--kernel`: all) KERNEL on both sides: the client asks for
//!   `nsm-1` in its namespace, the endpoint answers with its namespace and leaves the name to
//!   Quiver, and Quiver's KERNEL backend (`--kernel-backend`, TAP by default as in Quiver)
//!   makes both interfaces.
//!
//! Figures, per mechanism: Request and Close latency (p50/p99/max), pairs per second of their
//! calls; the steady connection's frames (sent, received, lost), and what the churn left
//! behind, each of which must be 0: file descriptors (`/proc/self/fd` before and after), memif
//! sockets (abstract names in `/proc/net/unix`), ports and owned objects (the forwarder's port
//! list and `owned_by` of every churned id), buffers (the pool's free count before the
//! forwarder forwarded anything and after it stopped), links in the KERNEL pairs' namespaces
//! beyond their `lo`, and veth ends of churned connections in this process's namespace. The
//! goals (MEMIF: p99 ≤ 5 ms per Request, ≥ 500 pairs/s; KERNEL: p99 ≤ 10 ms per Request; no
//! frame lost) are printed beside the figures, never asserted.
//!
//! Where the time goes: every data-path call the server makes is timed through a wrapper
//! (`breakdown`), and after the churn, with traffic still flowing, the pieces are timed alone
//! (`probe`): a gRPC round trip that builds nothing, an empty worker command, `synchronize`,
//! and a memif master port added and removed straight on the forwarder, with and without a
//! namespace (with KERNEL pairs, a TAP port made in a namespace too).

mod mix;
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
use quiver::config::{
    MemifMode, MemifRole as QuiverMemifRole, MemifSection, PortSection, TapSection,
};
use quiver::control::nsm::{ForwarderDataplane, KernelBackend};
use quiver::control::owner::{Change, ConfigOwner, Control};
use quiver::{Config, Forwarder};
use serde_json::json;

use mix::{is_kernel, Calls, KernelEnds, CLIENT_IFNAME};
use nsm::{kernel_request, mech, request};
use peers::{run_peers, PeerStats, RATE};
use timed::{summary, ByName, Timed};
use util::{fd_count, round3, sockets_named, wait_until, TempDir};

/// The goal, printed beside the figures.
const GOAL_P99_MS: f64 = 5.0;
/// The goal, printed beside the figures.
const GOAL_PAIRS_PER_S: f64 = 500.0;
/// The goal of a Request with KERNEL on both sides (issue 24), printed beside the figures.
const GOAL_KERNEL_P99_MS: f64 = 10.0;

/// How the churn mixes its mechanisms.
pub struct Options {
    /// Percent of the churned pairs with KERNEL on both sides (the others MEMIF).
    pub kernel_share: u8,
    /// Which interfaces KERNEL mechanisms get.
    pub kernel_backend: KernelBackend,
}

impl Options {
    /// From the command line: `--kernel-share PERCENT` (default 25), `--kernel` (100),
    /// `--kernel-backend tap|veth` (default tap, Quiver's).
    pub fn parse(share: Option<u8>, all: bool, backend: &str) -> Result<Options, String> {
        Ok(Options {
            kernel_share: match (share, all) {
                (Some(_), true) => return Err("--kernel is --kernel-share 100: give one".into()),
                (Some(s), false) if s > 100 => {
                    return Err(format!("--kernel-share {s}: a percentage, 0 to 100"))
                }
                (Some(s), false) => s,
                (None, true) => 100,
                (None, false) => 25,
            },
            kernel_backend: match backend {
                "tap" => KernelBackend::Tap,
                "veth" => KernelBackend::Veth,
                other => return Err(format!("--kernel-backend {other}: tap or veth")),
            },
        })
    }

    fn backend_name(&self) -> &'static str {
        match self.kernel_backend {
            KernelBackend::Tap => "tap",
            KernelBackend::Veth => "veth",
        }
    }
}

/// Runs the scenario; returns its JSON line.
pub fn run(quick: bool, opts: &Options) -> Result<String, String> {
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
    let kernel_pairs = (0..pairs)
        .filter(|&i| is_kernel(i, opts.kernel_share))
        .count();
    let pid = std::process::id();
    let dir = TempDir(std::env::temp_dir().join(format!("quiver-ctl-churn-{pid}")));
    std::fs::create_dir_all(&dir.0).map_err(|e| e.to_string())?;
    let netns = format!("file:///proc/{pid}/ns/net");
    // The KERNEL pairs' namespaces, deleted when this returns (after everything declared
    // below is dropped: the forwarder's ports first).
    let ends = if kernel_pairs > 0 {
        Some(KernelEnds::new(pid)?)
    } else {
        None
    };

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
    // Each answers with the mechanism Quiver offers first (the client's type): MEMIF on its
    // socket, or KERNEL in the endpoint's namespace, the interface's name left to Quiver.
    let endpoint = |sock: &Path, name: &str, memif: &str| {
        let mut answers = vec![mech(
            "MEMIF",
            &[("inodeURL", &netns), ("socketfile", memif)],
        )];
        if let Some(e) = &ends {
            answers.push(mech("KERNEL", &[("inodeURL", &e.nse.url())]));
        }
        TestEndpoint::start(sock, name, answers).map_err(|e| format!("endpoint {name}: {e}"))
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
    dp.inner.set_kernel_backend(opts.kernel_backend);
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
        "ctl-churn: steady connection up, {RATE} frames/s flowing; {pairs} Request/Close pairs, \
         {kernel_pairs} of them KERNEL on both sides ({} backend) (fds {fds_before}, ports {:?})",
        opts.backend_name(),
        ports_before
    );

    // The churn.
    let mut memif = Calls::default();
    let mut kernel = Calls::default();
    let mut failures = Vec::new();
    // KERNEL pairs whose two interfaces were both there when the Request was answered.
    let mut kernel_links_seen = 0usize;
    let ids: Vec<String> = (0..pairs).map(|i| format!("churn-{pid}-{i}")).collect();
    let churn_start = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let kernel_ends = ends.as_ref().filter(|_| is_kernel(i, opts.kernel_share));
        let (calls, req) = match kernel_ends {
            Some(e) => (
                &mut kernel,
                kernel_request(id, "churn-nse", &e.nsc.url(), CLIENT_IFNAME),
            ),
            None => (&mut memif, request(id, "churn-nse", &netns)),
        };
        calls.pairs += 1;
        let t0 = Instant::now();
        let answer = client.request(req);
        let t1 = Instant::now();
        calls.requests.push(t1 - t0);
        match answer {
            Ok(conn) => {
                if let Some(e) = kernel_ends {
                    // Not timed: both interfaces, one in each namespace.
                    if e.extra().is_ok_and(|(c, s)| c.len() == 1 && s.len() == 1) {
                        kernel_links_seen += 1;
                    }
                }
                let t2 = Instant::now();
                if let Err(e) = client.close(conn) {
                    calls.failures += 1;
                    failures.push(format!("Close {id}: {e}"));
                }
                calls.closes.push(t2.elapsed());
            }
            Err(e) => {
                calls.failures += 1;
                failures.push(format!("Request {id}: {e}"));
            }
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
    // With KERNEL pairs: a TAP port (what the TAP backend makes for each side) added with its
    // device made inside the endpoint's namespace, and removed, straight on the forwarder.
    let tap_probes = if ends.is_some() {
        (kernel_pairs / 2).max(20)
    } else {
        0
    };
    let mut add_tap = Vec::with_capacity(tap_probes);
    let mut remove_tap = Vec::with_capacity(tap_probes);
    for (i, e) in (0..tap_probes).filter_map(|i| Some((i, ends.as_ref()?))) {
        let section = PortSection::Tap(TapSection {
            name: format!("probe-tap-{i}"),
            mac: None,
            mtu: 1500,
            device: Some(format!("probe{i}")),
            netns: Some(e.nse.path().into()),
        });
        let t0 = Instant::now();
        fwd.apply(Change::AddPort {
            port: section,
            owner: Some("probe".into()),
        })
        .map_err(|e| format!("probe TAP port: {e}"))?;
        add_tap.push(t0.elapsed());
        let t0 = Instant::now();
        fwd.apply(Change::RemoveInterface {
            name: format!("probe-tap-{i}"),
        })
        .map_err(|e| format!("probe TAP port: {e}"))?;
        remove_tap.push(t0.elapsed());
    }
    for v in [
        &mut grpc,
        &mut command,
        &mut sync,
        &mut add_plain,
        &mut add_netns,
        &mut remove,
        &mut add_tap,
        &mut remove_tap,
    ] {
        v.sort();
    }
    let mut probe = json!({
        "grpc_refused_request": summary(&grpc),
        "worker_command": summary(&command),
        "synchronize": summary(&sync),
        "add_memif_master_port": summary(&add_plain),
        "add_memif_master_port_in_netns": summary(&add_netns),
        "remove_memif_port": summary(&remove),
    });
    if tap_probes > 0 {
        probe["add_tap_port_in_netns"] = summary(&add_tap);
        probe["remove_tap_port"] = summary(&remove_tap);
    }

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
    // The KERNEL pairs' links: none beyond `lo` in either namespace once the Closes are done
    // (nor the probes' TAP devices), no veth end of a churned connection in this process's
    // namespace (the veth backend puts Quiver's ends there).
    let kernel_ids: Vec<&String> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| ends.is_some() && is_kernel(*i, opts.kernel_share))
        .map(|(_, id)| id)
        .collect();
    let (mut nsc_left, mut nse_left, mut host_ends_left) = (Vec::new(), Vec::new(), Vec::new());
    if let Some(e) = &ends {
        wait_until(5, || {
            e.extra().is_ok_and(|(c, s)| c.is_empty() && s.is_empty())
                && mix::host_ends_present(&kernel_ids).is_ok_and(|v| v.is_empty())
        });
        (nsc_left, nse_left) = e.extra()?;
        host_ends_left = mix::host_ends_present(&kernel_ids)?;
    }
    let links_left = nsc_left.len() + nse_left.len() + host_ends_left.len();

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

    // Figures: MEMIF's are the scenario's headline (as before the KERNEL mix), KERNEL's beside.
    memif.sort();
    kernel.sort();
    let sent = stats.sent.load(Ordering::Relaxed);
    let unique = stats.unique.load(Ordering::Relaxed);
    let lost = sent - unique;
    let leaked_fds = fds_after.saturating_sub(fds_before);
    let leaked_buffers = start_free.saturating_sub(end_free);
    let leaked_total =
        leaked_fds + sockets_left + ports_left + owned_left + leaked_buffers + links_left;
    let pairs_per_s = (pairs - failures.len()) as f64 / churn_secs;
    let memif_pairs_per_s = memif.pairs_per_s();
    let meets = json!({
        "p99_ms": memif.meets(GOAL_P99_MS),
        "pairs_per_s": memif_pairs_per_s.map(|p| p >= GOAL_PAIRS_PER_S),
        "kernel_p99_ms": kernel.meets(GOAL_KERNEL_P99_MS),
        "no_frame_lost": lost == 0,
        "nothing_leaked": leaked_total == 0,
    });
    eprintln!(
        "ctl-churn: {pairs} Request/Close pairs in {churn_secs:.2} s, {pairs_per_s:.0} pairs/s; \
         {} failures; KERNEL backend {}",
        failures.len(),
        opts.backend_name()
    );
    eprintln!("{}", mix::table_header());
    eprintln!("{}", memif.row("MEMIF", GOAL_P99_MS));
    eprintln!("{}", kernel.row("KERNEL", GOAL_KERNEL_P99_MS));
    eprintln!(
        "  (pairs/s: pairs per second of their own calls; MEMIF goal ≥ {GOAL_PAIRS_PER_S}; \
         KERNEL pairs whose two interfaces were there when answered: {kernel_links_seen} of {})",
        kernel.pairs
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
         ({start_free} free before, {end_free} after stop), {links_left} links \
         (client namespace {nsc_left:?}, endpoint namespace {nse_left:?}, veth ends here \
         {host_ends_left:?}); churn links that came up: {churn_links}"
    );
    eprintln!("  where the time goes (data-path calls during the churn): {breakdown}");
    eprintln!("  probes (traffic flowing): {probe}");
    for f in failures.iter().take(5) {
        eprintln!("  failure: {f}");
    }
    let r = |v: Option<f64>| v.map(round3);
    Ok(json!({
        "scenario": "ctl-churn",
        "pairs": pairs,
        "memif_pairs": memif.pairs,
        "kernel_pairs": kernel.pairs,
        "kernel_share_pct": opts.kernel_share,
        "kernel_backend": opts.backend_name(),
        "failures": failures.len(),
        "seconds": round3(churn_secs),
        "pairs_per_s": round3(pairs_per_s),
        "memif_pairs_per_s": r(memif_pairs_per_s),
        "p50_ms": r(memif.request_ms(0.50)),
        "p99_ms": r(memif.request_ms(0.99)),
        "max_ms": r(memif.request_ms(1.0)),
        "close_p50_ms": r(memif.close_ms(0.50)),
        "close_p99_ms": r(memif.close_ms(0.99)),
        "kernel_request_p50_ms": r(kernel.request_ms(0.50)),
        "kernel_request_p99_ms": r(kernel.request_ms(0.99)),
        "kernel_request_max_ms": r(kernel.request_ms(1.0)),
        "kernel_close_p50_ms": r(kernel.close_ms(0.50)),
        "kernel_close_p99_ms": r(kernel.close_ms(0.99)),
        "kernel_close_max_ms": r(kernel.close_ms(1.0)),
        "kernel_links_seen": kernel_links_seen,
        "by_mechanism": {
            "memif": memif.json(),
            "kernel": kernel.json(),
        },
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
            "links": links_left,
            "links_client_netns": nsc_left,
            "links_endpoint_netns": nse_left,
            "veth_ends_in_own_netns": host_ends_left,
        },
        "ports_after_steady_close": ports_final,
        "churn_links_up": churn_links,
        "breakdown": breakdown,
        "probe": probe,
        "memif_poll_errors": stats.poll_errors.load(Ordering::Relaxed),
        "goal": {
            "p99_ms_max": GOAL_P99_MS,
            "pairs_per_s_min": GOAL_PAIRS_PER_S,
            "kernel_request_p99_ms_max": GOAL_KERNEL_P99_MS,
            "lost_frames": 0,
            "leaked": 0,
            "met": meets,
        },
    })
    .to_string())
}
