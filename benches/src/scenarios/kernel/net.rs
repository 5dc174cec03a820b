//! The `kernel` scenario's network and processes: two namespaces, A (iperf3's client,
//! 10.91.0.1/24) and B (its server, 10.91.0.2/24), joined through a third, M:
//!
//! ```text
//! bridge:     A a0 ──veth── qa ┐ br0 ┌ qb ──veth── b0 B        (all in M)
//! af_packet:  A a0 ──veth── qa   Quiver (AF_PACKET on qa, qb, L2 cross-connect)   qb ──veth── b0 B
//! tap:        A tapa ═ Quiver's TAP queues (L2 cross-connect) ═ tapb B
//! ```
//!
//! The namespace ends keep the kernel's default offloads (checksum, TSO, GSO). Quiver runs in M
//! as a `quiver run` process; its TAP devices are made there and moved into A and B
//! (`ip link set … netns …`) once it has opened them, then addressed and brought up there: the
//! devices keep working, their queues being descriptors Quiver holds. Everything is made fresh
//! for each measurement and deleted on drop.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use crate::scenarios::procs::{pinned, run, Proc, IP, TASKSET};

pub const IPERF3: &str = "/usr/bin/iperf3";
pub const TIMEOUT: &str = "/usr/bin/timeout";
pub const SYSCTL: &str = "/usr/sbin/sysctl";
pub const PING: &str = "/usr/bin/ping";

/// A's and B's addresses (B runs the iperf3 server).
pub const A_ADDR: &str = "10.91.0.1";
pub const B_ADDR: &str = "10.91.0.2";
/// iperf3's port.
const IPERF_PORT: u16 = 5201;
/// The UDP test's payload, in bytes.
pub const UDP_PAYLOAD: u64 = 64;

/// What joins A and B.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Via {
    /// A Linux bridge in M (the reference).
    Bridge,
    /// Quiver with AF_PACKET ports on the veths' M ends.
    AfPacket,
    /// Quiver with two TAP ports whose devices are in A and B.
    Tap,
    /// Quiver with AF_XDP ports (its XDP program, copy mode) on the veths' M ends.
    AfXdp,
}

impl Via {
    /// Every path, the reference first.
    pub const ALL: [Via; 4] = [Via::Bridge, Via::AfPacket, Via::Tap, Via::AfXdp];

    /// Its name in the JSON line.
    pub fn name(self) -> &'static str {
        match self {
            Via::Bridge => "bridge",
            Via::AfPacket => "af_packet",
            Via::Tap => "tap",
            Via::AfXdp => "af_xdp",
        }
    }
}

/// The TAP devices' names (made in M, then moved into A and B).
pub const TAPS: [&str; 2] = ["tapa", "tapb"];
/// The veths' ends in M (Quiver's AF_PACKET or AF_XDP ports, or the bridge's ports).
pub const VETH_M: [&str; 2] = ["qa", "qb"];

/// Polls `done` every 50 ms for up to `secs`.
pub fn wait_until(
    what: &str,
    secs: u64,
    mut done: impl FnMut() -> Result<bool, String>,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if done()? {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("timed out after {secs} s waiting for {what}"))
}

/// A temp file path for this run.
pub fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("quiver-bench-kernel-{}-{name}", std::process::id()))
}

/// The three namespaces, deleted (with their veths) on drop.
pub struct Net {
    /// A (client), B (server), M (the bridge or Quiver).
    pub a: String,
    pub b: String,
    pub m: String,
}

impl Net {
    /// Makes the namespaces, and for the bridge and AF_PACKET paths the veths (A's and B's
    /// ends addressed and up, M's ends up), and the bridge.
    pub fn new(via: Via) -> Result<Net, String> {
        let id = std::process::id();
        let net = Net {
            a: format!("qbk-a-{id}"),
            b: format!("qbk-b-{id}"),
            m: format!("qbk-m-{id}"),
        };
        for ns in [&net.a, &net.b, &net.m] {
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
                ],
            )?;
            run(&[IP, "-n", ns, "link", "set", "dev", "lo", "up"])?;
        }
        if via == Via::Tap {
            return Ok(net);
        }
        for (ns, inner, outer, addr) in [
            (&net.a, "a0", VETH_M[0], A_ADDR),
            (&net.b, "b0", VETH_M[1], B_ADDR),
        ] {
            run(&[
                IP, "-n", ns, "link", "add", inner, "type", "veth", "peer", "name", outer, "netns",
                &net.m,
            ])?;
            run(&[IP, "-n", &net.m, "link", "set", "dev", outer, "up"])?;
            net.address(ns, inner, addr)?;
        }
        if via == Via::Bridge {
            let m = net.m.as_str();
            run(&[IP, "-n", m, "link", "add", "br0", "type", "bridge"])?;
            for dev in VETH_M {
                run(&[IP, "-n", m, "link", "set", "dev", dev, "master", "br0"])?;
            }
            run(&[IP, "-n", m, "link", "set", "dev", "br0", "up"])?;
        }
        Ok(net)
    }

    /// Gives `dev` in `ns` its address (/24) and brings it up.
    fn address(&self, ns: &str, dev: &str, addr: &str) -> Result<(), String> {
        let cidr = format!("{addr}/24");
        run(&[IP, "-n", ns, "addr", "add", &cidr, "dev", dev])?;
        run(&[IP, "-n", ns, "link", "set", "dev", dev, "up"])?;
        Ok(())
    }

    /// Moves Quiver's TAP devices from M into A and B, addressed and up there.
    pub fn adopt_taps(&self) -> Result<(), String> {
        for (dev, ns, addr) in [(TAPS[0], &self.a, A_ADDR), (TAPS[1], &self.b, B_ADDR)] {
            run(&[IP, "-n", &self.m, "link", "set", "dev", dev, "netns", ns])?;
            self.address(ns, dev, addr)?;
        }
        Ok(())
    }

    /// Whether `dev` exists in M.
    pub fn in_m(&self, dev: &str) -> bool {
        run(&[IP, "-n", &self.m, "link", "show", "dev", dev]).is_ok()
    }

    /// Runs `args` inside namespace `ns`.
    pub fn exec(&self, ns: &str, args: &[&str]) -> Result<String, String> {
        let mut v = vec![IP, "netns", "exec", ns];
        v.extend_from_slice(args);
        run(&v)
    }

    /// One ping from A to B: whether a reply came within a second.
    pub fn ping_through(&self) -> bool {
        self.exec(&self.a, &[PING, "-n", "-q", "-c", "1", "-W", "1", B_ADDR])
            .is_ok()
    }

    /// Starts iperf3's server in B on `cpu`, once it listens.
    pub fn iperf_server(&self, cpu: usize) -> Result<Proc, String> {
        let port = IPERF_PORT.to_string();
        let args = pinned(cpu, &self.b, &[IPERF3, "-s", "-B", B_ADDR, "-p", &port]);
        let server = Proc::spawn("iperf3 server", &args, &temp("iperf3.log"))?;
        let hex = format!(":{IPERF_PORT:04X} ");
        wait_until("iperf3's server to listen", 10, || {
            Ok(self
                .exec(&self.b, &["cat", "/proc/net/tcp"])
                .is_ok_and(|t| {
                    t.lines()
                        .any(|l| l.contains(&hex) && l.split_whitespace().nth(3) == Some("0A"))
                }))
        })?;
        Ok(server)
    }

    /// One iperf3 test from A to B on `cpu` for `secs`: TCP (one stream), or UDP with
    /// [`UDP_PAYLOAD`]-byte datagrams as fast as iperf3 sends them (`-b 0`). iperf3's JSON
    /// report.
    pub fn iperf_client(&self, cpu: usize, secs: u64, udp: bool) -> Result<Value, String> {
        let (t, limit) = (secs.to_string(), (secs + 30).to_string());
        let (port, len) = (IPERF_PORT.to_string(), UDP_PAYLOAD.to_string());
        let mut args = vec![
            TIMEOUT, &limit, IPERF3, "-c", B_ADDR, "-p", &port, "-t", &t, "-J",
        ];
        if udp {
            args.extend_from_slice(&["-u", "-b", "0", "-l", &len]);
        }
        let args = pinned(cpu, &self.a, &args);
        let out = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run iperf3: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let report: Value = serde_json::from_str(&text).map_err(|e| {
            format!(
                "iperf3 wrote no JSON ({e}, {}): {text}{}",
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
        for ns in [&self.a, &self.b, &self.m] {
            let _ = run(&[IP, "netns", "del", ns]);
        }
    }
}
