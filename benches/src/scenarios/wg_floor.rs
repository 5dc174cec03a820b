//! The floor for `wg4-encrypt`: ChaCha20-Poly1305 on the same bytes, with the implementation
//! Quiver's data path uses (ring's, through `quiver-wireguard`'s `crypto::aead_seal`),
//! measured in the same run on the CPU that ran tunnel end 1, in TSC clocks
//! (`dataplane::cycles`, the counter Quiver's runtime figures come from).
//!
//! Measured in batches of 16 packets (about 50 µs each), one buffer sealed again and again in
//! place with a fresh counter each time, so it stays in L1 as a frame's packets would not quite:
//! this is the cipher's own cost, below which no encrypting node can go. Each figure is the
//! median over batches, which a batch now and then preempted by another process (the machines
//! here are shared) does not move; the minimum and the mean (what a busy core saw, preemptions
//! included, as in the nodes' own figures) are beside it.

use dataplane::cycles;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
use serde_json::{json, Value};
use wireguard::transport::{self, sealed_len, TransportKeys};

/// Packets per batch: short enough that few batches are preempted.
const BATCH: usize = 16;

/// The 96-bit nonce WireGuard makes from a counter.
fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

/// Clocks per packet of each batch of `op` (given the packet's counter), after a warm-up.
fn batches(count: usize, mut op: impl FnMut(u64)) -> Vec<f64> {
    let mut counter = 0u64;
    for _ in 0..BATCH * 64 {
        op(counter);
        counter += 1;
    }
    (0..count)
        .map(|_| {
            let t0 = cycles::now();
            for _ in 0..BATCH {
                op(counter);
                counter += 1;
            }
            (cycles::now() - t0) as f64 / BATCH as f64
        })
        .collect()
}

fn summary(mut v: Vec<f64>, what: &str) -> Value {
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    json!({
        "clocks_per_packet": round1(v[v.len() / 2]),
        "min_clocks_per_packet": round1(v[0]),
        "mean_clocks_per_packet": round1(mean),
        "batches": v.len(),
        "what": what,
    })
}

pub fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Sealing (and opening) `len` bytes: bare ChaCha20-Poly1305, key set up once.
fn bare(len: usize, count: usize) -> (Value, Value) {
    let cipher = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &[7u8; 32]).expect("a key"));
    let mut buf = vec![0x5au8; len];
    let seal = batches(count, |c| {
        let tag = cipher
            .seal_in_place_separate_tag(nonce(c), Aad::empty(), &mut buf)
            .expect("seals");
        let _ = std::hint::black_box(tag);
    });
    // Opening needs a message that verifies: seal one, then open copies of it.
    let plain = vec![0x5au8; len];
    let mut sealed = plain.clone();
    let tag = cipher
        .seal_in_place_separate_tag(nonce(1), Aad::empty(), &mut sealed)
        .expect("seals");
    let mut work = sealed.clone();
    let open = batches(count, |_| {
        work.copy_from_slice(&sealed);
        let ok = cipher.open_in_place_separate_tag(nonce(1), Aad::empty(), tag, &mut work, 0..);
        std::hint::black_box(ok.is_ok());
    });
    (
        summary(
            seal,
            "ring CHACHA20_POLY1305 seal_in_place_separate_tag, key set up once",
        ),
        summary(
            open,
            "ring CHACHA20_POLY1305 open_in_place_separate_tag (tag verified) after a memcpy of the message",
        ),
    )
}

/// Quiver's own `transport::seal` of an inner packet of `len` bytes (header, zero padding to 16,
/// AEAD through `crypto::aead_seal`, tag): what `wg4-encrypt` calls per packet, without the graph.
fn quiver_seal(len: usize, count: usize) -> Value {
    let keys = TransportKeys {
        send: [7u8; 32],
        recv: [9u8; 32],
        local_index: 1,
        remote_index: 2,
        created: std::time::Instant::now(),
        initiator: true,
    };
    let mut buf = vec![0x5au8; sealed_len(len)];
    let v = batches(count, |c| {
        let n = transport::seal(&keys, c, &mut buf, len).expect("seals");
        std::hint::black_box(n);
    });
    summary(
        v,
        "wireguard::transport::seal (the protocol crate's per-packet seal, as wg4-encrypt calls it)",
    )
}

/// The floor figures, measured on `cpu`.
pub fn measure(cpu: usize, quick: bool) -> Result<Value, String> {
    let count = if quick { 6400 } else { 25600 };
    std::thread::spawn(move || -> Result<Value, String> {
        let mut one = nix::sched::CpuSet::new();
        one.set(cpu).map_err(|e| e.to_string())?;
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one)
            .map_err(|e| format!("cannot pin to CPU {cpu}: {e}"))?;
        let _ = cycles::tsc_hz();
        let (seal_1400, open_1400) = bare(1400, count);
        let (seal_1440, open_1440) = bare(1440, count);
        Ok(json!({
            "cpu": cpu,
            "tsc_hz": cycles::tsc_hz(),
            "bare_seal_1400": seal_1400,
            "bare_open_1400": open_1400,
            "bare_seal_1440": seal_1440,
            "bare_open_1440": open_1440,
            "quiver_transport_seal_1428": quiver_seal(1428, count),
            "note": "a UDP datagram of 1400 B is a 1428 B inner IPv4 packet, padded to 1440 B before sealing: bare_seal_1440 is the same bytes wg4-encrypt seals; bare_seal_1400 is the 1400 B payload alone",
        }))
    })
    .join()
    .map_err(|_| "the floor measurement panicked".to_string())?
}
