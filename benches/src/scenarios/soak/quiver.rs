//! The `quiver` process under test: `quiver run --nsm` started in a namespace of its own,
//! killed with SIGKILL or stopped with SIGTERM, asked through `quiver ctl --json`, its
//! Prometheus endpoint scraped, its `/proc` entry read.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use super::super::procs::IP;
use super::host::{in_netns, wait_for};

/// Where the metrics are served, inside Quiver's namespace.
const METRICS: &str = "127.0.0.1:9464";

/// How every incarnation of Quiver is started.
pub struct QuiverSpec {
    /// The `quiver` binary.
    pub exe: PathBuf,
    /// The scratch directory: its config, sockets and logs.
    pub dir: PathBuf,
    /// The namespace it runs in.
    pub netns: String,
    /// `NSM_NAME`.
    pub name: String,
}

impl QuiverSpec {
    /// The NSM socket's URL.
    pub fn nsm_url(&self) -> String {
        format!("unix://{}", self.dir.join("nsm.sock").display())
    }

    /// The registry's socket (the soak serves it).
    pub fn registry_socket(&self) -> PathBuf {
        self.dir.join("registry.sock")
    }

    fn admin_socket(&self) -> PathBuf {
        self.dir.join("admin.sock")
    }

    fn config(&self) -> Result<PathBuf, String> {
        let path = self.dir.join("quiver.toml");
        // One adaptive worker on the last CPU, ordinary pages (hugepages are left to others).
        let text = format!(
            "[dataplane]\ncores = [{}]\nidle = \"adaptive\"\n[buffers]\ncount = 16384\n\
             hugepages = \"never\"\n[stats]\ninterval_secs = 0\n[metrics]\nlisten = \"{METRICS}\"\n",
            last_cpu()
        );
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }
}

/// The last CPU this process may use.
fn last_cpu() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()) - 1
}

/// One running `quiver run --nsm`.
pub struct Quiver {
    child: Option<Child>,
    /// Its process id.
    pub pid: u32,
    /// 0 for the first, one more for each restart.
    pub incarnation: u32,
    /// `NSM_KERNEL_BACKEND`.
    pub backend: &'static str,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
    admin: PathBuf,
    exe: PathBuf,
    netns_path: String,
    /// How long it took to answer health checks.
    pub ready_after: Duration,
}

impl Quiver {
    /// Starts incarnation `n` with KERNEL `backend` and waits until its NSM services and admin
    /// API answer.
    pub fn start(spec: &QuiverSpec, n: u32, backend: &'static str) -> Result<Quiver, String> {
        let config = spec.config()?;
        // One name for every incarnation's log (an open log is one of its fds); the previous
        // one's is kept beside it.
        let log = spec.dir.join("quiver.log");
        if n > 0 {
            let _ = std::fs::rename(&log, spec.dir.join(format!("quiver-{}.log", n - 1)));
        }
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let admin = spec.admin_socket();
        let t0 = Instant::now();
        // `ip netns exec` execs: the child's pid is Quiver's.
        let child = Command::new(IP)
            .args(["netns", "exec", &spec.netns])
            .arg(&spec.exe)
            .args(["run", "--nsm", "--config"])
            .arg(&config)
            .arg("--admin-socket")
            .arg(&admin)
            .env("NSM_NAME", &spec.name)
            .env("NSM_LISTEN_ON", spec.nsm_url())
            .env(
                "NSM_CONNECT_TO",
                format!("unix://{}", spec.registry_socket().display()),
            )
            .env("NSM_KERNEL_BACKEND", backend)
            .env("NSM_LOG_LEVEL", "INFO")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", spec.exe.display()))?;
        let mut q = Quiver {
            pid: child.id(),
            child: Some(child),
            incarnation: n,
            backend,
            log,
            admin,
            exe: spec.exe.clone(),
            netns_path: format!("/var/run/netns/{}", spec.netns),
            ready_after: Duration::ZERO,
        };
        let nsm = spec.dir.join("nsm.sock");
        let mut exited = None;
        let ready = wait_for(Duration::from_secs(60), Duration::from_millis(50), || {
            if let Some(Ok(Some(s))) = q.child.as_mut().map(|c| c.try_wait()) {
                exited = Some(s);
                return true;
            }
            q.ctl(&["health", "--nsm-socket", &nsm.display().to_string()])
                .is_ok()
        });
        if let Some(s) = exited {
            q.child = None;
            return Err(format!(
                "quiver #{n} exited at start ({s}):\n{}",
                q.log_tail(30)
            ));
        }
        if !ready {
            return Err(format!(
                "quiver #{n} did not answer within 60 s:\n{}",
                q.log_tail(30)
            ));
        }
        q.ready_after = t0.elapsed();
        Ok(q)
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILL, then reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGKILL);
            let _ = c.wait();
        }
    }

    /// SIGTERM and waits (up to 30 s, then SIGKILL): its exit status, `None` if it had to be
    /// killed.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
        let mut status = None;
        wait_for(Duration::from_secs(30), Duration::from_millis(20), || {
            status = c.try_wait().ok().flatten();
            status.is_some()
        });
        if status.is_none() {
            let _ = c.kill();
            let _ = c.wait();
        }
        status
    }

    /// `quiver ctl --socket <admin> ARGS…`: its stdout, or why it failed.
    pub fn ctl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(&self.exe)
            .arg("ctl")
            .arg("--socket")
            .arg(&self.admin)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "quiver ctl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `quiver ctl --json ARGS…` parsed.
    pub fn ctl_json(&self, args: &[&str]) -> Result<Value, String> {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ctl(&all)?;
        serde_json::from_str(&text).map_err(|e| format!("quiver ctl {args:?}: {e}: {text}"))
    }

    /// The Prometheus endpoint's text (scraped from inside Quiver's namespace).
    pub fn metrics(&self) -> Result<String, String> {
        in_netns(&self.netns_path, || -> Result<String, String> {
            let mut s = TcpStream::connect(METRICS).map_err(|e| format!("{METRICS}: {e}"))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .map_err(|e| e.to_string())?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: quiver\r\nConnection: close\r\n\r\n")
                .map_err(|e| e.to_string())?;
            let mut body = String::new();
            s.read_to_string(&mut body).map_err(|e| e.to_string())?;
            let (head, body) = body.split_once("\r\n\r\n").unwrap_or((&body, ""));
            if !head.starts_with("HTTP/1.1 200") {
                return Err(format!("metrics: {}", head.lines().next().unwrap_or("")));
            }
            Ok(body.to_string())
        })?
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Lines of its log that contain `what`.
    pub fn log_lines(&self, what: &str) -> Vec<String> {
        log_lines(&self.log, what)
    }
}

impl Drop for Quiver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Lines of the file at `path` that contain `what`.
pub fn log_lines(path: &Path, what: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(what))
        .map(str::to_string)
        .collect()
}

/// The resident set of process `pid` in kB.
pub fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}
