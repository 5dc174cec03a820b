//! Helpers for the tests against the Linux kernel: network namespaces and veths made with
//! iproute2 and removed on drop (even when a test panics), waits on conditions with deadlines,
//! and a running Quiver (the forwarding graph on real workers) over driver ports.

#![allow(dead_code)]

use std::fs::File;
use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::{Dataplane, GraphBuilder, IdlePolicy, PortInput, WorkerConfig};
use drivers::af_packet::{AfPacketConfig, AfPacketPort};
use drivers::tap::{TapConfig, TapPort};
use drivers::Port;
use graph_nodes::nodes::XconnectStats;
use graph_nodes::{add_forwarding_nodes, names, FibConfig, Forwarding, ForwardingState, IfIndex};

/// Why these tests cannot run here, if they cannot.
fn missing_prerequisite() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
        return Some("not running as root".into());
    }
    for (tool, arg) in [("ip", "-V"), ("ping", "-V")] {
        match Command::new(tool).arg(arg).output() {
            Ok(o) if o.status.success() => {}
            _ => {
                return Some(format!(
                    "`{tool}` is not installed (iproute2, iputils-ping)"
                ))
            }
        }
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    None
}

/// True if the test should run; false (after saying why) if it should skip. With
/// `QUIVER_REQUIRE_SYSTEM_TESTS=1` a missing prerequisite fails the test instead.
pub fn system_ready(test: &str) -> bool {
    match missing_prerequisite() {
        None => true,
        Some(why) => {
            testkit::unavailable(test, &why);
            false
        }
    }
}

/// [`system_ready`], and the programs `tools` (absolute paths) present, with the same rules.
pub fn system_ready_with(test: &str, tools: &'static [&'static str]) -> bool {
    system_ready(test)
        && testkit::require(
            test,
            &testkit::Needs {
                tools,
                ..Default::default()
            },
        )
}

/// A short name no other test (in this process or another) uses at the same time.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id() % 1_000_000)
}

/// Runs a command; panics, with its output, when it fails.
pub fn run(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Polls `condition` until it holds; panics with `what` (and the last state `condition`
/// describes) after `timeout`.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut condition: impl FnMut() -> Result<(), String>,
) {
    let deadline = Instant::now() + timeout;
    loop {
        match condition() {
            Ok(()) => return,
            Err(state) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}: {state}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// A network namespace, deleted on drop, with IPv6 off (so that the only frames are the
/// tests' own) and `lo` up.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new() -> Netns {
        let name = unique("quiver-t");
        run(&["ip", "netns", "add", &name]);
        let ns = Netns { name };
        ns.sh("for f in all default; do echo 1 > /proc/sys/net/ipv6/conf/$f/disable_ipv6; done 2>/dev/null; true");
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n <ns> args…`.
    pub fn ip(&self, args: &[&str]) -> Output {
        let mut v = vec!["ip", "-n", &self.name];
        v.extend_from_slice(args);
        run(&v)
    }

    /// A shell command in the namespace.
    pub fn sh(&self, script: &str) -> Output {
        run(&["ip", "netns", "exec", &self.name, "sh", "-c", script])
    }

    /// A command in the namespace, successful or not.
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("ip netns exec runs")
    }

    /// A counter of `interface` in the namespace (`rx_packets`, `tx_packets` …).
    pub fn counter(&self, interface: &str, counter: &str) -> u64 {
        let out = self.sh(&format!(
            "cat /sys/class/net/{interface}/statistics/{counter}"
        ));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a number")
    }

    /// Pings `address` from the namespace (3 echoes) until a run gets replies, for up to
    /// `timeout` (the first echoes may be spent while neighbours are resolved); returns the
    /// successful run's output.
    pub fn ping(&self, address: &str, timeout: Duration) -> String {
        let mut last = String::new();
        let mut result = None;
        wait_until(
            &format!("ping {address} from {}", self.name),
            timeout,
            || {
                let out = self.exec(&["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", address]);
                last = String::from_utf8_lossy(&out.stdout).into_owned();
                if out.status.success() {
                    result = Some(last.clone());
                    Ok(())
                } else {
                    Err(last.clone())
                }
            },
        );
        result.expect("ping succeeded")
    }

    /// Runs `f` on a thread inside the namespace (what it opens, it opens there).
    pub fn run_in<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let ns = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .expect("the thread in the namespace panicked")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A veth pair: `root` in the root namespace (for Quiver), `inner` (always `veth0`) in a test
/// namespace. IPv6 is off on the root end; both ends are up.
pub struct Veth {
    pub root: String,
    pub inner: String,
}

impl Veth {
    /// A pair into `ns`, the inner end with `address` (CIDR) unless empty.
    pub fn new(ns: &Netns, address: &str) -> Veth {
        let root = unique("qv");
        let inner = "veth0".to_string();
        run(&[
            "ip", "link", "add", &root, "type", "veth", "peer", "name", &inner, "netns", &ns.name,
        ]);
        let veth = Veth { root, inner };
        let _ = std::fs::write(
            format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", veth.root),
            "1",
        );
        run(&["ip", "link", "set", &veth.root, "up"]);
        if !address.is_empty() {
            ns.ip(&["addr", "add", address, "dev", &veth.inner]);
        }
        ns.ip(&["link", "set", &veth.inner, "up"]);
        veth
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Usually gone with its namespace already.
        let _ = Command::new("ip")
            .args(["link", "del", &self.root])
            .output();
    }
}

/// A forwarding table small enough for tests.
pub fn forwarding() -> Forwarding {
    Forwarding::new(FibConfig {
        long_prefix_groups: 256,
        hugepages: HugepagePolicy::Never,
        ..FibConfig::default()
    })
    .expect("forwarding tables")
}

/// A port and its interface in the forwarding table.
pub type PortAt = (Arc<dyn Port>, IfIndex);

/// Opens an AF_PACKET port with `queues` queues on `interface` and adds it to `fwd`.
pub fn af_packet_port(fwd: &mut Forwarding, interface: &str, queues: usize) -> PortAt {
    let port = AfPacketPort::open(&AfPacketConfig::new(interface, queues))
        .unwrap_or_else(|e| panic!("AF_PACKET on {interface}: {e}"));
    let mtu = port.mtu().min(u16::MAX as u32) as u16;
    add_port(fwd, Arc::new(port), mtu)
}

/// Adds `port` to `fwd`.
pub fn add_port(fwd: &mut Forwarding, port: Arc<dyn Port>, mtu: u16) -> PortAt {
    let index = fwd.add_port(port.name(), port.mac(), mtu).unwrap();
    (port, index)
}

/// The idle policy of test workers: the machine is shared.
pub const TEST_IDLE: IdlePolicy = IdlePolicy::Sleep {
    after: 1000,
    sleep: Duration::from_micros(100),
};

/// A test buffer pool (ordinary pages).
pub fn pool() -> Arc<BufferPool> {
    BufferPool::new(&BufferPoolConfig {
        buffers: 8192,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .expect("buffer pool")
}

/// Quiver running: workers with the forwarding graph over some ports, and a control loop that
/// commits the neighbours the data path learns (as the daemon's control plane does).
pub struct Quiver {
    pub dp: Arc<Dataplane<ForwardingState>>,
    pub fwd: Arc<Mutex<Forwarding>>,
    pub pool: Arc<BufferPool>,
    xconnect: Arc<Mutex<Vec<Arc<XconnectStats>>>>,
    stop: Arc<AtomicBool>,
    control: Option<JoinHandle<()>>,
}

impl Quiver {
    /// Starts one worker per core of `cores`. Each worker takes its queue pair of every port:
    /// a `PortInput` per receive queue into `ethernet-input`, the transmit queues to
    /// `interface-output`. Then commits `fwd` (routes reach the FIB once workers run).
    pub fn start(mut fwd: Forwarding, ports: &[PortAt], cores: &[usize]) -> Quiver {
        let pool = pool();
        let xconnect = Arc::new(Mutex::new(Vec::new()));
        let (ports, stats) = (ports.to_vec(), xconnect.clone());
        let dp = Dataplane::start(
            &WorkerConfig {
                cores: cores.to_vec(),
                idle: TEST_IDLE,
            },
            pool.clone(),
            fwd.snapshot(),
            move |init| {
                let mut b = GraphBuilder::new();
                let mut tx = Vec::new();
                for (port, index) in &ports {
                    let q = port
                        .queue_pair(init.index)
                        .map_err(|e| format!("{}: {e}", port.name()))?;
                    let node = format!("{}-rx", port.name());
                    b.add(PortInput::new(
                        &node,
                        names::ETHERNET_INPUT,
                        index.get(),
                        q.rx,
                    ));
                    tx.push((*index, q.tx));
                }
                let handles = add_forwarding_nodes(&mut b, tx);
                stats.lock().unwrap().push(handles.xconnect);
                b.build().map_err(|e| e.to_string())
            },
        )
        .expect("workers start");
        let dp = Arc::new(dp);
        fwd.commit(&*dp).expect("commit");
        let fwd = Arc::new(Mutex::new(fwd));
        let stop = Arc::new(AtomicBool::new(false));
        let control = {
            let (dp, fwd, stop) = (dp.clone(), fwd.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    {
                        let mut f = fwd.lock().unwrap();
                        if f.take_events() > 0 {
                            f.commit(&*dp).expect("commit learned neighbours");
                        }
                    }
                    dp.reclaim();
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        Quiver {
            dp,
            fwd,
            pool,
            xconnect,
            stop,
            control: Some(control),
        }
    }

    /// Frames cross-connected from interface `rx`, over all workers: (packets, bytes).
    pub fn xconnected(&self, rx: IfIndex) -> (u64, u64) {
        self.xconnect
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.get(rx))
            .fold((0, 0), |(p, b), (q, c)| (p + q, b + c))
    }

    /// Error (or event) counter `name` of `node`, over all workers.
    pub fn error(&self, node: &str, name: &str) -> u64 {
        self.dp
            .runtime()
            .workers
            .iter()
            .map(|w| w.error(node, name))
            .sum()
    }

    /// Packets node `node` handled, over all workers.
    pub fn node_packets(&self, node: &str) -> u64 {
        self.dp
            .runtime()
            .workers
            .iter()
            .filter_map(|w| w.node(node).map(|n| n.packets))
            .sum()
    }
}

impl Drop for Quiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(c) = self.control.take() {
            let _ = c.join();
        }
    }
}

/// A named counter of a port's detail.
pub fn detail(port: &dyn Port, name: &str) -> u64 {
    port.stats()
        .detail
        .iter()
        .find(|(n, _)| n == name)
        .map_or_else(|| panic!("no counter {name}"), |(_, v)| *v)
}

/// Waits until what the kernel counts on `interface` (in `ns`, the other end of `port`'s link)
/// equals what `port` counts: frames the namespace sent are those Quiver received, and the
/// reverse. Datagrams (TCP segments) an AF_PACKET port sent as one UDP (TCP) GSO super-frame
/// are one packet to the kernel's counters, until something segments them. Returns (sent, received) as the kernel
/// counted them.
pub fn wait_counters_match(ns: &Netns, interface: &str, port: &dyn Port) -> (u64, u64) {
    wait_counters_match_as(ns, interface, port, true)
}

/// [`wait_counters_match`], where `whole` says whether the port's super-frames reach the
/// kernel's counters whole (one packet each) or segmented before the link (one each segment).
pub fn wait_counters_match_as(
    ns: &Netns,
    interface: &str,
    port: &dyn Port,
    whole: bool,
) -> (u64, u64) {
    let mut seen = (0, 0);
    wait_until(
        &format!("{}'s counters to match {interface}'s", port.name()),
        Duration::from_secs(10),
        || {
            let (sent, received) = (
                ns.counter(interface, "tx_packets"),
                ns.counter(interface, "rx_packets"),
            );
            let s = port.stats();
            seen = (sent, received);
            let detail = |name: &str| {
                s.detail
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(0, |(_, v)| *v)
            };
            let tx_skbs = if whole {
                s.tx_packets - detail("tx-udp-gso-datagrams") + detail("tx-udp-gso-frames")
                    - detail("tx-tcp-gso-segments")
                    + detail("tx-tcp-gso-frames")
            } else {
                s.tx_packets
            };
            if (s.rx_packets, tx_skbs) == (sent, received) {
                Ok(())
            } else {
                Err(format!(
                    "kernel sent {sent} received {received}; port received {} sent {} ({:?})",
                    s.rx_packets, s.tx_packets, s.detail
                ))
            }
        },
    );
    seen
}

/// Starts `script` with python3 inside `ns` (with `args`) and waits for its first line, which
/// must be `listening`; returns the process and the rest of its output, line by line.
pub fn python_server(
    ns: &Netns,
    script: &str,
    args: &[&str],
) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut server = Command::new("ip")
        .args(["netns", "exec", &ns.name, "/usr/bin/python3", "-c", script])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("server starts");
    let mut lines = BufReader::new(server.stdout.take().expect("piped")).lines();
    assert_eq!(
        lines.next().and_then(Result::ok).as_deref(),
        Some("listening")
    );
    (server, lines)
}

/// Opens a TAP port with offloads, moves its device into `ns` with `address`, up.
pub fn tap_in(fwd: &mut Forwarding, ns: &Netns, address: &str) -> (PortAt, String) {
    let name = unique("qt");
    let port = TapPort::open(&TapConfig::new(&name, 1)).expect("TAP with offloads");
    run(&["ip", "link", "set", &name, "netns", &ns.name]);
    ns.ip(&["addr", "add", address, "dev", &name]);
    ns.ip(&["link", "set", &name, "up"]);
    let mtu = port.mtu() as u16;
    (add_port(fwd, Arc::new(port), mtu), name)
}
