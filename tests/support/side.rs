//! A network namespace with a veth into it, for tests that run `quiver run` on kernel
//! interfaces (`af_packet_ring.rs`, `af_xdp_run.rs`); a veth pair between two Quivers (an
//! underlay) and a namespace's ICMP echo count (`vrf_vxlan.rs`, `vrf_wireguard.rs`).

use std::process::{Command, Output};

/// `ip`.
pub const IP: &str = "/usr/sbin/ip";
/// `ping`.
pub const PING: &str = "/usr/bin/ping";

/// Runs `args`, which must succeed; returns its output.
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

/// A network namespace with a veth into it (`veth0` inside with an address, `root` outside,
/// up), deleted on drop.
pub struct Side {
    /// The namespace's name.
    pub ns: String,
    /// The veth's end outside, in the test's namespace.
    pub root: String,
}

impl Side {
    /// Namespace `quiver-<prefix>-<tag>-<pid>` and outer end `q<prefix><tag><pid>` (keep
    /// `prefix` to a few letters: interface names are short), `address` (CIDR) on `veth0`.
    pub fn new(prefix: &str, tag: &str, address: &str) -> Side {
        let id = std::process::id() % 100_000;
        let side = Side {
            ns: format!("quiver-{prefix}-{tag}-{id}"),
            root: format!("q{prefix}{tag}{id}"),
        };
        run(&[IP, "netns", "add", &side.ns]);
        run(&[
            IP, "link", "add", &side.root, "type", "veth", "peer", "name", "veth0", "netns",
            &side.ns,
        ]);
        run(&[IP, "link", "set", &side.root, "up"]);
        run(&[IP, "-n", &side.ns, "addr", "add", address, "dev", "veth0"]);
        run(&[IP, "-n", &side.ns, "link", "set", "veth0", "up"]);
        side
    }

    /// Whether one ping to `to` is answered within a second.
    pub fn ping(&self, to: &str) -> bool {
        Command::new(IP)
            .args([
                "netns", "exec", &self.ns, PING, "-n", "-c", "1", "-W", "1", to,
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

/// A veth pair in the test's namespace (IPv6 off on both ends), deleted on drop.
pub struct Underlay {
    /// One end.
    pub a: String,
    /// The other.
    pub b: String,
}

impl Underlay {
    /// A new pair, both ends up.
    pub fn pair() -> Underlay {
        let id = std::process::id() % 100_000;
        let u = Underlay {
            a: format!("qvua{id}"),
            b: format!("qvub{id}"),
        };
        run(&[
            IP, "link", "add", &u.a, "type", "veth", "peer", "name", &u.b,
        ]);
        for end in [&u.a, &u.b] {
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{end}/disable_ipv6"), "1");
            run(&[IP, "link", "set", end, "up"]);
        }
        u
    }
}

impl Drop for Underlay {
    fn drop(&mut self) {
        let _ = Command::new(IP).args(["link", "del", &self.a]).output();
    }
}

/// `side`'s kernel's count of ICMP echo requests received (`nstat`'s IcmpInEchos).
pub fn echoes_received(side: &Side) -> u64 {
    nstat(side, "IcmpInEchos")
}

/// `side`'s kernel's count of ICMPv6 echo requests received (`nstat`'s Icmp6InEchos).
pub fn echoes6_received(side: &Side) -> u64 {
    nstat(side, "Icmp6InEchos")
}

/// `side`'s kernel's counter `name` (`nstat -az`).
fn nstat(side: &Side, name: &str) -> u64 {
    let out = Command::new(IP)
        .args(["netns", "exec", &side.ns, "nstat", "-az", name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("nstat {name} in {}: {out:?}", side.ns))
}
