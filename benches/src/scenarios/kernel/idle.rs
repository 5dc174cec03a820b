//! The `kernel` scenario's scaling figures (issue 24, part 5): what idle KERNEL ports cost a
//! worker, and how long one takes to open.
//!
//! In this process, on a thread of its own (the forwarder keeps that thread and its children
//! off the worker's CPU): a `Forwarder` with one polling worker on Quiver's CPU, owned as in
//! the daemon. KERNEL ports are TAP devices created inside a network namespace of their own,
//! as NSM's KERNEL mechanism makes them in a pod's (`[[port]] type = "tap"` with `netns`); the
//! namespace has IPv6 off, so nothing talks on them. Each port is added with `Change::AddPort`
//! and timed from the request to its answer (the device open, the commit, the worker's queues
//! attached). With 2 ports, then with all of them, once every queue sleeps (`Port::rx_modes`),
//! the worker's clocks per empty loop pass are read from its counters over a few windows;
//! the figure is their median.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, IdlePolicy, RxMode, WorkerConfig};
use quiver::config::{PortSection, TapSection};
use quiver::control::owner::{Change, ConfigOwner, Control, HOUSEKEEPING_PERIOD};
use quiver::{Config, Forwarder};
use serde_json::{json, Value};

use super::net::{run, IP};
use crate::scenarios::memif_rate::median;

/// Issue 24's goal: an empty pass with [`MANY`] idle ports at most this many times one with
/// [`FEW`].
pub const GOAL_EMPTY_PASS_RATIO: f64 = 2.0;
/// Issue 24's goal: opening a KERNEL port takes at most this long, p99, in ms.
pub const GOAL_PORT_OPEN_MS_P99: f64 = 2.0;

/// The few idle ports measured.
pub const FEW: usize = 2;
/// The many idle ports measured.
pub const MANY: usize = 500;

/// What was measured.
pub struct IdleFigures {
    /// Clocks per empty pass with [`FEW`] idle ports.
    pub clocks_few: f64,
    /// Clocks per empty pass with [`MANY`] idle ports.
    pub clocks_many: f64,
    /// Every port's open time, in ms, sorted.
    pub open_ms: Vec<f64>,
    /// The rest, for the JSON line.
    pub detail: Value,
}

impl IdleFigures {
    /// The p99 of the open times.
    pub fn open_p99(&self) -> f64 {
        quantile(&self.open_ms, 0.99)
    }

    /// Many ports' empty pass against few ports'.
    pub fn ratio(&self) -> f64 {
        self.clocks_many / self.clocks_few.max(1e-9)
    }
}

/// The value at quantile `q` of sorted `v`.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A network namespace, deleted on drop (its TAP devices with it, once closed).
struct Netns(String);

impl Netns {
    fn new() -> Result<Netns, String> {
        let name = format!("quiver-bench-idle-{}", std::process::id());
        let _ = run(&[IP, "netns", "del", &name]);
        run(&[IP, "netns", "add", &name])?;
        let ns = Netns(name);
        // Nothing talks on the devices: no IPv6 (router solicitations, MLD) on any of them.
        run(&[
            IP,
            "netns",
            "exec",
            &ns.0,
            super::net::SYSCTL,
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])?;
        Ok(ns)
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.0))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&[IP, "netns", "del", &self.0]);
    }
}

/// Measures on a thread of its own, whose CPU affinity the forwarder changes (see the module
/// docs); `windows` of `window` each per figure.
pub fn measure(cpu: usize, windows: usize, window: Duration) -> Result<IdleFigures, String> {
    std::thread::Builder::new()
        .name("idle-ports".into())
        .spawn(move || measure_here(cpu, windows, window))
        .map_err(|e| e.to_string())?
        .join()
        .map_err(|_| "the idle-ports measurement panicked".to_string())?
}

fn measure_here(cpu: usize, windows: usize, window: Duration) -> Result<IdleFigures, String> {
    let ns = Netns::new()?;
    let cfg = Config::parse("[buffers]\nhugepages = \"never\"\n").map_err(|e| e.to_string())?;
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 16384,
        hugepages: HugepagePolicy::Never,
        ..BufferPoolConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let workers = WorkerConfig {
        cores: vec![cpu],
        idle: IdlePolicy::Poll,
    };
    let forwarder = Forwarder::start(&cfg, &workers, pool).map_err(|e| e.to_string())?;
    let owner = ConfigOwner::start(forwarder, HOUSEKEEPING_PERIOD);
    let fwd = owner.control();
    let result = measure_with(&fwd, &ns, windows, window);
    // Stopping: the owner, then the workers (each drops its queues), then the ports close.
    let t0 = Instant::now();
    let forwarder = owner.stop().map_err(|e| e.to_string());
    if let Ok(f) = forwarder {
        f.stop();
    }
    drop(fwd);
    let stop_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut figures = result?;
    figures.detail["stop_ms"] = json!(round1(stop_ms));
    drop(ns);
    Ok(figures)
}

/// Adds TAP port `i` in `ns`; how long that took, in ms.
fn add_port(fwd: &Control, ns: &Netns, i: usize) -> Result<f64, String> {
    let port = PortSection::Tap(TapSection {
        name: format!("idle{i}"),
        mac: None,
        mtu: 1500,
        device: Some(format!("qidle{i}")),
        netns: Some(ns.path()),
    });
    let t0 = Instant::now();
    fwd.apply(Change::AddPort {
        port,
        owner: Some("bench-idle".into()),
    })
    .map_err(|e| format!("port {i}: {e}"))?;
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

/// Waits (up to 10 s) until every port's queues sleep; how many ports do.
fn wait_asleep(fwd: &Control) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let view = fwd.view();
        let ports = view.ports();
        let asleep = ports
            .iter()
            .filter(|p| {
                let modes = p.port.rx_modes();
                !modes.is_empty() && modes.iter().all(|&m| m == RxMode::Interrupt)
            })
            .count();
        if asleep == ports.len() || Instant::now() > deadline {
            return (asleep, ports.len());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The worker's clocks per empty pass, the median over `windows` windows of `window`.
fn empty_pass_clocks(fwd: &Control, windows: usize, window: Duration) -> (f64, Vec<f64>) {
    let idle = |fwd: &Control| {
        let r = fwd.dataplane().runtime();
        r.workers.first().map_or((0, 0), |w| {
            (w.worker_loop.idle_cycles, w.worker_loop.idle_passes)
        })
    };
    let mut each = Vec::with_capacity(windows);
    for _ in 0..windows {
        let (c0, p0) = idle(fwd);
        std::thread::sleep(window);
        let (c1, p1) = idle(fwd);
        each.push((c1 - c0) as f64 / (p1 - p0).max(1) as f64);
    }
    (median(&each), each)
}

fn measure_with(
    fwd: &Control,
    ns: &Netns,
    windows: usize,
    window: Duration,
) -> Result<IdleFigures, String> {
    let tsc_ghz = dataplane::cycles::tsc_hz() as f64 / 1e9;
    let mut open_ms = Vec::with_capacity(MANY);
    for i in 0..FEW {
        open_ms.push(add_port(fwd, ns, i)?);
    }
    let asleep_few = wait_asleep(fwd);
    let (clocks_few, windows_few) = empty_pass_clocks(fwd, windows, window);
    eprintln!(
        "    {FEW} idle TAP ports ({} of {} asleep): {clocks_few:.0} clocks per empty pass",
        asleep_few.0, asleep_few.1
    );
    let t_many = Instant::now();
    for i in FEW..MANY {
        open_ms.push(add_port(fwd, ns, i)?);
    }
    let open_many_s = t_many.elapsed().as_secs_f64();
    let asleep_many = wait_asleep(fwd);
    let (clocks_many, windows_many) = empty_pass_clocks(fwd, windows, window);
    eprintln!(
        "    {MANY} idle TAP ports ({} of {} asleep): {clocks_many:.0} clocks per empty pass",
        asleep_many.0, asleep_many.1
    );
    let slept: u64 = fwd
        .dataplane()
        .runtime()
        .workers
        .iter()
        .map(|w| w.error(dataplane::PORT_INPUT, "queue-slept"))
        .sum();
    let mut sorted = open_ms.clone();
    sorted.sort_by(f64::total_cmp);
    // The slowest opens, by the order they were made in: a cost that grows with the port count
    // shows as late indices, a busy machine as scattered ones.
    let mut slowest: Vec<(usize, f64)> = open_ms.iter().copied().enumerate().collect();
    slowest.sort_by(|a, b| b.1.total_cmp(&a.1));
    slowest.truncate(8);
    let ns_of = |c: f64| round1(c / tsc_ghz.max(1e-9));
    let detail = json!({
        "ports": "TAP devices created inside a network namespace of their own (NSM's KERNEL \
                  mechanism), one queue each, added at run time to a running forwarder with one \
                  polling worker on Quiver's CPU; IPv6 off in the namespace, nothing sent",
        "tsc_ghz": round3(tsc_ghz),
        "few": {
            "ports": FEW,
            "asleep": asleep_few.0,
            "empty_pass_clocks": round1(clocks_few),
            "empty_pass_ns": ns_of(clocks_few),
            "windows": windows_few.iter().map(|&c| round1(c)).collect::<Vec<_>>(),
        },
        "many": {
            "ports": MANY,
            "asleep": asleep_many.0,
            "empty_pass_clocks": round1(clocks_many),
            "empty_pass_ns": ns_of(clocks_many),
            "windows": windows_many.iter().map(|&c| round1(c)).collect::<Vec<_>>(),
        },
        "queue_slept": slept,
        "empty_pass_ratio": round3(clocks_many / clocks_few.max(1e-9)),
        "port_open_ms": {
            "p50": round3(quantile(&sorted, 0.5)),
            "p99": round3(quantile(&sorted, 0.99)),
            "max": round3(sorted.last().copied().unwrap_or(0.0)),
            "count": sorted.len(),
            "slowest": slowest
                .iter()
                .map(|&(i, ms)| json!({"port": i, "ms": round3(ms)}))
                .collect::<Vec<_>>(),
        },
        "open_remaining_s": round3(open_many_s),
        "window_ms": window.as_millis() as u64,
    });
    Ok(IdleFigures {
        clocks_few,
        clocks_many,
        open_ms: sorted,
        detail,
    })
}
