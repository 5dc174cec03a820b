//! `memif-xc`: the memif crate's `traffic` tool sends 64-byte frames into one memif interface and
//! receives them from another, with a forwarder cross-connecting the two in between: first the
//! `quiver` binary (two memif master ports, `[[xconnect]]`), then `dpdk-testpmd` io-forwarding
//! between two `net_memif` servers, alternating in one run on the same CPUs. The traffic tool runs
//! one loop on one CPU; the forwarder's one worker (Quiver) or forwarding lcore (testpmd) polls on
//! the other.
//!
//! Figures: Mpps as the tool received them (distinct frames over the receive span) and the
//! forwarder's busy cycles per packet — Quiver's from its own counters (the summary it prints
//! when stopped), testpmd's from `set record-core-cycles on`.

use std::cell::Cell;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::host_state::{self, Probed};
use super::memif_rate::{
    build_traffic, check_prerequisites, median, number_after, release_artifact, two_cpus, Sample,
    TestPmd,
};

/// Frames in flight at most (sent, not yet received): both forwarders drop when their transmit
/// ring is full, so the window keeps the comparison lossless without limiting the rate.
const WINDOW: &str = "1024";

/// Builds the `quiver` binary in release mode; returns its path.
fn build_quiver() -> Result<PathBuf, String> {
    release_artifact(&["--bin", "quiver"], "quiver")
}

/// Starts the traffic tool as the two interfaces' slave, sending for `secs` once connected.
fn start_traffic(
    tool: &Path,
    sockets: (&str, &str),
    ids: (u32, u32),
    cpu: usize,
    secs: f64,
) -> Result<Child, String> {
    Command::new(tool)
        .args(["--tx", sockets.0, "--tx-role", "slave"])
        .arg(format!("--tx-id={}", ids.0))
        .args(["--rx", sockets.1, "--rx-role", "slave"])
        .arg(format!("--rx-id={}", ids.1))
        .args([
            "--size",
            "64",
            "--single-loop",
            "--json",
            "--no-verify",
            "--burst",
            "256",
        ])
        .args(["--window", WINDOW])
        .arg(format!("--tx-cpu={cpu}"))
        .arg(format!("--duration={secs}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", tool.display()))
}

/// Waits for the traffic tool to finish; returns its report.
fn finish_traffic(child: Child) -> Result<Value, String> {
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
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
    if report["error"].is_string() {
        return Err(format!("traffic failed: {report}"));
    }
    Ok(report)
}

fn collect(mut pipe: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let t = text.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            let chunk = String::from_utf8_lossy(&buf[..n]).into_owned();
            t.lock().unwrap_or_else(|e| e.into_inner()).push_str(&chunk);
        }
    });
    text
}

/// One round with Quiver as the forwarder: (the tool's sample with Quiver's cycles, report).
fn ours(
    quiver: &Path,
    tool: &Path,
    cpus: (usize, usize),
    secs: f64,
) -> Result<(Sample, Value), String> {
    let tag = format!("quiver-bench-xc-{}", std::process::id());
    let config = format!(
        r#"
[dataplane]
cores = [{fwd}]
idle = "poll"
[[port]]
name = "in"
type = "memif"
role = "master"
socket = "@{tag}"
id = 0
[[port]]
name = "out"
type = "memif"
role = "master"
socket = "@{tag}"
id = 1
[[xconnect]]
a = "in"
b = "out"
"#,
        fwd = cpus.1
    );
    let path = std::env::temp_dir().join(format!("{tag}.toml"));
    std::fs::write(&path, config).map_err(|e| e.to_string())?;
    let mut child: Child = Command::new(quiver)
        .args(["run", "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", quiver.display()))?;
    let stdout = collect(child.stdout.take().ok_or("no stdout")?);
    let stderr = collect(child.stderr.take().ok_or("no stderr")?);
    let sock = format!("@{tag}");
    let report = start_traffic(tool, (&sock, &sock), (0, 1), cpus.0, secs).and_then(finish_traffic);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    let status = child.wait().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&path);
    // The readers end at end of file, which the exit caused.
    let deadline = Instant::now() + Duration::from_secs(10);
    while (Arc::strong_count(&stdout) > 1 || Arc::strong_count(&stderr) > 1)
        && Instant::now() < deadline
    {
        std::thread::yield_now();
    }
    let out = stdout.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let err = stderr.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let report = report.map_err(|e| format!("{e}\nquiver:\n{out}{err}"))?;
    if !status.success() {
        return Err(format!("quiver failed ({status}):\n{out}{err}"));
    }
    let summary = out
        .lines()
        .find(|l| l.starts_with("forwarded:"))
        .ok_or_else(|| format!("quiver printed no summary:\n{out}{err}"))?;
    let cycles =
        number_after(summary, "Mpps,").ok_or_else(|| format!("cannot read `{summary}`"))?;
    let sample = Sample {
        mpps: report["mpps"].as_f64().ok_or(format!(
            "nothing came back through quiver: {report}\nquiver:\n{out}{err}"
        ))?,
        cycles_per_packet: cycles,
        packets: report["unique"].as_u64().unwrap_or(0),
    };
    Ok((sample, report))
}

/// One round with testpmd io-forwarding between two memif servers.
fn reference(tool: &Path, cpus: (usize, usize), secs: f64) -> Result<(Sample, Value), String> {
    // testpmd's default is an abstract socket named by `socket`.
    let name = format!("/quiver-bench-xc-pmd-{}", std::process::id());
    let v0 = format!("net_memif0,role=server,id=0,socket={name}");
    let v1 = format!("net_memif1,role=server,id=1,socket={name}");
    let mut pmd = TestPmd::start(
        "xc",
        (cpus.0, cpus.1),
        &[&v0, &v1],
        &["-i", "--forward-mode=io", "--no-flush-rx"],
    )?;
    pmd.wait_for("Port 1:", 0, 30)?;
    pmd.command("set record-core-cycles on")?;
    pmd.command("start")?;
    pmd.wait_for("io packet forwarding", 0, 30)?;
    let sock = format!("@{name}");
    // DPDK's memif PMD reports no statistics once its peer is gone, so testpmd must stop (and
    // print its cycles) while the tool is still sending: the tool sends for longer than the
    // window measured here, and its rate counts only the span in which frames came back.
    let child = start_traffic(tool, (&sock, &sock), (0, 1), cpus.0, secs + 2.0)?;
    std::thread::sleep(Duration::from_secs_f64(secs + 0.5));
    let mark = pmd.output.len();
    pmd.command("stop")?;
    let report = finish_traffic(child)?;
    let i = pmd.wait_for("CPU cycles/packet=", mark, 20)?;
    let cycles = number_after(&pmd.output[i], "CPU cycles/packet=")
        .ok_or_else(|| format!("cannot read `{}`", pmd.output[i]))?;
    let _ = pmd.command("quit");
    let sample = Sample {
        mpps: report["mpps"].as_f64().ok_or(format!(
            "nothing came back through testpmd: {report}\ntestpmd:\n{}",
            pmd.output.join("\n")
        ))?,
        cycles_per_packet: cycles,
        packets: report["unique"].as_u64().unwrap_or(0),
    };
    Ok((sample, report))
}

/// How many times a failed round is run again before the scenario fails.
const RETRIES: u32 = 2;

/// Runs `round`, again (at most [`RETRIES`] times in the whole run, each counted in `retried`
/// and reported) when it fails. A forwarder's memif link comes up on its control thread a moment
/// before its worker polls the new queues; frames the tool sends in that moment are dropped
/// (`tx-link-down`), and with a bounded window in flight the tool then waits for frames that
/// will never return and gives up. Both forwarders get the same treatment, and the JSON line
/// says how many rounds were run again.
fn with_retry<T>(
    who: &str,
    retried: &Cell<u32>,
    mut round: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    loop {
        match round() {
            Ok(v) => return Ok(v),
            Err(e) if retried.get() < RETRIES => {
                retried.set(retried.get() + 1);
                let first = e.lines().next().unwrap_or_default();
                eprintln!("  a {who} round failed ({first}); running it again");
            }
            Err(e) => return Err(e),
        }
    }
}

/// Runs the scenario; returns the JSON line.
pub fn run(quick: bool) -> Result<String, String> {
    check_prerequisites()?;
    let cpus = two_cpus()?;
    let (rounds, secs) = if quick { (1, 1.0) } else { (3, 5.0) };
    eprintln!("memif-xc: building quiver and the memif traffic example (release)");
    let quiver = build_quiver()?;
    let tool = build_traffic()?;
    eprintln!(
        "memif-xc: 64 B, traffic tool on CPU {}, forwarder on CPU {}; {rounds} round(s) of {secs} s",
        cpus.0, cpus.1
    );
    let retried = Cell::new(0);
    let runs = host_state::alternate(
        cpus,
        rounds,
        host_state::EXTRA_ROUNDS,
        || with_retry("quiver", &retried, || ours(&quiver, &tool, cpus, secs)),
        || with_retry("testpmd", &retried, || reference(&tool, cpus, secs)),
        |round, o, r| {
            eprintln!(
                "  round {round}: quiver {:.2} Mpps ({:.1} busy cycles/packet) [{}], testpmd {:.2} Mpps ({:.1} cycles/packet) [{}]",
                o.value.0.mpps,
                o.value.0.cycles_per_packet,
                o.describe(),
                r.value.0.mpps,
                r.value.0.cycles_per_packet,
                r.describe()
            )
        },
    )?;
    let (us, them, state) = (runs.ours, runs.theirs, runs.state);
    let lost = |v: &[Probed<(Sample, Value)>]| {
        v.iter()
            .map(|p| p.value.1["lost"].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    let pick = |v: &[Probed<(Sample, Value)>], f: fn(&Sample) -> f64| {
        median(
            &host_state::in_state(v, state)
                .iter()
                .map(|x| f(&x.0))
                .collect::<Vec<_>>(),
        )
    };
    let (our_mpps, our_cycles) = (pick(&us, |s| s.mpps), pick(&us, |s| s.cycles_per_packet));
    let (ref_mpps, ref_cycles) = (
        pick(&them, |s| s.mpps),
        pick(&them, |s| s.cycles_per_packet),
    );
    let samples = |v: &[Probed<(Sample, Value)>]| {
        v.iter()
            .map(|p| {
                let s = &p.value.0;
                p.annotate(json!({"mpps": s.mpps, "cycles_per_packet": s.cycles_per_packet, "packets": s.packets}))
            })
            .collect::<Vec<_>>()
    };
    Ok(json!({
        "scenario": "memif-xc",
        "frame_size": 64,
        "seconds_per_round": secs,
        "rounds_run_again": retried.get(),
        "host_state": host_state::state_name(state),
        "figures_from": "the median of each side's samples taken in host_state (all samples when none in common)",
        "cpus": [cpus.0, cpus.1],
        "mpps": our_mpps,
        "cycles_per_packet": our_cycles,
        "lost": lost(&us),
        "samples": samples(&us),
        "reference": {
            "name": "dpdk-testpmd io forwarding between two net_memif servers, same traffic tool, same CPUs, same run; cycles from record-core-cycles",
            "mpps": ref_mpps,
            "cycles_per_packet": ref_cycles,
            "lost": lost(&them),
            "samples": samples(&them),
        },
        "ratio": our_mpps / ref_mpps,
        "cycles_ratio": our_cycles / ref_cycles,
    })
    .to_string())
}
