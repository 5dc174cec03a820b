//! End to end, the way a user runs it: the `quiver` binary with a `quiver.toml` that
//! cross-connects two memif ports; DPDK's `dpdk-testpmd` (which we did not write) on one side,
//! connected over testpmd's default abstract socket and looping every frame back; a CNF built on
//! our memif crate on the other side. Every frame must come back exactly once, in order and
//! intact, and Quiver's interface counters must say the same.

mod support;

use std::time::{Duration, Instant};

use memif::{InterfaceConfig, Slave, SocketAddress};
use support::{interface_counters, Quiver, Scratch};
use testkit::{require, wait_for, Needs, TestPmd, TESTPMD};

const FRAMES: u32 = 20_000;

fn frame(seq: u32) -> Vec<u8> {
    let len = 60 + (seq as usize * 7) % 1400;
    let mut f: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(13).wrapping_add(seq) as u8)
        .collect();
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xbb]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xaa]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

#[test]
fn testpmd_and_a_memif_cnf_exchange_frames_through_quivers_cross_connect() {
    let needs = Needs {
        root: true,
        hugepages: 64,
        tools: &[TESTPMD, "/usr/bin/stdbuf"],
    };
    if !require("testpmd_and_a_memif_cnf_exchange_frames", &needs) {
        return;
    }
    let pid = std::process::id();
    let dir = Scratch::new("xc");
    let cnf_socket = dir.path("cnf.sock");
    // testpmd's default is an abstract socket named by its `socket` argument.
    let pmd_name = format!("/quiver-e2e-{pid}-pmd");
    let config = format!(
        r#"
[dataplane]
cores = [1]
idle = "adaptive"
[buffers]
count = 8192
hugepages = "never"
[[port]]
name = "cnf"
type = "memif"
role = "master"
socket = "{}"
[[port]]
name = "pmd"
type = "memif"
role = "master"
socket = "@{pmd_name}"
id = 3
[[xconnect]]
a = "cnf"
b = "pmd"
"#,
        cnf_socket.display()
    );
    let mut quiver = Quiver::run(&dir, "xc", &config);
    let mut cnf = Slave::new(
        SocketAddress::Path(cnf_socket.clone()),
        InterfaceConfig::new(0),
    )
    .unwrap();
    // testpmd loops every frame it receives on its one port back out of it.
    let pmd = TestPmd::start(
        "quiver-xc",
        "0,1",
        &[format!("net_memif0,role=client,id=3,socket={pmd_name}")],
        &[
            "--forward-mode=io",
            "--port-topology=loop",
            "--nb-cores=1",
            "--total-num-mbufs=8192",
            "--no-flush-rx",
            "--stats-period=1",
        ],
    );
    wait_for("the CNF's memif link", 30, || {
        cnf.poll().unwrap();
        cnf.interface().is_up()
    });
    // Frames sent before testpmd's link is up would be dropped (and counted as tx-link-down).
    quiver.wait_log("memif link up port=pmd");
    let mut pmd = pmd;
    pmd.wait_output("packets/burst=", 0, 30);
    // Until testpmd has posted its receive buffers, Quiver (the master) has nowhere to put a
    // frame and counts it as tx-full. Probe until one comes back; probes are counted apart.
    let probe = frame(u32::MAX);
    let (mut probes, mut probes_back) = (0u64, 0u64);
    // One probe every 10 ms at most, so that probes never fill testpmd's ring.
    let mut last_probe: Option<Instant> = None;
    wait_for("a probe frame to come back through testpmd", 30, || {
        cnf.poll().unwrap();
        if last_probe.is_none_or(|t| t.elapsed() > Duration::from_millis(10)) {
            probes += cnf.interface_mut().tx_burst(0, &[&probe[..]]) as u64;
            last_probe = Some(Instant::now());
        }
        cnf.interface_mut().rx_burst(0, 256, &mut |got: &[u8]| {
            probes_back += u64::from(got == &probe[..])
        });
        probes_back > 0
    });
    // Probes still in flight come back before the first numbered frame.
    let probe_len = probe.len() as u64;

    let (mut sent, mut next, mut bytes) = (0u32, 0u32, 0u64);
    let deadline = Instant::now() + Duration::from_secs(60);
    while next < FRAMES {
        if Instant::now() > deadline {
            let (out, err) = quiver.stop();
            panic!("only {next} of {FRAMES} frames came back (sent {sent}):\n{out}\n{err}");
        }
        cnf.poll().unwrap();
        // At most 256 in flight: rings hold 1024, and testpmd drops what it cannot send on.
        if sent < FRAMES && sent - next < 256 {
            let batch: Vec<Vec<u8>> = (sent..FRAMES.min(sent + 32)).map(frame).collect();
            let refs: Vec<&[u8]> = batch.iter().map(|f| &f[..]).collect();
            sent += cnf.interface_mut().tx_burst(0, &refs) as u32;
        }
        cnf.interface_mut().rx_burst(0, 256, &mut |got: &[u8]| {
            if got == &probe[..] {
                probes_back += 1;
                return;
            }
            let seq = u32::from_be_bytes(got[14..18].try_into().unwrap());
            assert_eq!(seq, next, "lost, duplicated or reordered");
            assert_eq!(got, &frame(seq)[..], "frame {seq} corrupted");
            bytes += got.len() as u64;
            next += 1;
        });
    }
    let (stdout, stderr) = quiver.stop();
    drop(pmd);
    let n = u64::from(FRAMES);
    // Every probe reached Quiver; those testpmd had room for came back.
    let (p, b) = (probes, probes_back);
    let cnf_counters = interface_counters(&stdout, "cnf");
    let pmd_counters = interface_counters(&stdout, "pmd");
    assert_eq!(
        cnf_counters,
        [
            n + p,
            bytes + p * probe_len,
            n + b,
            bytes + b * probe_len,
            0,
            0
        ],
        "{stdout}\n{stderr}"
    );
    let through_pmd = [n + b, bytes + b * probe_len];
    assert_eq!(
        pmd_counters,
        [
            through_pmd[0],
            through_pmd[1],
            through_pmd[0],
            through_pmd[1],
            0,
            0
        ],
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("buffers: 0 in use after stop"), "{stdout}");
}
