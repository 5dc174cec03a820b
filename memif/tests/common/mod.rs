//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use memif::SocketAddress;

/// A unique filesystem socket path for this process and test.
pub fn sock_path(test: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("quiver-memif-{}-{}.sock", std::process::id(), test))
}

/// A unique filesystem socket address for this process and test.
pub fn sock_addr(test: &str) -> SocketAddress {
    SocketAddress::Path(sock_path(test))
}

/// Call `step` until it returns true, yielding between calls; panic after `secs` seconds.
pub fn wait_for(what: &str, secs: u64, mut step: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if step() {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
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
