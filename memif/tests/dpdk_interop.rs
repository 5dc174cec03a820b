//! Interoperability with DPDK 22.11's `net_memif` PMD, driven through `dpdk-testpmd`.
//!
//! Needs root, `/usr/bin/dpdk-testpmd` and free 2 MiB hugepages. Without them each test prints why
//! and passes, unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`, which turns a missing prerequisite into a
//! failure. testpmd always runs with `--no-pci` (no real NIC), `--in-memory` (no hugepage files
//! left behind), a unique `--file-prefix` and only a `net_memif0` vdev.

mod common;

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{sock_path, wait_for};
use memif::{InterfaceConfig, Master, MasterConfig, Slave, SocketAddress};

const TESTPMD: &str = "/usr/bin/dpdk-testpmd";
const STDBUF: &str = "/usr/bin/stdbuf";
/// Hugepages one testpmd instance needs with `--total-num-mbufs=8192` (about 18 MiB of mbufs plus
/// EAL memzones), with margin.
const HUGEPAGES_NEEDED: u64 = 64;

/// Tests share two cores and the hugepage pool: run one testpmd at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn missing_prerequisite() -> Option<String> {
    for tool in [TESTPMD, STDBUF] {
        if !Path::new(tool).exists() {
            return Some(format!("{tool} not installed"));
        }
    }
    match std::fs::metadata("/proc/self") {
        Ok(md) if md.uid() == 0 => {}
        _ => return Some("not running as root".into()),
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let free = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    if free < HUGEPAGES_NEEDED {
        return Some(format!(
            "only {free} free 2 MiB hugepages, {HUGEPAGES_NEEDED} needed"
        ));
    }
    None
}

/// True if the test should run; false (after printing why) if it should skip.
fn system_ready(test: &str) -> bool {
    match missing_prerequisite() {
        None => true,
        Some(why) => {
            if std::env::var("QUIVER_REQUIRE_SYSTEM_TESTS").as_deref() == Ok("1") {
                panic!("{test}: QUIVER_REQUIRE_SYSTEM_TESTS=1 but {why}");
            }
            // Written to the real stderr (not `eprintln!`, which the test harness captures) so
            // the skip is visible in a normal `cargo test` run.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "skipping {test}: {why}");
            false
        }
    }
}

/// A running testpmd, stopped (SIGINT, then SIGKILL after 10 s) and reaped on drop.
struct TestPmd {
    child: Child,
    /// EAL's runtime directory for our `--file-prefix` (created even with `--in-memory`).
    runtime_dir: PathBuf,
    output: Arc<Mutex<String>>,
    socket: Option<PathBuf>,
}

impl TestPmd {
    fn start(prefix: &str, vdev: &str, fwd_mode: &str, socket: Option<PathBuf>) -> TestPmd {
        Self::start_with(prefix, vdev, fwd_mode, socket, &["--stats-period=1"])
    }

    fn start_with(
        prefix: &str,
        vdev: &str,
        fwd_mode: &str,
        socket: Option<PathBuf>,
        extra: &[&str],
    ) -> TestPmd {
        let interactive = extra.contains(&"-i");
        let file_prefix = format!("qmemif-{}-{prefix}", std::process::id());
        // testpmd's stdout is a pipe here, so stdio would buffer it in blocks and we would not
        // see prompts and statistics until it exits: make it line buffered.
        let mut child = Command::new(STDBUF)
            .args(["-oL", "-eL", TESTPMD])
            .args([
                "-l",
                "0,1",
                "--no-pci",
                "--in-memory",
                &format!("--file-prefix={file_prefix}"),
                &format!("--vdev={vdev}"),
                "--",
                &format!("--forward-mode={fwd_mode}"),
                "--nb-cores=1",
                "--total-num-mbufs=8192",
                // testpmd drains (and drops) whatever its rx queues hold for up to a second when
                // forwarding starts; without this, the first frames we send are lost.
                "--no-flush-rx",
            ])
            .args(extra)
            .stdin(if interactive {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dpdk-testpmd");
        let output = Arc::new(Mutex::new(String::new()));
        for mut pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let out = output.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    out.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        TestPmd {
            child,
            runtime_dir: Path::new("/var/run/dpdk").join(&file_prefix),
            output,
            socket,
        }
    }

    /// Write a command line to testpmd's stdin (interactive mode).
    fn command(&mut self, cmd: &str) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("testpmd started with -i");
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
    }

    fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Panic with testpmd's output if it exited early.
    fn check_alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("dpdk-testpmd exited ({st}):\n{}", self.output());
        }
    }

    /// Wait until testpmd's output contains `s`.
    fn wait_output(&mut self, s: &str, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !self.output().contains(s) {
            self.check_alive();
            assert!(
                Instant::now() < deadline,
                "testpmd never printed {s:?}:\n{}",
                self.output()
            );
            std::thread::yield_now();
        }
    }

    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::yield_now();
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
    }
}

impl Drop for TestPmd {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!("--- dpdk-testpmd output ---\n{}", self.output());
        }
    }
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

#[test]
fn dpdk_server_txonly_to_our_slave() {
    if !system_ready("dpdk_server_txonly_to_our_slave") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = sock_path("dpdk_txonly");
    let _ = std::fs::remove_file(&path);
    let vdev = format!(
        "net_memif0,role=server,id=0,socket={},socket-abstract=no",
        path.display()
    );
    let mut pmd = TestPmd::start("txonly", &vdev, "txonly", Some(path.clone()));
    pmd.wait_output("Port 0:", 30);
    let mut s = Slave::new(SocketAddress::Path(path.clone()), InterfaceConfig::new(0)).unwrap();
    s.retry_interval = Duration::from_millis(10);
    wait_for("link up with testpmd server", 30, || {
        pmd.check_alive();
        s.poll().unwrap();
        s.interface().is_up()
    });
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
    if !system_ready("dpdk_client_macswap_with_our_master") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = sock_path("dpdk_macswap");
    let mut m = Master::bind(SocketAddress::Path(path.clone()), MasterConfig::default()).unwrap();
    m.add_interface(InterfaceConfig::new(0)).unwrap();
    // A DPDK client connects when its port starts: our master must already listen.
    let vdev = format!(
        "net_memif0,role=client,id=0,socket={},socket-abstract=no",
        path.display()
    );
    let mut pmd = TestPmd::start("macswap", &vdev, "macswap", None);
    wait_for("link up with testpmd client", 30, || {
        pmd.check_alive();
        m.poll().unwrap();
        m.interface(0).unwrap().is_up()
    });
    pmd.wait_output("packets/burst=", 30);
    let frames: Vec<Vec<u8>> = (0..2000)
        .map(|i| mac_frame(i, 60 + (i as usize * 13) % 1400))
        .collect();
    let m = std::cell::RefCell::new(m);
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
    let c = m.interface(0).unwrap().counters();
    assert_eq!(got.len(), frames.len(), "frames lost; counters {c:?}");
    let want: Vec<Vec<u8>> = frames.iter().map(|f| swapped(f)).collect();
    assert!(got == want, "frames came back altered or reordered");
    assert_eq!(m.interface(0).unwrap().bad_descriptors(), 0);
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
    if !system_ready("dpdk_server_abstract_socket_macswap_with_our_slave") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // testpmd's default socket-abstract=yes: the path is used as an abstract name.
    let name = format!("/tmp/quiver-memif-{}-abstract.sock", std::process::id());
    let vdev = format!("net_memif0,role=server,id=7,socket={name}");
    let mut pmd = TestPmd::start("abstract", &vdev, "macswap", None);
    pmd.wait_output("Port 0:", 30);
    let mut s = Slave::new(
        SocketAddress::parse(&format!("@{name}")),
        InterfaceConfig::new(7),
    )
    .unwrap();
    s.retry_interval = Duration::from_millis(10);
    wait_for("link up over the abstract socket", 30, || {
        pmd.check_alive();
        s.poll().unwrap();
        s.interface().is_up()
    });
    pmd.wait_output("packets/burst=", 30);
    assert!(!Path::new(&name).exists(), "abstract socket made a file");
    let frames: Vec<Vec<u8>> = (0..2000)
        .map(|i| mac_frame(i, 60 + (i as usize * 29) % 1450))
        .collect();
    let s = std::cell::RefCell::new(s);
    let got = echo(
        &frames,
        || s.borrow_mut().poll().unwrap(),
        |refs| s.borrow_mut().interface_mut().tx_burst(0, refs),
        |got| {
            s.borrow_mut()
                .interface_mut()
                .rx_burst(0, 256, &mut |p: &[u8]| got.push(p.to_vec()));
        },
    );
    let s = s.into_inner();
    let c = s.interface().counters();
    assert_eq!(got.len(), frames.len(), "frames lost; counters {c:?}");
    let want: Vec<Vec<u8>> = frames.iter().map(|f| swapped(f)).collect();
    assert!(got == want, "frames came back altered or reordered");
    assert_eq!(s.interface().bad_descriptors(), 0);
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
    if !system_ready("dpdk_client_rxonly_interactive_counts_our_frames") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = sock_path("dpdk_rxonly");
    let mut m = Master::bind(SocketAddress::Path(path.clone()), MasterConfig::default()).unwrap();
    let mut cfg = InterfaceConfig::new(5);
    cfg.secret = Some("quiver-secret".into());
    m.add_interface(cfg).unwrap();
    let vdev = format!(
        "net_memif0,role=client,id=5,secret=quiver-secret,rsize=9,socket={},socket-abstract=no",
        path.display()
    );
    let mut pmd = TestPmd::start_with("rxonly", &vdev, "rxonly", None, &["-i"]);
    // testpmd waits for the link before reading commands: keep the master's handshake going.
    wait_for("link up with interactive testpmd client", 30, || {
        pmd.check_alive();
        m.poll().unwrap();
        m.interface(5).unwrap().is_up()
    });
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
    if !system_ready("dpdk_server_chained_jumbo_frames_macswap") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = sock_path("dpdk_jumbo");
    let _ = std::fs::remove_file(&path);
    let vdev = format!(
        "net_memif0,role=server,id=0,socket={},socket-abstract=no",
        path.display()
    );
    let mut pmd = TestPmd::start("jumbo", &vdev, "macswap", Some(path.clone()));
    pmd.wait_output("Port 0:", 30);
    let mut s = Slave::new(SocketAddress::Path(path.clone()), InterfaceConfig::new(0)).unwrap();
    s.retry_interval = Duration::from_millis(10);
    wait_for("link up with testpmd server", 30, || {
        pmd.check_alive();
        s.poll().unwrap();
        s.interface().is_up()
    });
    pmd.wait_output("packets/burst=", 30);
    // Frames of more than one 2048-byte buffer travel as NEXT-chained descriptors both ways (DPDK
    // turns them into multi-segment mbufs and back).
    let sizes = [64usize, 2048, 2049, 4000, 9000, 6144];
    let frames: Vec<Vec<u8>> = (0..600)
        .map(|i| mac_frame(i, sizes[i as usize % sizes.len()]))
        .collect();
    let s = std::cell::RefCell::new(s);
    let got = echo(
        &frames,
        || s.borrow_mut().poll().unwrap(),
        |refs| s.borrow_mut().interface_mut().tx_burst(0, refs),
        |got| {
            s.borrow_mut()
                .interface_mut()
                .rx_burst(0, 256, &mut |p: &[u8]| got.push(p.to_vec()));
        },
    );
    let s = s.into_inner();
    let c = s.interface().counters();
    assert_eq!(got.len(), frames.len(), "frames lost; counters {c:?}");
    let want: Vec<Vec<u8>> = frames.iter().map(|f| swapped(f)).collect();
    assert!(got == want, "frames came back altered or reordered");
    assert_eq!(s.interface().bad_descriptors(), 0);
}
