//! What the NSM end-to-end tests share: network namespaces, child processes killed when a test
//! fails, the memif example CNF `traffic` and its JSON report, mechanisms, a scratch
//! directory.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, IdlePolicy, WorkerConfig};
use drivers::LinkStatus;
use nsm_forwarder::path::timestamp;
use nsm_forwarder::testing::TestEndpoint;
use nsm_forwarder::{NsmConfig, NsmHandle, StaticEndpoint};
use nsm_proto::connection::{self, Connection, Mechanism, PathSegment};
use quiver::control::nsm::ForwarderDataplane;
use quiver::control::owner::{ConfigOwner, Control};
use quiver::{Config, Forwarder};
use testkit::{require, Needs};

pub mod kernel;
pub mod nodes;

/// `ip` (iproute2).
pub const IP: &str = "/usr/sbin/ip";
/// `ping` (iputils).
pub const PING: &str = "/usr/bin/ping";

/// Runs `args` and insists that it succeeds.
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

/// A named network namespace (with `lo` up), deleted on drop.
pub struct Netns(pub String);

impl Netns {
    /// `quiver-nsm-<tag>-<pid>`.
    pub fn new(tag: &str) -> Netns {
        let ns = Netns(format!("quiver-nsm-{tag}-{}", std::process::id()));
        run(&[IP, "netns", "add", &ns.0]);
        run(&[IP, "-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }

    /// Its path under /var/run/netns.
    pub fn path(&self) -> String {
        format!("/var/run/netns/{}", self.0)
    }

    /// NSM's `file://` URL of it.
    pub fn url(&self) -> String {
        format!("file://{}", self.path())
    }

    /// Whether it has a link called `name`.
    pub fn has_link(&self, name: &str) -> bool {
        Command::new(IP)
            .args(["-n", &self.0, "link", "show", name])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// The neighbour entry for `ip` on `dev`, as `ip neigh` shows it ("" when none).
    pub fn neighbor(&self, dev: &str, ip: &str) -> String {
        let out = run(&[IP, "-n", &self.0, "neigh", "show", ip, "dev", dev]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// One echo to `to` with `ttl`: its reply line when it came back.
    pub fn ping_reply(&self, to: &str, ttl: u8) -> Option<String> {
        let ttl = ttl.to_string();
        let out = Command::new(IP)
            .args([
                "netns", "exec", &self.0, PING, "-n", "-c", "1", "-W", "1", "-t", &ttl, to,
            ])
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.contains("bytes from"))
            .map(str::to_string)
    }

    /// The namespace's `net.ipv4.ping_group_range` as `sysctl -n` prints it.
    pub fn ping_group_range(&self) -> String {
        let out = run(&[
            IP,
            "netns",
            "exec",
            &self.0,
            "cat",
            "/proc/sys/net/ipv4/ping_group_range",
        ]);
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Whether one echo to `to` comes back.
    pub fn ping(&self, to: &str) -> bool {
        self.ping_reply(to, 64).is_some()
    }

    /// Starts `exe args…` inside the namespace, stdout and stderr collected.
    pub fn spawn(&self, exe: &Path, args: &[&str]) -> Child {
        Command::new(IP)
            .args(["netns", "exec", &self.0])
            .arg(exe)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new(IP).args(["netns", "del", &self.0]).output();
    }
}

/// A scratch directory for sockets, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `<tmp>/quiver-<tag>-<pid>`.
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("quiver-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process, killed if the test fails before waiting for it.
pub struct Killed(pub Option<Child>);

impl Killed {
    /// Waits for it to end and collects its output.
    pub fn wait(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Builds the memif examples (same profile as this test) and returns `traffic`'s path.
pub fn traffic_example() -> PathBuf {
    memif_example("traffic")
}

/// Builds the memif crate's example `name` (same profile as these tests) and returns its path.
pub fn memif_example(name: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "-p",
        "memif",
        "--example",
        name,
        "--message-format=json-render-diagnostics",
    ])
    .current_dir(env!("CARGO_MANIFEST_DIR"))
    .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd.output().expect("run cargo build --example");
    assert!(out.status.success(), "cargo build --example {name} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| {
            (v["reason"] == "compiler-artifact" && v["target"]["name"] == name)
                .then(|| v["executable"].as_str().map(PathBuf::from))
                .flatten()
        })
        .unwrap_or_else(|| panic!("cargo said where {name} is"))
}

pub fn traffic_report(o: &Output) -> serde_json::Value {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON report: {o:?}"))
}

/// A LOCAL mechanism of type `ty`.
pub fn mech(ty: &str, params: &[(&str, &str)]) -> Mechanism {
    Mechanism {
        cls: "LOCAL".into(),
        r#type: ty.into(),
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
    }
}

/// A KERNEL mechanism for interface `name` in the namespace `inode_url` names, as an endpoint
/// offers it.
pub fn kernel_mech(inode_url: &str, name: &str) -> Vec<Mechanism> {
    vec![mech("KERNEL", &[("inodeURL", inode_url), ("name", name)])]
}

/// The NSE's memif CNF: `traffic` in `nse`, master on socket `socket` (`@name` abstract, in
/// `nse`, or a filesystem path), counting
/// `frames` frames (it ends early when every frame came; otherwise 30 s bounds the wait).
pub fn memif_sink(traffic: &Path, nse: &Netns, socket: &str, frames: u64) -> Killed {
    let count = frames.to_string();
    Killed(Some(nse.spawn(
        traffic,
        &[
            "--rx",
            socket,
            "--rx-role",
            "master",
            "--count",
            &count,
            "--duration",
            "30s",
            "--connect-timeout",
            "60s",
            "--json",
        ],
    )))
}

/// The NSC's memif CNF: `traffic` in `nsc`, slave on socket `socket` (the one Quiver answered
/// with), sending `frames` frames at `rate` (slow enough that no ring on the way fills: a full
/// ring drops, by design).
pub fn memif_source(traffic: &Path, nsc: &Netns, socket: &str, frames: u64, rate: &str) -> Killed {
    let count = frames.to_string();
    Killed(Some(nsc.spawn(
        traffic,
        &[
            "--tx",
            socket,
            "--tx-role",
            "slave",
            "--count",
            &count,
            "--rate",
            rate,
            "--connect-timeout",
            "60s",
            "--json",
        ],
    )))
}

/// A test endpoint on `sock` answering with a MEMIF mechanism: socket `socket` in `nse`.
pub fn memif_endpoint(sock: &Path, nse: &Netns, socket: &str) -> TestEndpoint {
    TestEndpoint::start(
        sock,
        "nse",
        vec![mech(
            "MEMIF",
            &[("inodeURL", &nse.url()), ("socketfile", socket)],
        )],
    )
    .unwrap()
}

/// Whether port `port` of `fwd` has its link up.
pub fn link_up(fwd: &Control, port: &str) -> bool {
    fwd.view()
        .ports()
        .iter()
        .any(|e| e.name == port && e.port.link() == LinkStatus::Up)
}

/// A connection as an NSC first Requests it: id `id`, network service `service`, endpoint
/// `nse`, ETHERNET payload, a path of the NSC's one segment valid for 10 minutes.
pub fn nsc_connection(id: &str, service: &str) -> Connection {
    Connection {
        id: id.into(),
        network_service: service.into(),
        network_service_endpoint_name: "nse".into(),
        payload: "ETHERNET".into(),
        path: Some(connection::Path {
            index: 0,
            path_segments: vec![PathSegment {
                name: "nsc".into(),
                id: id.into(),
                expires: Some(timestamp(SystemTime::now() + Duration::from_secs(600))),
                ..Default::default()
            }],
        }),
        ..Default::default()
    }
}

/// What the kernel-mechanism tests start from: the NSC's and the NSE's namespaces, a scratch
/// directory and the forwarder (whose data paths get the test's KERNEL backend).
pub struct KernelTest {
    /// The NSC's namespace.
    pub nsc: Netns,
    /// The NSE's namespace.
    pub nse: Netns,
    /// The scratch directory (sockets).
    pub dir: TempDir,
    /// The forwarder.
    pub quiver: TestForwarder,
}

impl KernelTest {
    /// Starts `test` as root with `tools`: namespaces tagged `nsc` and `nse`, a directory
    /// tagged `dir`, the forwarder. `None` (the reason printed by [`require`]) when it cannot
    /// run here.
    pub fn start(
        test: &str,
        tools: &'static [&'static str],
        [nsc, nse, dir]: [&str; 3],
    ) -> Option<KernelTest> {
        if !require(
            test,
            &Needs {
                root: true,
                tools,
                ..Needs::default()
            },
        ) {
            return None;
        }
        Some(KernelTest {
            nsc: Netns::new(nsc),
            nse: Netns::new(nse),
            dir: TempDir::new(dir),
            quiver: TestForwarder::start(""),
        })
    }

    /// [`KernelTest::start`] for one run of a test per KERNEL backend ([`kernel::per_backend!`]):
    /// the test's name and tags carry the backend ([`kernel::tag`]), and the forwarder's data
    /// paths get it: TAP by leaving the default, veth by setting it.
    pub fn with_backend(
        backend: kernel::KernelBackend,
        test: &str,
        tools: &'static [&'static str],
        tags: [&str; 3],
    ) -> Option<KernelTest> {
        let t = kernel::tag(backend);
        let mut kt = KernelTest::start(
            &format!("{test}::{t}"),
            tools,
            tags.map(|tag| format!("{tag}-{t}"))
                .each_ref()
                .map(String::as_str),
        )?;
        if backend != kernel::KernelBackend::default() {
            kt.quiver.kernel_backend = Some(backend);
        }
        Some(kt)
    }
}

/// The real forwarder as the NSM tests run it: `quiver.toml` with buffers in ordinary pages
/// plus `extra`, one worker on core 0, owned by its configuration owner as in the daemon
/// (housekeeping every millisecond).
pub struct TestForwarder {
    /// The owner's handle, as `quiver run`'s control plane has it.
    pub fwd: Control,
    /// The KERNEL backend [`TestForwarder::dataplane`] sets (`None`: the data path's default).
    pub kernel_backend: Option<nsm_forwarder::config::KernelBackend>,
    pool: Arc<BufferPool>,
    start_free: usize,
    owner: ConfigOwner,
}

impl TestForwarder {
    /// Starts it with `extra` appended to its `quiver.toml`.
    pub fn start(extra: &str) -> TestForwarder {
        let cfg = Config::parse(&format!("[buffers]\nhugepages = \"never\"\n{extra}")).unwrap();
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers: 16384,
            hugepages: HugepagePolicy::Never,
            ..BufferPoolConfig::default()
        })
        .unwrap();
        let start_free = pool.free_count();
        let workers = WorkerConfig {
            cores: vec![0],
            idle: IdlePolicy::ADAPTIVE,
        };
        let owner = ConfigOwner::start(
            Forwarder::start(&cfg, &workers, pool.clone()).unwrap(),
            Duration::from_millis(1),
        );
        TestForwarder {
            fwd: owner.control(),
            kernel_backend: None,
            pool,
            start_free,
            owner,
        }
    }

    /// The NSM data path over it, with [`TestForwarder::kernel_backend`] set if there is one.
    pub fn dataplane(&self) -> Arc<ForwarderDataplane> {
        let dp = ForwarderDataplane::new(self.fwd.clone());
        if let Some(b) = self.kernel_backend {
            dp.set_kernel_backend(b).expect("a new data path");
        }
        dp
    }

    /// Serves NSM as `name` on `listen` over `dp`, sending every Request on to `next` (the
    /// endpoint's or the nsmgrs' URL), with `tunnel_ip` for VXLAN. Other Quivers' tagged veths
    /// may share this host: nothing is reconciled at start.
    pub fn serve(
        &self,
        dp: Arc<ForwarderDataplane>,
        name: &str,
        listen: &str,
        tunnel_ip: Option<IpAddr>,
        next: String,
    ) -> NsmHandle {
        self.serve_with(dp, name, listen, tunnel_ip, next, |_| {})
    }

    /// [`TestForwarder::serve`], the configuration changed by `configure` first.
    pub fn serve_with(
        &self,
        dp: Arc<ForwarderDataplane>,
        name: &str,
        listen: &str,
        tunnel_ip: Option<IpAddr>,
        next: String,
        configure: impl FnOnce(&mut NsmConfig),
    ) -> NsmHandle {
        let mut cfg = NsmConfig {
            name: name.into(),
            listen_on: listen.into(),
            tunnel_ip,
            reconcile_at_start: false,
            ..NsmConfig::default()
        };
        configure(&mut cfg);
        NsmHandle::spawn(cfg, dp, Arc::new(StaticEndpoint(next)), 1).unwrap()
    }

    /// Serves NSM as `quiver` on `dir`'s `quiver.sock` over a new data path, sending every
    /// Request on to the endpoint on `dir`'s `nse.sock`: the URL it listens on, the data path
    /// and the server.
    pub fn serve_in(&self, dir: &TempDir) -> (String, Arc<ForwarderDataplane>, NsmHandle) {
        let listen = format!("unix://{}", dir.join("quiver.sock").display());
        let dp = self.dataplane();
        let server = self.serve(
            dp.clone(),
            "quiver",
            &listen,
            None,
            format!("unix://{}", dir.join("nse.sock").display()),
        );
        (listen, dp, server)
    }

    /// Stops the forwarder (drop the servers first); every buffer must be back in the pool.
    pub fn stop(self) {
        self.owner.stop().unwrap().stop();
        assert_eq!(
            self.pool.free_count(),
            self.start_free,
            "every buffer is back"
        );
    }
}
