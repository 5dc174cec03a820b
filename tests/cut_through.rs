//! Cut-through as an operator sees it: the real `quiver` binary with two ETHERNET memif ports
//! cross-connected, memif CNFs on both, and `quiver ctl`. Frames go from one peer's buffers
//! straight into the other's (`show cross-connects` says `cut-through`, the ports count
//! `rx-cut-through`, no graph node sees them); a trace or a capture puts them through the
//! graph again; deleting the cross-connect stops them; a peer that stops reading holds
//! frames back in the sender's ring instead of losing them.

mod support;

use std::path::Path;

use serde_json::Value;
use support::{cnfs, one, trace_paths, Cnf, Quiver, Scratch};
use testkit::wait_for;

/// memif0 ↔ memif1 (ETHERNET, cross-connected), and memif2 (IP mode) ↔ memif3, which cannot
/// be cut through.
fn config(memif_socket: &Path) -> String {
    let port = |name: &str, id: u32, mode: &str| {
        format!(
            "[[port]]\nname = \"{name}\"\ntype = \"memif\"\nrole = \"master\"\nsocket = \"{}\"\nid = {id}\nmode = \"{mode}\"\n",
            memif_socket.display()
        )
    };
    format!(
        "[dataplane]\ncores = [1]\nidle = \"adaptive\"\n[buffers]\ncount = 4096\nhugepages = \"never\"\n\
         {}{}{}{}\
         [[xconnect]]\na = \"memif0\"\nb = \"memif1\"\n\
         [[xconnect]]\na = \"memif2\"\nb = \"memif3\"\n",
        port("memif0", 0, "ethernet"),
        port("memif1", 1, "ethernet"),
        port("memif2", 2, "ip"),
        port("memif3", 3, "ethernet"),
    )
}

/// A frame with sequence number `seq` (bytes 14..18), every byte derived from it.
fn frame(seq: u32) -> Vec<u8> {
    let len = 60 + (seq as usize * 37) % 1400;
    let mut f: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(13).wrapping_add(seq) as u8)
        .collect();
    f[0..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xbb, 2, 0, 0, 0, 0, 0xaa]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

fn frames(seqs: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    seqs.map(frame).collect()
}

/// Sends `sent` from a and waits for b to have them all; checks they are intact, in order.
fn through(a: &mut Cnf, b: &mut Cnf, sent: &[Vec<u8>]) {
    a.send(sent);
    let mut got = Vec::new();
    wait_for("the frames at the other CNF", 30, || {
        a.poll();
        b.receive(&mut got);
        got.len() >= sent.len()
    });
    assert!(got == sent, "every frame once, in order, intact");
}

fn path_of(q: &Quiver, a: &str) -> String {
    let x = q.json(&["show", "cross-connects"]);
    one(&x, "a", a)["path"].as_str().unwrap().to_string()
}

fn interface(q: &Quiver, name: &str) -> Value {
    one(&q.json(&["show", "interfaces"]), "name", name).clone()
}

fn cut_through_count(q: &Quiver, name: &str) -> u64 {
    interface(q, name)["detail"]["rx-cut-through"]
        .as_u64()
        .unwrap_or(0)
}

fn node_packets(q: &Quiver, node: &str) -> u64 {
    let rt = q.json(&["show", "runtime"]);
    rt["workers"][0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .map_or(0, |n| n["packets"].as_u64().unwrap())
}

/// Records in a classic pcap file.
fn pcap_records(file: &Path) -> usize {
    let bytes = std::fs::read(file).unwrap();
    let mut at = 24;
    let mut n = 0;
    while at + 16 <= bytes.len() {
        let caplen = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + caplen;
        n += 1;
    }
    assert_eq!(at, bytes.len(), "whole records");
    n
}

#[test]
fn memif_ports_cross_connected_pass_frames_peer_to_peer_and_step_aside_for_trace_and_capture() {
    let dir = Scratch::new("cut-through");
    let memif_socket = dir.path("memif.sock");
    let mut q = Quiver::start(&dir, &config(&memif_socket), &[]);
    let (mut a, mut b) = cnfs(&mut q, &memif_socket);
    assert_eq!(path_of(&q, "memif0"), "cut-through");
    assert_eq!(
        path_of(&q, "memif2"),
        "graph",
        "an IP-mode port needs the graph"
    );

    // Both ways, straight from peer to peer: the ports count it, no graph node sees it.
    through(&mut a, &mut b, &frames(0..2000));
    through(&mut b, &mut a, &frames(5000..5500));
    assert_eq!(cut_through_count(&q, "memif0"), 2000);
    assert_eq!(cut_through_count(&q, "memif1"), 500);
    let (m0, m1) = (interface(&q, "memif0"), interface(&q, "memif1"));
    assert_eq!(
        (m0["rx_packets"].as_u64(), m1["tx_packets"].as_u64()),
        (Some(2000), Some(2000))
    );
    assert_eq!(
        (m1["rx_packets"].as_u64(), m0["tx_packets"].as_u64()),
        (Some(500), Some(500))
    );
    assert_eq!(m1["detail"]["tx-peer-to-peer"], 2000);
    assert_eq!(node_packets(&q, "port-input"), 2500);
    assert_eq!(node_packets(&q, "ethernet-input"), 0);
    assert_eq!(node_packets(&q, "interface-output"), 0);

    // A trace of port-input: the frames go through the graph, to be traced.
    q.json(&["trace", "add", "port-input", "5"]);
    through(&mut a, &mut b, &frames(10_000..10_005));
    let trace = q.json(&["show", "trace"]);
    let paths = trace_paths(&trace);
    assert_eq!(paths.len(), 5, "{trace:#}");
    for nodes in paths {
        assert_eq!(
            nodes[..4],
            [
                "port-input",
                "ethernet-input",
                "l2-xconnect",
                "interface-output"
            ],
            "{trace:#}"
        );
    }
    assert_eq!(cut_through_count(&q, "memif0"), 2000);
    q.json(&["clear", "trace"]);
    through(&mut a, &mut b, &frames(10_005..10_105));
    assert_eq!(cut_through_count(&q, "memif0"), 2100, "cut through again");

    // A capture of memif1 sees the frames it sends: they go through the graph meanwhile.
    let pcap = dir.path("memif1.pcap");
    q.json(&[
        "capture",
        "start",
        "memif1",
        "--file",
        pcap.to_str().unwrap(),
    ]);
    through(&mut a, &mut b, &frames(20_000..20_007));
    q.json(&["capture", "stop", "memif1"]);
    assert_eq!(pcap_records(&pcap), 7);
    assert_eq!(cut_through_count(&q, "memif0"), 2100);
    through(&mut a, &mut b, &frames(20_007..20_107));
    assert_eq!(cut_through_count(&q, "memif0"), 2200, "cut through again");

    // Without the cross-connect nothing reaches b; with it again, frames cut through.
    q.json(&["xconnect", "del", "memif0"]);
    let rx_before = interface(&q, "memif0")["rx_packets"].as_u64().unwrap();
    a.send(&frames(30_000..30_010));
    wait_for("memif0 to receive them", 30, || {
        a.poll();
        interface(&q, "memif0")["rx_packets"].as_u64().unwrap() == rx_before + 10
    });
    let mut got = Vec::new();
    b.receive(&mut got);
    assert!(got.is_empty(), "nothing crosses once disconnected: {got:?}");
    assert_eq!(
        interface(&q, "memif1")["tx_packets"],
        2000 + 5 + 100 + 7 + 100
    );
    q.json(&["xconnect", "add", "memif0", "memif1"]);
    assert_eq!(path_of(&q, "memif0"), "cut-through");
    through(&mut a, &mut b, &frames(30_010..30_110));
    assert_eq!(cut_through_count(&q, "memif0"), 2300);
    let m0 = interface(&q, "memif0");
    assert_eq!(
        (m0["rx_dropped"].as_u64(), m0["tx_dropped"].as_u64()),
        (Some(0), Some(0))
    );
    q.check_running();
}

#[test]
fn a_peer_that_stops_reading_holds_frames_back_in_the_senders_ring_without_loss() {
    let dir = Scratch::new("cut-through-backpressure");
    let memif_socket = dir.path("memif.sock");
    let mut q = Quiver::start(&dir, &config(&memif_socket), &[]);
    let (mut a, mut b) = cnfs(&mut q, &memif_socket);
    assert_eq!(path_of(&q, "memif0"), "cut-through");

    // b reads nothing: memif1's ring fills (b posted a ring of buffers), then a's: once
    // memif1 has no room, nothing more is taken from a.
    const N: u32 = 5000;
    let all = frames(0..N);
    let ring = 1 << memif::InterfaceConfig::new(0).log2_ring_size;
    let mut sent = 0;
    wait_for("memif1's ring and a's full", 30, || {
        a.poll();
        let refs: Vec<&[u8]> = all[sent..].iter().map(|f| &f[..]).collect();
        sent += a.0.interface_mut().tx_burst(0, &refs);
        // In this order: memif1 full first, then a's ring full after it.
        interface(&q, "memif1")["tx_packets"] == ring as u64
            && a.0.interface().tx_unconsumed(0) == ring
    });
    let m0 = interface(&q, "memif0");
    assert_eq!(
        m0["rx_packets"], ring as u64,
        "taken from a: what memif1 took"
    );
    assert_eq!(sent, 2 * ring, "the rest waits in a's ring");
    assert_eq!(interface(&q, "memif1")["tx_dropped"], 0);

    // b reads again: every frame arrives, once, in order.
    let mut got = Vec::new();
    wait_for("every frame at b", 60, || {
        a.poll();
        let refs: Vec<&[u8]> = all[sent..].iter().map(|f| &f[..]).collect();
        sent += a.0.interface_mut().tx_burst(0, &refs);
        b.receive(&mut got);
        got.len() >= N as usize
    });
    assert!(got == all, "every frame once, in order, intact");
    let m1 = interface(&q, "memif1");
    assert_eq!(
        (m1["tx_packets"].as_u64(), m1["tx_dropped"].as_u64()),
        (Some(N as u64), Some(0))
    );
    assert_eq!(cut_through_count(&q, "memif0"), N as u64);
    q.check_running();
}

#[test]
fn frames_towards_a_peer_that_left_are_counted_and_it_finds_the_cut_through_when_back() {
    let dir = Scratch::new("cut-through-reconnect");
    let memif_socket = dir.path("memif.sock");
    let mut q = Quiver::start(&dir, &config(&memif_socket), &[]);
    let (mut a, mut b) = cnfs(&mut q, &memif_socket);
    through(&mut a, &mut b, &frames(0..100));
    assert_eq!(cut_through_count(&q, "memif0"), 100);

    // b leaves: what a sends meanwhile is dropped at memif1, counted as the link being down.
    drop(b);
    wait_for("memif1 down", 30, || {
        interface(&q, "memif1")["link"] != "up"
    });
    a.send(&frames(100..110));
    wait_for("the frames counted as dropped", 30, || {
        a.poll();
        interface(&q, "memif1")["detail"]["tx-link-down"] == 10
    });
    let m0 = interface(&q, "memif0");
    assert_eq!(
        m0["rx_packets"], 110,
        "received, then dropped towards the absent peer"
    );

    // b comes back: the cut-through carries a's frames again.
    let mut b = Cnf::connect(&memif_socket, 1);
    wait_for("b back", 30, || b.is_up());
    wait_for("memif1 up", 30, || interface(&q, "memif1")["link"] == "up");
    through(&mut a, &mut b, &frames(110..1110));
    assert_eq!(cut_through_count(&q, "memif0"), 1100);
    assert_eq!(path_of(&q, "memif0"), "cut-through");
    q.check_running();
}
