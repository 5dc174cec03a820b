//! The traffic tool as a process: through test forwarders (faithful, or injecting exactly known
//! faults it must report), looped back to itself, and limited by duration, window and rate.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::sock_path;
use crate::peers::{master_with_interface, slave_peer, MasterPeer, TestPeer};
use crate::stream;
use crate::tool::{Finished, Tool};

/// What a test forwarder does wrong, by sequence number.
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    duplicate: Option<u64>,
    corrupt: Option<u64>,
    /// Swaps this frame with the next one.
    swap: Option<u64>,
    drop: Option<u64>,
}

/// One of each fault, on frames 100, 200, 300 and 400.
const FAULTS: Faults = Faults {
    duplicate: Some(100),
    corrupt: Some(200),
    swap: Some(300),
    drop: Some(400),
};

/// Applies `faults` to one frame on its way through.
fn mangle(f: &[u8], faults: &Faults, held: &mut Option<Vec<u8>>, out: &mut VecDeque<Vec<u8>>) {
    let seq = stream::header(f).map(|(_, s)| s);
    if seq.is_some() && seq == faults.drop {
        return;
    }
    let mut v = f.to_vec();
    if seq.is_some() && seq == faults.corrupt {
        let last = v.len() - 1;
        v[last] ^= 0xff;
    }
    if seq.is_some() && seq == faults.swap {
        *held = Some(v);
        return;
    }
    if seq.is_some() && seq == faults.duplicate {
        out.push_back(v.clone());
    }
    out.push_back(v);
    if seq.is_some() && seq == faults.swap.map(|s| s + 1) {
        out.extend(held.take());
    }
}

/// Moves frames from `from` to `to` (applying `faults`) until `stop` is set and nothing is
/// left; never drops a frame for lack of ring space.
fn forward(from: &mut dyn TestPeer, to: &mut dyn TestPeer, faults: Faults, stop: &AtomicBool) {
    let mut queue: VecDeque<Vec<u8>> = VecDeque::new();
    let mut held = None;
    while !(stop.load(Ordering::Relaxed) && queue.is_empty()) {
        from.pump();
        to.pump();
        if queue.len() < 512 {
            from.iface().rx_burst(0, 64, &mut |f: &[u8]| {
                mangle(f, &faults, &mut held, &mut queue);
            });
        }
        if queue.is_empty() {
            std::thread::yield_now();
            continue;
        }
        let refs: Vec<&[u8]> = queue.iter().take(64).map(Vec::as_slice).collect();
        let n = to.iface().tx_burst(0, &refs);
        queue.drain(..n);
    }
}

/// Runs the traffic tool with `args` while a forwarder thread moves frames from `from` to `to`.
fn through_forwarder(
    args: &str,
    ready_line: &str,
    make_peers: impl FnOnce() -> (Box<dyn TestPeer>, Box<dyn TestPeer>),
    faults: Faults,
) -> Finished {
    let mut tool = Tool::spawn("traffic", args);
    tool.wait_line(ready_line, 30);
    let (mut from, mut to) = make_peers();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        let fwd = s.spawn(move || forward(from.as_mut(), to.as_mut(), faults, stop));
        let done = tool.finish(120);
        stop.store(true, Ordering::Relaxed);
        fwd.join().unwrap();
        done
    })
}

/// [`through_forwarder`] for the tool sending as master on socket A (`<tag>_a`) and receiving
/// as slave on B (`<tag>_b`), with `more` arguments; the forwarder is the other end of both.
fn through_forwarder_a_to_b(tag: &str, more: &str, faults: Faults) -> Finished {
    let (a, b) = (
        sock_path(&format!("{tag}_a")),
        sock_path(&format!("{tag}_b")),
    );
    // B must listen before the tool's slave gives up (it retries meanwhile).
    let b_master = master_with_interface(&b, 0);
    let args = format!(
        "--tx {} --tx-role master --rx {} --rx-role slave {more}",
        a.display(),
        b.display()
    );
    through_forwarder(
        &args,
        "listening tx",
        move || {
            let from: Box<dyn TestPeer> = Box::new(slave_peer(&a, 0));
            let to: Box<dyn TestPeer> = Box::new(MasterPeer(b_master, 0));
            (from, to)
        },
        faults,
    )
}

pub(crate) fn assert_counts(j: &serde_json::Value, want: &[(&str, u64)]) {
    for (k, v) in want {
        assert_eq!(j[*k].as_u64(), Some(*v), "{k} in {j}");
    }
}

#[test]
fn traffic_through_a_forwarder_is_lossless() {
    let more = "--count 20000 --size 100 --json --expect-lossless";
    let done = through_forwarder_a_to_b("ex_fwd", more, Faults::default());
    assert!(done.status.success(), "{}", done.stderr);
    let j = done.json();
    assert_counts(
        &j,
        &[
            ("sent", 20000),
            ("received", 20000),
            ("unique", 20000),
            ("lost", 0),
            ("duplicated", 0),
            ("reordered", 0),
            ("corrupted", 0),
            ("foreign", 0),
        ],
    );
    assert_eq!(j["lossless"], true);
    assert_eq!(j["threads"], true);
}

#[test]
fn traffic_both_masters_on_one_socket_through_a_forwarder() {
    // One listening socket serves the tool's tx (id 0) and rx (id 1): one endpoint, one loop.
    let a = sock_path("ex_fwd_shared");
    let args = format!(
        "--tx {sa} --tx-role master --tx-id 0 --rx {sa} --rx-role master --rx-id 1 \
         --count 5000 --size 1514 --json --expect-lossless",
        sa = a.display()
    );
    let a2 = a.clone();
    let done = through_forwarder(
        &args,
        "listening tx",
        move || {
            let from: Box<dyn TestPeer> = Box::new(slave_peer(&a2, 0));
            let to: Box<dyn TestPeer> = Box::new(slave_peer(&a2, 1));
            (from, to)
        },
        Faults::default(),
    );
    assert!(done.status.success(), "{}", done.stderr);
    let j = done.json();
    assert_counts(&j, &[("sent", 5000), ("unique", 5000), ("lost", 0)]);
    assert_eq!(j["threads"], false);
}

#[test]
fn traffic_reports_exactly_the_faults_a_forwarder_injects() {
    let more = "--count 1000 --drain 500ms --json --expect-lossless";
    let done = through_forwarder_a_to_b("ex_faults", more, FAULTS);
    assert_eq!(done.status.code(), Some(1), "--expect-lossless fails");
    let j = done.json();
    assert_counts(
        &j,
        &[
            ("sent", 1000),
            ("received", 1000), // one dropped, one duplicated
            ("unique", 999),
            ("lost", 1),
            ("duplicated", 1),
            ("reordered", 1),
            ("corrupted", 1),
            ("foreign", 0),
        ],
    );
    assert_eq!(j["lossless"], false);
}

#[test]
fn traffic_without_verification_still_tracks_every_sequence_number() {
    // --no-verify copies only each frame's headers out of the ring; loss, duplication and order
    // are still judged from every frame's sequence number (corruption is not looked for).
    let more = "--count 1000 --drain 500ms --json --no-verify --size 3000";
    let done = through_forwarder_a_to_b("ex_nv", more, FAULTS);
    assert!(done.status.success(), "{}", done.stderr);
    let j = done.json();
    assert_counts(
        &j,
        &[
            ("sent", 1000),
            ("received", 1000),
            ("unique", 999),
            ("lost", 1),
            ("duplicated", 1),
            ("reordered", 1),
            ("corrupted", 0),
            ("foreign", 0),
        ],
    );
    assert_eq!(j["verified"], false);
    assert_eq!(j["lossless"], false);
}

/// Runs the traffic tool with `args` to its end (120 s at most); it must succeed (`what` names
/// the run if not). Returns the JSON it printed last.
pub(crate) fn run_traffic(what: &str, args: &str) -> serde_json::Value {
    let done = Tool::spawn("traffic", args).finish(120);
    assert!(
        done.status.success(),
        "{what}: {}\n{}",
        done.stdout.join("\n"),
        done.stderr
    );
    done.json()
}

fn loopback(name: &str, tx_role: &str, rx_role: &str, extra: &str) -> serde_json::Value {
    let sock = format!("@quiver-ex-{}-{name}", std::process::id());
    let args = format!(
        "--tx {sock} --tx-role {tx_role} --rx {sock} --rx-role {rx_role} --json \
         --expect-lossless {extra}"
    );
    run_traffic(name, &args)
}

#[test]
fn traffic_loops_back_to_itself() {
    // Our slave sends to our master on the same socket, on two threads and in one loop.
    let j = loopback("lo_threads", "slave", "master", "--count 50000");
    assert_counts(
        &j,
        &[("sent", 50000), ("unique", 50000), ("received", 50000)],
    );
    assert_eq!(j["threads"], true);
    assert!(j["rx_busy_cycles_per_packet"].as_f64().unwrap() > 0.0);
    let j = loopback(
        "lo_single",
        "slave",
        "master",
        "--count 50000 --single-loop",
    );
    assert_counts(&j, &[("sent", 50000), ("unique", 50000)]);
    assert_eq!(j["threads"], false);
    // Master sends to slave; jumbo frames travel as chained 2048-byte buffers.
    let j = loopback("lo_jumbo", "master", "slave", "--count 3000 --size 9000");
    assert_counts(&j, &[("sent", 3000), ("unique", 3000), ("corrupted", 0)]);
    assert_eq!(j["rx_counters"]["rx_packets"], 3000);
    // A rate limit holds: 2000 frames at 20 kframes/s take at least ~0.1 s.
    let j = loopback("lo_rate", "slave", "master", "--count 2000 --rate 20k");
    assert_counts(&j, &[("sent", 2000), ("unique", 2000)]);
    assert!(j["tx_seconds"].as_f64().unwrap() >= 0.09, "{j}");
}

#[test]
fn traffic_duration_and_window() {
    let j = loopback(
        "lo_window",
        "slave",
        "master",
        "--duration 300ms --window 64 --burst 16",
    );
    assert!(j["sent"].as_u64().unwrap() > 0, "{j}");
    assert_eq!(j["sent"], j["unique"]);
    assert!(j["tx_seconds"].as_f64().unwrap() >= 0.29, "{j}");
}
