//! `dpdk`: Quiver forwarding between two DPDK `net_ring` ports beside `dpdk-testpmd` on the
//! same kind of vdevs, in the same run, on the same pinned core. The reference is testpmd's
//! `macswap` forwarding, which reads and writes every packet's Ethernet header as Quiver's L2
//! path reads it (its `io` forwarding, which never touches a packet, is printed beside it as
//! the floor of moving mbufs at all, never as the ratio's divisor).
//!
//! A `net_ring` vdev made without arguments is its own loopback: what it transmits on queue 0 it
//! receives on queue 0. Both forwarders keep a fixed number of packets circling between two such
//! ports (0 → 1 → 0 …) with no other work: testpmd's `start tx_first` sends one burst per port
//! and io forwarding then moves them; Quiver seeds the same number of 64-byte frames into its
//! graph and cross-connects the two ports (`port-input` → `ethernet-input` → `l2-xconnect` →
//! `interface-output`, mbufs and buffers being the same memory). Figures are busy cycles per
//! received packet (TSC cycles of loop passes / forwarding iterations that moved packets: Quiver's
//! worker counters, testpmd's `set record-core-cycles on`) and million packets received per
//! second (Quiver: its counters over the window; testpmd: the sum of its ports' `Rx-pps` over the
//! same window). Each is measured in windows; medians are reported with every sample.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dataplane::buffer::BufferPool;
use dataplane::{
    cycles, BufferPoolConfig, Context, Dataplane, Frame, GraphBuilder, IdlePolicy, Next, Node,
    NodeSpec, PortInput, WorkerConfig,
};
use drivers::dpdk::{
    DpdkMempool, DpdkPort, DpdkPortConfig, Eal, EalConfig, EalMemory, PREFIX_SIZE,
};
use drivers::Port;
use graph_nodes::{add_forwarding_nodes, names, FibConfig, Forwarding, ForwardingState, IfIndex};
use serde_json::json;

use super::common::{node_clocks, udp_frame};

const TESTPMD: &str = "/usr/bin/dpdk-testpmd";
const STDBUF: &str = "/usr/bin/stdbuf";
/// Free 2 MiB hugepages below which both EALs use ordinary pages.
const HUGEPAGES_WANTED: u64 = 128;

/// Puts `per_port` frames into the graph once for each port, as if received on it; then nothing.
struct Seed {
    templates: Vec<(Vec<u8>, IfIndex)>,
    per_port: usize,
    next: usize,
}

impl<S> Node<S> for Seed {
    fn spec(&self) -> NodeSpec {
        NodeSpec::input("seed").nexts(&[names::ETHERNET_INPUT])
    }

    fn process(&mut self, cx: &mut Context<'_, S>, frame: &mut Frame) -> usize {
        let Some((template, rx)) = self.templates.get(self.next) else {
            return 0;
        };
        self.next += 1;
        let n = cx
            .buffers
            .alloc_up_to(&mut frame.spare_mut()[..self.per_port]);
        for i in 0..n {
            let bi = frame.spare_mut()[i];
            cx.buffers.set_length(bi, template.len() as u16);
            cx.buffers.data_mut(bi).copy_from_slice(template);
            cx.buffers.meta_mut(bi).rx_interface = rx.get();
        }
        frame.set_len(n);
        cx.enqueue_frame(Next::declared(0), frame);
        n
    }
}

fn prerequisites() -> Result<(usize, usize), String> {
    for tool in [TESTPMD, STDBUF] {
        if !std::path::Path::new(tool).exists() {
            return Err(format!(
                "{tool} is missing: install the Debian packages `dpdk` and `coreutils` \
                 (scripts/setup-host)"
            ));
        }
    }
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        return Err("needs root (DPDK's EAL and testpmd map hugepages)".into());
    }
    let set =
        nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).map_err(|e| e.to_string())?;
    let cpus: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect();
    match (cpus.first(), cpus.last()) {
        (Some(&first), Some(&last)) if first != last => Ok((first, last)),
        _ => Err("needs two CPUs: a main lcore and a forwarding core".into()),
    }
}

fn free_hugepages() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Figures {
    cycles: Vec<f64>,
    mpps: Vec<f64>,
}

/// Quiver: two fresh `net_ring` vdevs, one worker on `core`, `burst` packets per port circling.
fn quiver(
    eal: &Eal,
    ports: [&str; 2],
    core: usize,
    burst: usize,
    windows: usize,
    window: Duration,
) -> Result<(Figures, serde_json::Value), String> {
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 16384,
        prefix_size: PREFIX_SIZE,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let mempool = DpdkMempool::new(eal, pool.clone()).map_err(|e| e.to_string())?;
    let mut opened: Vec<Arc<DpdkPort>> = Vec::new();
    for name in ports {
        eal.create_vdev(name, "").map_err(|e| e.to_string())?;
        opened.push(Arc::new(
            DpdkPort::open(&mempool, &DpdkPortConfig::new(name, 1)).map_err(|e| e.to_string())?,
        ));
    }
    let mut fwd = Forwarding::new(FibConfig {
        long_prefix_groups: 64,
        hugepages: dataplane::HugepagePolicy::Never,
        ..FibConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let a = fwd
        .add_port("a", opened[0].mac(), 1500)
        .map_err(|e| e.to_string())?;
    let b = fwd
        .add_port("b", opened[1].mac(), 1500)
        .map_err(|e| e.to_string())?;
    fwd.cross_connect(a, b).map_err(|e| e.to_string())?;
    let dp = start_dataplane(&pool, &fwd, &opened, [a, b], core, burst)?;
    fwd.commit(&dp).map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(300));
    let (figures, rt) = measure_windows(&dp, windows, window)?;
    let nodes = [
        format!("{}-input", ports[0]),
        format!("{}-input", ports[1]),
        names::ETHERNET_INPUT.to_string(),
        names::L2_XCONNECT.to_string(),
        names::INTERFACE_OUTPUT.to_string(),
    ];
    let (per_node, _) = node_clocks(&rt, &nodes.iter().map(String::as_str).collect::<Vec<_>>())?;
    let drops: u64 = rt.errors.iter().map(|e| e.count).sum();
    if drops > 0 {
        return Err(format!("Quiver dropped packets:\n{}", rt.format_errors()));
    }
    // Drain: with the cross-connect gone the ports are routed ones without routes, so every
    // circling packet is dropped (and freed) at its next arrival.
    fwd.disconnect(a);
    fwd.commit(&dp).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while pool.in_use_count() > mempool.cached() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    dp.stop();
    drop(opened);
    let leaked = pool.in_use_count();
    if leaked != 0 {
        return Err(format!(
            "{leaked} buffers not back in the pool after the run"
        ));
    }
    Ok((figures, per_node))
}

/// The worker on `core`: a seed of `burst` packets per port, the ports' inputs, the
/// forwarding nodes; `a` and `b` are `opened`'s interfaces.
fn start_dataplane(
    pool: &Arc<BufferPool>,
    fwd: &Forwarding,
    opened: &[Arc<DpdkPort>],
    [a, b]: [IfIndex; 2],
    core: usize,
    burst: usize,
) -> Result<Dataplane<ForwardingState>, String> {
    let templates = vec![
        (udp_frame(opened[1].mac(), 0x0a00_0102), a),
        (udp_frame(opened[0].mac(), 0x0a00_0101), b),
    ];
    let graph_ports: Vec<(Arc<dyn Port>, IfIndex)> =
        vec![(opened[0].clone(), a), (opened[1].clone(), b)];
    Dataplane::start(
        &WorkerConfig {
            cores: vec![core],
            idle: IdlePolicy::Poll,
        },
        pool.clone(),
        fwd.snapshot(),
        move |init| {
            let mut g = GraphBuilder::<ForwardingState>::new();
            g.add(Seed {
                templates: templates.clone(),
                per_port: burst,
                next: 0,
            });
            let mut tx = Vec::new();
            for (port, index) in &graph_ports {
                let qp = port.queue_pair(init.index).map_err(|e| e.to_string())?;
                g.add(PortInput::new(
                    &format!("{}-input", port.name()),
                    names::ETHERNET_INPUT,
                    index.get(),
                    qp.rx,
                ));
                tx.push((*index, qp.tx));
            }
            add_forwarding_nodes(&mut g, tx);
            g.build().map_err(|e| e.to_string())
        },
    )
    .map_err(|e| e.to_string())
}

/// `windows` measurement windows of `window` each; the figures, and the last window's runtime.
fn measure_windows(
    dp: &Dataplane<ForwardingState>,
    windows: usize,
    window: Duration,
) -> Result<(Figures, dataplane::WorkerRuntime), String> {
    let mut figures = Figures {
        cycles: Vec::new(),
        mpps: Vec::new(),
    };
    let mut last = None;
    for _ in 0..windows {
        dp.clear_counters();
        let t0 = Instant::now();
        std::thread::sleep(window);
        let rt = dp.runtime().summed();
        let secs = t0.elapsed().as_secs_f64();
        let l = rt.worker_loop;
        figures.cycles.push(l.busy_cycles_per_packet());
        figures.mpps.push(l.busy_packets as f64 / secs / 1e6);
        last = Some(rt);
    }
    let rt = last.ok_or("no measurement window")?;
    Ok((figures, rt))
}

/// A running testpmd (interactive), killed and reaped on drop.
struct TestPmd {
    child: Child,
    output: Arc<Mutex<String>>,
    /// EAL's runtime directory for its file prefix (created even with `--in-memory`).
    runtime_dir: String,
}

impl TestPmd {
    fn start(
        cores: (usize, usize),
        burst: usize,
        no_huge: bool,
        mode: &str,
    ) -> Result<TestPmd, String> {
        let prefix = format!("quiver-bench-testpmd-{}", std::process::id());
        let mut cmd = Command::new(STDBUF);
        cmd.args(["-oL", "-eL", TESTPMD])
            .args(["-l", &format!("{},{}", cores.0, cores.1), "--no-pci"])
            .arg(format!("--file-prefix={prefix}"))
            .args(["--no-telemetry", "--log-level=error"])
            .args(["--vdev=net_ring0", "--vdev=net_ring1"]);
        if no_huge {
            cmd.args(["--no-huge", "-m", "512"]);
        } else {
            cmd.arg("--in-memory");
        }
        cmd.args([
            "--",
            "-i",
            &format!("--forward-mode={mode}"),
            "--nb-cores=1",
            "--total-num-mbufs=8192",
            &format!("--burst={burst}"),
        ]);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {TESTPMD}: {e}"))?;
        let output = Arc::new(Mutex::new(String::new()));
        for mut pipe in [
            Box::new(child.stdout.take().expect("piped")) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().expect("piped")),
        ] {
            let out = output.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    out.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        Ok(TestPmd {
            child,
            output,
            runtime_dir: format!("/var/run/dpdk/{prefix}"),
        })
    }

    fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn command(&mut self, cmd: &str) -> Result<(), String> {
        let stdin = self.child.stdin.as_mut().ok_or("testpmd has no stdin")?;
        writeln!(stdin, "{cmd}")
            .and_then(|_| stdin.flush())
            .map_err(|e| format!("testpmd: {e}\n{}", self.output()))
    }

    /// Waits until the output after byte `from` contains `s`.
    fn wait(&mut self, from: usize, s: &str, secs: u64) -> Result<String, String> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let out = self.output();
            if out.get(from..).is_some_and(|t| t.contains(s)) {
                return Ok(out[from..].to_string());
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(format!("dpdk-testpmd exited ({st}):\n{out}"));
            }
            if Instant::now() > deadline {
                return Err(format!("dpdk-testpmd never printed {s:?}:\n{out}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `show port stats all`, returning the sum of the ports' Rx-pps.
    fn rx_pps(&mut self) -> Result<f64, String> {
        let mark = self.output().len();
        self.command("show port stats all")?;
        // Two ports, each block ending with its throughput lines.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.wait(mark, "Tx-bps", 10)?;
            let pps: Vec<f64> = text
                .lines()
                .filter_map(|l| l.trim().strip_prefix("Rx-pps:"))
                .filter_map(|v| v.split_whitespace().next()?.parse().ok())
                .collect();
            if pps.len() >= 2 && text.matches("Tx-bps").count() >= 2 {
                return Ok(pps[..2].iter().sum());
            }
            if Instant::now() > deadline {
                return Err(format!("unreadable port statistics:\n{text}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestPmd {
    fn drop(&mut self) {
        let _ = self.command("quit");
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
    }
}

/// testpmd forwarding (`mode`: `io` or `macswap`) between `--vdev net_ring0` and
/// `--vdev net_ring1`.
fn testpmd(
    cores: (usize, usize),
    burst: usize,
    windows: usize,
    window: Duration,
    no_huge: bool,
    mode: &str,
) -> Result<Figures, String> {
    let mut pmd = TestPmd::start(cores, burst, no_huge, mode)?;
    pmd.wait(0, "testpmd>", 60)?;
    let mark = pmd.output().len();
    pmd.command("set record-core-cycles on")?;
    pmd.command("start tx_first")?;
    pmd.wait(mark, "packets/burst=", 30)?;
    std::thread::sleep(Duration::from_millis(300));
    let mut figures = Figures {
        cycles: Vec::new(),
        mpps: Vec::new(),
    };
    for _ in 0..windows {
        pmd.rx_pps()?;
        std::thread::sleep(window);
        figures.mpps.push(pmd.rx_pps()? / 1e6);
    }
    let mark = pmd.output().len();
    pmd.command("stop")?;
    let text = pmd.wait(mark, "CPU cycles/packet=", 30)?;
    let c: f64 = text
        .split("CPU cycles/packet=")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no cycles/packet in testpmd's output:\n{text}"))?;
    // testpmd reports one figure for its whole run: the same for every window.
    figures.cycles = vec![c; windows];
    Ok(figures)
}

/// Runs the scenario; returns the JSON line.
pub fn run(quick: bool) -> Result<String, String> {
    let (main_core, worker_core) = prerequisites()?;
    let (windows, window) = if quick {
        (1, Duration::from_secs(2))
    } else {
        (5, Duration::from_secs(2))
    };
    let bursts: &[usize] = if quick { &[32] } else { &[32, 256] };
    let no_huge = free_hugepages() < HUGEPAGES_WANTED;
    let mut config = EalConfig::vdevs_only();
    config.main_lcore = Some(main_core);
    config.file_prefix = format!("quiver-bench-dpdk-{}", std::process::id());
    config.log_level = "error".into();
    if no_huge {
        config.memory = EalMemory::NoHuge { megabytes: 512 };
    }
    let eal = Eal::init(&config).map_err(|e| e.to_string())?;
    eprintln!(
        "dpdk: {} | Quiver and testpmd forward on core {worker_core} (main lcore {main_core}); \
         {windows} window(s) of {window:?}{}",
        eal.version(),
        if no_huge {
            "; no free hugepages: --no-huge"
        } else {
            ""
        },
    );
    let mut results = Vec::new();
    for (k, &burst) in bursts.iter().enumerate() {
        let names = [
            format!("net_ring{}", 2 * k),
            format!("net_ring{}", 2 * k + 1),
        ];
        let (q, per_node) = quiver(
            eal,
            [&names[0], &names[1]],
            worker_core,
            burst,
            windows,
            window,
        )?;
        eprintln!(
            "  {burst} packets per port circling: quiver {:.1} cycles/packet, {:.1} Mpps",
            median(&q.cycles),
            median(&q.mpps)
        );
        let cores = (main_core, worker_core);
        let t = testpmd(cores, burst, windows, window, no_huge, "macswap")?;
        let io = testpmd(cores, burst, windows, window, no_huge, "io")?;
        eprintln!(
            "  {burst} packets per port circling: testpmd macswap {:.1} cycles/packet, {:.1} \
             Mpps; io {:.1} cycles/packet, {:.1} Mpps",
            median(&t.cycles),
            median(&t.mpps),
            median(&io.cycles),
            median(&io.mpps)
        );
        results.push((burst, q, t, io, per_node));
    }
    let (burst, q, t, io, per_node) = &results[0];
    let others: Vec<serde_json::Value> = results[1..]
        .iter()
        .map(|(b, q, t, io, n)| {
            json!({
                "burst": b,
                "cycles_per_packet": median(&q.cycles),
                "mpps": median(&q.mpps),
                "per_node": n,
                "reference_cycles_per_packet": median(&t.cycles),
                "reference_mpps": median(&t.mpps),
                "io_cycles_per_packet": median(&io.cycles),
                "ratio": median(&q.cycles) / median(&t.cycles),
            })
        })
        .collect();
    Ok(json!({
        "scenario": "dpdk",
        "burst": burst,
        "packets": (median(&q.mpps) * 1e6 * window.as_secs_f64() * windows as f64) as u64,
        "mpps": median(&q.mpps),
        "cycles_per_packet": median(&q.cycles),
        "samples": { "cycles_per_packet": q.cycles, "mpps": q.mpps },
        "per_node": per_node,
        "tsc_hz": cycles::tsc_hz(),
        "reference": {
            "name": "dpdk-testpmd macswap forwarding (reads and writes each Ethernet header) between --vdev net_ring0 and net_ring1, tx_first, record-core-cycles, same core, same run",
            "cycles_per_packet": median(&t.cycles),
            "mpps": median(&t.mpps),
            "samples": { "mpps": t.mpps },
        },
        "io_forwarding": {
            "name": "dpdk-testpmd io forwarding (never reads a packet), same vdevs, core and run: context, not the reference",
            "cycles_per_packet": median(&io.cycles),
            "mpps": median(&io.mpps),
        },
        "ratio": median(&q.cycles) / median(&t.cycles),
        "ratio_to_io": median(&q.cycles) / median(&io.cycles),
        "more_bursts": others,
    })
    .to_string())
}
