//! `quiver`: parse the command line and configuration, start the data plane, report, stop.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use dataplane::{BufferPool, Dataplane, RuntimeSnapshot, WorkerConfig};
use graph_nodes::{FibConfig, LocalState};
use quiver::control::owner::ConfigOwner;
use quiver::{demo, Config, Forwarder};

mod ctl;

/// Quiver: a userspace vector packet forwarder.
#[derive(Parser)]
#[command(name = "quiver", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the data plane with the ports, cross-connects, addresses and routes of the
    /// configuration file. With no `[[port]]` configured, every worker runs the built-in demo
    /// instead: UDP traffic routed through the real forwarding graph between two in-memory ports,
    /// with a few bad frames to show drop reasons.
    Run(RunArgs),
    /// Talk to a running `quiver run` over its admin socket: show interfaces, runtime,
    /// errors, fib, neighbours, cross-connects, memif, connections, trace; add and delete
    /// routes, neighbours, cross-connects, memif and AF_PACKET interfaces; trace; capture
    /// packets to pcap files; clear counters. Tables by default, `--json` for scripts.
    Ctl(ctl::CtlArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Configuration file (TOML). Without one, every setting takes its default.
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// Worker cores, e.g. `1` or `0,1` (overrides `dataplane.cores`).
    #[arg(long, value_delimiter = ',')]
    cores: Option<Vec<usize>>,
    /// Print `show runtime` every this many seconds (overrides `stats.interval_secs`).
    #[arg(long)]
    stats_interval: Option<u64>,
    /// Stop after this many seconds (default: run until SIGINT or SIGTERM).
    #[arg(long)]
    duration: Option<u64>,
    /// Serve the admin API (`quiver ctl`) on this unix socket, mode 0660; its directory is
    /// created, a stale socket replaced, a live one refused (quiver exits). Default
    /// /run/quiver/admin.sock, where a socket that cannot be served only warns. Empty: no
    /// admin API. Not served by the built-in demo.
    #[arg(long)]
    admin_socket: Option<String>,
    /// Serve NSM's forwarder API (also on when `NSM_LISTEN_ON` is set), configured by the
    /// `NSM_*` environment as cmd-forwarder-vpp is. `NSM_LISTEN_ON` is `unix:///path` or
    /// `tcp://host:port`; TCP is served with mTLS only, so it needs `SPIFFE_ENDPOINT_SOCKET`
    /// (without it quiver refuses to start: plaintext is only for unix sockets).
    #[arg(long)]
    nsm: bool,
    /// Serve Prometheus metrics (`GET /metrics`) on this `IP:PORT`, e.g. 127.0.0.1:9464
    /// (overrides `metrics.listen`; default: no metrics). Not served by the built-in demo.
    #[arg(long, value_name = "IP:PORT")]
    metrics_listen: Option<String>,
}

fn main() -> std::process::ExitCode {
    let log = quiver::logging::init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => log
            .follow_signals()
            .map_err(|e| format!("cannot handle SIGUSR1/SIGUSR2: {e}"))
            .and_then(|()| run(args)),
        Command::Ctl(args) => ctl::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quiver: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The default worker core: the last one this process may use, leaving the first to the
/// control plane and the OS.
fn default_cores() -> Result<Vec<usize>, String> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map_err(|e| format!("cannot read this process's CPU affinity: {e}"))?;
    (0..nix::sched::CpuSet::count())
        .rev()
        .find(|&c| set.is_set(c).unwrap_or(false))
        .map(|c| vec![c])
        .ok_or_else(|| "no CPU available".to_string())
}

fn run(args: RunArgs) -> Result<(), String> {
    let mut cfg = match &args.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    if let Some(cores) = args.cores {
        cfg.dataplane.cores = Some(cores);
    }
    if let Some(s) = args.stats_interval {
        cfg.stats.interval_secs = s;
    }
    if let Some(m) = args.metrics_listen {
        cfg.metrics.listen = m;
    }
    let nsm = (args.nsm || nsm_forwarder::NsmConfig::requested_by_env())
        .then(nsm_config)
        .transpose()?;
    if let Some(addr) = nsm.as_ref().and_then(|n| n.prometheus_addr()) {
        if cfg.metrics.listen.trim().is_empty() {
            cfg.metrics.listen = addr.to_string();
        } else {
            tracing::warn!(
                metrics = cfg.metrics.listen,
                "PROMETHEUS=true: metrics are served where --metrics-listen or [metrics] listen \
                 says, not at NSM_PROMETHEUS_LISTEN_ON"
            );
        }
    }
    // Bound now: a bad address stops quiver before anything starts.
    let metrics = (!cfg.metrics.listen.trim().is_empty())
        .then(|| quiver::metrics::bind(&cfg.metrics.listen))
        .transpose()
        .map_err(|e| e.to_string())?;
    let cores = match cfg.dataplane.cores.clone() {
        Some(c) => c,
        None => default_cores()?,
    };

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
    }

    let pool = BufferPool::new(&quiver::forwarder::pool_config(&cfg)).map_err(|e| e.to_string())?;
    tracing::info!(
        buffers = pool.capacity(),
        hugepages = pool.is_hugepage_backed(),
        "buffer pool ready"
    );
    let workers = WorkerConfig {
        cores,
        idle: cfg.dataplane.idle.into(),
    };
    let clock = Clock {
        started: Instant::now(),
        interval: (cfg.stats.interval_secs > 0)
            .then(|| Duration::from_secs(cfg.stats.interval_secs)),
        deadline: args
            .duration
            .map(|d| Instant::now() + Duration::from_secs(d)),
        stop,
    };
    if cfg.port.is_empty() && nsm.is_none() {
        if metrics.is_some() {
            tracing::warn!("the built-in demo serves no metrics");
        }
        run_demo(&cfg, &workers, pool, clock)
    } else {
        run_ports(
            &cfg,
            &workers,
            pool,
            clock,
            args.admin_socket.as_deref().map(Path::new),
            nsm,
            metrics,
        )
    }
}

/// The NSM forwarder's settings from the environment; each variable of cmd-forwarder-vpp's
/// that is set but does not apply to Quiver is logged once, with the reason.
fn nsm_config() -> Result<nsm_forwarder::NsmConfig, String> {
    let cfg = nsm_forwarder::NsmConfig::from_env().map_err(|e| e.to_string())?;
    for n in nsm_forwarder::config::not_applicable(|k| std::env::var(k).ok()) {
        tracing::warn!("{} is set but does not apply to Quiver: {}", n.var, n.why);
    }
    Ok(cfg)
}

/// When to report and when to stop.
struct Clock {
    started: Instant,
    interval: Option<Duration>,
    deadline: Option<Instant>,
    stop: Arc<AtomicBool>,
}

impl Clock {
    /// Calls `tick` every few milliseconds until stopped; its argument says whether a report
    /// is due.
    fn run(&self, mut tick: impl FnMut(bool) -> Result<(), String>) -> Result<(), String> {
        let mut next_report = self.interval.map(|i| self.started + i);
        while !self.stop.load(Ordering::Relaxed) && self.deadline.is_none_or(|d| Instant::now() < d)
        {
            std::thread::sleep(Duration::from_millis(5));
            let due = next_report.is_some_and(|at| Instant::now() >= at);
            if due {
                next_report = next_report.zip(self.interval).map(|(at, every)| at + every);
            }
            tick(due)?;
        }
        Ok(())
    }
}

/// Prints the packet rate since the last call.
struct RateMeter {
    last: (Instant, u64),
}

impl RateMeter {
    fn line(&mut self, started: Instant, packets: u64) -> String {
        let secs = self.last.0.elapsed().as_secs_f64();
        let pps = (packets - self.last.1) as f64 / secs;
        let line = format!(
            "--- {:.0}s: {:.3} Mpps forwarded ({packets} packets so far)",
            started.elapsed().as_secs_f64(),
            pps / 1e6
        );
        self.last = (Instant::now(), packets);
        line
    }
}

fn run_ports(
    cfg: &Config,
    workers: &WorkerConfig,
    pool: Arc<BufferPool>,
    clock: Clock,
    admin_socket: Option<&Path>,
    nsm: Option<nsm_forwarder::NsmConfig>,
    metrics: Option<std::net::TcpListener>,
) -> Result<(), String> {
    let owner = ConfigOwner::start(
        Forwarder::start(cfg, workers, pool.clone()).map_err(|e| e.to_string())?,
        quiver::control::owner::HOUSEKEEPING_PERIOD,
    );
    let control = owner.control();
    let connections = quiver::control::admin::ConnectionSlot::default();
    let admin = quiver::control::admin::start_with(&control, admin_socket, connections.clone())
        .map_err(|e| e.to_string())?;
    let prefix = nsm
        .as_ref()
        .map(|c| c.prometheus_metrics_prefix.clone())
        .unwrap_or_default();
    let header_timeout = nsm.as_ref().map_or(quiver::metrics::HEADER_TIMEOUT, |c| {
        c.prometheus_server_header_timeout
    });
    let nsm = nsm
        .map(|c| quiver::control::nsm::start(&control, c))
        .transpose()
        .map_err(|e| e.to_string())?;
    if let Some(nsm) = &nsm {
        connections.set(quiver::control::admin::nsm_connections(nsm));
    }
    let metrics = metrics
        .map(|l| {
            quiver::metrics::start(
                &control,
                l,
                nsm.as_ref().map(|_| connections.clone()),
                nsm.as_ref()
                    .map(|n| quiver::metrics::nsm::NsmSource::new(n, &prefix)),
                header_timeout,
            )
        })
        .transpose()
        .map_err(|e| e.to_string())?;
    tracing::info!(
        ports = control.view().ports.len(),
        workers = workers.cores.len(),
        "forwarding"
    );
    let mut meter = RateMeter {
        last: (Instant::now(), 0),
    };
    clock.run(|report| {
        owner.check().map_err(|e| e.to_string())?;
        if report {
            let view = control.view();
            println!("{}", meter.line(clock.started, view.tx_packets()));
            println!("{}", view.format_interfaces());
            println!("{}", control.dataplane().runtime().format_runtime(false));
        }
        Ok(())
    })?;
    // The services first (NSM unregisters), then the owner gives the forwarder back.
    drop(connections);
    drop(metrics);
    drop(nsm);
    drop(admin);
    drop(control);
    let fwd = owner.stop().map_err(|e| e.to_string())?;
    let elapsed = clock.started.elapsed();
    let interfaces = fwd.format_interfaces();
    let packets = fwd.tx_packets();
    let runtime = fwd.stop();
    println!("{interfaces}");
    summary(&runtime, packets, elapsed, &pool);
    Ok(())
}

fn run_demo(
    cfg: &Config,
    workers: &WorkerConfig,
    pool: Arc<BufferPool>,
    clock: Clock,
) -> Result<(), String> {
    let mut topo = demo::topology(FibConfig {
        hugepages: cfg.buffers.pool_config().hugepages,
        ..FibConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let boot = LocalState::default();
    topo.forwarding.commit(&boot).map_err(|e| e.to_string())?;
    let delivered = Arc::new(AtomicU64::new(0));
    let (rate, size) = (cfg.demo.rate_pps, cfg.demo.frame_size);
    let ports = (topo.ingress, topo.egress);
    tracing::info!(
        rate_pps = rate,
        frame_size = size,
        routes = topo.forwarding.route_count(),
        "no ports configured: running the built-in demo (routed traffic between two in-memory ports)"
    );
    let counter = delivered.clone();
    let dp: Dataplane<_> = Dataplane::start(
        workers,
        pool.clone(),
        topo.forwarding.snapshot(),
        move |init| demo::build(init, ports, rate, size, counter.clone()),
    )
    .map_err(|e| e.to_string())?;
    let mut meter = RateMeter {
        last: (Instant::now(), 0),
    };
    clock.run(|report| {
        dp.reclaim();
        if report {
            let line = meter.line(clock.started, delivered.load(Ordering::Relaxed));
            println!("{line}");
            println!("{}", dp.runtime().format_runtime(false));
        }
        Ok(())
    })?;
    let elapsed = clock.started.elapsed();
    let runtime = dp.runtime();
    dp.stop();
    summary(&runtime, delivered.load(Ordering::Relaxed), elapsed, &pool);
    Ok(())
}

fn summary(runtime: &RuntimeSnapshot, packets: u64, elapsed: Duration, pool: &BufferPool) {
    let sum = runtime.summed();
    println!("=== quiver stopped after {:.1}s", elapsed.as_secs_f64());
    println!("{}", runtime.format_runtime(true));
    println!("{}", sum.format_errors());
    println!(
        "forwarded: {packets} packets, average {:.2} Mpps, {:.1} busy clocks/packet over the whole graph",
        packets as f64 / elapsed.as_secs_f64() / 1e6,
        sum.worker_loop.busy_cycles_per_packet()
    );
    println!(
        "buffers: {} in use after stop (of {})",
        pool.in_use_count(),
        pool.capacity()
    );
}
