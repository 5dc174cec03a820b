//! What the interop tests share: the peers we did not write (built once, cached under
//! /var/cache/quiver-interop), network namespaces joined by a veth, our side's UDP socket in its
//! namespace driven by `wireguard::Device`, and ICMP echo packets built by hand.

// Each test binary uses a part of this module.
#![allow(dead_code)]

pub mod icmp;
pub use testkit::wg_peers as peers;
pub mod setup;
pub mod tun;

use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use wireguard::{Device, DeviceError, PeerId, PrivateKey, Received};

/// The peer's underlay address (its end of the veth).
pub const PEER_UNDERLAY: &str = "192.168.77.1";
/// Our underlay address.
pub const OUR_UNDERLAY: &str = "192.168.77.2";
/// The peer's tunnel interface address.
pub const PEER_TUNNEL: [u8; 4] = [10, 77, 0, 1];
/// Our address inside the tunnel (the peer's allowed IPs for us).
pub const OUR_TUNNEL: [u8; 4] = [10, 77, 0, 2];
/// The peer's WireGuard listening port.
pub const PEER_PORT: u16 = 51820;

/// Prints on the real stderr (the test harness does not capture it).
pub fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "[wg-interop] {msg}");
}

/// Runs a command to completion; panics with its output if it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

/// Two namespaces joined by a veth (the peer's at 192.168.77.1, ours at .2), and the processes
/// started in them; all removed on drop.
pub struct Topology {
    /// The peer's namespace.
    pub peer_ns: String,
    /// Our namespace.
    pub our_ns: String,
    /// Name of the peer's tunnel interface (unique per test: UAPI sockets are global).
    pub ifname: String,
    children: Vec<Child>,
}

impl Topology {
    /// Makes the namespaces and the veth.
    pub fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{n}", std::process::id() % 100_000);
        let t = Self {
            peer_ns: format!("wgq-peer-{tag}"),
            our_ns: format!("wgq-ours-{tag}"),
            ifname: format!("wgq{tag}"),
            children: Vec::new(),
        };
        ip(&["netns", "add", &t.peer_ns]);
        ip(&["netns", "add", &t.our_ns]);
        let (va, vb) = (format!("wqa{tag}"), format!("wqb{tag}"));
        ip(&[
            "link", "add", &va, "netns", &t.peer_ns, "type", "veth", "peer", "name", &vb, "netns",
            &t.our_ns,
        ]);
        for (ns, dev, addr) in [
            (&t.peer_ns, &va, PEER_UNDERLAY),
            (&t.our_ns, &vb, OUR_UNDERLAY),
        ] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        t
    }

    /// Starts `cmd` in the peer's namespace, kept until drop.
    pub fn spawn_in_peer(&mut self, args: &[&str], log: &str) -> &mut Child {
        let log = File::create(log).expect("log file");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.peer_ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        self.children.push(child);
        self.children.last_mut().expect("just pushed")
    }

    /// Runs a command in the peer's namespace to completion.
    pub fn run_in_peer(&self, args: &[&str]) -> String {
        run(Command::new("ip")
            .args(["netns", "exec", &self.peer_ns])
            .args(args))
    }

    /// A UDP socket bound in our namespace on an ephemeral port.
    pub fn our_socket(&self) -> UdpSocket {
        let path = format!("/run/netns/{}", self.our_ns);
        std::thread::spawn(move || {
            let ns = File::open(&path).expect("namespace file");
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            UdpSocket::bind((OUR_UNDERLAY, 0)).expect("bind")
        })
        .join()
        .expect("socket thread")
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = testkit::interrupt(c, Duration::from_secs(3));
        }
        for ns in [&self.peer_ns, &self.our_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// What one [`Ours::step_full`] did.
pub enum Step {
    /// No datagram was waiting.
    Idle,
    /// A datagram was handled (or refused); nothing came out of the tunnel.
    Handled,
    /// An inner packet came out of the tunnel.
    Data(Vec<u8>),
}

/// Our side: a `Device` with one peer, on a UDP socket.
pub struct Ours {
    /// The protocol state.
    pub dev: Device,
    /// The peer.
    pub peer: PeerId,
    /// The socket.
    pub sock: UdpSocket,
    /// Everything the device refused (a test asserts there was nothing).
    pub refused: Vec<DeviceError>,
}

impl Ours {
    /// Our device with `key`, talking to `peer_key` at the peer's underlay address.
    pub fn new(sock: UdpSocket, key: PrivateKey, peer_key: wireguard::PublicKey) -> Self {
        let mut dev = Device::new(key);
        let endpoint: SocketAddr = format!("{PEER_UNDERLAY}:{PEER_PORT}").parse().unwrap();
        let peer = dev.add_peer(peer_key, Default::default(), Some(endpoint));
        let tunnel = std::net::IpAddr::from(PEER_TUNNEL);
        dev.peer_mut(peer)
            .allowed_ips
            .insert(wireguard::allowed_ips::Prefix::new(tunnel, 32).expect("a host prefix"));
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("read timeout");
        Self {
            dev,
            peer,
            sock,
            refused: Vec::new(),
        }
    }

    fn send_to_peer(&self, msg: &[u8]) {
        let to = self.dev.peer(self.peer).endpoint.expect("peer endpoint");
        self.sock.send_to(msg, to).expect("send");
    }

    /// Forces a handshake now (a rekey if a session exists).
    pub fn initiate(&mut self) {
        let mut out = [0u8; 148];
        let n = self
            .dev
            .initiate(self.peer, Instant::now(), &mut out)
            .expect("initiation");
        self.send_to_peer(&out[..n]);
    }

    /// Encrypts and sends an IP packet to the peer.
    pub fn send_ip(&mut self, packet: &[u8]) {
        let mut buf = vec![0u8; wireguard::transport::sealed_len(packet.len())];
        buf[16..16 + packet.len()].copy_from_slice(packet);
        let n = self
            .dev
            .send(self.peer, Instant::now(), &mut buf, packet.len())
            .expect("send");
        self.send_to_peer(&buf[..n]);
    }

    /// Encrypts and sends an IP packet to the peer, if a session allows.
    pub fn try_send_ip(&mut self, packet: &[u8]) -> Result<(), DeviceError> {
        let mut buf = vec![0u8; wireguard::transport::sealed_len(packet.len())];
        buf[16..16 + packet.len()].copy_from_slice(packet);
        let n = self
            .dev
            .send(self.peer, Instant::now(), &mut buf, packet.len())?;
        self.send_to_peer(&buf[..n]);
        Ok(())
    }

    /// Runs the timers, then handles at most one datagram (waiting up to the socket's read
    /// timeout for it); returns the inner packet it carried, if any.
    pub fn step(&mut self) -> Option<Vec<u8>> {
        match self.step_full() {
            Step::Data(p) => Some(p),
            Step::Idle | Step::Handled => None,
        }
    }

    /// [`step`](Self::step), telling an idle socket from a datagram handled.
    pub fn step_full(&mut self) -> Step {
        let now = Instant::now();
        let mut out = [0u8; 256];
        while let Some((_, n)) = self.dev.poll(now, &mut out) {
            self.send_to_peer(&out[..n]);
        }
        let mut buf = [0u8; 2048];
        let (n, src) = match self.sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        // A signal (a peer process ending, say) cut the wait short.
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                return Step::Idle
            }
            Err(e) => panic!("recv: {e}"),
        };
        let mut reply = [0u8; 256];
        match self
            .dev
            .receive(Instant::now(), src, &mut buf[..n], &mut reply)
        {
            Ok(Received::Reply { to, len, .. }) => {
                self.sock.send_to(&reply[..len], to).expect("send reply");
                Step::Handled
            }
            Ok(Received::Data { range, .. }) => Step::Data(buf[range].to_vec()),
            Ok(Received::Nothing) => Step::Handled,
            Err(e) => {
                say(&format!("refused a datagram of {n} bytes from {src}: {e}"));
                self.refused.push(e);
                Step::Handled
            }
        }
    }

    /// Steps until `done` returns true for a received packet (or for `None`: every step), or
    /// `secs` pass (then panics naming `what`).
    pub fn run_until(
        &mut self,
        what: &str,
        secs: u64,
        mut done: impl FnMut(&mut Self, Option<Vec<u8>>) -> bool,
    ) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let got = self.step();
            if done(self, got) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
        }
    }

    /// Our current session's local index.
    pub fn session_index(&self) -> Option<u32> {
        self.dev
            .peer(self.peer)
            .current()
            .map(|s| s.keys.local_index)
    }
}
