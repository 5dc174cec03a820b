//! Building and running the examples: each binary built once per test run, then run as a
//! [`Tool`] whose output lines are waited for with deadlines (never a sleep), and read when it has
//! [`Finished`].

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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
pub(crate) struct Tool {
    name: String,
    pub(crate) child: Child,
    lines: Receiver<String>,
    stdout: Vec<String>,
    /// Lines of `stdout` already looked at by [`Tool::wait_line`].
    cursor: usize,
    stderr: Receiver<String>,
}

/// An example that exited.
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<String>,
    pub(crate) stderr: String,
}

impl Finished {
    /// The JSON object the tool printed last.
    pub(crate) fn json(&self) -> serde_json::Value {
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
    pub(crate) fn spawn(name: &str, args: &str) -> Tool {
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
    pub(crate) fn wait_line(&mut self, prefix: &str, secs: u64) -> String {
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

    pub(crate) fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, sig).unwrap();
    }

    /// Waits (at most `secs`) for the tool to exit: its stdout reaches end of file.
    pub(crate) fn finish(mut self, secs: u64) -> Finished {
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
