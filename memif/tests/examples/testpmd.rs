//! Both examples against `dpdk-testpmd`'s memif servers (io and macswap forwarding); each test
//! takes its turn at testpmd, and skips (or fails, when system tests are required) without it.

use std::path::PathBuf;

use crate::common::{sock_path, testpmd_turn, MemifTestPmd};
use crate::frames::{
    arp_request, echo_request, expected_arp_reply, expected_echo_reply, RESPONDER_IP,
};
use crate::peers::{exchange, recv_frames, send_frames, slave_peer, wait_up};
use crate::responder::spawn_responder;
use crate::traffic::{assert_counts, run_traffic};

/// testpmd with one `net_memifN` server per socket (file sockets, removed before and after),
/// forwarding with `mode` and printing statistics every second.
fn testpmd_servers(tag: &str, sockets: &[PathBuf], mode: &str) -> MemifTestPmd {
    let vdevs: Vec<String> = sockets
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let _ = std::fs::remove_file(s);
            format!(
                "net_memif{i},role=server,id=0,socket={},socket-abstract=no",
                s.display()
            )
        })
        .collect();
    let stats = ["--stats-period=1"];
    MemifTestPmd::start(tag, &vdevs, mode, &stats, sockets.to_vec())
}

#[test]
fn traffic_through_dpdk_testpmd_io_between_two_memif_servers() {
    let Some(_serial) = testpmd_turn("traffic_through_dpdk_testpmd_io_between_two_memif_servers")
    else {
        return;
    };
    let (a, b) = (sock_path("ex_pmd_io_a"), sock_path("ex_pmd_io_b"));
    let mut pmd = testpmd_servers("io", &[a.clone(), b.clone()], "io");
    pmd.wait_output("Port 1:", 30);
    // At most 512 frames in flight: testpmd io drops what our receive ring cannot take, and
    // this (debug) build may receive more slowly than testpmd forwards.
    let args = format!(
        "--tx {} --rx {} --count 20000 --window 512 --json --expect-lossless",
        a.display(),
        b.display()
    );
    let j = run_traffic("io", &args);
    assert_counts(
        &j,
        &[
            ("sent", 20000),
            ("received", 20000),
            ("lost", 0),
            ("duplicated", 0),
            ("reordered", 0),
            ("corrupted", 0),
        ],
    );
}

#[test]
fn traffic_loops_through_dpdk_testpmd_macswap() {
    let Some(_serial) = testpmd_turn("traffic_loops_through_dpdk_testpmd_macswap") else {
        return;
    };
    let a = sock_path("ex_pmd_macswap");
    let mut pmd = testpmd_servers("macswap", std::slice::from_ref(&a), "macswap");
    pmd.wait_output("Port 0:", 30);
    let args = format!(
        "--tx {} --loop --count 20000 --size 1000 --window 512 --json --expect-lossless",
        a.display()
    );
    assert_counts(
        &run_traffic("macswap", &args),
        &[("sent", 20000), ("unique", 20000), ("corrupted", 0)],
    );
}

#[test]
fn responder_answers_through_dpdk_testpmd() {
    let Some(_serial) = testpmd_turn("responder_answers_through_dpdk_testpmd") else {
        return;
    };
    // testpmd io-forwards between the responder (port 0) and our slave (port 1).
    let (a, b) = (sock_path("ex_pmd_resp_a"), sock_path("ex_pmd_resp_b"));
    let mut pmd = testpmd_servers("resp", &[a.clone(), b.clone()], "io");
    pmd.wait_output("Port 1:", 30);
    let mut r = spawn_responder(a.to_str().unwrap(), "");
    let mut s = slave_peer(&b, 0);
    wait_up(&mut s, 30);
    r.wait_line("connected memif", 30);
    pmd.wait_output("packets/burst=", 30);
    exchange(&mut s, arp_request(RESPONDER_IP), expected_arp_reply());
    let requests: Vec<Vec<u8>> = (0..50)
        .map(|i| echo_request(i, 64 + usize::from(i)))
        .collect();
    send_frames(&mut s, &requests);
    let want: Vec<Vec<u8>> = (0..50)
        .map(|i| expected_echo_reply(i, 64 + usize::from(i)))
        .collect();
    assert_eq!(recv_frames(&mut s, 50, 20), want);
    r.signal(nix::sys::signal::Signal::SIGTERM);
    let j = r.finish(20).json();
    assert_counts(
        &j,
        &[("arp_replies", 1), ("echo_replies", 50), ("ignored", 0)],
    );
}
