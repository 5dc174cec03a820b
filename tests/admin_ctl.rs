//! `quiver ctl` as a user runs it: the real `quiver` binary serves its admin socket, and every
//! check runs `quiver ctl … --json` as a subprocess and reads what it printed. Traffic comes
//! from memif CNFs built on our memif crate, connected to Quiver's memif ports (no root needed).

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use memif::{InterfaceConfig, Slave, SocketAddress};
use serde_json::Value;
use testkit::{require, wait_for, Needs};

/// A directory of this test's sockets and files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("quiver-ctl-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The quiver daemon with its stderr collected; killed on drop.
struct Quiver {
    child: Child,
    stderr: Arc<Mutex<String>>,
    socket: PathBuf,
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
            t.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

/// The configuration: two memif masters on `memif_socket` (ids 0 and 1), routed.
fn config(memif_socket: &Path) -> String {
    format!(
        r#"
[dataplane]
cores = [1]
idle = "adaptive"
[buffers]
count = 4096
hugepages = "never"
[stats]
interval_secs = 0
[[port]]
name = "memif0"
type = "memif"
role = "master"
socket = "{s}"
id = 0
[[port]]
name = "memif1"
type = "memif"
role = "master"
socket = "{s}"
id = 1
[[address]]
port = "memif0"
ip = "10.0.0.1/24"
[[address]]
port = "memif1"
ip = "10.0.1.1/24"
"#,
        s = memif_socket.display()
    )
}

impl Quiver {
    /// Starts `quiver run` with `config` and the admin socket `socket`; does not wait.
    fn spawn(dir: &Scratch, name: &str, config: &str, socket: &Path) -> Quiver {
        Quiver::spawn_with(dir, name, config, socket, |_| {})
    }

    /// [`Quiver::spawn`] with more arguments or environment set by `more`.
    fn spawn_with(
        dir: &Scratch,
        name: &str,
        config: &str,
        socket: &Path,
        more: impl FnOnce(&mut Command),
    ) -> Quiver {
        let path = dir.path(&format!("{name}.toml"));
        std::fs::write(&path, config).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_quiver"));
        cmd.args(["run", "--config"])
            .arg(&path)
            .arg("--admin-socket")
            .arg(socket);
        more(&mut cmd);
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start quiver");
        let stderr = collect(child.stderr.take().unwrap());
        Quiver {
            child,
            stderr,
            socket: socket.to_path_buf(),
        }
    }

    /// Starts `quiver run` and waits until its admin API listens.
    fn start(dir: &Scratch, name: &str, config: &str, socket: &Path) -> Quiver {
        let mut q = Quiver::spawn(dir, name, config, socket);
        q.wait_log("admin API listening");
        q
    }

    /// Waits until quiver has logged `text`.
    fn wait_log(&mut self, text: &str) {
        wait_for(text, 30, || {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("quiver exited ({st}):\n{}", self.stderr.lock().unwrap());
            }
            self.stderr.lock().unwrap().contains(text)
        });
    }

    /// Runs `quiver ctl --socket <ours> args…`.
    fn ctl(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_quiver"))
            .arg("ctl")
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run quiver ctl")
    }

    /// Runs `quiver ctl args… --json`, which must succeed, and parses what it printed.
    fn json(&self, args: &[&str]) -> Value {
        let mut v = args.to_vec();
        v.push("--json");
        let out = self.ctl(&v);
        assert!(
            out.status.success(),
            "quiver ctl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "quiver ctl {args:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// Runs a `quiver ctl` command that must fail; returns its message.
    fn refused(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !out.status.success(),
            "quiver ctl {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(out.stdout.is_empty(), "{args:?} printed a result");
        err
    }
}

impl Drop for Quiver {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A memif CNF: the slave end of one of Quiver's memif ports.
struct Cnf(Slave);

impl Cnf {
    fn connect(socket: &Path, id: u32) -> Cnf {
        Cnf(Slave::new(
            SocketAddress::Path(socket.to_path_buf()),
            InterfaceConfig::new(id),
        )
        .unwrap())
    }

    fn poll(&mut self) {
        self.0.poll().unwrap();
    }

    fn is_up(&mut self) -> bool {
        self.poll();
        self.0.interface().is_up()
    }

    /// Sends every frame (retrying while the ring is full).
    fn send(&mut self, frames: &[Vec<u8>]) {
        let mut sent = 0;
        wait_for("frames to be sent", 30, || {
            self.poll();
            let refs: Vec<&[u8]> = frames[sent..].iter().map(|f| &f[..]).collect();
            sent += self.0.interface_mut().tx_burst(0, &refs);
            sent == frames.len()
        });
    }

    /// Every frame received now.
    fn receive(&mut self, into: &mut Vec<Vec<u8>>) {
        self.poll();
        self.0
            .interface_mut()
            .rx_burst(0, 256, &mut |f: &[u8]| into.push(f.to_vec()));
    }
}

fn entries<'a>(v: &'a Value, key: &str, value: &str) -> Vec<&'a Value> {
    v.as_array()
        .expect("a JSON array")
        .iter()
        .filter(|e| e[key] == value)
        .collect()
}

fn one<'a>(v: &'a Value, key: &str, value: &str) -> &'a Value {
    let found = entries(v, key, value);
    assert_eq!(found.len(), 1, "one entry with {key} = {value} in {v:#}");
    found[0]
}

fn node_packets(runtime: &Value, node: &str) -> u64 {
    runtime["workers"][0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .unwrap_or_else(|| panic!("no node {node} in {runtime:#}"))["packets"]
        .as_u64()
        .unwrap()
}

fn mac_bytes(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// An Ethernet/IPv4/UDP frame from 10.0.0.2 to `dst`, for MAC `to`.
fn udp(to: [u8; 6], dst: [u8; 4], seq: u16) -> Vec<u8> {
    let mut f = quiver::demo::udp_frame(100, u32::from_be_bytes(dst), 64, seq);
    f[0..6].copy_from_slice(&to);
    f
}

#[test]
fn quiver_ctl_shows_and_changes_a_running_quiver() {
    let dir = Scratch::new("main");
    let memif_socket = dir.path("memif.sock");
    let admin = dir.path("run/admin.sock");
    let mut q = Quiver::start(&dir, "main", &config(&memif_socket), &admin);

    // The socket: created with its directory, mode 0660.
    let meta = std::fs::metadata(&admin).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);

    let ifs = q.json(&["show", "interfaces"]);
    let memif0 = one(&ifs, "name", "memif0");
    assert_eq!(memif0["type"], "memif");
    assert_eq!(memif0["mode"], "l3");
    assert_eq!(memif0["addresses"], serde_json::json!(["10.0.0.1/24"]));
    let memif0_mac = mac_bytes(memif0["mac"].as_str().unwrap());
    one(&ifs, "name", "memif1");

    // A route: shown, unresolved until its next hop is a neighbour, then deleted.
    assert!(entries(&q.json(&["show", "fib"]), "prefix", "10.9.0.0/16").is_empty());
    q.json(&["route", "add", "10.9.0.0/16", "--via", "10.0.1.2@memif1"]);
    let fib = q.json(&["show", "fib"]);
    let route = one(&fib, "prefix", "10.9.0.0/16");
    assert_eq!(route["source"], "static");
    assert_eq!(
        route["paths"],
        serde_json::json!([{"kind": "arp", "next_hop": "10.0.1.2", "interface": "memif1"}])
    );
    q.json(&["neighbor", "add", "memif1", "10.0.1.2", "02:00:00:00:01:02"]);
    let n = q.json(&["show", "neighbors"]);
    assert_eq!(one(&n, "ip", "10.0.1.2")["mac"], "02:00:00:00:01:02");
    assert_eq!(one(&n, "ip", "10.0.1.2")["interface"], "memif1");
    let fib = q.json(&["show", "fib"]);
    assert_eq!(
        one(&fib, "prefix", "10.9.0.0/16")["paths"][0]["kind"],
        "rewrite"
    );
    q.json(&["route", "del", "10.9.0.0/16"]);
    assert!(entries(&q.json(&["show", "fib"]), "prefix", "10.9.0.0/16").is_empty());
    let err = q.refused(&["route", "del", "10.9.0.0/16"]);
    assert!(err.contains("not found: no route 10.9.0.0/16"), "{err}");

    // Bad requests: a clear message, a non-zero exit, nothing changed.
    let fib_before = q.json(&["show", "fib"]);
    let neighbors_before = q.json(&["show", "neighbors"]);
    let xc_before = q.json(&["show", "cross-connects"]);
    for (args, expected) in [
        (
            &["route", "add", "10.9.0.0/33", "--via", "10.0.1.2@memif1"][..],
            "invalid argument: prefix `10.9.0.0/33`",
        ),
        (
            &["route", "add", "10.9.0.0/16", "--via", "10.0.1.2@nosuch"],
            "not found: no port named `nosuch`",
        ),
        (
            &["route", "add", "10.9.0.0/16", "--via", "10.0.1.300@memif1"],
            "invalid argument: next hop `10.0.1.300`",
        ),
        (
            &["neighbor", "add", "nosuch", "10.0.1.3", "02:00:00:00:01:03"],
            "not found: no port named `nosuch`",
        ),
        (
            &["neighbor", "add", "memif1", "10.0.1.3", "02:00:00:00:01"],
            "invalid argument: `02:00:00:00:01` is not a MAC address",
        ),
        (&["xconnect", "add", "memif0", "nosuch"], "not found"),
        (&["xconnect", "add", "memif0", "memif0"], "invalid argument"),
        (&["xconnect", "del", "memif0"], "not found"),
        (&["interface", "del", "nosuch"], "not found"),
        (
            &["trace", "add", "nosuch-input", "5"],
            "not found: no input node named `nosuch-input`",
        ),
    ] {
        let err = q.refused(args);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    assert_eq!(q.json(&["show", "fib"]), fib_before);
    assert_eq!(q.json(&["show", "neighbors"]), neighbors_before);
    assert_eq!(q.json(&["show", "cross-connects"]), xc_before);

    // Traffic: CNF a on memif0 sends to 10.9.0.0/16, routed out of memif1 to CNF b.
    q.json(&["route", "add", "10.9.0.0/16", "--via", "10.0.1.2@memif1"]);
    let mut a = Cnf::connect(&memif_socket, 0);
    let mut b = Cnf::connect(&memif_socket, 1);
    wait_for("both CNFs' links", 30, || a.is_up() & b.is_up());
    q.wait_log("memif link up port=memif0");
    q.wait_log("memif link up port=memif1");
    q.json(&["clear", "counters"]);
    q.json(&["trace", "add", "port-input", "5"]);
    const N: usize = 100;
    let frames: Vec<Vec<u8>> = (0..N as u16)
        .map(|i| udp(memif0_mac, [10, 9, 0, 5], i))
        .collect();
    a.send(&frames);
    let mut got = Vec::new();
    wait_for("the routed frames at CNF b", 30, || {
        a.poll();
        b.receive(&mut got);
        got.len() >= N
    });
    assert_eq!(got.len(), N);
    for f in &got {
        assert_eq!(f[0..6], [2, 0, 0, 0, 1, 2], "to the neighbour's MAC");
        assert_eq!(f[22], 63, "TTL decremented");
        assert_eq!(f[30..34], [10, 9, 0, 5]);
    }

    let rt = q.json(&["show", "runtime"]);
    for node in [
        "port-input",
        "ethernet-input",
        "ip4-input",
        "ip4-lookup",
        "ip4-rewrite",
    ] {
        assert_eq!(node_packets(&rt, node), N as u64, "{node}: {rt:#}");
    }
    let per_worker = q.json(&["show", "runtime", "--per-worker"]);
    assert_eq!(per_worker["workers"][0]["worker"], 0);
    assert_eq!(per_worker["workers"][0]["core"], 1);
    let ifs = q.json(&["show", "interfaces"]);
    assert_eq!(one(&ifs, "name", "memif0")["rx_packets"], N as u64);
    assert_eq!(one(&ifs, "name", "memif1")["tx_packets"], N as u64);
    let memifs = q.json(&["show", "memif"]);
    let m1 = one(&memifs, "name", "memif1");
    assert_eq!(m1["role"], "master");
    assert_eq!(m1["socket"], memif_socket.display().to_string());
    assert_eq!(m1["id"], 1);
    assert_eq!(m1["link"], "up");
    assert_eq!(m1["ring_size"], 1024);
    assert_eq!(m1["tx_packets"], N as u64);

    // The trace: the first 5 packets, each through the routing nodes, with its bytes.
    let trace = q.json(&["show", "trace"]);
    let packets = trace.as_array().unwrap();
    assert_eq!(packets.len(), 5, "{trace:#}");
    for p in packets {
        let nodes: Vec<&str> = p["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        assert_eq!(
            nodes[..5],
            [
                "port-input",
                "ethernet-input",
                "ip4-input",
                "ip4-lookup",
                "ip4-rewrite"
            ],
            "{p:#}"
        );
        let lines = p["lines"].to_string();
        assert!(lines.contains("0a090005"), "the destination's bytes: {p:#}");
    }
    q.json(&["clear", "trace"]);
    assert_eq!(q.json(&["show", "trace"]), serde_json::json!([]));

    // Errors count per node and reason: frames for an address with no route.
    let before = q.json(&["show", "errors"]);
    let no_route = |v: &Value| {
        entries(v, "reason", "no-route")
            .iter()
            .map(|e| e["count"].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!(no_route(&before), 0);
    a.send(&[udp(memif0_mac, [192, 0, 2, 1], 7)]);
    wait_for("the no-route drop", 30, || {
        a.poll();
        no_route(&q.json(&["show", "errors"])) == 1
    });

    // Clearing zeroes runtime, error and interface counters.
    q.json(&["clear", "counters"]);
    let rt = q.json(&["show", "runtime"]);
    for node in ["ethernet-input", "ip4-lookup", "ip4-rewrite"] {
        assert_eq!(node_packets(&rt, node), 0, "{node}: {rt:#}");
    }
    assert_eq!(no_route(&q.json(&["show", "errors"])), 0);
    let ifs = q.json(&["show", "interfaces"]);
    assert_eq!(one(&ifs, "name", "memif0")["rx_packets"], 0);
    assert_eq!(one(&ifs, "name", "memif1")["tx_packets"], 0);

    // Interfaces and a cross-connect added at run time carry traffic; deleting them leaves
    // nothing.
    let memif_socket2 = dir.path("memif2.sock");
    let s2 = memif_socket2.to_str().unwrap();
    let added = q.json(&[
        "interface",
        "add",
        "memif",
        "memif2",
        "--memif-socket",
        s2,
        "--id",
        "0",
    ]);
    assert!(added["index"].is_u64(), "{added}");
    q.json(&[
        "interface",
        "add",
        "memif",
        "memif3",
        "--memif-socket",
        s2,
        "--id",
        "1",
    ]);
    let err = q.refused(&[
        "interface",
        "add",
        "memif",
        "memif3",
        "--memif-socket",
        s2,
        "--id",
        "2",
    ]);
    assert!(err.contains("already exists"), "{err}");
    let err = q.refused(&[
        "interface",
        "add",
        "memif",
        "memif4",
        "--memif-socket",
        s2,
        "--id",
        "1",
    ]);
    assert!(err.contains("already exists"), "{err}");
    let err = q.refused(&[
        "interface",
        "add",
        "memif",
        "memif4",
        "--memif-socket",
        s2,
        "--id",
        "4",
        "--role",
        "boss",
    ]);
    assert!(err.contains("invalid argument: memif role `boss`"), "{err}");
    q.json(&["xconnect", "add", "memif2", "memif3"]);
    let xc = q.json(&["show", "cross-connects"]);
    assert_eq!(
        xc,
        serde_json::json!([{"a": "memif2", "b": "memif3", "kind": "l2", "peer_a": "", "peer_b": ""}])
    );
    let ifs = q.json(&["show", "interfaces"]);
    assert_eq!(one(&ifs, "name", "memif2")["mode"], "l2");
    assert_eq!(one(&ifs, "name", "memif3")["type"], "memif");
    let m2 = one(&q.json(&["show", "memif"]), "name", "memif2").clone();
    assert_eq!(m2["socket"], s2);
    assert_eq!(m2["id"], 0);
    let mut c = Cnf::connect(&memif_socket2, 0);
    let mut d = Cnf::connect(&memif_socket2, 1);
    wait_for("the new CNFs' links", 30, || c.is_up() & d.is_up());
    q.wait_log("memif link up port=memif2");
    q.wait_log("memif link up port=memif3");
    let frames: Vec<Vec<u8>> = (0..50u16)
        .map(|i| udp([2, 0, 0, 0, 0, 0xdd], [10, 7, 0, 1], i))
        .collect();
    c.send(&frames);
    let mut got = Vec::new();
    wait_for("the cross-connected frames at CNF d", 30, || {
        c.poll();
        d.receive(&mut got);
        got.len() >= frames.len()
    });
    assert_eq!(got, frames, "untouched, in order");
    q.json(&["xconnect", "del", "memif3"]);
    assert_eq!(q.json(&["show", "cross-connects"]), serde_json::json!([]));
    q.json(&["interface", "del", "memif2"]);
    q.json(&["interface", "del", "memif3"]);
    let ifs = q.json(&["show", "interfaces"]);
    assert!(entries(&ifs, "name", "memif2").is_empty());
    assert!(entries(&ifs, "name", "memif3").is_empty());
    assert_eq!(ifs.as_array().unwrap().len(), 2);

    // NSM connections: none here.
    assert_eq!(q.json(&["show", "connections"]), serde_json::json!([]));

    // The human tables name what the JSON does.
    let out = q.ctl(&["show", "interfaces"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("Name "), "{text}");
    assert!(text.lines().any(|l| l.starts_with("memif1 ")), "{text}");

    // Stopping removes the socket.
    let pid = nix::unistd::Pid::from_raw(q.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = q.child.wait().unwrap();
    assert!(status.success(), "{}", q.stderr.lock().unwrap());
    assert!(!admin.exists(), "the admin socket is removed on exit");
    drop(a);
    drop(b);
}

/// `quiver ctl health`, the container's and Kubernetes' probe: it answers for the admin API, and
/// with `--nsm-socket` for the NSM services (both SERVING); it fails when nothing serves.
#[test]
fn health_answers_for_the_admin_api_and_the_nsm_services() {
    let dir = Scratch::new("health");
    let admin = dir.path("admin.sock");
    let nsm = dir.path("nsm.sock");
    let nsm_arg = nsm.to_str().unwrap().to_string();
    let health = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_quiver"))
            .args(["ctl", "--socket"])
            .arg(&admin)
            .arg("health")
            .args(args)
            .output()
            .expect("run quiver ctl health")
    };
    // Nothing runs yet: both checks fail.
    assert!(!health(&[]).status.success());
    assert!(!health(&["--nsm-socket", &nsm_arg]).status.success());

    let mut q = Quiver::spawn_with(&dir, "q", &config(&dir.path("m.sock")), &admin, |c| {
        c.arg("--nsm")
            .env("NSM_LISTEN_ON", format!("unix://{}", nsm.display()))
            .env_remove("NSM_CONNECT_TO");
    });
    q.wait_log("admin API listening");
    let out = health(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("the NSM socket", 30, || nsm.exists());
    let out = health(&["--nsm-socket", &nsm_arg, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["serving"],
        serde_json::json!([
            "networkservice.NetworkService",
            "connection.MonitorConnection"
        ])
    );
    // The unix:// form works too.
    let url = format!("unix://{nsm_arg}");
    assert!(health(&["--nsm-socket", &url]).status.success());

    q.child.kill().unwrap();
    q.child.wait().unwrap();
    let out = health(&["--nsm-socket", &nsm_arg]);
    assert!(!out.status.success(), "healthy after the server died");
}

#[test]
fn a_live_admin_socket_is_refused_and_a_stale_one_replaced() {
    let dir = Scratch::new("socket");
    let admin = dir.path("admin.sock");
    let mut first = Quiver::start(&dir, "first", &config(&dir.path("m1.sock")), &admin);
    let mut second = Quiver::spawn(&dir, "second", &config(&dir.path("m2.sock")), &admin);
    let status = second.child.wait().unwrap();
    assert!(
        !status.success(),
        "a second quiver on a live socket must fail"
    );
    wait_for("the second quiver's message", 10, || {
        second
            .stderr
            .lock()
            .unwrap()
            .contains("is in use by a running process")
    });
    // The first still serves.
    one(&first.json(&["show", "interfaces"]), "name", "memif0");

    // Killed without a chance to clean up, it leaves a stale socket behind …
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert!(std::fs::metadata(&admin).unwrap().file_type().is_socket());
    let err = first.refused(&["show", "interfaces"]);
    assert!(err.contains("cannot connect"), "{err}");
    // … which the next quiver replaces.
    let third = Quiver::start(&dir, "third", &config(&dir.path("m3.sock")), &admin);
    one(&third.json(&["show", "interfaces"]), "name", "memif1");
    let mode = std::fs::metadata(&admin).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
}

#[test]
fn an_af_packet_interface_is_added_and_deleted_at_run_time() {
    let needs = Needs {
        root: true,
        hugepages: 0,
        tools: &["/usr/sbin/ip"],
    };
    if !require(
        "an_af_packet_interface_is_added_and_deleted_at_run_time",
        &needs,
    ) {
        return;
    }
    let dir = Scratch::new("afp");
    let veth = format!("qctl{}", std::process::id() % 100_000);
    let peer = format!("{veth}p");
    let ip = |args: &[&str]| {
        let out = Command::new("/usr/sbin/ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer]);
    struct Remove(String);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = Command::new("/usr/sbin/ip")
                .args(["link", "del", &self.0])
                .output();
        }
    }
    let _cleanup = Remove(veth.clone());
    ip(&["link", "set", &veth, "up"]);
    ip(&["link", "set", &peer, "up"]);
    let q = Quiver::start(
        &dir,
        "afp",
        &config(&dir.path("m.sock")),
        &dir.path("admin.sock"),
    );
    let added = q.json(&[
        "interface",
        "add",
        "af-packet",
        "host0",
        "--host-interface",
        &veth,
    ]);
    assert!(added["index"].is_u64(), "{added}");
    let ifs = q.json(&["show", "interfaces"]);
    let host0 = one(&ifs, "name", "host0");
    assert_eq!(host0["type"], "af_packet");
    let err = q.refused(&[
        "interface",
        "add",
        "af-packet",
        "host1",
        "--host-interface",
        "no-such-if0",
    ]);
    assert!(err.contains("no-such-if0"), "{err}");
    assert!(entries(&q.json(&["show", "interfaces"]), "name", "host1").is_empty());
    q.json(&["interface", "del", "host0"]);
    assert!(entries(&q.json(&["show", "interfaces"]), "name", "host0").is_empty());
}
