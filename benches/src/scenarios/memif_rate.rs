//! `memif-rate`: the memif crate's one-way rate beside DPDK's, over the same two CPUs.
//!
//! Ours: the crate's `traffic` example (built here, release) sends 64-byte frames as a memif
//! slave and receives them as a master on the same socket, one thread each, pinned to the last
//! two CPUs; every received frame is checked (sequence and bytes). Its figures are the receive
//! rate and the busy cycles per frame of each side (TSC cycles of loop passes that moved frames).
//!
//! Reference, same run: `dpdk-testpmd` txonly as a `net_memif` client → `dpdk-testpmd` rxonly as
//! a `net_memif` server, forwarding lcores on the same two CPUs. Its rate is the server's
//! RX-packets delta over the measured window; its cycles are testpmd's own
//! (`set record-core-cycles on`, printed at `stop`). With `--quick`: one round of 1 s each;
//! otherwise three alternating rounds of 5 s, medians reported with every sample.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::host_state;

const TESTPMD: &str = "dpdk-testpmd";
/// Hugepages the two testpmd processes need together (8192 mbufs each, with margin).
const HUGEPAGES_NEEDED: u64 = 128;

/// One round's figures for one side.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    pub(super) mpps: f64,
    pub(super) cycles_per_packet: f64,
    pub(super) packets: u64,
}

/// The last two CPUs this process may use: (sending, receiving).
pub(super) fn two_cpus() -> Result<(usize, usize), String> {
    let set =
        nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).map_err(|e| e.to_string())?;
    let cpus: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect();
    match cpus.as_slice() {
        [.., a, b] => Ok((*a, *b)),
        _ => Err("memif-rate needs two CPUs (one sends, one receives)".into()),
    }
}

/// Builds the memif crate's `traffic` example in release mode; returns its path.
pub(super) fn build_traffic() -> Result<PathBuf, String> {
    release_artifact(&["-p", "memif", "--example", "traffic"], "traffic")
}

/// Runs `cargo build --release ARGS` in the workspace and returns the path of the executable
/// called `name` that it built.
pub(super) fn release_artifact(args: &[&str], name: &str) -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no workspace root")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--release"])
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo build --release {} failed", args.join(" ")));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == name)
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| format!("cargo did not say where {name} is"))
}

/// One run of our traffic tool; returns the receive side's sample and the whole JSON report.
fn ours(traffic: &Path, cpus: (usize, usize), secs: f64) -> Result<(Sample, Value), String> {
    let sock = format!("@quiver-bench-memif-rate-{}", std::process::id());
    let out = Command::new(traffic)
        .args(["--tx", &sock, "--tx-role", "slave"])
        .args(["--rx", &sock, "--rx-role", "master"])
        .args(["--size", "64", "--json", "--expect-lossless"])
        .arg(format!("--duration={secs}"))
        .arg(format!("--tx-cpu={}", cpus.0))
        .arg(format!("--rx-cpu={}", cpus.1))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", traffic.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Value = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| {
            format!(
                "traffic printed no JSON report:\n{text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    if !out.status.success() {
        return Err(format!("traffic failed ({}): {report}", out.status));
    }
    let f = |k: &str| report[k].as_f64().ok_or(format!("no `{k}` in {report}"));
    let sample = Sample {
        mpps: f("mpps")?,
        cycles_per_packet: f("rx_busy_cycles_per_packet")?,
        packets: report["unique"].as_u64().unwrap_or(0),
    };
    Ok((sample, report))
}

/// A testpmd process whose output lines arrive through a channel (read by two threads), so
/// waiting for them blocks instead of spinning on the CPUs being measured.
pub(super) struct TestPmd {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    pub(super) output: Vec<String>,
    runtime_dir: PathBuf,
}

impl TestPmd {
    /// `lcores`: (main, forwarding).
    pub(super) fn start(
        tag: &str,
        lcores: (usize, usize),
        vdevs: &[&str],
        app: &[&str],
    ) -> Result<Self, String> {
        let prefix = format!("quiver-bench-memif-rate-{}-{tag}", std::process::id());
        let mut child = Command::new("stdbuf")
            .args(["-oL", "-eL", TESTPMD, "--no-pci", "--in-memory"])
            .args(["-l", &format!("{},{}", lcores.0, lcores.1)])
            .arg(format!("--main-lcore={}", lcores.0))
            .arg(format!("--file-prefix={prefix}"))
            .args(vdevs.iter().map(|v| format!("--vdev={v}")))
            .args(["--log-level=lib.eal:error", "--", "--nb-cores=1"])
            .arg("--total-num-mbufs=8192")
            .args(app)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {TESTPMD} (Debian package `dpdk`): {e}"))?;
        let (tx, lines) = mpsc::channel();
        let pipes: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().ok_or("no stdout")?),
            Box::new(child.stderr.take().ok_or("no stderr")?),
        ];
        for pipe in pipes {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(TestPmd {
            stdin: child.stdin.take(),
            child,
            lines,
            output: Vec::new(),
            runtime_dir: Path::new("/var/run/dpdk").join(prefix),
        })
    }

    /// Waits for a line containing `s` printed after line `from`; returns its index.
    pub(super) fn wait_for(&mut self, s: &str, from: usize, secs: u64) -> Result<usize, String> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut i = from;
        loop {
            while i < self.output.len() {
                if self.output[i].contains(s) {
                    return Ok(i);
                }
                i += 1;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.output.push(l),
                Err(e) => {
                    return Err(format!(
                        "testpmd never printed {s:?} ({e}):\n{}",
                        self.output.join("\n")
                    ))
                }
            }
        }
    }

    /// Types a command (interactive mode).
    pub(super) fn command(&mut self, cmd: &str) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("testpmd has no stdin")?;
        writeln!(stdin, "{cmd}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("testpmd `{cmd}`: {e}"))
    }

    /// Asks for port statistics; returns the time asked and RX-packets.
    fn rx_packets(&mut self) -> Result<(Instant, u64), String> {
        let mark = self.output.len();
        let t = Instant::now();
        self.command("show port stats all")?;
        let i = self.wait_for("RX-packets:", mark, 10)?;
        let n = number_after(&self.output[i], "RX-packets:")
            .ok_or_else(|| format!("cannot read `{}`", self.output[i]))?;
        Ok((t, n as u64))
    }
}

impl Drop for TestPmd {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        // Both pipes close when it exits.
        let deadline = Instant::now() + Duration::from_secs(10);
        while self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
        {}
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
    }
}

/// The number following `key` in `line`.
pub(super) fn number_after(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split(|c: char| c.is_whitespace() || c == '(')
        .find(|s| !s.is_empty())?
        .parse()
        .ok()
}

/// One round of testpmd txonly (client) → rxonly (server).
fn reference(cpus: (usize, usize), secs: f64) -> Result<Sample, String> {
    let sock = std::env::temp_dir().join(format!(
        "quiver-bench-memif-rate-{}.sock",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&sock);
    let vdev = |role: &str| {
        format!(
            "net_memif0,role={role},id=0,socket={},socket-abstract=no",
            sock.display()
        )
    };
    // The receiving server forwards on the CPU our receiver uses, the client on the other.
    let mut server = TestPmd::start(
        "rx",
        (cpus.0, cpus.1),
        &[&vdev("server")],
        &["-i", "--forward-mode=rxonly"],
    )?;
    server.wait_for("Port 0:", 0, 30)?;
    let _client = TestPmd::start(
        "tx",
        (cpus.1, cpus.0),
        &[&vdev("client")],
        &["--forward-mode=txonly", "--stats-period=1"],
    )?;
    // Interactive testpmd waits for the link (the client connecting) before it reads commands;
    // its prompt ends no line, so wait for the end of that check instead.
    let checking = server.wait_for("Checking link statuses", 0, 30)?;
    server.wait_for("Done", checking, 30)?;
    server.command("set record-core-cycles on")?;
    server.command("start")?;
    // Warm up until frames flow, then measure the window.
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.rx_packets()?.1 == 0 {
        if Instant::now() >= deadline {
            return Err(format!(
                "no frames reached the rxonly testpmd:\n{}",
                server.output.join("\n")
            ));
        }
    }
    let (t0, n0) = server.rx_packets()?;
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (t1, n1) = server.rx_packets()?;
    let mark = server.output.len();
    server.command("stop")?;
    let i = server.wait_for("CPU cycles/packet=", mark, 20)?;
    let cycles = number_after(&server.output[i], "CPU cycles/packet=")
        .ok_or_else(|| format!("cannot read `{}`", server.output[i]))?;
    let _ = server.command("quit");
    drop(server);
    let _ = std::fs::remove_file(&sock);
    let packets = n1.saturating_sub(n0);
    Ok(Sample {
        mpps: packets as f64 / (t1 - t0).as_secs_f64() / 1e6,
        cycles_per_packet: cycles,
        packets,
    })
}

/// Says exactly what is missing for the reference, if anything.
pub(super) fn check_prerequisites() -> Result<(), String> {
    let found = |tool: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).exists()))
    };
    for tool in [TESTPMD, "stdbuf"] {
        if !found(tool) {
            return Err(format!(
                "{tool} not found (scripts/setup-host installs Debian's `dpdk-dev`)"
            ));
        }
    }
    let free = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    if free < HUGEPAGES_NEEDED {
        return Err(format!(
            "{free} free 2 MiB hugepages, {HUGEPAGES_NEEDED} needed (scripts/setup-host reserves them)"
        ));
    }
    Ok(())
}

pub(super) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

/// Runs the scenario; returns the JSON line.
pub fn run(quick: bool) -> Result<String, String> {
    check_prerequisites()?;
    let cpus = two_cpus()?;
    let (rounds, secs) = if quick { (1, 1.0) } else { (3, 5.0) };
    eprintln!("memif-rate: building the memif traffic example (release)");
    let traffic = build_traffic()?;
    eprintln!(
        "memif-rate: 64 B one way, sender on CPU {}, receiver on CPU {}; {rounds} round(s) of {secs} s",
        cpus.0, cpus.1
    );
    let runs = host_state::alternate(
        cpus,
        rounds,
        host_state::EXTRA_ROUNDS,
        || ours(&traffic, cpus, secs),
        || reference(cpus, secs),
        |round, o, r| {
            eprintln!(
                "  round {round}: memif crate {:.2} Mpps ({:.1} rx cycles/frame) [{}], testpmd {:.2} Mpps ({:.1} rx cycles/frame) [{}]",
                o.value.0.mpps,
                o.value.0.cycles_per_packet,
                o.describe(),
                r.value.mpps,
                r.value.cycles_per_packet,
                r.describe()
            )
        },
    )?;
    let (us, them, state) = (runs.ours, runs.theirs, runs.state);
    let ours_in_state = host_state::in_state(&us, state);
    let theirs_in_state = host_state::in_state(&them, state);
    let pick =
        |v: &[&Sample], f: fn(&Sample) -> f64| median(&v.iter().map(|s| f(s)).collect::<Vec<_>>());
    let our_samples: Vec<&Sample> = ours_in_state.iter().map(|x| &x.0).collect();
    let (our_mpps, our_cycles) = (
        pick(&our_samples, |s| s.mpps),
        pick(&our_samples, |s| s.cycles_per_packet),
    );
    let (ref_mpps, ref_cycles) = (
        pick(&theirs_in_state, |s| s.mpps),
        pick(&theirs_in_state, |s| s.cycles_per_packet),
    );
    // The tool's own report of the last sample compared.
    let last = ours_in_state.last().map_or(Value::Null, |x| x.1.clone());
    let sample = |s: &Sample| json!({"mpps": s.mpps, "cycles_per_packet": s.cycles_per_packet});
    Ok(json!({
        "scenario": "memif-rate",
        "frame_size": 64,
        "seconds_per_round": secs,
        "cpus": [cpus.0, cpus.1],
        "host_state": host_state::state_name(state),
        "figures_from": "the median of each side's samples taken in host_state (all samples when none in common)",
        "packets": us.iter().map(|p| p.value.0.packets).sum::<u64>(),
        "mpps": our_mpps,
        "cycles_per_packet": our_cycles,
        "tx_cycles_per_packet": last["tx_busy_cycles_per_packet"],
        "lost": last["lost"],
        "tsc_hz": last["tsc_hz"],
        "samples": us.iter().map(|p| p.annotate(sample(&p.value.0))).collect::<Vec<_>>(),
        "reference": {
            "name": "dpdk-testpmd txonly (net_memif client) -> dpdk-testpmd rxonly (net_memif server), 64 B, same CPUs, same run; cycles from record-core-cycles",
            "mpps": ref_mpps,
            "cycles_per_packet": ref_cycles,
            "samples": them.iter().map(|p| p.annotate(sample(&p.value))).collect::<Vec<_>>(),
        },
        "ratio": our_mpps / ref_mpps,
        "cycles_ratio": our_cycles / ref_cycles,
    })
    .to_string())
}
