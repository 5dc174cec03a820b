//! AF_PACKET interfaces added to a running Quiver with `quiver ctl interface add af-packet`:
//! on a veth made for the test, deleted again, sized, and their receive queues' modes as
//! `show interfaces` reports them.

use std::process::Command;

use testkit::{require, wait_for, Needs};

use super::config;
use super::support::{entries, one, socket_mappings, Quiver, Scratch};

/// A veth pair made for a test, both ends up, deleted on drop; `None` (the test skipped) without
/// root or `ip`.
struct Veth {
    /// The end Quiver's AF_PACKET port opens.
    name: String,
    /// The other end, where the test's traffic comes from.
    peer: String,
}

impl Veth {
    fn new(test: &str, prefix: &str) -> Option<Veth> {
        let needs = Needs {
            root: true,
            hugepages: 0,
            tools: &["/usr/sbin/ip"],
        };
        if !require(test, &needs) {
            return None;
        }
        let name = format!("{prefix}{}", std::process::id() % 100_000);
        let v = Veth {
            peer: format!("{name}p"),
            name,
        };
        ip(&[
            "link", "add", &v.name, "type", "veth", "peer", "name", &v.peer,
        ]);
        ip(&["link", "set", &v.name, "up"]);
        ip(&["link", "set", &v.peer, "up"]);
        Some(v)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("/usr/sbin/ip")
            .args(["link", "del", &self.name])
            .output();
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("/usr/sbin/ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {args:?}: {out:?}");
}

/// A Quiver with the memif pair configuration in a scratch directory `tag`, its admin socket
/// there (the directory goes after the Quiver: declare them in this order).
fn start(tag: &str) -> (Scratch, Quiver) {
    let dir = Scratch::new(tag);
    let q = Quiver::start_at(
        &dir,
        tag,
        &config(&dir.path("m.sock")),
        &dir.path("admin.sock"),
    );
    (dir, q)
}

/// `quiver ctl interface add af-packet NAME --host-interface HOST`: its JSON answer.
fn add_af_packet(q: &Quiver, name: &str, host: &str) -> serde_json::Value {
    q.json(&[
        "interface",
        "add",
        "af-packet",
        name,
        "--host-interface",
        host,
    ])
}

#[test]
fn an_af_packet_interface_is_added_and_deleted_at_run_time() {
    let Some(veth) = Veth::new(
        "an_af_packet_interface_is_added_and_deleted_at_run_time",
        "qctl",
    ) else {
        return;
    };
    let (_dir, q) = start("afp");
    let added = add_af_packet(&q, "host0", &veth.name);
    assert!(added["index"].is_u64(), "{added}");
    let ifs = q.json(&["show", "interfaces"]);
    let host0 = one(&ifs, "name", "host0");
    assert_eq!(host0["type"], "af_packet");
    let err = q.refused_quietly(&[
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

/// `interface add af-packet --ring-kb` sizes the port's rings as `ring_kb` in `[[port]]` does,
/// `show interfaces` says so, and a size the configuration file would refuse is refused with
/// nothing made.
#[test]
fn an_af_packet_interface_added_at_run_time_takes_its_ring_size() {
    let test = "an_af_packet_interface_added_at_run_time_takes_its_ring_size";
    let Some(veth) = Veth::new(test, "qrkb") else {
        return;
    };
    let (_dir, q) = start("afp-ring");
    // `quiver ctl interface add af-packet NAME … --ring-kb KIB`: its JSON, or why it was refused.
    let add = |name: &str, ring_kb: &str, ok: bool| {
        let args = [
            "interface",
            "add",
            "af-packet",
            name,
            "--host-interface",
            &veth.name,
            "--ring-kb",
            ring_kb,
        ];
        if ok {
            q.json(&args).to_string()
        } else {
            q.refused_quietly(&args)
        }
    };
    assert!(
        socket_mappings(q.child.id()).is_empty(),
        "no AF_PACKET port yet"
    );

    // Refused, as the configuration file refuses them: not a power of two, out of range.
    for bad in ["0", "32", "1000", "131072"] {
        let err = add("host1", bad, false);
        assert!(
            err.contains(&format!(
                "invalid argument: ring_kb: {bad} must be a power of two from 64 to 65536"
            )),
            "--ring-kb {bad}: {err}"
        );
    }
    assert!(entries(&q.json(&["show", "interfaces"]), "name", "host1").is_empty());
    assert!(socket_mappings(q.child.id()).is_empty(), "no ring was made");

    // 256 KiB: the one worker's queue maps 256 KiB of receive ring and 256 of transmit ring.
    let added: serde_json::Value = serde_json::from_str(&add("host0", "256", true)).unwrap();
    assert!(added["index"].is_u64(), "{added}");
    let ifs = q.json(&["show", "interfaces"]);
    let host0 = one(&ifs, "name", "host0");
    assert_eq!(host0["type"], "af_packet");
    assert_eq!(host0["ring_kb"], 256);
    assert_eq!(
        one(&ifs, "name", "memif0")["ring_kb"],
        0,
        "not an AF_PACKET port"
    );
    assert_eq!(socket_mappings(q.child.id()), [(2 * 256) << 10]);
    let out = q.ctl(&["show", "interfaces"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l == "    rings: 256 KiB each way per queue"),
        "{text}"
    );

    // Without --ring-kb: the configuration file's default, 4096.
    add_af_packet(&q, "host2", &veth.peer);
    let ifs = q.json(&["show", "interfaces"]);
    assert_eq!(one(&ifs, "name", "host2")["ring_kb"], 4096);
    assert_eq!(
        socket_mappings(q.child.id()),
        [(2 * 256) << 10, (2 * 4096) << 10]
    );
    q.json(&["interface", "del", "host0"]);
    q.json(&["interface", "del", "host2"]);
    wait_for("the rings to go with their ports", 10, || {
        socket_mappings(q.child.id()).is_empty()
    });
}

/// `show interfaces` gives each receive queue's mode: an idle AF_PACKET queue goes to sleep on
/// its socket (`interrupt`), is polled again while frames come (`polling`), and sleeps again once
/// they stop. memif queues are always polled and show no mode.
#[test]
fn show_interfaces_has_an_idle_queue_in_interrupt_mode_and_a_busy_one_polling() {
    let test = "show_interfaces_has_an_idle_queue_in_interrupt_mode_and_a_busy_one_polling";
    let Some(veth) = Veth::new(test, "qrxm") else {
        return;
    };
    // The traffic: UDP broadcasts out of the peer, which Quiver's port receives.
    let net = 200 + std::process::id() % 50;
    ip(&[
        "addr",
        "add",
        &format!("198.18.{net}.1/24"),
        "dev",
        &veth.peer,
    ]);
    let (_dir, q) = start("rx-mode");
    add_af_packet(&q, "host0", &veth.name);
    let host0 = |q: &Quiver| one(&q.json(&["show", "interfaces"]), "name", "host0").clone();
    let modes = |q: &Quiver| host0(q)["rx_modes"].clone();
    let memif0 = one(&q.json(&["show", "interfaces"]), "name", "memif0").clone();
    assert_eq!(memif0["rx_modes"], serde_json::json!([]), "always polled");

    // Idle: asleep, in the JSON and in the table.
    wait_for("host0's idle queue to sleep", 30, || {
        modes(&q) == serde_json::json!(["interrupt"])
    });
    let out = q.ctl(&["show", "interfaces"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l == "    rx mode: interrupt"),
        "{text}"
    );

    // Frames: polled again while they come. They come from a thread of their own, without a
    // pause longer than the queue's idle time, so the queue is awake whenever `show` looks
    // (a burst per look let it fall asleep again before the slower `quiver ctl` answered).
    let received = host0(&q)["rx_packets"].as_u64().unwrap();
    let sender = std::net::UdpSocket::bind(format!("198.18.{net}.1:0")).unwrap();
    sender.set_broadcast(true).unwrap();
    let to = format!("198.18.{net}.255:9");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let sent = std::thread::scope(|s| {
        let traffic = s.spawn(|| {
            let mut sent = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                sender.send_to(&[0x5a; 64], &to).unwrap();
                sent += 1;
                // Pacing, not synchronisation: a frame every 100 µs keeps the queue awake.
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            sent
        });
        wait_for("host0's queue to be polled while frames come", 30, || {
            modes(&q) == serde_json::json!(["polling"])
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        traffic.join().unwrap()
    });
    assert!(
        host0(&q)["rx_packets"].as_u64().unwrap() > received,
        "the frames were received ({sent} sent)"
    );

    // Quiet again: asleep again.
    wait_for("host0's queue to sleep again", 30, || {
        modes(&q) == serde_json::json!(["interrupt"])
    });
    let slept = q.json(&["show", "errors"]);
    let count = |reason: &str| {
        slept
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["node"] == "port-input" && e["reason"] == reason)
            .map_or(0, |e| e["count"].as_u64().unwrap())
    };
    assert!(count("queue-slept") >= 2, "{slept:#}");
    assert!(count("queue-woken") >= 1, "{slept:#}");
}

/// Adding AF_PACKET interfaces at run time never makes the worker wait: their sockets' rings are
/// set up off the workers. Setting up a ring waits in the kernel for an RCU grace period, tens of
/// milliseconds under load in which a worker would forward nothing while the other ports'
/// receive rings overflowed (the soak's steady KERNEL flow lost frames at each KERNEL Request).
/// A polling worker switches out of its own will only to wait in the kernel, so its voluntary
/// context switches count those waits.
#[test]
fn adding_af_packet_interfaces_never_makes_the_polling_worker_wait() {
    let test = "adding_af_packet_interfaces_never_makes_the_polling_worker_wait";
    let Some(veth) = Veth::new(test, "qwk") else {
        return;
    };
    let dir = Scratch::new("afp-wait");
    let polling = config(&dir.path("m.sock")).replace(r#"idle = "adaptive""#, r#"idle = "poll""#);
    assert!(polling.contains(r#"idle = "poll""#), "{polling}");
    let q = Quiver::start_at(&dir, "afp-wait", &polling, &dir.path("admin.sock"));
    let worker = thread_named(q.child.id(), "quiver-wk0");
    const ADDED: u64 = 8;
    let before = voluntary_switches(q.child.id(), worker);
    for i in 0..ADDED {
        let name = format!("host{i}");
        let end = if i % 2 == 0 { &veth.name } else { &veth.peer };
        let added = add_af_packet(&q, &name, end);
        assert!(added["index"].is_u64(), "{added}");
        q.json(&["interface", "del", &name]);
    }
    let waits = voluntary_switches(q.child.id(), worker) - before;
    assert!(
        waits < ADDED,
        "the worker waited {waits} times while {ADDED} AF_PACKET interfaces were added"
    );
}

/// The id of `pid`'s thread named `name`.
fn thread_named(pid: u32, name: &str) -> u32 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|tid| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .is_ok_and(|c| c.trim() == name)
        })
        .unwrap_or_else(|| panic!("no thread {name} in process {pid}"))
}

/// How often thread `tid` of `pid` gave up its CPU to wait.
fn voluntary_switches(pid: u32, tid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no voluntary_ctxt_switches in {status}"))
}
