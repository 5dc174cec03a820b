//! NSM's IP payload through Quiver: two network namespaces, each with a veth whose other end is
//! an AF_PACKET port added at run time, joined by an L3 cross-connect. `ping` from one namespace
//! reaches an address that no route of Quiver's covers (so only the cross-connect can carry it),
//! and the replies come back with their TTL decremented once.

use std::net::Ipv4Addr;
use std::process::{Command, Output};
use std::time::Duration;

use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, IdlePolicy, WorkerConfig};
use quiver::control::owner::{Applied, Change, ConfigOwner, Control};
use quiver::{Config, Forwarder, ForwarderError, Owned};
use testkit::{require, wait_for, Needs};

const IP: &str = "/usr/sbin/ip";
const PING: &str = "/usr/bin/ping";

fn run(args: &[&str]) -> Output {
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

/// A network namespace with a veth into it (`veth0` inside, `root` outside), deleted on drop.
struct Side {
    ns: String,
    root: String,
}

impl Side {
    /// `address` (CIDR) on `veth0`, a default route via `gateway`, IPv6 off.
    fn new(tag: &str, address: &str, gateway: &str) -> Side {
        let id = std::process::id() % 100_000;
        let side = Side {
            ns: format!("quiver-l3-{tag}-{id}"),
            root: format!("ql3{tag}{id}"),
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
        side.sh("echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; true");
        run(&[IP, "link", "set", &side.root, "up"]);
        side.ip(&["addr", "add", address, "dev", "veth0"]);
        side.ip(&["link", "set", "veth0", "up"]);
        side.ip(&["link", "set", "lo", "up"]);
        side.ip(&["route", "add", "default", "via", gateway]);
        side
    }

    fn ip(&self, args: &[&str]) {
        let mut v = vec![IP, "-n", &self.ns];
        v.extend_from_slice(args);
        run(&v);
    }

    fn sh(&self, script: &str) {
        run(&[IP, "netns", "exec", &self.ns, "sh", "-c", script]);
    }

    /// One ping to `to` with `ttl`: its output, and whether a reply came.
    fn ping(&self, to: &str, ttl: u8) -> (bool, String) {
        let out = Command::new(IP)
            .args(["netns", "exec", &self.ns, PING, "-n", "-c", "1", "-W", "1"])
            .args(["-t", &ttl.to_string(), to])
            .output()
            .expect("ping runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        let _ = Command::new(IP).args(["link", "del", &self.root]).output();
        let _ = Command::new(IP).args(["netns", "del", &self.ns]).output();
    }
}

fn error_count(f: &Control, node: &str, name: &str) -> u64 {
    f.dataplane()
        .runtime()
        .workers
        .iter()
        .map(|w| w.error(node, name))
        .sum()
}

#[test]
fn ping_crosses_an_l3_cross_connect_between_two_namespaces_with_the_ttl_decremented() {
    if !require(
        "ping_crosses_an_l3_cross_connect",
        &Needs {
            root: true,
            tools: &[IP, PING],
            ..Needs::default()
        },
    ) {
        return;
    }
    let a = Side::new("a", "10.71.1.1/24", "10.71.1.254");
    let b = Side::new("b", "10.71.2.1/24", "10.71.2.254");
    // Behind b, an address Quiver has no route to: only the cross-connect reaches it.
    b.ip(&["addr", "add", "192.168.71.1/32", "dev", "lo"]);

    let cfg = Config::parse("[buffers]\nhugepages = \"never\"\n").unwrap();
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 8192,
        hugepages: HugepagePolicy::Never,
        ..BufferPoolConfig::default()
    })
    .unwrap();
    let start_free = pool.free_count();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = WorkerConfig {
        cores: (0..2).map(|w| w % cores).collect(),
        idle: IdlePolicy::ADAPTIVE,
    };
    // Owned as in the daemon: changes go to the owner, which runs housekeeping (ARP) between
    // them.
    let owner = ConfigOwner::start(
        Forwarder::start(&cfg, &workers, pool.clone()).unwrap(),
        Duration::from_millis(1),
    );
    let f = owner.control();

    let conn = Some("nsm-connection-1".to_string());
    for (name, side) in [("pa", &a), ("pb", &b)] {
        let port = Config::parse(&format!(
            "[[port]]\nname = \"{name}\"\ntype = \"af_packet\"\ninterface = \"{}\"\n",
            side.root
        ))
        .unwrap()
        .port
        .remove(0);
        f.apply(Change::AddPort {
            port,
            owner: conn.clone(),
        })
        .unwrap();
    }
    // Quiver's side of each link answers ARP for the namespaces' gateways and asks for the
    // peers' MACs from these addresses.
    for (port, ip) in [("pa", "10.71.1.254"), ("pb", "10.71.2.254")] {
        f.apply(Change::AddAddress {
            port: port.into(),
            ip: ip.parse().unwrap(),
            len: 24,
            owner: conn.clone(),
        })
        .unwrap();
    }
    let l3xc = |a: &str, b: &str| Change::L3CrossConnect {
        a: a.into(),
        b: b.into(),
        peer_b: "10.71.2.1".parse::<Ipv4Addr>().unwrap().into(),
        peer_a: "10.71.1.1".parse::<Ipv4Addr>().unwrap().into(),
        owner: conn.clone(),
    };
    assert!(matches!(
        f.apply(l3xc("pa", "pa")),
        Err(ForwarderError::InvalidArgument(_))
    ));
    f.apply(l3xc("pa", "pb")).unwrap();
    assert!(f
        .view()
        .owned_by("nsm-connection-1")
        .contains(&Owned::L3CrossConnect("pa".into(), "pb".into())));

    // The first echoes may be spent while both sides resolve their neighbours.
    let mut reply = String::new();
    wait_for("a ping through the L3 cross-connect", 30, || {
        let (ok, out) = a.ping("192.168.71.1", 64);
        reply = out;
        ok
    });
    // b answered with TTL 64; Quiver decremented it once on the way back.
    assert!(reply.contains("ttl=63"), "{reply}");
    {
        let l3xc: u64 = f
            .dataplane()
            .runtime()
            .workers
            .iter()
            .filter_map(|w| w.node("ip4-l3xc").map(|n| n.packets))
            .sum();
        assert!(l3xc >= 2, "echo and reply went through ip4-l3xc ({l3xc})");
        // The FIB had no route to 192.168.71.1: the lookup never saw these packets.
        assert_eq!(error_count(&f, "ip4-lookup", "no-route"), 0);
    }
    // And on the way there: an echo with TTL 1 expires in Quiver instead of reaching b.
    let expired = error_count(&f, "ip4-rewrite", "ttl-expired");
    let (ok, out) = a.ping("192.168.71.1", 1);
    assert!(!ok, "{out}");
    wait_for("the TTL-1 echo counted as expired", 10, || {
        error_count(&f, "ip4-rewrite", "ttl-expired") > expired
    });

    // Closing the connection removes the cross-connect, addresses and ports.
    let removed = f.apply(Change::RemoveOwned {
        owner: "nsm-connection-1".into(),
    });
    assert_eq!(removed, Ok(Applied::Removed(5)));
    {
        let v = f.view();
        assert!(v.ports().is_empty());
        assert!(v.interfaces.is_empty());
        assert!(v.routes.is_empty());
    }
    let (ok, _) = a.ping("192.168.71.1", 64);
    assert!(!ok, "nothing carries the ping any more");

    owner.stop().unwrap().stop();
    assert_eq!(pool.free_count(), start_free);
}
