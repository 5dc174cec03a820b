//! Interoperability with DPDK 22.11's `net_memif` PMD, driven through `dpdk-testpmd`.
//!
//! Needs root, `/usr/bin/dpdk-testpmd` and free 2 MiB hugepages. Without them each test prints why
//! and passes, unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`, which turns a missing prerequisite into a
//! failure. testpmd always runs with `--no-pci` (no real NIC), `--in-memory` (no hugepage files
//! left behind), a unique `--file-prefix` and only a `net_memif0` vdev.

mod common;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{sock_path, testpmd_turn, wait_for, MemifTestPmd};
use memif::{InterfaceConfig, Master, MasterConfig, Slave, SocketAddress};

/// testpmd prints its port statistics every second.
const STATS: &[&str] = &["--stats-period=1"];

/// testpmd with the one memif vdev `vdev`, forwarding with `fwd_mode` (and `extra` arguments);
/// the socket file `socket`, if any, is removed once it stopped.
fn testpmd(
    tag: &str,
    vdev: String,
    fwd_mode: &str,
    extra: &[&str],
    socket: Option<PathBuf>,
) -> MemifTestPmd {
    MemifTestPmd::start(tag, &[vdev], fwd_mode, extra, socket.into_iter().collect())
}

fn mac_frame(seq: u32, len: usize) -> Vec<u8> {
    let mut f = common::frame(seq, len);
    f[0..6].copy_from_slice(&[0x02, 0xaa, 0, 0, 0, 0x01]);
    f[6..12].copy_from_slice(&[0x02, 0xbb, 0, 0, 0, 0x02]);
    f
}

fn swapped(f: &[u8]) -> Vec<u8> {
    let mut s = f.to_vec();
    s[0..6].copy_from_slice(&f[6..12]);
    s[6..12].copy_from_slice(&f[0..6]);
    s
}

/// Send `frames` through `tx` and collect what comes back through `rx` (calling `pump` between
/// attempts) until every frame returned or the deadline passes.
fn echo(
    frames: &[Vec<u8>],
    mut pump: impl FnMut(),
    mut tx: impl FnMut(&[&[u8]]) -> usize,
    mut rx: impl FnMut(&mut Vec<Vec<u8>>),
) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < frames.len() && Instant::now() < deadline {
        pump();
        // At most 256 frames in flight (rings hold 1024): a peer that finds our receive ring
        // full drops what it cannot send back, so outrunning our own receiving would lose
        // frames that nobody lost.
        if sent < frames.len() && sent - got.len() < 256 {
            let end = (sent + 32).min(frames.len());
            let refs: Vec<&[u8]> = frames[sent..end].iter().map(|f| f.as_slice()).collect();
            sent += tx(&refs);
        }
        rx(&mut got);
        std::thread::yield_now();
    }
    got
}

/// testpmd (`--file-prefix` tag and socket `dpdk_<tag>`) forwarding with `fwd_mode` as the
/// memif server (id 0) of our slave on a file socket; returns once the slave's link is up.
fn server_and_slave(tag: &str, fwd_mode: &str) -> (MemifTestPmd, Slave) {
    let path = sock_path(&format!("dpdk_{tag}"));
    let _ = std::fs::remove_file(&path);
    let vdev = format!(
        "net_memif0,role=server,id=0,socket={},socket-abstract=no",
        path.display()
    );
    let mut pmd = testpmd(tag, vdev, fwd_mode, STATS, Some(path.clone()));
    let addr = SocketAddress::Path(path);
    let s = slave_of(&mut pmd, addr, 0, "link up with testpmd server");
    (pmd, s)
}

/// Our slave of interface `id` at `addr`, once testpmd's server port 0 is up; returns when its
/// link is (`what`).
fn slave_of(pmd: &mut MemifTestPmd, addr: SocketAddress, id: u32, what: &str) -> Slave {
    pmd.wait_output("Port 0:", 30);
    let mut s = Slave::new(addr, InterfaceConfig::new(id)).unwrap();
    s.retry_interval = Duration::from_millis(10);
    wait_for(what, 30, || {
        pmd.check_alive();
        s.poll().unwrap();
        s.interface().is_up()
    });
    s
}

/// Waits for testpmd, a memif client, to bring up interface `id` of our master `m` (`what`).
fn wait_master_up(pmd: &mut MemifTestPmd, m: &mut Master, id: u32, what: &str) {
    wait_for(what, 30, || {
        pmd.check_alive();
        m.poll().unwrap();
        m.interface(id).unwrap().is_up()
    });
}

/// `got` is `frames` as testpmd's macswap returns them: every one, in order, intact but for
/// the swapped MACs; and the receiver (its `counters`) saw no `bad_descriptors`.
fn assert_swapped(frames: &[Vec<u8>], got: &[Vec<u8>], c: memif::Counters, bad_descriptors: u64) {
    assert_eq!(got.len(), frames.len(), "frames lost; counters {c:?}");
    let want: Vec<Vec<u8>> = frames.iter().map(|f| swapped(f)).collect();
    assert!(got == want, "frames came back altered or reordered");
    assert_eq!(bad_descriptors, 0);
}

/// [`echo`] of `frames` from slave `s` through testpmd's macswap: see [`assert_swapped`].
fn macswap_through_slave(s: Slave, frames: &[Vec<u8>]) {
    let s = RefCell::new(s);
    let got = echo(
        frames,
        || s.borrow_mut().poll().unwrap(),
        |refs| s.borrow_mut().interface_mut().tx_burst(0, refs),
        |got| {
            s.borrow_mut()
                .interface_mut()
                .rx_burst(0, 256, &mut |p: &[u8]| got.push(p.to_vec()));
        },
    );
    let s = s.into_inner();
    let i = s.interface();
    assert_swapped(frames, &got, i.counters(), i.bad_descriptors());
}

#[test]
fn dpdk_server_txonly_to_our_slave() {
    let Some(_g) = testpmd_turn("dpdk_server_txonly_to_our_slave") else {
        return;
    };
    let (pmd, mut s) = server_and_slave("txonly", "txonly");
    let mut n = 0u64;
    let mut bad = Vec::new();
    wait_for("txonly frames", 30, || {
        s.poll().unwrap();
        s.interface_mut().rx_burst(0, 256, &mut |p: &[u8]| {
            n += 1;
            // testpmd txonly: 64-byte IPv4/UDP frames.
            if p.len() != 64 || p[12..14] != [0x08, 0x00] || p[14] != 0x45 {
                bad.push(p.to_vec());
            }
        });
        n >= 10_000
    });
    assert!(
        bad.is_empty(),
        "unexpected frames: {:02x?}",
        &bad[..bad.len().min(2)]
    );
    assert_eq!(s.interface().bad_descriptors(), 0);
    assert!(s.interface().counters().rx_bytes >= 64 * 10_000);
    drop(pmd);
    wait_for("slave sees testpmd go", 30, || {
        s.poll().unwrap();
        !s.interface().is_up()
    });
}

#[test]
fn dpdk_client_macswap_with_our_master() {
    let Some(_g) = testpmd_turn("dpdk_client_macswap_with_our_master") else {
        return;
    };
    let path = sock_path("dpdk_macswap");
    let mut m = Master::bind(SocketAddress::Path(path.clone()), MasterConfig::default()).unwrap();
    m.add_interface(InterfaceConfig::new(0)).unwrap();
    // A DPDK client connects when its port starts: our master must already listen.
    let vdev = format!(
        "net_memif0,role=client,id=0,socket={},socket-abstract=no",
        path.display()
    );
    let mut pmd = testpmd("macswap", vdev, "macswap", STATS, None);
    wait_master_up(&mut pmd, &mut m, 0, "link up with testpmd client");
    pmd.wait_output("packets/burst=", 30);
    let frames: Vec<Vec<u8>> = (0..2000)
        .map(|i| mac_frame(i, 60 + (i as usize * 13) % 1400))
        .collect();
    let m = RefCell::new(m);
    let got = echo(
        &frames,
        || m.borrow_mut().poll().unwrap(),
        |refs| m.borrow_mut().interface_mut(0).unwrap().tx_burst(0, refs),
        |got| {
            m.borrow_mut()
                .interface_mut(0)
                .unwrap()
                .rx_burst(0, 256, &mut |p: &[u8]| got.push(p.to_vec()));
        },
    );
    let mut m = m.into_inner();
    let i = m.interface(0).unwrap();
    assert_swapped(&frames, &got, i.counters(), i.bad_descriptors());
    drop(pmd);
    wait_for("master sees testpmd go", 30, || {
        m.poll().unwrap();
        !m.interface(0).unwrap().is_up()
    });
    drop(m);
    assert!(!path.exists());
}

#[test]
fn dpdk_server_abstract_socket_macswap_with_our_slave() {
    let Some(_g) = testpmd_turn("dpdk_server_abstract_socket_macswap_with_our_slave") else {
        return;
    };
    // testpmd's default socket-abstract=yes: the path is used as an abstract name.
    let name = format!("/tmp/quiver-memif-{}-abstract.sock", std::process::id());
    let vdev = format!("net_memif0,role=server,id=7,socket={name}");
    let mut pmd = testpmd("abstract", vdev, "macswap", STATS, None);
    let addr = SocketAddress::parse(&format!("@{name}"));
    let s = slave_of(&mut pmd, addr, 7, "link up over the abstract socket");
    pmd.wait_output("packets/burst=", 30);
    assert!(!Path::new(&name).exists(), "abstract socket made a file");
    let frames: Vec<Vec<u8>> = (0..2000)
        .map(|i| mac_frame(i, 60 + (i as usize * 29) % 1450))
        .collect();
    macswap_through_slave(s, &frames);
}

/// Parse the first `RX-packets: N` of testpmd's output after `from`.
fn rx_packets_after(out: &str, from: usize) -> Option<u64> {
    let tail = out.get(from..)?;
    let i = tail.find("RX-packets:")?;
    tail[i + "RX-packets:".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[test]
fn dpdk_client_rxonly_interactive_counts_our_frames() {
    let Some(_g) = testpmd_turn("dpdk_client_rxonly_interactive_counts_our_frames") else {
        return;
    };
    let path = sock_path("dpdk_rxonly");
    let mut m = Master::bind(SocketAddress::Path(path.clone()), MasterConfig::default()).unwrap();
    let mut cfg = InterfaceConfig::new(5);
    cfg.secret = Some("quiver-secret".into());
    m.add_interface(cfg).unwrap();
    let vdev = format!(
        "net_memif0,role=client,id=5,secret=quiver-secret,rsize=9,socket={},socket-abstract=no",
        path.display()
    );
    let mut pmd = testpmd("rxonly", vdev, "rxonly", &["-i"], None);
    // testpmd waits for the link before reading commands: keep the master's handshake going.
    wait_master_up(
        &mut pmd,
        &mut m,
        5,
        "link up with interactive testpmd client",
    );
    pmd.wait_output("testpmd>", 30);
    pmd.command("start");
    pmd.wait_output("packets/burst=", 30);
    let frames: Vec<Vec<u8>> = (0..5000)
        .map(|i| mac_frame(i, 64 + (i as usize * 7) % 1400))
        .collect();
    let mut sent = 0;
    wait_for("all frames accepted by the ring", 30, || {
        m.poll().unwrap();
        let end = (sent + 64).min(frames.len());
        let refs: Vec<&[u8]> = frames[sent..end].iter().map(|f| f.as_slice()).collect();
        sent += m.interface_mut(5).unwrap().tx_burst(0, &refs);
        sent == frames.len()
    });
    // The tx ring drains once testpmd has received everything.
    wait_for("testpmd consumed the ring", 30, || {
        let st = m.interface(5).unwrap().ring_state(true, 0).unwrap();
        st.tail == st.local
    });
    // testpmd re-posts buffers before it adds to its counters: ask until the count settles
    // (a preempted testpmd may answer early), then insist on the exact number.
    let mut counted = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while counted != Some(frames.len() as u64) && Instant::now() < deadline {
        let mark = pmd.output().len();
        pmd.command("show port stats all");
        wait_for("testpmd's port stats", 10, || {
            pmd.output()[mark..].contains("Tx-bps")
        });
        counted = rx_packets_after(&pmd.output(), mark);
    }
    assert_eq!(counted, Some(frames.len() as u64));
    let c = m.interface(5).unwrap().counters();
    assert_eq!(c.tx_packets, frames.len() as u64);
    pmd.command("stop");
    pmd.command("quit");
    drop(pmd);
}

#[test]
fn dpdk_server_chained_jumbo_frames_macswap() {
    let Some(_g) = testpmd_turn("dpdk_server_chained_jumbo_frames_macswap") else {
        return;
    };
    let (mut pmd, s) = server_and_slave("jumbo", "macswap");
    pmd.wait_output("packets/burst=", 30);
    // Frames of more than one 2048-byte buffer travel as NEXT-chained descriptors both ways (DPDK
    // turns them into multi-segment mbufs and back).
    let sizes = [64usize, 2048, 2049, 4000, 9000, 6144];
    let frames: Vec<Vec<u8>> = (0..600)
        .map(|i| mac_frame(i, sizes[i as usize % sizes.len()]))
        .collect();
    macswap_through_slave(s, &frames);
}
