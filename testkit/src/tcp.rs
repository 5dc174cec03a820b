//! A TCP transfer between two network namespaces, checked for content: a server in one reads
//! one connection to its end, a client in the other sends seeded pseudo-random bytes; both
//! print the length and SHA-256 of what they saw. Uses the system Python, run with
//! `ip netns exec`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::SYSTEM_PYTHON;

/// Receives one connection on `argv[1]`:`argv[2]`; prints "listening", then the bytes' count
/// and SHA-256.
const SERVER: &str = r#"
import hashlib, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
s.settimeout(60)
print("listening", flush=True)
c, _ = s.accept()
c.settimeout(60)
h, n = hashlib.sha256(), 0
while True:
    d = c.recv(1 << 20)
    if not d:
        break
    h.update(d)
    n += len(d)
print(n, h.hexdigest(), flush=True)
"#;

/// Sends `argv[3]` MiB of seeded bytes to `argv[1]`:`argv[2]`; prints their count and SHA-256.
const CLIENT: &str = r#"
import hashlib, random, socket, sys
data = random.Random(24).randbytes(int(sys.argv[3]) << 20)
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
s.sendall(data)
s.shutdown(socket.SHUT_WR)
s.recv(1)
print(len(data), hashlib.sha256(data).hexdigest(), flush=True)
"#;

/// Sends `mib` MiB from namespace `from` to a server at `to_addr`:`port` in namespace `to`;
/// returns what the server and the client printed (each: length and SHA-256). Equal strings
/// mean every byte arrived, in order.
pub fn transfer(from: &str, to: &str, to_addr: &str, port: u16, mib: u32) -> (String, String) {
    let port = port.to_string();
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            to,
            SYSTEM_PYTHON,
            "-c",
            SERVER,
            to_addr,
            &port,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let mut lines = BufReader::new(server.stdout.take().expect("piped")).lines();
    assert_eq!(
        lines.next().and_then(Result::ok).as_deref(),
        Some("listening")
    );
    let mib = mib.to_string();
    let client = Command::new("ip")
        .args([
            "netns",
            "exec",
            from,
            SYSTEM_PYTHON,
            "-c",
            CLIENT,
            to_addr,
            &port,
            &mib,
        ])
        .output()
        .expect("the client runs");
    let received = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = server.wait();
    assert!(
        client.status.success(),
        "client: {}",
        String::from_utf8_lossy(&client.stderr)
    );
    (
        received,
        String::from_utf8_lossy(&client.stdout).trim().to_string(),
    )
}
