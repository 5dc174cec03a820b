//! `wireguard`: iperf3 through a WireGuard tunnel whose two ends are played in turn by
//! wireguard-go, boringtun and Quiver, on the same two CPUs, alternating, in one run
//! (issue 23's benchmark).
//!
//! Namespace A → tunnel end 1 → veth underlay → tunnel end 2 → namespace B (`wg_net`). A peer
//! implementation runs as two instances, each on a TUN in its end's namespace, configured with
//! `wg`, the kernel forwarding between the TUN and the veths; Quiver runs as two `quiver run`
//! processes, each owning its end's two veths (AF_PACKET ports) with one `[[wireguard]]` tunnel
//! and a route into it. End 1 is pinned to the first CPU (`taskset`; Quiver's worker too, by
//! `[dataplane] cores`), end 2 to the second, and iperf3's client (in A) and server (in B) with
//! them. Each round: TCP for `secs`, then UDP with 1400-byte datagrams as fast as iperf3 sends
//! them (`-b 0`), figures as iperf3's receiver counted them. For Quiver, the runtime counters
//! (`quiver ctl show runtime`) of each end are read after each test, and a third test, UDP paced
//! at [`PACED_RATE`], gives the headline clocks/packet of `wg4-encrypt` (end 1) and
//! `wg4-decrypt` (end 2) with the cores not saturated (node clocks come from the TSC, so under
//! saturation they include the time iperf3 held the worker's CPU inside a node's call), beside
//! the cost of bare ChaCha20-Poly1305 on the same bytes (`wg_floor`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::wg_peers::Peer;

use super::memif_rate::{median, release_artifact, two_cpus};
use super::wg_floor::{self, round1};
use super::wg_net::{self, pinned, EndSpec, Net, Proc, ENDS, WG, WG_PORT};

/// One of the implementations compared.
#[derive(Clone, Copy)]
enum Imp {
    Peer(Peer),
    Quiver,
}

impl Imp {
    fn name(self) -> &'static str {
        match self {
            Imp::Peer(p) => p.name(),
            Imp::Quiver => "quiver",
        }
    }
}

/// Rate of the paced UDP test (iperf3's `-b`), in which Quiver's node costs are read with its
/// cores not saturated.
const PACED_RATE: &str = "200M";

/// The tests of a round: name, UDP rate (`None`: TCP), whether for Quiver only. The paced
/// test is Quiver's alone: it measures the nodes, not the throughput.
const PHASES: [(&str, Option<&str>, bool); 3] = [
    ("tcp", None, false),
    ("udp", Some("0"), false),
    ("udp_paced", Some(PACED_RATE), true),
];

/// What one round of one implementation gave.
struct RoundResult {
    tcp_gbps: f64,
    tcp_retransmits: u64,
    udp_gbps: f64,
    udp_lost_percent: f64,
    /// Quiver only: the paced UDP test's Gbit/s received and loss.
    paced: Option<(f64, f64)>,
    /// Quiver only: by phase.
    quiver: Option<BTreeMap<&'static str, QuiverPhase>>,
}

/// Quiver's own figures for one test.
struct QuiverPhase {
    /// Node counters of end 1 and end 2.
    nodes: [BTreeMap<String, NodeStat>; 2],
    /// Each end's worker thread: share of the test's wall time on its CPU, and runnable but
    /// waiting for it (the CPU taken by iperf3 or anything else: node clocks, read from the
    /// TSC, include such waits when they fall inside a node's call).
    workers: [Value; 2],
}

/// One node's counters summed over a process's workers.
#[derive(Default, Clone, Copy)]
struct NodeStat {
    clocks: f64,
    packets: f64,
    vectors: f64,
}

impl NodeStat {
    fn per_packet(&self) -> f64 {
        if self.packets > 0.0 {
            self.clocks / self.packets
        } else {
            0.0
        }
    }
}

/// Whatever this scenario cannot run without, or `None`.
fn missing_prerequisite() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (network namespaces, TUN devices, AF_PACKET)".into());
    }
    for tool in [
        wg_net::IP,
        wg_net::SYSCTL,
        wg_net::PING,
        WG,
        wg_net::TASKSET,
        wg_net::TIMEOUT,
        wg_net::IPERF3,
    ] {
        if !Path::new(tool).exists() {
            return Some(format!(
                "{tool} not found (scripts/setup-host installs iproute2, wireguard-tools, iperf3)"
            ));
        }
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun (the peers need TUN devices)".into());
    }
    None
}

/// A peer's binary, built and cached by testkit (a failed build panics there).
fn peer_binary(peer: Peer) -> Result<PathBuf, String> {
    std::panic::catch_unwind(|| peer.binary())
        .unwrap_or_else(|_| Err("its build failed (see above)".into()))
}

/// A temp file path for this run.
fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("quiver-bench-wg-{}-{name}", std::process::id()))
}

/// Both ends as a peer implementation: two instances on TUNs, configured with `wg`.
fn start_peer(
    net: &Net,
    peer: Peer,
    bin: &Path,
    cpus: [usize; 2],
    keys: &[(String, String); 2],
) -> Result<Vec<Proc>, String> {
    let mut procs = Vec::new();
    for (i, end) in ENDS.iter().enumerate() {
        net.address_end(end)?;
        let ns = net.end_ns(end.n);
        let ifname = format!("qbw{}{}", end.n, std::process::id() % 100_000);
        let uapi = format!("/var/run/wireguard/{ifname}.sock");
        // A socket left by an instance killed before would pass for ours.
        let _ = std::fs::remove_file(&uapi);
        let bin = bin.display().to_string();
        let log = temp(&format!("{ifname}.log"));
        let cmd: Vec<&str> = match peer {
            Peer::WireguardGo => vec!["env", "LOG_LEVEL=error", &bin, "-f", &ifname],
            Peer::Boringtun => vec![
                &bin,
                &ifname,
                "--foreground",
                "--disable-drop-privileges",
                "--threads",
                "1",
                "--verbosity",
                "error",
            ],
        };
        let mut p = Proc::spawn(peer.name(), &pinned(cpus[i], ns, &cmd), &log)?;
        wg_net::wait_until(&format!("{} to open {uapi}", peer.name()), 10, || {
            Path::new(&uapi).exists()
        })
        .map_err(|e| format!("{e}\n{}", p.log_tail()))?;
        p.check()?;
        let key_file = temp(&format!("{ifname}.key"));
        std::fs::write(&key_file, format!("{}\n", keys[i].0)).map_err(|e| e.to_string())?;
        let endpoint = format!("{}:{WG_PORT}", end.peer_under_addr);
        let set = net.exec(
            ns,
            &[
                WG,
                "set",
                &ifname,
                "private-key",
                &key_file.display().to_string(),
                "listen-port",
                &WG_PORT.to_string(),
                "peer",
                &keys[1 - i].1,
                "allowed-ips",
                end.remote_net,
                "endpoint",
                &endpoint,
            ],
        );
        let _ = std::fs::remove_file(&key_file);
        set?;
        let mtu = wg_net::TUNNEL_MTU.to_string();
        wg_net::run(&[
            wg_net::IP,
            "-n",
            ns,
            "link",
            "set",
            &ifname,
            "mtu",
            &mtu,
            "up",
        ])?;
        wg_net::run(&[
            wg_net::IP,
            "-n",
            ns,
            "route",
            "add",
            end.remote_net,
            "dev",
            &ifname,
        ])?;
        procs.push(p);
    }
    Ok(procs)
}

/// quiver.toml for end `end` on `cpu`.
fn quiver_config(end: &EndSpec, cpu: usize, private: &str, peer_public: &str) -> String {
    format!(
        r#"
[dataplane]
cores = [{cpu}]
idle = "adaptive"
[buffers]
count = 16384
[stats]
interval_secs = 0
[[port]]
name = "inner"
type = "af_packet"
interface = "{inner_if}"
[[port]]
name = "under"
type = "af_packet"
interface = "{under_if}"
[[address]]
port = "inner"
ip = "{inner_addr}/24"
[[address]]
port = "under"
ip = "{under_addr}/24"
[[neighbor]]
port = "inner"
ip = "{host_addr}"
mac = "{host_mac}"
[[neighbor]]
port = "under"
ip = "{peer_under_addr}"
mac = "{peer_under_mac}"
[[wireguard]]
name = "wg0"
private_key = "{private}"
listen_port = {WG_PORT}
address = "{under_addr}"
[[wireguard.peers]]
public_key = "{peer_public}"
endpoint = "{peer_under_addr}:{WG_PORT}"
allowed_ips = ["{remote_net}"]
[[route]]
prefix = "{remote_net}"
via = ["{remote_host}@wg0"]
"#,
        inner_if = end.inner_if,
        under_if = end.under_if,
        inner_addr = end.inner_addr,
        under_addr = end.under_addr,
        host_addr = end.host_addr,
        host_mac = end.host_mac,
        peer_under_addr = end.peer_under_addr,
        peer_under_mac = end.peer_under_mac,
        remote_net = end.remote_net,
        remote_host = end.remote_host,
    )
}

/// Both ends as two `quiver run` processes; returns them and their admin sockets.
fn start_quiver(
    net: &Net,
    quiver: &Path,
    cpus: [usize; 2],
    keys: &[(String, String); 2],
) -> Result<(Vec<Proc>, [PathBuf; 2]), String> {
    let mut procs = Vec::new();
    let sockets = [temp("end1.sock"), temp("end2.sock")];
    for (i, end) in ENDS.iter().enumerate() {
        let config = temp(&format!("end{}.toml", end.n));
        std::fs::write(
            &config,
            quiver_config(end, cpus[i], &keys[i].0, &keys[1 - i].1),
        )
        .map_err(|e| e.to_string())?;
        let q = quiver.display().to_string();
        let cmd = [
            q.as_str(),
            "run",
            "--config",
            &config.display().to_string(),
            "--admin-socket",
            &sockets[i].display().to_string(),
        ];
        let log = temp(&format!("quiver{}.log", end.n));
        let mut p = Proc::spawn("quiver", &pinned(cpus[i], net.end_ns(end.n), &cmd), &log)?;
        let up = wg_net::wait_until("quiver's admin API", 20, || {
            ctl(quiver, &sockets[i], &["health"]).is_ok()
        });
        let _ = std::fs::remove_file(&config);
        p.check()?;
        up.map_err(|e| format!("{e}\n{}", p.log_tail()))?;
        procs.push(p);
    }
    Ok((procs, sockets))
}

/// `quiver ctl --socket SOCKET ARGS…`: its stdout.
fn ctl(quiver: &Path, socket: &Path, args: &[&str]) -> Result<String, String> {
    let q = quiver.display().to_string();
    let s = socket.display().to_string();
    let mut v = vec![q.as_str(), "ctl", "--socket", &s];
    v.extend_from_slice(args);
    wg_net::run(&v)
}

/// Per-node counters of one quiver process, summed over its workers.
fn runtime(quiver: &Path, socket: &Path) -> Result<BTreeMap<String, NodeStat>, String> {
    let text = ctl(quiver, socket, &["--json", "show", "runtime"])?;
    let rt: Value = serde_json::from_str(&text).map_err(|e| format!("show runtime: {e}"))?;
    let mut nodes = BTreeMap::<String, NodeStat>::new();
    for w in rt["workers"].as_array().into_iter().flatten() {
        for n in w["nodes"].as_array().into_iter().flatten() {
            let s = nodes
                .entry(n["name"].as_str().unwrap_or("?").to_string())
                .or_default();
            s.clocks += n["clocks"].as_f64().unwrap_or(0.0);
            s.packets += n["packets"].as_f64().unwrap_or(0.0);
            s.vectors += n["vectors"].as_f64().unwrap_or(0.0);
        }
    }
    Ok(nodes)
}

/// One round of `imp`: a fresh network, both ends, a ping through, TCP, UDP.
fn round(
    imp: Imp,
    bins: &BTreeMap<&'static str, PathBuf>,
    cpus: [usize; 2],
    secs: u64,
) -> Result<RoundResult, String> {
    let net = Net::new()?;
    let keys = [wg_net::genkey()?, wg_net::genkey()?];
    let bin = &bins[imp.name()];
    let (mut procs, sockets) = match imp {
        Imp::Peer(p) => (start_peer(&net, p, bin, cpus, &keys)?, None),
        Imp::Quiver => {
            let (p, s) = start_quiver(&net, bin, cpus, &keys)?;
            (p, Some(s))
        }
    };
    let t0 = Instant::now();
    let through = wg_net::wait_until("a ping from A to B through the tunnel", 30, || {
        net.ping_through()
    });
    if let Err(e) = through {
        let logs: Vec<String> = procs.iter().map(Proc::log_tail).collect();
        return Err(format!(
            "{}: {e}\nthe ends' logs:\n{}",
            imp.name(),
            logs.join("\n--\n")
        ));
    }
    eprintln!(
        "    {}: tunnel up ({:.1} s after start)",
        imp.name(),
        t0.elapsed().as_secs_f64()
    );
    let server = net.iperf_server(cpus[1], &temp("iperf3.log"))?;
    let pids: Vec<u32> = procs.iter().filter_map(Proc::pid).collect();
    let mut phases = BTreeMap::new();
    let mut reports = BTreeMap::new();
    for &(phase, udp_rate, quiver_only) in PHASES.iter() {
        if quiver_only && sockets.is_none() {
            continue;
        }
        if let Some(s) = &sockets {
            for sock in s {
                ctl(bin, sock, &["clear", "counters"])?;
            }
        }
        net.wait_server_listening()?;
        let before = (Instant::now(), worker_sched(&pids));
        let report = net.iperf_client(cpus[0], secs, udp_rate);
        let after = (Instant::now(), worker_sched(&pids));
        for p in procs.iter_mut() {
            p.check()?;
        }
        reports.insert(
            phase,
            report.map_err(|e| format!("{} {phase}: {e}", imp.name()))?,
        );
        if let Some(s) = &sockets {
            let wall = (after.0 - before.0).as_nanos() as f64;
            let share = |i: usize| match (before.1[i], after.1[i]) {
                (Some(b), Some(a)) => json!({
                    "on_cpu": round3((a.0 - b.0) as f64 / wall),
                    "runnable_waiting": round3((a.1 - b.1) as f64 / wall),
                }),
                _ => Value::Null,
            };
            phases.insert(
                phase,
                QuiverPhase {
                    nodes: [runtime(bin, &s[0])?, runtime(bin, &s[1])?],
                    workers: [share(0), share(1)],
                },
            );
        }
    }
    drop(server);
    for p in procs.iter_mut() {
        p.stop(Duration::from_secs(10));
    }
    drop(procs);
    drop(net);
    let end = |phase: &str| reports.get(phase).map_or(Value::Null, |r| r["end"].clone());
    let (tcp, udp, paced) = (end("tcp"), end("udp"), end("udp_paced"));
    let gbps = |v: &Value| v["bits_per_second"].as_f64().unwrap_or(0.0) / 1e9;
    Ok(RoundResult {
        tcp_gbps: gbps(&tcp["sum_received"]),
        tcp_retransmits: tcp["sum_sent"]["retransmits"].as_u64().unwrap_or(0),
        udp_gbps: gbps(&udp["sum_received"]),
        udp_lost_percent: udp["sum"]["lost_percent"].as_f64().unwrap_or(0.0),
        paced: sockets.is_some().then(|| {
            (
                gbps(&paced["sum_received"]),
                paced["sum"]["lost_percent"].as_f64().unwrap_or(0.0),
            )
        }),
        quiver: sockets.map(|_| phases),
    })
}

/// Each quiver worker's (`quiver-wk0`) scheduler account, by process.
fn worker_sched(pids: &[u32]) -> Vec<Option<(u64, u64)>> {
    pids.iter()
        .map(|&p| wg_net::schedstat(p, "quiver-wk0"))
        .collect()
}

/// Nodes that carried packets: name → clocks/packet, packets, packets per vector.
fn nodes_json(nodes: &BTreeMap<String, NodeStat>) -> Value {
    let mut m = serde_json::Map::new();
    for (name, s) in nodes.iter().filter(|(_, s)| s.packets > 0.0) {
        m.insert(
            name.clone(),
            json!({
                "clocks_per_packet": round1(s.per_packet()),
                "packets": s.packets,
                "packets_per_vector": round1(s.packets / s.vectors.max(1.0)),
            }),
        );
    }
    Value::Object(m)
}

/// The JSON line of a skipped run, or, with `QUIVER_REQUIRE_SYSTEM_TESTS=1` (CI), a failure:
/// as testkit does for the system tests.
fn skip(why: String) -> Result<String, String> {
    if std::env::var("QUIVER_REQUIRE_SYSTEM_TESTS").as_deref() == Ok("1") {
        return Err(format!(
            "wireguard cannot run: {why} (QUIVER_REQUIRE_SYSTEM_TESTS=1: not skipped)"
        ));
    }
    eprintln!("wireguard: skipped: {why}");
    Ok(json!({"scenario": "wireguard", "skipped": why}).to_string())
}

/// Runs the scenario; returns the JSON line.
pub fn run(quick: bool) -> Result<String, String> {
    if let Some(why) = missing_prerequisite() {
        return skip(why);
    }
    let (c0, c1) = two_cpus().map_err(|_| "wireguard needs two CPUs".to_string())?;
    let cpus = [c0, c1];
    // Quick: three short rounds, not one, so that one slow sample of either side is not the figure.
    let (rounds, secs) = if quick { (3, 3) } else { (3, 10) };
    eprintln!("wireguard: building quiver (release) and finding the peers (testkit::wg_peers)");
    let mut bins = BTreeMap::new();
    bins.insert("quiver", release_artifact(&["--bin", "quiver"], "quiver")?);
    let mut imps = Vec::new();
    let mut unavailable = serde_json::Map::new();
    for peer in [Peer::WireguardGo, Peer::Boringtun] {
        match peer_binary(peer) {
            Ok(b) => {
                bins.insert(peer.name(), b);
                imps.push(Imp::Peer(peer));
            }
            Err(why) => {
                eprintln!("wireguard: {} unavailable: {why}", peer.name());
                unavailable.insert(peer.name().into(), json!(why));
            }
        }
    }
    if imps.is_empty() {
        let why = format!("no peer implementation to compare with: {unavailable:?}");
        return skip(why);
    }
    imps.push(Imp::Quiver);
    eprintln!(
        "wireguard: end 1 (and iperf3's client) on CPU {c0}, end 2 (and iperf3's server) on CPU {c1}; \
         {rounds} round(s) of TCP {secs} s + UDP 1400 B {secs} s per implementation, alternating"
    );
    let started = Instant::now();
    let mut results: BTreeMap<&'static str, Vec<RoundResult>> = BTreeMap::new();
    for r in 0..rounds {
        // Each round starts with the next implementation, so none is always first.
        for k in 0..imps.len() {
            let imp = imps[(r + k) % imps.len()];
            eprintln!("  round {}: {}", r + 1, imp.name());
            let res = round(imp, &bins, cpus, secs)?;
            eprintln!(
                "    {}: TCP {:.2} Gbit/s ({} retransmits), UDP 1400 B {:.2} Gbit/s received ({:.1}% lost)",
                imp.name(),
                res.tcp_gbps,
                res.tcp_retransmits,
                res.udp_gbps,
                res.udp_lost_percent
            );
            results.entry(imp.name()).or_default().push(res);
        }
    }
    eprintln!("wireguard: the AEAD floor on CPU {c0}");
    let floor = wg_floor::measure(c0, quick)?;
    figures(quick, secs, cpus, &results, floor, unavailable, started)
}

/// The JSON line from every round's results.
fn figures(
    quick: bool,
    secs: u64,
    cpus: [usize; 2],
    results: &BTreeMap<&'static str, Vec<RoundResult>>,
    floor: Value,
    unavailable: serde_json::Map<String, Value>,
    started: Instant,
) -> Result<String, String> {
    let mut per_imp = implementations_json(results);
    let tcp = |name: &str| results.get(name).map_or(0.0, |v| med(v, |r| r.tcp_gbps));
    let udp = |name: &str| results.get(name).map_or(0.0, |v| med(v, |r| r.udp_gbps));
    let reference = ["wireguard-go", "boringtun"]
        .into_iter()
        .filter(|n| results.contains_key(n))
        .max_by(|a, b| tcp(a).total_cmp(&tcp(b)))
        .ok_or("no peer ran")?;
    let ours = &results["quiver"];
    // A node's clocks/packet in a phase at an end: the median over rounds.
    let node = |phase: &str, end: usize, name: &str| {
        median(
            &ours
                .iter()
                .filter_map(|r| r.quiver.as_ref()?.get(phase))
                .map(|p| p.nodes[end].get(name).map_or(0.0, NodeStat::per_packet))
                .collect::<Vec<_>>(),
        )
    };
    let encrypt = node("udp_paced", 0, "wg4-encrypt");
    let decrypt = node("udp_paced", 1, "wg4-decrypt");
    let floor_seal = floor["bare_seal_1440"]["clocks_per_packet"]
        .as_f64()
        .unwrap_or(0.0);
    let floor_open = floor["bare_open_1440"]["clocks_per_packet"]
        .as_f64()
        .unwrap_or(0.0);
    // The last round's node tables and workers' CPU shares, both ends, every test: where the
    // rest of the time goes.
    let tables = last_tables(ours);
    if let Some(q) = per_imp.get_mut("quiver") {
        q["udp_paced"] = paced_json(ours);
    }
    Ok(json!({
        "scenario": "wireguard",
        "quick": quick,
        "seconds_per_test": secs,
        "rounds": ours.len(),
        "cpus": {"end1_and_iperf3_client": cpus[0], "end2_and_iperf3_server": cpus[1]},
        "topology": "netns A -> end 1 -> veth underlay -> end 2 -> netns B; each end in its own netns; quiver as two `quiver run` processes (AF_PACKET ports, one [[wireguard]] tunnel each, idle = adaptive), the peers as two instances each on a TUN (kernel forwarding); tunnel and A/B MTU 1440",
        "gbps": round3(tcp("quiver")),
        "udp_gbps": round3(udp("quiver")),
        "reference": {
            "name": reference,
            "why": "the faster peer by TCP median",
            "gbps": round3(tcp(reference)),
            "udp_gbps": round3(udp(reference)),
        },
        "ratio": round3(tcp("quiver") / tcp(reference)),
        "udp_ratio": round3(udp("quiver") / udp(reference)),
        "implementations": per_imp,
        "unavailable": unavailable,
        "nodes": {
            "wg4-encrypt": {
                "clocks_per_packet": round1(encrypt),
                "saturated_clocks_per_packet": round1(node("udp", 0, "wg4-encrypt")),
                "tcp_clocks_per_packet": round1(node("tcp", 0, "wg4-encrypt")),
                "from": "end 1's counters in the paced UDP test (1428 B inner packets, cores not saturated); saturated_: the UDP test at full rate; tcp_: the TCP test (data and ACKs mixed). Under load these include time the worker waited for its CPU inside the node (see tables.*.end1_worker)",
            },
            "wg4-decrypt": {
                "clocks_per_packet": round1(decrypt),
                "saturated_clocks_per_packet": round1(node("udp", 1, "wg4-decrypt")),
                "tcp_clocks_per_packet": round1(node("tcp", 1, "wg4-decrypt")),
                "from": "end 2's counters, as wg4-encrypt's",
            },
            "tables": tables,
        },
        "aead_floor": floor,
        "encrypt_to_floor": round3(encrypt / floor_seal),
        "decrypt_to_floor": round3(decrypt / floor_open),
        "goal": {
            "ratio_at_least": 1.0,
            "encrypt_to_floor_at_most": 1.5,
            "met": tcp("quiver") >= tcp(reference) && encrypt <= 1.5 * floor_seal,
        },
        "seconds": round1(started.elapsed().as_secs_f64()),
    })
    .to_string())
}

/// The median of `f` over rounds.
fn med(v: &[RoundResult], f: fn(&RoundResult) -> f64) -> f64 {
    median(&v.iter().map(f).collect::<Vec<_>>())
}

/// `implementations` of the JSON line: each one's medians and samples.
fn implementations_json(
    results: &BTreeMap<&'static str, Vec<RoundResult>>,
) -> serde_json::Map<String, Value> {
    let mut per_imp = serde_json::Map::new();
    for (name, v) in results {
        per_imp.insert(
            name.to_string(),
            json!({
                "tcp_gbps": round3(med(v, |r| r.tcp_gbps)),
                "udp_gbps": round3(med(v, |r| r.udp_gbps)),
                "udp_lost_percent": round1(med(v, |r| r.udp_lost_percent)),
                "tcp_retransmits": med(v, |r| r.tcp_retransmits as f64),
                "samples": v.iter().map(|r| json!({
                    "tcp_gbps": round3(r.tcp_gbps),
                    "tcp_retransmits": r.tcp_retransmits,
                    "udp_gbps": round3(r.udp_gbps),
                    "udp_lost_percent": round1(r.udp_lost_percent),
                })).collect::<Vec<_>>(),
            }),
        );
    }
    per_imp
}

/// The last round's node tables and workers' CPU shares, both ends, every test.
fn last_tables(ours: &[RoundResult]) -> Value {
    let last = ours.last().and_then(|r| r.quiver.as_ref());
    last.map_or(Value::Null, |p| {
        json!(p
            .iter()
            .map(|(phase, q)| (
                phase.to_string(),
                json!({
                    "end1": nodes_json(&q.nodes[0]),
                    "end2": nodes_json(&q.nodes[1]),
                    "end1_worker": q.workers[0],
                    "end2_worker": q.workers[1],
                })
            ))
            .collect::<serde_json::Map<_, _>>())
    })
}

/// Quiver's paced UDP test: its rate, and the medians of its throughput and loss.
fn paced_json(ours: &[RoundResult]) -> Value {
    let paced = |f: fn(&(f64, f64)) -> f64| {
        median(
            &ours
                .iter()
                .filter_map(|r| r.paced.as_ref().map(f))
                .collect::<Vec<_>>(),
        )
    };
    json!({
        "rate": PACED_RATE,
        "gbps": round3(paced(|p| p.0)),
        "lost_percent": round1(paced(|p| p.1)),
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
