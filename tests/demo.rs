//! `scripts/demo`, the README's first command, run for real for 8 s: two network namespaces
//! routed through Quiver over veths (flood ping), a memif responder CNF reached from one of them
//! (flood ping), and the memif traffic CNF's numbered frames through Quiver's L2 cross-connect,
//! with `quiver ctl watch` printing the live counters. From its output: traffic flowed on every
//! interface, every frame the traffic CNF sent reached it back (and Quiver counted each one in
//! and out), both pings got replies, the live view showed rates. Afterwards no namespace, veth,
//! socket directory or process of the demo is left.
//!
//! The demo gets the `quiver` this test was built with (QUIVER_BIN) and the memif examples
//! built here with the same cargo and profile (QUIVER_EXAMPLES), so it neither runs
//! scripts/setup-host nor builds anything itself.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use testkit::{require, Needs};

const IP: &str = "/usr/sbin/ip";
const PING: &str = "/usr/bin/ping";
const SETSID: &str = "/usr/bin/setsid";

/// Builds the `traffic` and `responder` examples (same profile as this test) and returns the
/// directory holding both.
fn examples_dir() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "-p",
        "memif",
        "--example",
        "traffic",
        "--example",
        "responder",
        "--message-format=json-render-diagnostics",
    ])
    .current_dir(env!("CARGO_MANIFEST_DIR"))
    .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd
        .output()
        .expect("run cargo build --example traffic --example responder");
    assert!(
        out.status.success(),
        "cargo build of the memif examples failed"
    );
    let built: HashMap<String, PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact")
        .filter_map(|v| {
            let name = v["target"]["name"].as_str()?.to_string();
            Some((name, PathBuf::from(v["executable"].as_str()?)))
        })
        .collect();
    let dir = built["traffic"].parent().unwrap().to_path_buf();
    assert_eq!(built["responder"].parent(), Some(dir.as_path()));
    dir
}

/// The text after `prefix` on the first line that starts with it.
fn after<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line starting with `{prefix}` in:\n{text}"))
}

/// The number just before `word` in `text` (`46965 packets transmitted` → 46965).
fn number_before(text: &str, word: &str) -> u64 {
    let at = text
        .find(word)
        .unwrap_or_else(|| panic!("no `{word}` in `{text}`"));
    text[..at]
        .split_whitespace()
        .last()
        .and_then(|n| n.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
        .unwrap_or_else(|| panic!("no number before `{word}` in `{text}`"))
}

/// Rows of the `show interfaces` table under `Quiver's interfaces (totals):`, by name:
/// (RX packets, TX packets, RX drops + TX drops).
fn interface_totals(out: &str) -> HashMap<String, (u64, u64, u64)> {
    let table = out
        .split("Quiver's interfaces (totals):\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no interface totals in:\n{out}"));
    let mut rows = HashMap::new();
    for line in table.lines().skip(1) {
        if line.is_empty() {
            break;
        }
        if line.starts_with(' ') {
            continue; // a note under a row
        }
        let c: Vec<&str> = line.split_whitespace().collect();
        let n = |k: usize| c[k].parse::<u64>().unwrap_or_else(|_| panic!("`{line}`"));
        // Name Idx Type Link Mode MTU MAC RX-packets RX-bytes TX-packets TX-bytes RX-drops TX-drops
        rows.insert(c[0].to_string(), (n(7), n(9), n(11) + n(12)));
    }
    rows
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, r)| !r.starts_with('Z'))
    })
}

fn command_lines_mentioning(what: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(what) {
                found.push(c);
            }
        }
    }
    found
}

#[test]
fn the_demo_routes_and_cross_connects_live_traffic_then_leaves_nothing_behind() {
    if !require(
        "the_demo_routes_and_cross_connects_live_traffic_then_leaves_nothing_behind",
        &Needs {
            root: true,
            tools: &[IP, PING, SETSID],
            ..Needs::default()
        },
    ) {
        return;
    }
    let examples = examples_dir();
    let tag = format!("qdt{}", std::process::id() % 100_000);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/demo"))
        .args(["--duration", "8"])
        .env("QUIVER_BIN", env!("CARGO_BIN_EXE_quiver"))
        .env("QUIVER_EXAMPLES", &examples)
        .env("QUIVER_DEMO_TAG", &tag)
        .current_dir(root)
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("{stdout}\n--- stderr ---\n{stderr}");
    assert!(out.status.success(), "scripts/demo failed:\n{all}");

    // Every interface carried traffic, without drops.
    let totals = interface_totals(&stdout);
    for name in ["to-a", "to-b", "to-cnf"] {
        let (rx, tx, drops) = totals
            .get(name)
            .copied()
            .unwrap_or_else(|| panic!("no interface {name}:\n{all}"));
        assert!(rx > 0 && tx > 0, "{name} rx {rx} tx {tx}:\n{all}");
        assert_eq!(drops, 0, "{name}:\n{all}");
    }
    // The traffic CNF's frames: all came back, and Quiver counted each one in on src and out
    // on sink.
    let sent = number_before(after(&stdout, "traffic: sent "), "frames");
    let received = after(&stdout, "traffic: received ");
    assert!(sent > 0, "{all}");
    assert_eq!(number_before(received, "("), sent, "{all}");
    assert_eq!(number_before(received, "unique)"), sent, "{all}");
    assert!(received.contains("lost 0,"), "{all}");
    assert!(received.ends_with("- lossless"), "{all}");
    assert_eq!(totals["src"].0, sent, "{all}");
    assert_eq!(totals["sink"].1, sent, "{all}");
    // Both pings got replies.
    let pings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("packets transmitted"))
        .collect();
    // The two warm-up `ping -c 2` and the two floods.
    assert_eq!(pings.len(), 4, "{all}");
    for p in &pings[2..] {
        assert!(number_before(p, "packets transmitted") > 0, "{all}");
        assert!(number_before(p, "received") > 0, "{all}");
    }
    let responder = after(&stdout, "responder: ");
    assert!(number_before(responder, "echo replies") > 0, "{all}");
    // The live view showed rates (plain frames: stdout is not a terminal).
    assert!(
        !stdout.contains('\x1b'),
        "no terminal escapes in a pipe:\n{all}"
    );
    let frames = stdout.matches("(rates over the last").count();
    assert!(frames >= 2, "{all}");
    let src_rate = stdout
        .lines()
        .filter(|l| l.starts_with("src "))
        .filter_map(|l| l.split_whitespace().nth(3))
        .find(|r| *r != "-" && *r != "0");
    assert!(
        src_rate.is_some(),
        "the live view never showed src receiving:\n{all}"
    );

    // Nothing of the demo is left.
    let dir = after(&stdout, "demo: sockets, configuration and logs in ").trim();
    assert!(!Path::new(dir).exists(), "{dir} is still there");
    let netns = Command::new(IP).args(["netns", "list"]).output().unwrap();
    let netns = String::from_utf8_lossy(&netns.stdout);
    assert!(
        !netns.contains(&format!("{tag}-")),
        "namespaces left:\n{netns}"
    );
    let links = Command::new(IP).args(["-o", "link"]).output().unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(!links.contains(&format!("{tag}-")), "veths left:\n{links}");
    let pids: Vec<u32> = after(&stdout, "demo: pids: ")
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(pids.len(), 5, "{all}");
    for pid in pids {
        assert!(!alive(pid), "process {pid} of the demo still runs");
    }
    assert_eq!(command_lines_mentioning(dir), Vec::<String>::new());
}
