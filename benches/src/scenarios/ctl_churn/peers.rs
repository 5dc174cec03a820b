//! The memif peers of the steady connection (its NSC sending numbered frames, its NSE checking
//! them) and the churn endpoint's memif master, all on one thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memif::{InterfaceConfig, Master, MasterConfig, Slave, SocketAddress};

use super::util::wait_until;

/// Frames per second the steady connection's NSC sends.
pub(super) const RATE: u64 = 20_000;
/// Bytes per frame.
const FRAME: usize = 64;
/// Marks our frames (after the sequence number), so that anything else is counted as foreign.
const MAGIC: u32 = 0x5155_4956;

/// What the memif peers' thread reports, updated as it goes.
#[derive(Default)]
pub(super) struct PeerStats {
    /// Set by the main thread: leave the loop.
    pub(super) stop: AtomicBool,
    /// Set by the main thread: the NSC sends while this is set.
    pub(super) sending: AtomicBool,
    /// Both memifs of the steady connection are up.
    pub(super) up: AtomicBool,
    /// Frames the NSC numbered and handed to its ring.
    pub(super) sent: AtomicU64,
    /// Of those, frames the sender dropped (counted in its `tx_dropped`).
    pub(super) sender_dropped: AtomicU64,
    /// Passes in which the NSC's ring was full (Quiver was not draining it).
    pub(super) ring_full: AtomicU64,
    /// Frames the NSE received.
    pub(super) received: AtomicU64,
    /// Distinct sequence numbers the NSE received.
    pub(super) unique: AtomicU64,
    /// Frames received more than once.
    pub(super) duplicated: AtomicU64,
    /// Frames received after a later one.
    pub(super) reordered: AtomicU64,
    /// Frames that were not ours or not intact.
    pub(super) foreign: AtomicU64,
    /// Connections the churn endpoint's memif master accepted.
    pub(super) churn_links: AtomicU64,
    /// Errors from polling the memif control sockets.
    pub(super) poll_errors: AtomicU64,
}

fn frame(seq: u64) -> [u8; FRAME] {
    let mut f = [0u8; FRAME];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..22].copy_from_slice(&seq.to_le_bytes());
    f[22..26].copy_from_slice(&MAGIC.to_le_bytes());
    f
}

impl PeerStats {
    /// Stops the traffic and waits for the last frames to arrive (at most 5 s, or 500 ms
    /// without progress).
    pub(super) fn drain(&self) {
        self.sending.store(false, Ordering::Relaxed);
        let mut last = (u64::MAX, Instant::now());
        wait_until(5, || {
            let u = self.unique.load(Ordering::Relaxed);
            if u == self.sent.load(Ordering::Relaxed) - self.sender_dropped.load(Ordering::Relaxed)
            {
                return true;
            }
            if u != last.0 {
                last = (u, Instant::now());
            }
            last.1.elapsed() > Duration::from_millis(500)
        });
    }
}

/// The memif peers: the steady connection's NSC (slave, sending) and NSE (master, checking),
/// and the churn endpoint's master, all polled from one thread.
pub(super) fn run_peers(
    stats: Arc<PeerStats>,
    nsc_socket: String,
    nse_socket: String,
    churn_socket: String,
) -> Result<(), String> {
    let mut nse = Master::bind(SocketAddress::parse(&nse_socket), MasterConfig::default())
        .map_err(|e| format!("steady NSE memif master on {nse_socket}: {e}"))?;
    nse.add_interface(InterfaceConfig::new(0))
        .map_err(|e| e.to_string())?;
    let mut churn = Master::bind(SocketAddress::parse(&churn_socket), MasterConfig::default())
        .map_err(|e| format!("churn NSE memif master on {churn_socket}: {e}"))?;
    churn
        .add_interface(InterfaceConfig::new(0))
        .map_err(|e| e.to_string())?;
    let mut nsc = Slave::new(SocketAddress::parse(&nsc_socket), InterfaceConfig::new(0))
        .map_err(|e| e.to_string())?;
    nsc.retry_interval = Duration::from_millis(10);

    let mut seen: Vec<u64> = Vec::new();
    let mut highest: Option<u64> = None;
    let mut seq = 0u64;
    let mut started: Option<Instant> = None;
    let mut scratch = Vec::with_capacity(256);
    while !stats.stop.load(Ordering::Relaxed) {
        for r in [nse.poll(), churn.poll(), nsc.poll()] {
            if r.is_err() {
                stats.poll_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        let up = nsc.interface().is_up() && nse.interface(0).is_some_and(|i| i.is_up());
        stats.up.store(up, Ordering::Relaxed);
        stats.churn_links.store(
            churn.interface(0).map_or(0, |i| i.counters().connects),
            Ordering::Relaxed,
        );
        let mut busy = false;

        // Send what the pace allows (at most 64 frames a pass).
        if up && stats.sending.load(Ordering::Relaxed) {
            let t0 = *started.get_or_insert_with(Instant::now);
            let due = (t0.elapsed().as_secs_f64() * RATE as f64) as u64;
            let n = due.saturating_sub(seq).min(64);
            if n > 0 {
                scratch.clear();
                scratch.extend((seq..seq + n).map(frame));
                let refs: Vec<&[u8]> = scratch.iter().map(|f| &f[..]).collect();
                let dropped_before = nsc.interface().counters().tx_dropped;
                let taken = nsc.interface_mut().tx_burst(0, &refs) as u64;
                let dropped = nsc.interface().counters().tx_dropped - dropped_before;
                // Frames the ring had no room for are sent again on the next pass (a full
                // ring pushes back; it loses nothing); dropped ones are numbered and lost.
                stats.sender_dropped.fetch_add(dropped, Ordering::Relaxed);
                if taken < n {
                    stats.ring_full.fetch_add(1, Ordering::Relaxed);
                }
                seq += taken;
                stats.sent.store(seq, Ordering::Relaxed);
                busy = true;
            }
        } else if !stats.sending.load(Ordering::Relaxed) {
            started = None;
        }

        // Receive and check.
        if let Some(iface) = nse.interface_mut(0) {
            let got = iface.rx_burst(0, 256, &mut |f: &[u8]| {
                stats.received.fetch_add(1, Ordering::Relaxed);
                if f.len() != FRAME || f[22..26] != MAGIC.to_le_bytes() {
                    stats.foreign.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                let s = u64::from_le_bytes(f[14..22].try_into().expect("8 bytes"));
                let (word, bit) = ((s / 64) as usize, 1u64 << (s % 64));
                if seen.len() <= word {
                    seen.resize(word + 1, 0);
                }
                if seen[word] & bit != 0 {
                    stats.duplicated.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                seen[word] |= bit;
                stats.unique.fetch_add(1, Ordering::Relaxed);
                if highest.is_some_and(|h| s < h) {
                    stats.reordered.fetch_add(1, Ordering::Relaxed);
                }
                highest = Some(highest.map_or(s, |h| h.max(s)));
            });
            busy |= got > 0;
        }
        if let Some(iface) = churn.interface_mut(0) {
            iface.rx_burst(0, 256, &mut |_| {});
        }
        if !busy {
            // Pacing: a frame is due every 50 µs at 20k/s.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Ok(())
}
