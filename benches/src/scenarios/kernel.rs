//! `kernel`: iperf3 between two network namespaces through a Linux bridge (the reference) and
//! through Quiver with each KERNEL backend — veth + AF_PACKET, TAP — in one run, alternating
//! (issue 24's benchmark; the network and processes are in `kernel/net.rs`).
//!
//! Each measurement makes its namespaces afresh, starts Quiver if it is in the path (one
//! `quiver run` in M with two ports and an `[[xconnect]]`, its worker and the whole process on
//! the second CPU), waits for a ping from A to B, starts iperf3's server in B and runs two
//! tests from A: TCP (one stream) and UDP with 64-byte payloads as fast as iperf3 sends them
//! (`-b 0`). Figures are iperf3's receiver's: Gbit/s for TCP, Mpps received for UDP. iperf3's
//! client and server are pinned to the first CPU. For Quiver, the counters are cleared before
//! each test and read after it (`quiver ctl --json show runtime`, `show errors`): busy clocks
//! per packet of the worker and of each node that carried packets. A TCP "packet" there is
//! what the kernel handed over: mostly GSO super-frames of up to 64 KiB.
//!
//! Then the scaling figures (`kernel/idle.rs`): a worker's clocks per empty loop pass with 2 and
//! with 500 idle KERNEL (TAP) ports, and the p99 time to open one (`empty_pass_clocks_2`,
//! `empty_pass_clocks_500`, `port_open_ms_p99`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::memif_rate::{median, release_artifact, two_cpus};
use net::{Net, Proc, Via, TAPS, UDP_PAYLOAD, VETH_M};

mod idle;
mod net;

/// The goal of issue 24: Quiver's best backend against the bridge, same run.
const GOAL_TCP_RATIO: f64 = 0.5;
const GOAL_UDP64_RATIO: f64 = 1.0;

/// The tests of each measurement.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Test {
    Tcp,
    Udp64,
}

impl Test {
    const ALL: [Test; 2] = [Test::Tcp, Test::Udp64];

    fn name(self) -> &'static str {
        match self {
            Test::Tcp => "tcp",
            Test::Udp64 => "udp64",
        }
    }

    /// The JSON key of its figure.
    fn key(self) -> &'static str {
        match self {
            Test::Tcp => "tcp_gbps",
            Test::Udp64 => "udp64_mpps",
        }
    }
}

/// One test's result.
struct Sample {
    /// Gbit/s (TCP) or Mpps (UDP) as iperf3's receiver counted them.
    figure: f64,
    /// iperf3's other figures.
    iperf: Value,
    /// Quiver's counters over the test (none for the bridge).
    quiver: Option<Value>,
}

/// A test's result, or why it failed.
type Outcome = Result<Sample, String>;

/// Whatever this scenario cannot run without, or `None`.
fn missing_prerequisite() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some(
            "needs root (network namespaces, veths, TAP devices, AF_PACKET, AF_XDP)".into(),
        );
    }
    for tool in [
        net::IP,
        net::IPERF3,
        net::TASKSET,
        net::TIMEOUT,
        net::SYSCTL,
        net::PING,
    ] {
        if !Path::new(tool).exists() {
            return Some(format!(
                "{tool} not found (scripts/setup-host installs iproute2, iperf3, procps, iputils-ping)"
            ));
        }
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun (the TAP backend needs it)".into());
    }
    None
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// quiver.toml: two ports of `via`'s kind, cross-connected, one polling worker on `cpu`.
fn quiver_config(via: Via, cpu: usize) -> String {
    let ports: String = ["a", "b"]
        .iter()
        .enumerate()
        .map(|(i, name)| match via {
            Via::Tap => format!(
                "[[port]]\nname = \"{name}\"\ntype = \"tap\"\ndevice = \"{}\"\n",
                TAPS[i]
            ),
            Via::AfXdp => format!(
                "[[port]]\nname = \"{name}\"\ntype = \"af_xdp\"\ninterface = \"{}\"\n",
                VETH_M[i]
            ),
            _ => format!(
                "[[port]]\nname = \"{name}\"\ntype = \"af_packet\"\ninterface = \"{}\"\n",
                VETH_M[i]
            ),
        })
        .collect();
    format!(
        "[dataplane]\ncores = [{cpu}]\nidle = \"poll\"\n[stats]\ninterval_secs = 0\n\
         {ports}[[xconnect]]\na = \"a\"\nb = \"b\"\n"
    )
}

/// A `quiver run` in M and its admin socket.
struct Quiver {
    bin: PathBuf,
    socket: PathBuf,
    proc: Proc,
}

impl Quiver {
    /// Starts Quiver in M pinned to `cpu`, once its admin API answers (and, for TAP ports,
    /// its devices exist).
    fn start(bin: &Path, net: &Net, via: Via, cpu: usize) -> Result<Quiver, String> {
        let config = net::temp("quiver.toml");
        std::fs::write(&config, quiver_config(via, cpu)).map_err(|e| e.to_string())?;
        let socket = net::temp("admin.sock");
        let (b, c, s) = (
            bin.display().to_string(),
            config.display().to_string(),
            socket.display().to_string(),
        );
        let cmd = net::pinned(
            cpu,
            &net.m,
            &[&b, "run", "--config", &c, "--admin-socket", &s],
        );
        let proc = Proc::spawn("quiver", &cmd, &net::temp("quiver.log"))?;
        let mut q = Quiver {
            bin: bin.into(),
            socket,
            proc,
        };
        let up = net::wait_until("quiver's admin API", 30, || {
            q.proc.check()?;
            Ok(q.ctl(&["health"]).is_ok() && (via != Via::Tap || TAPS.iter().all(|d| net.in_m(d))))
        });
        let _ = std::fs::remove_file(&config);
        up.map_err(|e| format!("{e}\n{}", q.proc.log_tail()))?;
        Ok(q)
    }

    /// `quiver ctl --socket SOCKET ARGS…`: its stdout.
    fn ctl(&self, args: &[&str]) -> Result<String, String> {
        let (b, s) = (
            self.bin.display().to_string(),
            self.socket.display().to_string(),
        );
        let mut v = vec![b.as_str(), "ctl", "--socket", &s];
        v.extend_from_slice(args);
        net::run(&v)
    }

    /// Zeroes the runtime, error and interface counters.
    fn clear(&self) -> Result<(), String> {
        self.ctl(&["clear", "counters"]).map(drop)
    }

    /// The counters since the last clear: the worker's busy clocks per packet, each node's
    /// clocks per packet (those that carried packets), and the non-zero error counters (drops
    /// and offload events), summed over workers.
    fn figures(&self) -> Result<Value, String> {
        let text = self.ctl(&["--json", "show", "runtime"])?;
        let rt: Value = serde_json::from_str(&text).map_err(|e| format!("show runtime: {e}"))?;
        let (mut busy_clocks, mut busy_packets) = (0.0, 0.0);
        // name → (clocks, packets, vectors)
        let mut nodes = BTreeMap::<String, (f64, f64, f64)>::new();
        let f = |v: &Value| v.as_f64().unwrap_or(0.0);
        for w in rt["workers"].as_array().into_iter().flatten() {
            busy_clocks += f(&w["busy_clocks"]);
            busy_packets += f(&w["busy_packets"]);
            for n in w["nodes"].as_array().into_iter().flatten() {
                let s = nodes
                    .entry(n["name"].as_str().unwrap_or("?").to_string())
                    .or_default();
                s.0 += f(&n["clocks"]);
                s.1 += f(&n["packets"]);
                s.2 += f(&n["vectors"]);
            }
        }
        let nodes: serde_json::Map<String, Value> = nodes
            .into_iter()
            .filter(|(_, s)| s.1 > 0.0)
            .map(|(name, (c, p, v))| {
                let stat = json!({
                    "clocks_per_packet": round1(c / p),
                    "packets": p as u64,
                    "packets_per_vector": round1(p / v.max(1.0)),
                });
                (name, stat)
            })
            .collect();
        let text = self.ctl(&["--json", "show", "errors"])?;
        let errors: Value = serde_json::from_str(&text).map_err(|e| format!("show errors: {e}"))?;
        let counters: serde_json::Map<String, Value> = errors
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["count"].as_u64().unwrap_or(0) > 0)
            .map(|e| {
                let name = format!(
                    "{}/{}",
                    e["node"].as_str().unwrap_or("?"),
                    e["reason"].as_str().unwrap_or("?")
                );
                (name, e["count"].clone())
            })
            .collect();
        Ok(json!({
            "busy_clocks_per_packet": round1(busy_clocks / busy_packets.max(1.0)),
            "packets": busy_packets as u64,
            "nodes": nodes,
            "error_counters": counters,
        }))
    }
}

/// Reads one test's figure from iperf3's report.
fn sample(test: Test, report: &Value, quiver: Option<Value>) -> Sample {
    let end = &report["end"];
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    match test {
        Test::Tcp => Sample {
            figure: f(&end["sum_received"]["bits_per_second"]) / 1e9,
            iperf: json!({
                "sent_gbps": round3(f(&end["sum_sent"]["bits_per_second"]) / 1e9),
                "retransmits": end["sum_sent"]["retransmits"],
            }),
            quiver,
        },
        Test::Udp64 => {
            // `sum` carries the sender's count and the receiver's losses.
            let sum = &end["sum"];
            let secs = f(&sum["seconds"]).max(1e-9);
            let sent = f(&sum["packets"]);
            let received = (sent - f(&sum["lost_packets"])).max(0.0);
            Sample {
                figure: received / secs / 1e6,
                iperf: json!({
                    "sent_mpps": round3(sent / secs / 1e6),
                    "lost_percent": round1(f(&sum["lost_percent"])),
                }),
                quiver,
            }
        }
    }
}

/// One measurement of `via`: a fresh network (and Quiver), a ping through, then each test.
/// An error before the tests fails them all.
fn measure(
    via: Via,
    quiver_bin: &Path,
    cpus: (usize, usize),
    secs: u64,
) -> Result<Vec<(Test, Outcome)>, String> {
    let net = Net::new(via)?;
    let mut quiver = match via {
        Via::Bridge => None,
        _ => Some(Quiver::start(quiver_bin, &net, via, cpus.1)?),
    };
    if via == Via::Tap {
        net.adopt_taps()?;
    }
    let t0 = Instant::now();
    let through = net::wait_until("a ping from A to B", 20, || {
        if let Some(q) = quiver.as_mut() {
            q.proc.check()?;
        }
        Ok(net.ping_through())
    });
    if let Err(e) = through {
        let log = quiver
            .as_ref()
            .map(|q| q.proc.log_tail())
            .unwrap_or_default();
        return Err(format!("{e}\n{log}"));
    }
    eprintln!(
        "    {}: A reaches B ({:.1} s after setup)",
        via.name(),
        t0.elapsed().as_secs_f64()
    );
    let server = net.iperf_server(cpus.0)?;
    let mut out = Vec::new();
    for test in Test::ALL {
        let res = one_test(&net, quiver.as_mut(), test, cpus.0, secs);
        out.push((test, res));
    }
    drop(server);
    if let Some(mut q) = quiver.take() {
        q.proc.stop(Duration::from_secs(10));
    }
    drop(net);
    Ok(out)
}

/// One iperf3 test through the network as it stands, with Quiver's counters cleared before
/// and read after.
fn one_test(
    net: &Net,
    mut quiver: Option<&mut Quiver>,
    test: Test,
    cpu: usize,
    secs: u64,
) -> Outcome {
    if let Some(q) = &quiver {
        q.clear()?;
    }
    let report = net.iperf_client(cpu, secs, test == Test::Udp64);
    if let Some(q) = quiver.as_mut() {
        q.proc.check()?;
    }
    let report = report?;
    let figures = quiver.map(|q| q.figures()).transpose()?;
    Ok(sample(test, &report, figures))
}

/// One path's test over the rounds: the median figure (`None` when every round failed) and
/// its JSON (the figure, iperf3's and Quiver's figures from the median round, every round's
/// figure).
fn summarize(test: Test, samples: &[Outcome]) -> (Option<f64>, Value) {
    let ok: Vec<&Sample> = samples.iter().filter_map(|s| s.as_ref().ok()).collect();
    let figure = (!ok.is_empty()).then(|| median(&ok.iter().map(|s| s.figure).collect::<Vec<_>>()));
    let middle = figure.and_then(|m| ok.iter().find(|s| s.figure == m));
    let all: Vec<Value> = samples
        .iter()
        .map(|s| match s {
            Ok(s) => {
                let mut v = json!({test.key(): round3(s.figure), "iperf3": s.iperf});
                if let Some(q) = &s.quiver {
                    v["busy_clocks_per_packet"] = q["busy_clocks_per_packet"].clone();
                }
                v
            }
            Err(e) => json!({"error": e}),
        })
        .collect();
    let mut v = json!({
        test.key(): figure.map(round3),
        "samples": all,
    });
    if let Some(s) = middle {
        v["iperf3"] = s.iperf.clone();
        if let Some(q) = &s.quiver {
            v["quiver"] = q.clone();
        }
    }
    (figure, v)
}

/// The load average (1, 5, 15 minutes) as /proc/loadavg has it.
fn load_average() -> Value {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let v: Vec<f64> = text
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    json!(v)
}

/// Runs the scenario; returns the JSON line.
pub fn run(quick: bool) -> Result<String, String> {
    if let Some(why) = missing_prerequisite() {
        eprintln!("kernel: skipped: {why}");
        return Ok(json!({"scenario": "kernel", "skipped": why}).to_string());
    }
    let cpus = two_cpus().map_err(|_| "kernel needs two CPUs".to_string())?;
    let online = std::thread::available_parallelism().map_or(0, |n| n.get());
    let (rounds, secs) = if quick { (1, 3) } else { (3, 10) };
    eprintln!("kernel: building quiver (release)");
    let quiver = release_artifact(&["--bin", "quiver"], "quiver")?;
    eprintln!(
        "kernel: {online} CPUs: iperf3's client and server on CPU {}, Quiver (worker and process) on CPU {}; \
         {rounds} round(s) of TCP {secs} s + UDP {UDP_PAYLOAD} B {secs} s per path \
         (bridge, af_packet, tap, af_xdp), alternating",
        cpus.0, cpus.1
    );
    let load_before = load_average();
    let started = Instant::now();
    let results = run_rounds(rounds, &quiver, cpus, secs);
    let idle = measure_idle(quick, cpus.1);
    let summary = |via: Via, test: Test| {
        summarize(
            test,
            results
                .get(&(via, test))
                .map(Vec::as_slice)
                .unwrap_or_default(),
        )
    };
    let (ref_tcp, ref_tcp_json) = summary(Via::Bridge, Test::Tcp);
    let (ref_udp, ref_udp_json) = summary(Via::Bridge, Test::Udp64);
    let (Some(ref_tcp), Some(ref_udp)) = (ref_tcp, ref_udp) else {
        return Err(format!(
            "the reference (Linux bridge) failed: {ref_tcp_json}\n{ref_udp_json}"
        ));
    };
    let ratio = |x: f64, r: f64| if r > 0.0 { round3(x / r) } else { 0.0 };
    let (backends, best) = backends_json(&results, ref_tcp, ref_udp);
    let pick = |t: Test| best.get(&t).copied().unwrap_or((0.0, "none"));
    let (tcp, tcp_backend) = pick(Test::Tcp);
    let (udp, udp_backend) = pick(Test::Udp64);
    let (tcp_ratio, udp_ratio) = (ratio(tcp, ref_tcp), ratio(udp, ref_udp));
    let failed: usize = results.values().flatten().filter(|r| r.is_err()).count();
    let (clocks_2, clocks_500, open_p99, scaling_met, idle_json) = idle_json(&idle);
    Ok(json!({
        "scenario": "kernel",
        "cpus": {
            "online": online,
            "iperf3": cpus.0,
            "quiver": cpus.1,
            "note": format!(
                "{online} CPUs: iperf3's client and server share CPU {}, Quiver's worker (and process) has CPU {}; \
                 the bridge's forwarding runs in softirq on iperf3's CPU, Quiver's on its own",
                cpus.0, cpus.1
            ),
        },
        "load_average": {"before": load_before, "after": load_average()},
        "rounds": rounds,
        "seconds_per_test": secs,
        "seconds_total": round1(started.elapsed().as_secs_f64()),
        "udp_payload_bytes": UDP_PAYLOAD,
        "figures_from": "iperf3's receiver: TCP Gbit/s (one stream); UDP datagrams received per second (-b 0); medians over rounds",
        "tcp_gbps": round3(tcp),
        "tcp_backend": tcp_backend,
        "udp64_mpps": round3(udp),
        "udp64_backend": udp_backend,
        "tcp_ratio": tcp_ratio,
        "udp64_ratio": udp_ratio,
        "failed_tests": failed,
        "empty_pass_clocks_2": clocks_2,
        "empty_pass_clocks_500": clocks_500,
        "port_open_ms_p99": open_p99,
        "idle_ports": idle_json,
        "reference": {
            "name": "Linux bridge in a third namespace between the veths, default offloads, same run",
            "tcp_gbps": round3(ref_tcp),
            "udp64_mpps": round3(ref_udp),
            "tcp": ref_tcp_json,
            "udp64": ref_udp_json,
        },
        "backends": backends,
        "goal": {
            "tcp_ratio_at_least": GOAL_TCP_RATIO,
            "udp64_ratio_at_least": GOAL_UDP64_RATIO,
            "met": tcp_ratio >= GOAL_TCP_RATIO && udp_ratio >= GOAL_UDP64_RATIO,
            "empty_pass_ratio_at_most": idle::GOAL_EMPTY_PASS_RATIO,
            "port_open_ms_p99_at_most": idle::GOAL_PORT_OPEN_MS_P99,
            "scaling_met": scaling_met,
        },
    })
    .to_string())
}

/// `rounds` rounds over every path, each round starting with the next path (so none is
/// always first); every test's outcome by path.
fn run_rounds(
    rounds: usize,
    quiver: &Path,
    cpus: (usize, usize),
    secs: u64,
) -> BTreeMap<(Via, Test), Vec<Outcome>> {
    let mut results: BTreeMap<(Via, Test), Vec<Outcome>> = BTreeMap::new();
    for r in 0..rounds {
        // Each round starts with the next path, so none is always first.
        for k in 0..Via::ALL.len() {
            let via = Via::ALL[(r + k) % Via::ALL.len()];
            eprintln!("  round {}: {}", r + 1, via.name());
            let tests = measure(via, quiver, cpus, secs).unwrap_or_else(|e| {
                Test::ALL
                    .iter()
                    .map(|&t| (t, Err(format!("setup: {e}"))))
                    .collect()
            });
            for (test, res) in tests {
                match &res {
                    Ok(s) => eprintln!(
                        "    {} {}: {:.3} {}",
                        via.name(),
                        test.name(),
                        s.figure,
                        if test == Test::Tcp {
                            "Gbit/s"
                        } else {
                            "Mpps received"
                        }
                    ),
                    Err(e) => eprintln!("    {} {}: failed: {e}", via.name(), test.name()),
                }
                results.entry((via, test)).or_default().push(res);
            }
        }
    }
    results
}

/// The idle-port figures: empty passes with few and many idle TAP ports, port opening, one
/// polling worker on `cpu`.
fn measure_idle(quick: bool, cpu: usize) -> Result<idle::IdleFigures, String> {
    eprintln!(
        "  idle ports: {} and {} TAP ports in a namespace, one polling worker on CPU {}",
        idle::FEW,
        idle::MANY,
        cpu
    );
    let (windows, window) = if quick {
        (3, Duration::from_millis(300))
    } else {
        (5, Duration::from_secs(1))
    };
    let idle = idle::measure(cpu, windows, window);
    match &idle {
        Ok(f) => eprintln!(
            "    empty pass: {:.0} clocks with {} idle ports, {:.0} with {} ({:.2}x, goal <= {}x); \
             opening a port: p50 {:.2} ms, p99 {:.2} ms (goal <= {} ms)",
            f.clocks_few,
            idle::FEW,
            f.clocks_many,
            idle::MANY,
            f.ratio(),
            idle::GOAL_EMPTY_PASS_RATIO,
            f.detail["port_open_ms"]["p50"].as_f64().unwrap_or(0.0),
            f.open_p99(),
            idle::GOAL_PORT_OPEN_MS_P99
        ),
        Err(e) => eprintln!("    idle ports: failed: {e}"),
    }
    idle
}

/// `backends` of the JSON line, and the best backend per test: (figure, name).
fn backends_json(
    results: &BTreeMap<(Via, Test), Vec<Outcome>>,
    ref_tcp: f64,
    ref_udp: f64,
) -> (serde_json::Map<String, Value>, Best) {
    let summary = |via: Via, test: Test| {
        summarize(
            test,
            results
                .get(&(via, test))
                .map(Vec::as_slice)
                .unwrap_or_default(),
        )
    };
    let ratio = |x: f64, r: f64| if r > 0.0 { round3(x / r) } else { 0.0 };
    let mut backends = serde_json::Map::new();
    // Best backend per test: (figure, name).
    let mut best: Best = BTreeMap::new();
    for via in [Via::AfPacket, Via::Tap, Via::AfXdp] {
        let mut b = serde_json::Map::new();
        let mut clocks = serde_json::Map::new();
        for test in Test::ALL {
            let (figure, detail) = summary(via, test);
            let reference = if test == Test::Tcp { ref_tcp } else { ref_udp };
            let ratio_key = format!("{}_ratio", test.name());
            b.insert(test.key().into(), json!(figure.map(round3)));
            b.insert(ratio_key, json!(figure.map(|x| ratio(x, reference))));
            if let Some(c) = detail["quiver"].get("busy_clocks_per_packet") {
                clocks.insert(test.name().into(), c.clone());
            }
            b.insert(test.name().into(), detail);
            if let Some(x) = figure {
                let e = best.entry(test).or_insert((x, via.name()));
                if x > e.0 {
                    *e = (x, via.name());
                }
            }
        }
        b.insert("busy_clocks_per_packet".into(), Value::Object(clocks));
        backends.insert(via.name().into(), Value::Object(b));
    }
    (backends, best)
}

/// The best backend per test: (figure, name).
type Best = BTreeMap<Test, (f64, &'static str)>;

/// The idle-port figures as the JSON line has them: empty-pass clocks with few and many
/// ports, port opening's p99, whether the goals were met, the detail.
fn idle_json(idle: &Result<idle::IdleFigures, String>) -> (Value, Value, Value, bool, Value) {
    match idle {
        Ok(f) => (
            json!(round1(f.clocks_few)),
            json!(round1(f.clocks_many)),
            json!(round3(f.open_p99())),
            f.ratio() <= idle::GOAL_EMPTY_PASS_RATIO && f.open_p99() <= idle::GOAL_PORT_OPEN_MS_P99,
            f.detail.clone(),
        ),
        Err(e) => (
            Value::Null,
            Value::Null,
            Value::Null,
            false,
            json!({ "error": e }),
        ),
    }
}
