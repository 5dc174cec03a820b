//! `dpdk-testpmd` as a test peer.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where Debian installs testpmd.
pub const TESTPMD: &str = "/usr/bin/dpdk-testpmd";
const STDBUF: &str = "/usr/bin/stdbuf";

/// A running testpmd: `--no-pci`, `--in-memory`, a unique `--file-prefix`; stopped (SIGINT, then
/// SIGKILL after 10 s) and reaped on drop, with its output printed if the test is failing.
pub struct TestPmd {
    child: Child,
    runtime_dir: PathBuf,
    output: Arc<Mutex<String>>,
}

impl TestPmd {
    /// Starts testpmd with EAL `vdevs` on cores `lcores` (e.g. `"0,1"`), then `app_args` after
    /// `--`. With `-i` among them, commands can be written with [`TestPmd::command`].
    pub fn start(name: &str, lcores: &str, vdevs: &[String], app_args: &[&str]) -> TestPmd {
        let interactive = app_args.contains(&"-i");
        let prefix = format!("qtest-{}-{name}", std::process::id());
        let mut cmd = Command::new(STDBUF);
        // A pipe makes stdio block-buffered: line-buffer it so prompts and stats arrive.
        cmd.args(["-oL", "-eL", TESTPMD])
            .args(["-l", lcores, "--no-pci", "--in-memory"])
            .arg(format!("--file-prefix={prefix}"));
        for v in vdevs {
            cmd.arg(format!("--vdev={v}"));
        }
        let mut child = cmd
            .arg("--")
            .args(app_args)
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
        let pipes: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().expect("piped")),
            Box::new(child.stderr.take().expect("piped")),
        ];
        for mut pipe in pipes {
            let out = output.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let text = String::from_utf8_lossy(&buf[..n]);
                    out.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push_str(&text);
                }
            });
        }
        TestPmd {
            child,
            runtime_dir: Path::new("/var/run/dpdk").join(prefix),
            output,
        }
    }

    /// Writes a command line to testpmd's prompt.
    pub fn command(&mut self, cmd: &str) {
        let stdin = self.child.stdin.as_mut().expect("testpmd started with -i");
        writeln!(stdin, "{cmd}").expect("write to testpmd");
        stdin.flush().expect("flush testpmd's stdin");
    }

    /// Everything testpmd printed so far.
    pub fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Panics with testpmd's output if it has exited.
    pub fn check_alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("dpdk-testpmd exited ({st}):\n{}", self.output());
        }
    }

    /// Waits until testpmd's output contains `s` (after `from` bytes of it); returns where it
    /// ends. Panics with the output if testpmd exits or `secs` pass.
    pub fn wait_output(&mut self, s: &str, from: usize, secs: u64) -> usize {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let out = self.output();
            if let Some(i) = out.get(from..).and_then(|t| t.find(s)) {
                return from + i + s.len();
            }
            self.check_alive();
            assert!(
                Instant::now() < deadline,
                "testpmd never printed {s:?}:\n{out}"
            );
            std::thread::yield_now();
        }
    }

    /// Stops testpmd (SIGINT, then SIGKILL after 10 s) and returns its output.
    pub fn stop(&mut self) -> String {
        let _ = crate::interrupt(&mut self.child, Duration::from_secs(10));
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
        self.output()
    }
}

impl Drop for TestPmd {
    fn drop(&mut self) {
        let out = self.stop();
        if std::thread::panicking() {
            eprintln!("--- dpdk-testpmd output ---\n{out}");
        }
    }
}
