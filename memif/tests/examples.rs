//! The examples (`responder`, `traffic`) as real processes, against peers built here with the
//! crate's API, against test forwarders (faithful and misbehaving) and against `dpdk-testpmd`;
//! plus their frame parsers and checkers in-process (tables and property tests).
//!
//! The example binaries are built once per test run with the `cargo` that runs the tests
//! (`cargo build --examples --message-format=json`, which also says where they are). Readiness is
//! never a sleep: tests wait, with deadlines, for lines the tools print (`listening …`,
//! `connected …`), for link state, or for frames. DPDK tests need root, `dpdk-testpmd` and free
//! hugepages; without them they print why and pass, unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`.

mod common;

#[allow(dead_code)]
#[path = "../examples/common/reply.rs"]
mod reply;
#[allow(dead_code)]
#[path = "../examples/common/reply6.rs"]
mod reply6;
#[allow(dead_code)]
#[path = "../examples/common/stream.rs"]
mod stream;
#[path = "../examples/common/wire.rs"]
mod wire;

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{sock_path, testpmd_turn, wait_for, MemifTestPmd};
use memif::{Interface, InterfaceConfig, Master, MasterConfig, Slave, SocketAddress};
use proptest::prelude::*;
use reply::{respond, Host, Ignored, Outcome};

// ---------------------------------------------------------------------------------------------
// Building and running the examples
// ---------------------------------------------------------------------------------------------

/// Builds every example of this crate once (same profile as these tests) and returns where
/// each binary is.
fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    let built = BUILT.get_or_init(build_examples);
    built
        .get(name)
        .unwrap_or_else(|| panic!("cargo built no example `{name}`: {built:?}"))
        .clone()
}

fn build_examples() -> HashMap<String, PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "-p",
        "memif",
        "--examples",
        "--message-format=json-render-diagnostics",
    ])
    .current_dir(env!("CARGO_MANIFEST_DIR"))
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd.output().expect("run cargo build --examples");
    assert!(out.status.success(), "cargo build --examples failed");
    let mut found = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_example = v["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "example"));
        if let (true, Some(exe), Some(name)) = (
            v["reason"] == "compiler-artifact" && is_example,
            v["executable"].as_str(),
            v["target"]["name"].as_str(),
        ) {
            found.insert(name.to_string(), PathBuf::from(exe));
        }
    }
    found
}

/// Lines of a child's output, read by a thread and handed over through a channel.
fn line_reader(pipe: impl Read + Send + 'static, tx: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

/// A running example. Killed (and its output shown) if a test panics while it runs.
struct Tool {
    name: String,
    child: Child,
    lines: Receiver<String>,
    stdout: Vec<String>,
    /// Lines of `stdout` already looked at by [`Tool::wait_line`].
    cursor: usize,
    stderr: Receiver<String>,
}

/// An example that exited.
struct Finished {
    status: ExitStatus,
    stdout: Vec<String>,
    stderr: String,
}

impl Finished {
    /// The JSON object the tool printed last.
    fn json(&self) -> serde_json::Value {
        let last = self.stdout.last().map(String::as_str).unwrap_or("");
        serde_json::from_str(last).unwrap_or_else(|e| {
            panic!(
                "last stdout line is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout.join("\n"),
                self.stderr
            )
        })
    }
}

impl Tool {
    /// Starts example `name` with the whitespace-separated arguments `args`.
    fn spawn(name: &str, args: &str) -> Tool {
        let mut child = Command::new(example(name))
            .args(args.split_whitespace())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn example {name}: {e}"));
        let (tx, lines) = mpsc::channel();
        line_reader(child.stdout.take().unwrap(), tx);
        let (etx, stderr) = mpsc::channel();
        line_reader(child.stderr.take().unwrap(), etx);
        Tool {
            name: name.to_string(),
            child,
            lines,
            stdout: Vec::new(),
            cursor: 0,
            stderr,
        }
    }

    /// Waits for the next stdout line starting with `prefix`, after the line the previous wait
    /// matched; returns it.
    fn wait_line(&mut self, prefix: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            while self.cursor < self.stdout.len() {
                self.cursor += 1;
                let l = &self.stdout[self.cursor - 1];
                if l.starts_with(prefix) {
                    return l.clone();
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.stdout.push(l),
                Err(RecvTimeoutError::Timeout) => {
                    panic!("{} never printed `{prefix}…`", self.name)
                }
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "{} exited before printing `{prefix}…`:\n{}",
                    self.name,
                    self.drain_stderr()
                ),
            }
        }
    }

    fn drain_stderr(&self) -> String {
        self.stderr.try_iter().collect::<Vec<_>>().join("\n")
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, sig).unwrap();
    }

    /// Waits (at most `secs`) for the tool to exit: its stdout reaches end of file.
    fn finish(mut self, secs: u64) -> Finished {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.stdout.push(l),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{} still running after {secs} s; output so far:\n{}",
                    self.name,
                    self.stdout.join("\n")
                ),
            }
        }
        let status = self.child.wait().unwrap();
        // stderr closes with the process; collect what it said.
        let stderr: Vec<String> = self.stderr.iter().collect();
        Finished {
            status,
            stdout: std::mem::take(&mut self.stdout),
            stderr: stderr.join("\n"),
        }
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- {} stdout ---\n{}\n--- stderr ---\n{}",
                self.name,
                self.stdout.join("\n"),
                self.drain_stderr()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Frames, built here independently of the examples' code
// ---------------------------------------------------------------------------------------------

const RESPONDER_MAC: [u8; 6] = [0x02, 0xfe, 0x5a, 0, 0, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];
const RESPONDER_IP: [u8; 4] = [192, 168, 1, 2];
const PEER_IP: [u8; 4] = [192, 168, 1, 1];

/// RFC 1071 checksum, written again here so the tests do not check the examples with their own
/// code.
fn inet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| (u32::from(c[0]) << 8) | u32::from(c.get(1).copied().unwrap_or(0)))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn arp_request(target: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&PEER_IP);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target);
    f.resize(60, 0);
    f
}

/// The reply the responder must send to `arp_request(RESPONDER_IP)`, byte for byte.
fn expected_arp_reply() -> Vec<u8> {
    let mut f = vec![
        0x02, 0, 0, 0, 0, 0x99, // to the asker
        0x02, 0xfe, 0x5a, 0, 0, 0x01, // from us
        0x08, 0x06, // ARP
        0, 1, 0x08, 0x00, 6, 4, // Ethernet / IPv4
        0, 2, // reply
        0x02, 0xfe, 0x5a, 0, 0, 0x01, 192, 168, 1, 2, // sender: us
        0x02, 0, 0, 0, 0, 0x99, 192, 168, 1, 1, // target: the asker
    ];
    f.resize(60, 0);
    f
}

/// An IPv4 packet in an Ethernet frame; the IPv4 header checksum is computed.
fn ipv4_frame(dst_mac: [u8; 6], src: [u8; 4], dst: [u8; 4], proto: u8, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + body.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0xbe, 0xef, 0x40, 0, 64, proto, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let c = inet_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(body);
    f
}

/// An ICMP message with a correct checksum.
fn icmp(kind: u8, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, 0, 0, 0];
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(payload);
    let c = inet_checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

fn echo_request(seq: u16, payload_len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..payload_len).map(|i| (i * 7 + 3) as u8).collect();
    let body = icmp(8, 0x1234, seq, &payload);
    let mut f = ipv4_frame(RESPONDER_MAC, PEER_IP, RESPONDER_IP, 1, &body);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// The reply to `echo_request(seq, payload_len)`, byte for byte.
fn expected_echo_reply(seq: u16, payload_len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..payload_len).map(|i| (i * 7 + 3) as u8).collect();
    let body = icmp(0, 0x1234, seq, &payload);
    let mut f = Vec::new();
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&RESPONDER_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + body.len()) as u16;
    // Same identification as the request, no flags, TTL 64.
    let mut ip = vec![0x45, 0, 0, 0, 0xbe, 0xef, 0, 0, 64, 1, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&RESPONDER_IP);
    ip.extend_from_slice(&PEER_IP);
    let c = inet_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&body);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// Recomputes the IPv4 header checksum of an Ethernet frame (after a test edited the header).
fn fix_ip_checksum(f: &mut [u8]) {
    f[24] = 0;
    f[25] = 0;
    let c = inet_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Frames the responder must ignore, each with the reason it must give.
fn garbage() -> Vec<(&'static str, Vec<u8>, Ignored)> {
    let mut v: Vec<(&'static str, Vec<u8>, Ignored)> = Vec::new();
    v.push(("one byte", vec![0xff], Ignored::Runt));
    v.push(("13 bytes", vec![0; 13], Ignored::Runt));
    let mut f = echo_request(1, 8);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    v.push(("IPv6 ethertype", f, Ignored::OtherEthertype));
    let mut f = echo_request(1, 8);
    f.splice(12..12, [0x81, 0x00, 0, 5]);
    v.push(("VLAN tagged", f, Ignored::OtherEthertype));
    v.push(("random bytes", vec![0xa5; 64], Ignored::OtherEthertype));
    v.push((
        "ARP for another address",
        arp_request([192, 168, 1, 3]),
        Ignored::ArpOtherTarget,
    ));
    let mut f = arp_request(RESPONDER_IP);
    f[21] = 2;
    v.push(("ARP reply", f, Ignored::ArpNotRequest));
    let mut f = arp_request(RESPONDER_IP);
    f.truncate(34);
    v.push(("truncated ARP", f, Ignored::ArpMalformed));
    let mut f = arp_request(RESPONDER_IP);
    f[18] = 8;
    v.push((
        "ARP with 8-byte hardware addresses",
        f,
        Ignored::ArpMalformed,
    ));
    let mut f = arp_request(RESPONDER_IP);
    f[22] = 0x01; // sender hardware address is multicast
    v.push(("ARP from a group MAC", f, Ignored::GroupSource));
    let mut f = echo_request(1, 8);
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x55]);
    v.push(("echo to another MAC", f, Ignored::OtherMac));
    let mut f = echo_request(1, 8);
    f[0..6].copy_from_slice(&[0xff; 6]);
    v.push(("echo to the broadcast MAC", f, Ignored::OtherMac));
    let mut f = echo_request(1, 8);
    f[6] = 0x01;
    v.push(("echo from a group MAC", f, Ignored::GroupSource));
    let mut f = echo_request(1, 8);
    f[24] ^= 0xff;
    v.push(("bad IPv4 checksum", f, Ignored::Ipv4BadChecksum));
    let mut f = echo_request(1, 8);
    f[14] = 0x65;
    fix_ip_checksum(&mut f);
    v.push(("IP version 6 in an IPv4 frame", f, Ignored::Ipv4Malformed));
    let mut f = echo_request(1, 8);
    f[14] = 0x44;
    v.push(("IPv4 header length 16", f, Ignored::Ipv4Malformed));
    let mut f = echo_request(1, 8);
    f[16..18].copy_from_slice(&1500u16.to_be_bytes());
    fix_ip_checksum(&mut f);
    v.push((
        "IPv4 total length past the frame",
        f,
        Ignored::Ipv4Malformed,
    ));
    let mut f = echo_request(1, 8);
    f.truncate(30);
    v.push(("truncated IPv4 header", f, Ignored::Ipv4Malformed));
    let mut f = echo_request(1, 8);
    f[20] = 0x20; // more fragments
    fix_ip_checksum(&mut f);
    v.push(("first fragment", f, Ignored::Ipv4Fragment));
    let mut f = echo_request(1, 8);
    f[30..34].copy_from_slice(&[192, 168, 1, 9]);
    fix_ip_checksum(&mut f);
    v.push(("echo to another address", f, Ignored::Ipv4OtherDestination));
    let mut f = echo_request(1, 8);
    f[26..30].copy_from_slice(&[0, 0, 0, 0]);
    fix_ip_checksum(&mut f);
    v.push(("echo from 0.0.0.0", f, Ignored::Ipv4BadSource));
    let mut f = echo_request(1, 8);
    f[26..30].copy_from_slice(&[192, 168, 1, 255]);
    fix_ip_checksum(&mut f);
    v.push(("echo from the subnet broadcast", f, Ignored::Ipv4BadSource));
    let udp = [0x04, 0x00, 0x04, 0x01, 0, 12, 0, 0, 1, 2, 3, 4];
    v.push((
        "UDP to us",
        ipv4_frame(RESPONDER_MAC, PEER_IP, RESPONDER_IP, 17, &udp),
        Ignored::NotIcmp,
    ));
    let mut f = echo_request(1, 8);
    f[36] ^= 0x55;
    v.push(("bad ICMP checksum", f, Ignored::IcmpBadChecksum));
    let body = icmp(0, 1, 1, &[0; 8]);
    v.push((
        "echo reply",
        ipv4_frame(RESPONDER_MAC, PEER_IP, RESPONDER_IP, 1, &body),
        Ignored::IcmpNotEchoRequest,
    ));
    v.push((
        "ICMP shorter than its header",
        ipv4_frame(RESPONDER_MAC, PEER_IP, RESPONDER_IP, 1, &[8, 0, 0xf7, 0xff]),
        Ignored::IcmpMalformed,
    ));
    v
}

fn host() -> Host {
    Host {
        mac: RESPONDER_MAC,
        ip: RESPONDER_IP.into(),
        prefix: 24,
        ip6: None,
    }
}

// ---------------------------------------------------------------------------------------------
// The responder's parser, in-process
// ---------------------------------------------------------------------------------------------

#[test]
fn reply_answers_arp_and_echo_exactly() {
    let mut out = Vec::new();
    assert_eq!(
        respond(&host(), &arp_request(RESPONDER_IP), &mut out),
        Outcome::ArpReply
    );
    assert_eq!(out, expected_arp_reply());
    for (seq, len) in [(1u16, 0usize), (2, 56), (3, 1400), (4, 9)] {
        assert_eq!(
            respond(&host(), &echo_request(seq, len), &mut out),
            Outcome::EchoReply
        );
        assert_eq!(out, expected_echo_reply(seq, len), "payload {len}");
    }
}

#[test]
fn reply_ignores_a_table_of_malformed_frames() {
    let mut out = vec![1, 2, 3];
    for (what, frame, why) in garbage() {
        assert_eq!(
            respond(&host(), &frame, &mut out),
            Outcome::Ignored(why),
            "{what}"
        );
        assert!(out.is_empty(), "{what}: ignored frames leave no reply");
    }
}

/// A valid request of either kind, for mutation.
fn valid_request() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(arp_request(RESPONDER_IP)),
        (0usize..200).prop_map(|n| echo_request(7, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn reply_never_panics_on_random_bytes(frame in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut out = Vec::new();
        let o = respond(&host(), &frame, &mut out);
        prop_assert_eq!(matches!(o, Outcome::Ignored(_)), out.is_empty());
    }

    #[test]
    fn reply_never_panics_on_mutated_requests(
        frame in valid_request(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
    ) {
        let mut f = frame;
        for (at, b) in edits {
            let i = at % f.len();
            f[i] = b;
        }
        f.truncate(cut % (f.len() + 1));
        let mut out = Vec::new();
        let o = respond(&host(), &f, &mut out);
        // Whatever is answered is a well-formed frame from us with correct checksums.
        if o == Outcome::EchoReply {
            prop_assert_eq!(&out[6..12], &RESPONDER_MAC[..]);
            prop_assert_eq!(inet_checksum(&out[14..34]), 0);
            let total = usize::from(u16::from_be_bytes([out[16], out[17]]));
            prop_assert_eq!(inet_checksum(&out[34..14 + total]), 0);
        }
        if o == Outcome::ArpReply {
            prop_assert_eq!(&out[28..32], &RESPONDER_IP[..]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The traffic tool's frames and sequence tracking, in-process
// ---------------------------------------------------------------------------------------------

#[test]
fn stream_frames_are_checked_byte_for_byte() {
    let addrs = stream::Addresses {
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_mac: [2, 0, 0, 0, 0, 1],
    };
    for size in [60usize, 64, 1514, 9000] {
        let templates = stream::FrameRing::new(size, 5, &addrs);
        let mut sink = stream::Sink::default();
        let f = stream::build_frame(size, 5, 1000, &addrs);
        assert_eq!(f.len(), size);
        assert_eq!(inet_checksum(&f[14..34]), 0, "IPv4 header checksum");
        sink.check(&f, 5, Some(&templates));
        // MAC addresses swapped (macswap): still intact.
        let mut swapped = f.clone();
        swapped[0..6].copy_from_slice(&f[6..12]);
        swapped[6..12].copy_from_slice(&f[0..6]);
        sink.check(&swapped, 5, Some(&templates));
        assert_eq!((sink.received, sink.corrupted), (2, 0));
        // Any byte after the MACs, except the sequence number, is checked.
        for i in (12..size).filter(|i| !(stream::SEQ_OFF..stream::FILL_OFF).contains(i)) {
            let mut bad = f.clone();
            bad[i] ^= 0x40;
            let mut s = stream::Sink::default();
            s.check(&bad, 5, Some(&templates));
            assert_eq!(s.corrupted + s.foreign, 1, "byte {i} of {size}");
        }
        let mut short = f.clone();
        short.pop();
        sink.check(&short, 5, Some(&templates));
        assert_eq!(sink.corrupted, 1);
        sink.check(
            &stream::build_frame(size, 6, 1, &addrs),
            5,
            Some(&templates),
        );
        sink.check(&[0u8; 30], 5, Some(&templates));
        assert_eq!(sink.foreign, 2);
    }
}

proptest! {
    #[test]
    fn seq_tracker_matches_a_model(seqs in proptest::collection::vec(0u64..3000, 0..3000)) {
        let mut t = stream::SeqTracker::default();
        let mut seen = HashSet::new();
        let (mut unique, mut dup, mut late, mut high) = (0u64, 0u64, 0u64, None::<u64>);
        for &s in &seqs {
            t.record(s);
            if !seen.insert(s) {
                dup += 1;
            } else {
                unique += 1;
                if high.is_some_and(|h| s < h) {
                    late += 1;
                }
            }
            high = high.max(Some(s));
        }
        prop_assert_eq!((t.unique, t.duplicated, t.reordered), (unique, dup, late));
    }
}

#[test]
fn seq_tracker_window_slides_over_long_runs() {
    let mut t = stream::SeqTracker::default();
    for s in 0..1_000_000u64 {
        t.record(s);
    }
    assert_eq!(t.record(999_990), stream::Sighting::Duplicate);
    let far = 1_000_000 + 3 * stream::SeqTracker::WINDOW;
    assert_eq!(t.record(far), stream::Sighting::InOrder);
    assert_eq!(t.record(far - 5), stream::Sighting::Late);
    assert_eq!(t.record(far - 5), stream::Sighting::Duplicate);
    // Older than the window: late, and not counted as distinct (it cannot be told from a
    // duplicate), so the sender's total shows it as lost too.
    assert_eq!(t.record(1_000_001), stream::Sighting::Late);
    assert_eq!((t.unique, t.duplicated, t.reordered), (1_000_002, 2, 2));
}

// ---------------------------------------------------------------------------------------------
// The responder as a process
// ---------------------------------------------------------------------------------------------

fn master_with_interface(path: &Path, id: u32) -> Master {
    let mut m = Master::bind(
        SocketAddress::Path(path.to_path_buf()),
        MasterConfig::default(),
    )
    .expect("bind the test master");
    m.add_interface(InterfaceConfig::new(id)).unwrap();
    m
}

fn spawn_responder(socket: &str, extra: &str) -> Tool {
    let args =
        format!("--socket {socket} --ip 192.168.1.2/24 --mac 02:fe:5a:00:00:01 --json {extra}");
    Tool::spawn("responder", &args)
}

/// A memif peer built here with the crate's API.
trait TestPeer: Send {
    /// Control work.
    fn pump(&mut self);
    /// The data-path interface.
    fn iface(&mut self) -> &mut Interface;
}

/// A master serving one interface id.
struct MasterPeer(Master, u32);

impl TestPeer for MasterPeer {
    fn pump(&mut self) {
        self.0.poll().unwrap();
    }
    fn iface(&mut self) -> &mut Interface {
        self.0.interface_mut(self.1).unwrap()
    }
}

impl TestPeer for Slave {
    fn pump(&mut self) {
        self.poll().unwrap();
    }
    fn iface(&mut self) -> &mut Interface {
        self.interface_mut()
    }
}

fn slave_peer(socket: &Path, id: u32) -> Slave {
    let mut s = Slave::new(
        SocketAddress::Path(socket.to_path_buf()),
        InterfaceConfig::new(id),
    )
    .unwrap();
    s.retry_interval = Duration::from_millis(10);
    s
}

fn wait_up(p: &mut dyn TestPeer, secs: u64) {
    wait_for("test peer link up", secs, || {
        p.pump();
        p.iface().is_up()
    });
}

/// Sends `frames` on queue 0, retrying until the ring took them all.
fn send_frames(p: &mut dyn TestPeer, frames: &[Vec<u8>]) {
    let mut sent = 0;
    wait_for("frames taken by the ring", 20, || {
        p.pump();
        let refs: Vec<&[u8]> = frames[sent..].iter().map(Vec::as_slice).collect();
        sent += p.iface().tx_burst(0, &refs);
        sent == frames.len()
    });
}

/// Receives until `n` frames arrived.
fn recv_frames(p: &mut dyn TestPeer, n: usize, secs: u64) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    wait_for("frames back", secs, || {
        p.pump();
        p.iface()
            .rx_burst(0, 64, &mut |f: &[u8]| got.push(f.to_vec()));
        got.len() >= n
    });
    got
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

/// Sends `request`; exactly `reply` must come back.
fn exchange(p: &mut dyn TestPeer, request: Vec<u8>, reply: Vec<u8>) {
    send_frames(p, &[request]);
    assert_eq!(recv_frames(p, 1, 20), vec![reply]);
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
    let pid = r.child.id();
    let window = Duration::from_millis(1500);
    if let Some(before) = cpu_time(pid) {
        std::thread::sleep(window);
        let used = cpu_time(pid).unwrap() - before;
        assert!(
            used < window / 10,
            "idle responder used {used:?} of CPU in {window:?}"
        );
    }
    // And it still wakes up for frames.
    exchange(&mut s, arp_request(RESPONDER_IP), expected_arp_reply());
    r.signal(nix::sys::signal::Signal::SIGTERM);
    let j = r.finish(20).json();
    assert!(j["sleeps"].as_u64().unwrap() >= 1, "{j}");
    assert!(j["wakeups"].as_u64().unwrap() >= 1, "{j}");
}

// ---------------------------------------------------------------------------------------------
// The traffic tool as a process
// ---------------------------------------------------------------------------------------------

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

fn assert_counts(j: &serde_json::Value, want: &[(&str, u64)]) {
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
fn run_traffic(what: &str, args: &str) -> serde_json::Value {
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

// ---------------------------------------------------------------------------------------------
// Against dpdk-testpmd
// ---------------------------------------------------------------------------------------------

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
