//! Processes the network scenarios (`kernel`, `wireguard`) run: a command run to its end, a
//! command pinned to a CPU inside a namespace, a long-running process with its log, stopped on
//! drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `ip` (iproute2).
pub const IP: &str = "/usr/sbin/ip";
/// `taskset` (util-linux).
pub const TASKSET: &str = "/usr/bin/taskset";

/// Runs a command to completion; its stdout, or why it failed.
pub fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{args:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `taskset -c CPU ip netns exec NS ARGS…` (taskset and `ip netns exec` both exec, so the
/// process's pid is the command's).
pub fn pinned(cpu: usize, ns: &str, args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [TASKSET, "-c", &cpu.to_string(), IP, "netns", "exec", ns]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

/// A process writing to a log file; interrupted (then killed) on drop.
pub struct Proc {
    child: Option<Child>,
    what: String,
    log: PathBuf,
}

impl Proc {
    /// Starts `args` with stdout and stderr to `log`.
    pub fn spawn(what: &str, args: &[String], log: &Path) -> Result<Proc, String> {
        let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| format!("cannot start {what} ({args:?}): {e}"))?;
        Ok(Proc {
            child: Some(child),
            what: what.into(),
            log: log.into(),
        })
    }

    /// Its process id (while it runs).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Fails (with the end of its log) if it has exited.
    pub fn check(&mut self) -> Result<(), String> {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                return Err(format!(
                    "{} exited ({status}):\n{}",
                    self.what,
                    self.log_tail()
                ));
            }
        }
        Ok(())
    }

    /// The last 30 lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// SIGINT, then SIGKILL if it has not exited within `grace`; waits for it.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(c.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if matches!(c.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
        let _ = std::fs::remove_file(&self.log);
    }
}
