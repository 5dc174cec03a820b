//! The responder as a process, against peers built here: it answers ARP and echo requests
//! exactly, counts what it ignores by reason, reconnects when its master returns, and sleeps while
//! idle.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use memif::{InterfaceConfig, Slave, SocketAddress};

use crate::common::sock_path;
use crate::frames::{
    arp_request, echo_request, expected_arp_reply, expected_echo_reply, garbage, RESPONDER_IP,
};
use crate::peers::{
    exchange, master_with_interface, recv_frames, send_frames, wait_up, MasterPeer,
};
use crate::tool::Tool;

pub(crate) fn spawn_responder(socket: &str, extra: &str) -> Tool {
    let args =
        format!("--socket {socket} --ip 192.168.1.2/24 --mac 02:fe:5a:00:00:01 --json {extra}");
    Tool::spawn("responder", &args)
}

/// A master serving interface `id` on `path`, and the responder (`extra` arguments) connected
/// to it as its slave: both links up.
fn responder_on_master(path: &Path, id: u32, extra: &str) -> (MasterPeer, Tool) {
    let mut p = MasterPeer(master_with_interface(path, id), id);
    let mut r = spawn_responder(path.to_str().unwrap(), extra);
    wait_up(&mut p, 30);
    r.wait_line("connected memif", 30);
    (p, r)
}

/// Time the process has spent on a CPU, from /proc/PID/schedstat.
fn cpu_time(pid: u32) -> Option<Duration> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

#[test]
fn responder_answers_arp_and_echo_and_counts_garbage() {
    let path = sock_path("ex_responder");
    let (mut p, r) = responder_on_master(&path, 0, "--role slave");
    exchange(&mut p, arp_request(RESPONDER_IP), expected_arp_reply());
    exchange(&mut p, echo_request(1, 56), expected_echo_reply(1, 56));
    // Garbage, then one more echo request: its reply comes back first (frames stay in order)
    // only if no garbage was answered.
    let g = garbage();
    let mut frames: Vec<Vec<u8>> = g.iter().map(|(_, f, _)| f.clone()).collect();
    frames.push(echo_request(2, 1000));
    send_frames(&mut p, &frames);
    assert_eq!(
        recv_frames(&mut p, 1, 20),
        vec![expected_echo_reply(2, 1000)]
    );
    r.signal(nix::sys::signal::Signal::SIGTERM);
    let done = r.finish(20);
    assert!(done.status.success(), "{}", done.stderr);
    let j = done.json();
    assert_eq!(j["arp_replies"], 1, "{j}");
    assert_eq!(j["echo_replies"], 2, "{j}");
    assert_eq!(j["ignored"], g.len(), "{j}");
    assert_eq!(j["received"], g.len() + 3, "{j}");
    assert_eq!(j["replies_dropped"], 0, "{j}");
    let mut by_reason: HashMap<&str, u64> = HashMap::new();
    for (_, _, why) in &g {
        *by_reason.entry(why.name()).or_default() += 1;
    }
    for (name, n) in by_reason {
        assert_eq!(j["ignored_by_reason"][name], n, "{name}: {j}");
    }
}

#[test]
fn responder_reconnects_when_its_master_returns() {
    let path = sock_path("ex_responder_reconnect");
    let (mut p, mut r) = responder_on_master(&path, 4, "--id 4");
    exchange(&mut p, arp_request(RESPONDER_IP), expected_arp_reply());
    drop(p);
    r.wait_line("disconnected memif", 30);
    let mut p = MasterPeer(master_with_interface(&path, 4), 4);
    wait_up(&mut p, 30);
    r.wait_line("connected memif", 30);
    exchange(&mut p, echo_request(9, 20), expected_echo_reply(9, 20));
    r.signal(nix::sys::signal::Signal::SIGINT);
    let j = r.finish(20).json();
    assert_eq!(
        (j["connects"].as_u64(), j["disconnects"].as_u64()),
        (Some(2), Some(1)),
        "{j}"
    );
    assert_eq!(
        (j["arp_replies"].as_u64(), j["echo_replies"].as_u64()),
        (Some(1), Some(1))
    );
}

#[test]
fn responder_as_master_sleeps_while_idle() {
    let name = format!("@quiver-ex-{}-resp-master", std::process::id());
    let mut r = spawn_responder(&name, "--role master --id 2 --secret s3");
    r.wait_line("listening", 30);
    let mut cfg = InterfaceConfig::new(2);
    cfg.secret = Some("s3".into());
    let mut s = Slave::new(SocketAddress::parse(&name), cfg).unwrap();
    s.retry_interval = Duration::from_millis(10);
    wait_up(&mut s, 30);
    exchange(&mut s, echo_request(3, 64), expected_echo_reply(3, 64));
    // Idle now: over a measurement window it should use next to no CPU (a spinning poller
    // would use most of the window even on a loaded machine).
    // Without schedstat (a kernel without CONFIG_SCHEDSTATS) this is a skip: a failure under
    // QUIVER_REQUIRE_SYSTEM_TESTS=1.
    let pid = r.child.id();
    let window = Duration::from_millis(1500);
    match cpu_time(pid) {
        Some(before) => {
            // A measurement window, not a wait for anything.
            std::thread::sleep(window);
            let used = cpu_time(pid).unwrap() - before;
            assert!(
                used < window / 10,
                "idle responder used {used:?} of CPU in {window:?}"
            );
        }
        None => testkit::unavailable(
            "responder_as_master_sleeps_while_idle",
            &format!("no /proc/{pid}/schedstat to measure the idle responder's CPU time"),
        ),
    }
    // And it still wakes up for frames.
    exchange(&mut s, arp_request(RESPONDER_IP), expected_arp_reply());
    r.signal(nix::sys::signal::Signal::SIGTERM);
    let j = r.finish(20).json();
    assert!(j["sleeps"].as_u64().unwrap() >= 1, "{j}");
    assert!(j["wakeups"].as_u64().unwrap() >= 1, "{j}");
}
