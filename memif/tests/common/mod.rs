//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use memif::SocketAddress;
pub use testkit::{wait_for, TESTPMD};
use testkit::{Needs, TestPmd};

/// A unique filesystem socket path for this process and test.
pub fn sock_path(test: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("quiver-memif-{}-{}.sock", std::process::id(), test))
}

/// A unique filesystem socket address for this process and test.
pub fn sock_addr(test: &str) -> SocketAddress {
    SocketAddress::Path(sock_path(test))
}

/// [`testkit::TestPmd`] runs testpmd under it, its output line-buffered.
const STDBUF: &str = "/usr/bin/stdbuf";

/// What a test running one `dpdk-testpmd` needs: root, the tools, and free 2 MiB hugepages for
/// `--total-num-mbufs=8192` (about 18 MiB of mbufs plus EAL memzones), with margin.
pub const TESTPMD_NEEDS: Needs = Needs {
    root: true,
    hugepages: 64,
    tools: &[TESTPMD, STDBUF],
};

/// One testpmd at a time: tests share two cores and the hugepage pool.
static TESTPMD_TURN: Mutex<()> = Mutex::new(());

/// When a testpmd test can run ([`testkit::require`] with [`TESTPMD_NEEDS`]: it prints why not,
/// or fails under `QUIVER_REQUIRE_SYSTEM_TESTS=1`), waits for its turn and holds it.
pub fn testpmd_turn(test: &str) -> Option<MutexGuard<'static, ()>> {
    testkit::require(test, &TESTPMD_NEEDS)
        .then(|| TESTPMD_TURN.lock().unwrap_or_else(|e| e.into_inner()))
}

/// A test frame: Ethernet-ish header with sequence number and a payload pattern.
pub fn frame(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    for (i, b) in f.iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(7).wrapping_add(seq) as u8;
    }
    if len >= 18 {
        f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f[14..18].copy_from_slice(&seq.to_be_bytes());
    }
    f
}

/// `dpdk-testpmd` on cores 0 and 1 with the memif `vdevs`, forwarding with `fwd_mode` (one
/// forwarding core, 8192 mbufs), then the `extra` arguments. Stopped (SIGINT, then SIGKILL after
/// 10 s) on drop, which then removes the socket files `sockets`.
pub struct MemifTestPmd {
    pmd: TestPmd,
    sockets: Vec<PathBuf>,
}

impl MemifTestPmd {
    /// Starts it; `tag` makes its `--file-prefix` unique in this process.
    pub fn start(
        tag: &str,
        vdevs: &[String],
        fwd_mode: &str,
        extra: &[&str],
        sockets: Vec<PathBuf>,
    ) -> MemifTestPmd {
        let mode = format!("--forward-mode={fwd_mode}");
        let mut args = vec![
            mode.as_str(),
            "--nb-cores=1",
            "--total-num-mbufs=8192",
            // testpmd drains (and drops) whatever its rx queues hold for up to a second when
            // forwarding starts; without this, the first frames we send are lost.
            "--no-flush-rx",
        ];
        args.extend_from_slice(extra);
        let pmd = TestPmd::start(&format!("memif-{tag}"), "0,1", vdevs, &args);
        MemifTestPmd { pmd, sockets }
    }

    /// Writes a command line to testpmd's prompt (started with `-i`).
    pub fn command(&mut self, cmd: &str) {
        self.pmd.command(cmd);
    }

    /// Everything testpmd printed so far.
    pub fn output(&self) -> String {
        self.pmd.output()
    }

    /// Panics with testpmd's output if it has exited.
    pub fn check_alive(&mut self) {
        self.pmd.check_alive();
    }

    /// Waits until testpmd has printed `s`; panics with its output if it exits or `secs` pass.
    pub fn wait_output(&mut self, s: &str, secs: u64) {
        self.pmd.wait_output(s, 0, secs);
    }
}

impl Drop for MemifTestPmd {
    fn drop(&mut self) {
        self.pmd.stop();
        for s in &self.sockets {
            let _ = std::fs::remove_file(s);
        }
    }
}
