//! The `wireguard` scenario's network and processes: four namespaces in a line,
//!
//! ```text
//! A (iperf3 client)  a0 ──veth── e1a  END 1  u1 ──veth (underlay)── u2  END 2  e2b ──veth── b0  B (iperf3 server)
//! 10.90.1.1/24            10.90.1.254   192.168.90.1          192.168.90.2   10.90.2.254       10.90.2.1/24
//! ```
//!
//! Each tunnel end is its own namespace. A WireGuard peer (wireguard-go, boringtun) runs there on
//! a TUN, with the addresses above on the kernel's interfaces and IPv4 forwarding on; Quiver
//! runs there as a `quiver run` process owning `e1a`/`u1` (`e2b`/`u2`) through AF_PACKET ports,
//! the kernel's interfaces left without addresses. Every veth has a fixed MAC so that Quiver's
//! ends can have static neighbours. A's and B's links have the tunnel's MTU (1440: 1500 less
//! WireGuard's 60 over IPv4), the same for every implementation. Everything is made fresh for
//! each round and deleted on drop.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use super::procs::{pinned, run, Proc, IP, TASKSET};

pub const SYSCTL: &str = "/usr/sbin/sysctl";
pub const PING: &str = "/usr/bin/ping";
pub const WG: &str = "/usr/bin/wg";
pub const TIMEOUT: &str = "/usr/bin/timeout";
pub const IPERF3: &str = "/usr/bin/iperf3";

/// The UDP port of both ends.
pub const WG_PORT: u16 = 51820;
/// The tunnel's MTU (and A's and B's links').
pub const TUNNEL_MTU: u16 = 1440;
/// iperf3's port.
const IPERF_PORT: u16 = 5201;

/// A's address, B's address (the iperf3 server).
pub const A_ADDR: &str = "10.90.1.1";
pub const B_ADDR: &str = "10.90.2.1";
/// A's and B's subnets.
pub const A_NET: &str = "10.90.1.0/24";
pub const B_NET: &str = "10.90.2.0/24";

/// One tunnel end's addresses and interface names.
pub struct EndSpec {
    /// Its index in the line (1 or 2).
    pub n: u8,
    /// The interface toward its host (A or B) and its address there.
    pub inner_if: &'static str,
    pub inner_addr: &'static str,
    /// The host's address and MAC (a static neighbour for Quiver).
    pub host_addr: &'static str,
    pub host_mac: &'static str,
    /// The underlay interface, its address, and the other end's address and MAC.
    pub under_if: &'static str,
    pub under_addr: &'static str,
    pub peer_under_addr: &'static str,
    pub peer_under_mac: &'static str,
    /// The subnet behind the other end (sent into the tunnel) and an address in it.
    pub remote_net: &'static str,
    pub remote_host: &'static str,
}

/// End 1 (A's side) and end 2 (B's side).
pub const ENDS: [EndSpec; 2] = [
    EndSpec {
        n: 1,
        inner_if: "e1a",
        inner_addr: "10.90.1.254",
        host_addr: A_ADDR,
        host_mac: "02:00:5a:00:01:01",
        under_if: "u1",
        under_addr: "192.168.90.1",
        peer_under_addr: "192.168.90.2",
        peer_under_mac: "02:00:5a:00:09:02",
        remote_net: B_NET,
        remote_host: B_ADDR,
    },
    EndSpec {
        n: 2,
        inner_if: "e2b",
        inner_addr: "10.90.2.254",
        host_addr: B_ADDR,
        host_mac: "02:00:5a:00:02:01",
        under_if: "u2",
        under_addr: "192.168.90.2",
        peer_under_addr: "192.168.90.1",
        peer_under_mac: "02:00:5a:00:09:01",
        remote_net: A_NET,
        remote_host: A_ADDR,
    },
];

/// Polls `done` every 50 ms for up to `secs`.
pub fn wait_until(what: &str, secs: u64, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if done() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("timed out after {secs} s waiting for {what}"))
}

/// The four namespaces, deleted (with their veths) on drop.
pub struct Net {
    /// A, end 1, end 2, B.
    pub ns: [String; 4],
}

impl Net {
    /// Makes the namespaces and veths; A and B addressed and routed toward their ends.
    pub fn new() -> Result<Net, String> {
        let id = std::process::id();
        let net = Net {
            ns: ["a", "e1", "e2", "b"].map(|s| format!("qbwg-{s}-{id}")),
        };
        for ns in &net.ns {
            // One left by a run that was killed would be in the way.
            let _ = run(&[IP, "netns", "del", ns]);
            run(&[IP, "netns", "add", ns])?;
            net.exec(
                ns,
                &[
                    SYSCTL,
                    "-qw",
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                    "net.ipv4.ip_forward=1",
                ],
            )?;
            run(&[IP, "-n", ns, "link", "set", "lo", "up"])?;
        }
        let [a, e1, e2, b] = &net.ns;
        net.veth(
            (a, "a0", ENDS[0].host_mac),
            (e1, "e1a", "02:00:5a:00:01:fe"),
        )?;
        net.veth(
            (e1, "u1", "02:00:5a:00:09:01"),
            (e2, "u2", "02:00:5a:00:09:02"),
        )?;
        net.veth(
            (e2, "e2b", "02:00:5a:00:02:fe"),
            (b, "b0", ENDS[1].host_mac),
        )?;
        for (ns, dev, end) in [(a, "a0", &ENDS[0]), (b, "b0", &ENDS[1])] {
            let mtu = TUNNEL_MTU.to_string();
            run(&[IP, "-n", ns, "link", "set", dev, "mtu", &mtu])?;
            let addr = format!("{}/24", end.host_addr);
            run(&[IP, "-n", ns, "addr", "add", &addr, "dev", dev])?;
            run(&[
                IP,
                "-n",
                ns,
                "route",
                "add",
                "default",
                "via",
                end.inner_addr,
            ])?;
        }
        Ok(net)
    }

    /// A veth pair between two namespaces, both ends up.
    fn veth(&self, one: (&str, &str, &str), two: (&str, &str, &str)) -> Result<(), String> {
        run(&[
            IP, "-n", one.0, "link", "add", one.1, "address", one.2, "type", "veth", "peer",
            "name", two.1, "address", two.2, "netns", two.0,
        ])?;
        run(&[IP, "-n", one.0, "link", "set", one.1, "up"])?;
        run(&[IP, "-n", two.0, "link", "set", two.1, "up"])?;
        Ok(())
    }

    /// Runs `args` inside namespace `ns`.
    pub fn exec(&self, ns: &str, args: &[&str]) -> Result<String, String> {
        let mut v = vec![IP, "netns", "exec", ns];
        v.extend_from_slice(args);
        run(&v)
    }

    /// The namespace of end `n` (1 or 2).
    pub fn end_ns(&self, n: u8) -> &str {
        &self.ns[usize::from(n)]
    }

    /// Gives the kernel's interfaces of end `n` their addresses (for a peer on a TUN).
    pub fn address_end(&self, end: &EndSpec) -> Result<(), String> {
        let ns = self.end_ns(end.n);
        for (dev, addr) in [
            (end.inner_if, end.inner_addr),
            (end.under_if, end.under_addr),
        ] {
            let cidr = format!("{addr}/24");
            run(&[IP, "-n", ns, "addr", "add", &cidr, "dev", dev])?;
        }
        Ok(())
    }

    /// One ping from A to B's address: whether a reply came within a second.
    pub fn ping_through(&self) -> bool {
        self.exec(
            &self.ns[0],
            &[PING, "-n", "-q", "-c", "1", "-W", "1", B_ADDR],
        )
        .is_ok()
    }

    /// Starts iperf3's server in B on `cpu`, once it listens.
    pub fn iperf_server(&self, cpu: usize, log: &Path) -> Result<Proc, String> {
        let args = pinned(
            cpu,
            &self.ns[3],
            &[IPERF3, "-s", "-B", B_ADDR, "-p", &IPERF_PORT.to_string()],
        );
        let server = Proc::spawn("iperf3 server", &args, log)?;
        self.wait_server_listening()?;
        Ok(server)
    }

    /// Waits until iperf3's server in B listens: after a test it opens its listening socket
    /// anew, and a client that comes first is refused.
    pub fn wait_server_listening(&self) -> Result<(), String> {
        let port = format!(":{IPERF_PORT:04X} ");
        wait_until("iperf3's server to listen", 10, || {
            self.exec(&self.ns[3], &["cat", "/proc/net/tcp"])
                .is_ok_and(|t| {
                    t.lines()
                        .any(|l| l.contains(&port) && l.split_whitespace().nth(3) == Some("0A"))
                })
        })
    }

    /// One iperf3 test from A to B on `cpu` for `secs`: TCP, or with `udp_rate` UDP with
    /// 1400-byte datagrams at that rate (iperf3's `-b`; "0": as fast as it can send). iperf3's
    /// JSON report.
    pub fn iperf_client(
        &self,
        cpu: usize,
        secs: u64,
        udp_rate: Option<&str>,
    ) -> Result<Value, String> {
        let (t, limit) = (secs.to_string(), (secs + 30).to_string());
        let port = IPERF_PORT.to_string();
        let mut args = vec![
            TIMEOUT, &limit, IPERF3, "-c", B_ADDR, "-p", &port, "-t", &t, "-J",
        ];
        if let Some(rate) = udp_rate {
            args.extend_from_slice(&["-u", "-b", rate, "-l", "1400"]);
        }
        let args = pinned(cpu, &self.ns[0], &args);
        let out = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run iperf3: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let report: Value = serde_json::from_str(&text).map_err(|e| {
            format!(
                "iperf3 wrote no JSON ({e}, {}):\n{text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        if let Some(e) = report["error"].as_str() {
            return Err(format!("iperf3: {e}"));
        }
        Ok(report)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = run(&[IP, "netns", "del", ns]);
        }
    }
}

/// A new key pair from `wg`: (private, public), base64.
pub fn genkey() -> Result<(String, String), String> {
    let private = run(&[WG, "genkey"])?.trim().to_string();
    let mut p = Command::new(WG)
        .arg("pubkey")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("wg pubkey: {e}"))?;
    {
        use std::io::Write;
        let mut stdin = p.stdin.take().ok_or("wg pubkey: no stdin")?;
        stdin
            .write_all(format!("{private}\n").as_bytes())
            .map_err(|e| e.to_string())?;
    }
    let out = p.wait_with_output().map_err(|e| e.to_string())?;
    let public = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if public.is_empty() {
        return Err("wg pubkey wrote nothing".into());
    }
    Ok((private, public))
}

/// The scheduler's account of thread `comm` of process `pid` (`/proc/PID/task/TID/schedstat`):
/// nanoseconds run on a CPU and nanoseconds runnable but waiting for one.
pub fn schedstat(pid: u32, comm: &str) -> Option<(u64, u64)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for t in tasks.flatten() {
        let p = t.path();
        if std::fs::read_to_string(p.join("comm")).is_ok_and(|c| c.trim() == comm) {
            let s = std::fs::read_to_string(p.join("schedstat")).ok()?;
            let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
            return Some((f.next()??, f.next()??));
        }
    }
    None
}
