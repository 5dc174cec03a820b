//! What the tests of the `quiver` binary (`metrics.rs`, `capture.rs`, `admin_ctl.rs`,
//! `dpdk_tap.rs`, `memif_testpmd.rs`) share: a scratch directory, the real `quiver run` as a
//! child process with its output collected, `quiver ctl` against it, and a memif CNF on our memif
//! crate as a traffic peer (no root needed).

#![allow(dead_code)]

pub mod side;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memif::{InterfaceConfig, Slave, SocketAddress};
use serde_json::Value;
use testkit::{interrupt, wait_for};

/// A directory of one test's sockets and files, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh directory for test `name`.
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("quiver-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// A path inside it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two memif masters on `memif_socket` (ids 0 and 1), memif0 10.0.0.1/24 and memif1
/// 10.0.1.1/24. `more` is appended.
pub fn memif_pair_config(memif_socket: &Path, more: &str) -> String {
    format!(
        r#"
[dataplane]
cores = [1]
idle = "adaptive"
[buffers]
count = 4096
hugepages = "never"
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
{more}
"#,
        s = memif_socket.display()
    )
}

/// [`memif_pair_config`], routed: 10.9.0.0/16 via CNF b (10.0.1.2, a static neighbour) on
/// memif1. `more` is appended.
pub fn routed_config(memif_socket: &Path, more: &str) -> String {
    memif_pair_config(
        memif_socket,
        &format!(
            r#"[[neighbor]]
port = "memif1"
ip = "10.0.1.2"
mac = "02:00:00:00:01:02"
[[route]]
prefix = "10.9.0.0/16"
via = ["10.0.1.2@memif1"]
{more}"#
        ),
    )
}

/// The quiver daemon with its stdout and stderr collected as it runs; killed on drop.
pub struct Quiver {
    pub child: Child,
    /// What it printed on stdout: the tables it prints when it stops.
    pub stdout: Arc<Mutex<String>>,
    /// Its log.
    pub stderr: Arc<Mutex<String>>,
    /// Its admin socket, if it was started with one.
    pub socket: Option<PathBuf>,
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

impl Quiver {
    /// Starts `quiver run --config <config> --admin-socket <dir>/admin.sock args…`; does not
    /// wait.
    pub fn spawn(dir: &Scratch, config: &str, args: &[&str]) -> Quiver {
        Quiver::spawn_env(dir, config, args, &[])
    }

    /// [`Quiver::spawn`] with environment variables `env` set.
    pub fn spawn_env(dir: &Scratch, config: &str, args: &[&str], env: &[(&str, &str)]) -> Quiver {
        Quiver::spawn_with(dir, "quiver", config, &dir.path("admin.sock"), |cmd| {
            cmd.args(args).envs(env.iter().copied());
        })
    }

    /// Starts `quiver run --config <dir>/<name>.toml --admin-socket <socket>`, then what `more`
    /// adds (arguments, environment); does not wait.
    pub fn spawn_with(
        dir: &Scratch,
        name: &str,
        config: &str,
        socket: &Path,
        more: impl FnOnce(&mut Command),
    ) -> Quiver {
        let cmd = Command::new(env!("CARGO_BIN_EXE_quiver"));
        Quiver::launch(cmd, dir, name, config, Some(socket), more)
    }

    /// [`Quiver::spawn_with`] adding nothing, then waits until its admin API listens.
    pub fn start_at(dir: &Scratch, name: &str, config: &str, socket: &Path) -> Quiver {
        let mut q = Quiver::spawn_with(dir, name, config, socket, |_| {});
        q.wait_log("admin API listening");
        q
    }

    /// Starts `quiver run --config <dir>/<name>.toml` and nothing more (no admin socket), as a
    /// user first runs it; does not wait.
    pub fn run(dir: &Scratch, name: &str, config: &str) -> Quiver {
        let cmd = Command::new(env!("CARGO_BIN_EXE_quiver"));
        Quiver::launch(cmd, dir, name, config, None, |_| {})
    }

    /// [`Quiver::spawn_env`] in a network namespace of its own, with only `lo` (up): what it
    /// does to the host's interfaces (NSM's startup clean-up) stays there. Needs root.
    pub fn spawn_in_new_netns(
        dir: &Scratch,
        config: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Quiver {
        let mut cmd = Command::new("/usr/bin/unshare");
        cmd.args([
            "--net",
            "--",
            "/bin/sh",
            "-c",
            "/usr/bin/ip link set lo up && exec \"$0\" \"$@\"",
            env!("CARGO_BIN_EXE_quiver"),
        ]);
        let socket = dir.path("admin.sock");
        Quiver::launch(cmd, dir, "quiver", config, Some(&socket), |cmd| {
            cmd.args(args).envs(env.iter().copied());
        })
    }

    /// Starts `cmd run --config <dir>/<name>.toml`, with `--admin-socket <socket>` if given,
    /// then what `more` adds; does not wait.
    fn launch(
        mut cmd: Command,
        dir: &Scratch,
        name: &str,
        config: &str,
        socket: Option<&Path>,
        more: impl FnOnce(&mut Command),
    ) -> Quiver {
        let path = dir.path(&format!("{name}.toml"));
        std::fs::write(&path, config).unwrap();
        cmd.args(["run", "--config"]).arg(&path);
        if let Some(socket) = socket {
            cmd.arg("--admin-socket").arg(socket);
        }
        more(&mut cmd);
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start quiver");
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        Quiver {
            child,
            stdout,
            stderr,
            socket: socket.map(Path::to_path_buf),
        }
    }

    /// [`Quiver::spawn`], then waits until its admin API listens.
    pub fn start(dir: &Scratch, config: &str, args: &[&str]) -> Quiver {
        let mut q = Quiver::spawn(dir, config, args);
        q.wait_log("admin API listening");
        q
    }

    /// Panics with quiver's output if it has exited.
    pub fn check_running(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!(
                "quiver exited ({st}):\n{}\n{}",
                self.stdout.lock().unwrap(),
                self.stderr.lock().unwrap()
            );
        }
    }

    /// Waits until quiver has logged `text`.
    pub fn wait_log(&mut self, text: &str) {
        wait_for(text, 30, || {
            self.check_running();
            self.stderr.lock().unwrap().contains(text)
        });
    }

    /// Stops quiver (SIGINT; SIGKILL after 20 s), which must exit with success; returns what it
    /// printed on stdout and stderr.
    pub fn stop(&mut self) -> (String, String) {
        let status = interrupt(&mut self.child, Duration::from_secs(20)).unwrap();
        // The readers finish at end of file, which the exit just caused.
        wait_for("quiver's output to end", 10, || {
            Arc::strong_count(&self.stdout) == 1 && Arc::strong_count(&self.stderr) == 1
        });
        let out = self.stdout.lock().unwrap().clone();
        let err = self.stderr.lock().unwrap().clone();
        assert!(status.success(), "quiver failed ({status}):\n{out}\n{err}");
        (out, err)
    }

    /// The log so far.
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits for quiver to exit on its own; returns its status and log.
    pub fn wait_exit(mut self) -> (std::process::ExitStatus, String) {
        let mut status = None;
        wait_for("quiver to exit", 30, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        // The log's pipe closes with the process: its reader thread ends, dropping its
        // reference to the text.
        wait_for("quiver's log to be read", 10, || {
            Arc::strong_count(&self.stderr) == 1
        });
        (status.unwrap(), self.log())
    }

    /// Runs `quiver ctl --socket <ours> args…`.
    pub fn ctl(&self, args: &[&str]) -> Output {
        let socket = self
            .socket
            .as_ref()
            .expect("quiver started with an admin socket");
        Command::new(env!("CARGO_BIN_EXE_quiver"))
            .arg("ctl")
            .arg("--socket")
            .arg(socket)
            .args(args)
            .output()
            .expect("run quiver ctl")
    }

    /// Runs `quiver ctl args… --json`, which must succeed, and parses what it printed.
    pub fn json(&self, args: &[&str]) -> Value {
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
    pub fn refused(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.refused_output(args).stderr).into_owned()
    }

    /// [`Quiver::refused`], and the command must print no result on stdout.
    pub fn refused_quietly(&self, args: &[&str]) -> String {
        let out = self.refused_output(args);
        assert!(out.stdout.is_empty(), "{args:?} printed a result");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    fn refused_output(&self, args: &[&str]) -> Output {
        let out = self.ctl(args);
        assert!(
            !out.status.success(),
            "quiver ctl {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        out
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
pub struct Cnf(pub Slave);

impl Cnf {
    /// Connects to interface `id` on `socket`.
    pub fn connect(socket: &Path, id: u32) -> Cnf {
        Cnf(Slave::new(
            SocketAddress::Path(socket.to_path_buf()),
            InterfaceConfig::new(id),
        )
        .unwrap())
    }

    /// Connects to interface `id` on `socket` in IP mode (bare IP packets, no Ethernet).
    pub fn connect_ip(socket: &Path, id: u32) -> Cnf {
        Cnf(Slave::new(
            SocketAddress::Path(socket.to_path_buf()),
            InterfaceConfig {
                mode: memif::Mode::Ip,
                ..InterfaceConfig::new(id)
            },
        )
        .unwrap())
    }

    /// Runs the control protocol.
    pub fn poll(&mut self) {
        self.0.poll().unwrap();
    }

    /// Whether the link is up.
    pub fn is_up(&mut self) -> bool {
        self.poll();
        self.0.interface().is_up()
    }

    /// Sends every frame (retrying while the ring is full).
    pub fn send(&mut self, frames: &[Vec<u8>]) {
        let mut sent = 0;
        wait_for("frames to be sent", 30, || {
            self.poll();
            let refs: Vec<&[u8]> = frames[sent..].iter().map(|f| &f[..]).collect();
            sent += self.0.interface_mut().tx_burst(0, &refs);
            sent == frames.len()
        });
    }

    /// Every frame received now.
    pub fn receive(&mut self, into: &mut Vec<Vec<u8>>) {
        self.poll();
        self.0
            .interface_mut()
            .rx_burst(0, 256, &mut |f: &[u8]| into.push(f.to_vec()));
    }
}

/// The nodes each packet of `show trace --json` went through, packet by packet.
pub fn trace_paths(trace: &Value) -> Vec<Vec<&str>> {
    trace
        .as_array()
        .expect("a JSON array")
        .iter()
        .map(|p| {
            p["nodes"]
                .as_array()
                .expect("a packet's nodes")
                .iter()
                .map(|n| n.as_str().unwrap())
                .collect()
        })
        .collect()
}

/// The entries of a JSON array whose `key` is `value`.
pub fn entries<'a>(v: &'a Value, key: &str, value: &str) -> Vec<&'a Value> {
    v.as_array()
        .expect("a JSON array")
        .iter()
        .filter(|e| e[key] == value)
        .collect()
}

/// The entry of a JSON array whose `key` is `value` (exactly one).
pub fn one<'a>(v: &'a Value, key: &str, value: &str) -> &'a Value {
    let found = entries(v, key, value);
    assert_eq!(found.len(), 1, "one entry with {key} = {value} in {v:#}");
    found[0]
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn mac_bytes(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// An Ethernet/IPv4/UDP frame of `size` bytes from 10.0.0.2 to `dst`, for MAC `to`.
pub fn udp(to: [u8; 6], dst: [u8; 4], size: usize, seq: u16) -> Vec<u8> {
    let mut f = quiver::demo::udp_frame(size, u32::from_be_bytes(dst), 64, seq);
    f[0..6].copy_from_slice(&to);
    f
}

/// The MAC of quiver's interface `name`.
pub fn interface_mac(q: &Quiver, name: &str) -> [u8; 6] {
    let ifs = q.json(&["show", "interfaces"]);
    mac_bytes(one(&ifs, "name", name)["mac"].as_str().unwrap())
}

/// CNF a on memif0 and CNF b on memif1, both up (in quiver's log too).
pub fn cnfs(q: &mut Quiver, memif_socket: &Path) -> (Cnf, Cnf) {
    cnfs_of(q, memif_socket, ["memif0", "memif1"])
}

/// CNFs on interfaces 0 and 1 of `memif_socket`, which are quiver's ports `ports`: both up (in
/// quiver's log too).
pub fn cnfs_of(q: &mut Quiver, memif_socket: &Path, ports: [&str; 2]) -> (Cnf, Cnf) {
    let mut a = Cnf::connect(memif_socket, 0);
    let mut b = Cnf::connect(memif_socket, 1);
    wait_for("both CNFs' links", 30, || a.is_up() & b.is_up());
    for port in ports {
        q.wait_log(&format!("memif link up port={port}"));
    }
    (a, b)
}

/// Sends `frames` from a and waits until b has received `expect` frames; returns them.
pub fn route(a: &mut Cnf, b: &mut Cnf, frames: &[Vec<u8>], expect: usize) -> Vec<Vec<u8>> {
    a.send(frames);
    let mut got = Vec::new();
    wait_for("the routed frames at CNF b", 30, || {
        a.poll();
        b.receive(&mut got);
        got.len() >= expect
    });
    got
}

/// The counters of `port` in the last `show interfaces` table quiver printed on `stdout`:
/// (rx packets, rx bytes, tx packets, tx bytes, rx drops, tx drops).
pub fn interface_counters(stdout: &str, port: &str) -> [u64; 6] {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.split_whitespace().next() == Some(port))
        .unwrap_or_else(|| panic!("no {port} line in:\n{stdout}"));
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(3)
        .map(|x| x.parse().unwrap())
        .collect();
    v.try_into()
        .unwrap_or_else(|_| panic!("bad {port} line: {line}"))
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The sizes, in bytes and sorted, of the socket mappings of process `pid`: an AF_PACKET
/// queue's receive and transmit rings are one mapping of its socket.
pub fn socket_mappings(pid: u32) -> Vec<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut sizes: Vec<u64> = maps
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(5)
                .is_some_and(|p| p.starts_with("socket:["))
        })
        .map(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (from, to) = range.split_once('-').unwrap();
            u64::from_str_radix(to, 16).unwrap() - u64::from_str_radix(from, 16).unwrap()
        })
        .collect();
    sizes.sort_unstable();
    sizes
}
