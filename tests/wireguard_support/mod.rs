//! What the WireGuard end-to-end tests share: namespaces with a veth into each, a WireGuard
//! peer we did not write (wireguard-go or boringtun) on a TUN configured with `wg`, keys, the
//! data path's error counters.

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use quiver::control::owner::Control;
use testkit::wait_for;
use testkit::wg_peers::Peer;

pub(crate) const IP: &str = "/usr/sbin/ip";
pub(crate) const PING: &str = "/usr/bin/ping";
pub(crate) const WG: &str = "/usr/bin/wg";
pub(crate) const PYTHON: &str = testkit::SYSTEM_PYTHON;
/// The protocol crate's TCP transfer checked for content.
pub(crate) const TCP_CHECK: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/wireguard/tests/common/tcp_check.py"
);

pub(crate) fn run(args: &[&str]) -> Output {
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

pub(crate) fn say(msg: &str) {
    eprintln!("[wireguard e2e] {msg}");
}

/// A namespace with a veth into it (`veth0` inside, `root` outside), deleted on drop.
pub(crate) struct Side {
    pub(crate) ns: String,
    pub(crate) root: String,
}

impl Side {
    pub(crate) fn new(tag: &str, address: &str, gateway: Option<&str>) -> Side {
        let id = std::process::id() % 100_000;
        let side = Side {
            ns: format!("quiver-wg-{tag}-{id}"),
            root: format!("qwg{tag}{id}"),
        };
        run(&[IP, "netns", "add", &side.ns]);
        run(&[
            IP, "link", "add", &side.root, "type", "veth", "peer", "name", "veth0", "netns",
            &side.ns,
        ]);
        let _ = std::fs::write(
            format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", side.root),
            "1",
        );
        run(&[IP, "link", "set", &side.root, "up"]);
        side.ip(&["addr", "add", address, "dev", "veth0"]);
        side.ip(&["link", "set", "veth0", "up"]);
        side.ip(&["link", "set", "lo", "up"]);
        if let Some(gw) = gateway {
            side.ip(&["route", "add", "default", "via", gw]);
        }
        side
    }

    pub(crate) fn ip(&self, args: &[&str]) {
        let mut v = vec![IP, "-n", &self.ns];
        v.extend_from_slice(args);
        run(&v);
    }

    pub(crate) fn exec(&self, args: &[&str]) -> Output {
        let mut v = vec![IP, "netns", "exec", &self.ns];
        v.extend_from_slice(args);
        run(&v)
    }

    /// One ping to `to`: whether a reply came.
    pub(crate) fn ping(&self, to: &str) -> bool {
        Command::new(IP)
            .args([
                "netns", "exec", &self.ns, PING, "-n", "-c", "1", "-W", "2", to,
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        let _ = Command::new(IP).args(["link", "del", &self.root]).output();
        let _ = Command::new(IP).args(["netns", "del", &self.ns]).output();
    }
}

/// The peer on TUN `ifname` in `side`'s namespace, configured with `wg` (10.81.9.2/24 and
/// fd00:81:9::2/64, allowing A's subnets 10.81.1.0/24 and fd00:81:1::/64 and Quiver's
/// 10.81.9.1; Quiver's endpoint 192.168.81.1:51821 unless [`PeerProcess::start_to`] names
/// another); killed on drop.
pub(crate) struct PeerProcess {
    child: Child,
    ns: String,
    ifname: String,
}

impl PeerProcess {
    pub(crate) fn start(
        peer: Peer,
        bin: &std::path::Path,
        side: &Side,
        ifname: &str,
        key_file: &str,
        quiver_public: &str,
    ) -> PeerProcess {
        Self::start_to(
            peer,
            bin,
            side,
            ifname,
            (key_file, quiver_public),
            "192.168.81.1:51821",
        )
    }

    /// As [`PeerProcess::start`], with our key file and Quiver's public key in `keys`, Quiver
    /// at `quiver_endpoint` (`[2001:db8::1]:51821` over an IPv6 underlay).
    pub(crate) fn start_to(
        peer: Peer,
        bin: &std::path::Path,
        side: &Side,
        ifname: &str,
        (key_file, quiver_public): (&str, &str),
        quiver_endpoint: &str,
    ) -> PeerProcess {
        let uapi = format!("/var/run/wireguard/{ifname}.sock");
        // A socket left by an instance before this one would pass for ours.
        let _ = std::fs::remove_file(&uapi);
        let log = format!("/tmp/{ifname}.log");
        let out = std::fs::File::create(&log).expect("log file");
        let cmd = peer.command(bin, ifname, &log);
        let child = Command::new(IP)
            .args(["netns", "exec", &side.ns])
            .args(&cmd)
            .stdout(Stdio::from(out.try_clone().expect("log")))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", peer.name()));
        wait_for(&format!("{} to open {uapi}", peer.name()), 10, || {
            std::path::Path::new(&uapi).exists()
        });
        side.exec(&[
            WG,
            "set",
            ifname,
            "private-key",
            key_file,
            "listen-port",
            "51820",
            "peer",
            quiver_public,
            "allowed-ips",
            "10.81.1.0/24,10.81.9.1/32,fd00:81:1::/64",
            "endpoint",
            quiver_endpoint,
        ]);
        side.ip(&["addr", "add", "10.81.9.2/24", "dev", ifname]);
        // Dual stack: IPv6 inside the tunnel too.
        side.ip(&["addr", "add", "fd00:81:9::2/64", "dev", ifname, "nodad"]);
        side.ip(&["link", "set", ifname, "up"]);
        side.ip(&["route", "add", "10.81.1.0/24", "dev", ifname]);
        side.ip(&["route", "add", "fd00:81:1::/64", "dev", ifname]);
        PeerProcess {
            child,
            ns: side.ns.clone(),
            ifname: ifname.into(),
        }
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its TUN goes with it; a new instance needs the name. (No panic here: this may run
        // while a failed test unwinds.)
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline
            && Command::new(IP)
                .args(["-n", &self.ns, "link", "show", &self.ifname])
                .output()
                .is_ok_and(|o| o.status.success())
        {
            std::thread::yield_now();
        }
    }
}

pub(crate) fn genkey() -> (String, String) {
    let private = String::from_utf8(run(&[WG, "genkey"]).stdout).expect("utf-8");
    let mut p = Command::new(WG)
        .arg("pubkey")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("wg pubkey");
    use std::io::Write;
    p.stdin
        .take()
        .expect("stdin")
        .write_all(private.as_bytes())
        .expect("write");
    let public = p.wait_with_output().expect("wg pubkey output").stdout;
    (
        private.trim().to_string(),
        String::from_utf8(public).expect("utf-8").trim().to_string(),
    )
}

pub(crate) fn errors(f: &Control, node: &str, name: &str) -> u64 {
    f.dataplane()
        .runtime()
        .workers
        .iter()
        .map(|w| w.error(node, name))
        .sum()
}

/// One test at a time: each runs a forwarder and a peer on the same few cores.
pub(crate) static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Packets node `node` handled, over the workers.
#[allow(dead_code)] // not every test binary that shares this module asks
pub(crate) fn node_packets(f: &Control, node: &str) -> u64 {
    f.dataplane()
        .runtime()
        .workers
        .iter()
        .map(|w| w.node(node).map_or(0, |n| n.packets))
        .sum()
}

/// Quiver for `cfg` on two workers (on the machine's first two CPUs, or its one), 8192
/// buffers on ordinary pages, its configuration owner committing every millisecond.
#[allow(dead_code)] // not every test binary that shares this module asks
pub(crate) fn start_forwarder(cfg: &quiver::Config) -> quiver::control::owner::ConfigOwner {
    use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, IdlePolicy, WorkerConfig};
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 8192,
        hugepages: HugepagePolicy::Never,
        ..BufferPoolConfig::default()
    })
    .unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = WorkerConfig {
        cores: (0..2).map(|w| w % cores).collect(),
        idle: IdlePolicy::ADAPTIVE,
    };
    quiver::control::owner::ConfigOwner::start(
        quiver::Forwarder::start(cfg, &workers, pool).unwrap(),
        Duration::from_millis(1),
    )
}
