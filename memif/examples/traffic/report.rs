//! The outcome of a run, as text or as one JSON object.

use memif::Counters;
use serde_json::json;

use crate::args::Args;
use crate::rx::RxSide;
use crate::tx::TxSide;

/// Everything the report needs.
pub struct Outcome {
    pub tx: Option<TxSide>,
    pub rx: Option<RxSide>,
    pub tx_counters: Option<Counters>,
    pub rx_counters: Option<Counters>,
    pub threads: bool,
    pub error: Option<String>,
}

impl Outcome {
    /// Frames sent (or, receive only, numbered before the highest seen) that never arrived.
    pub fn lost(&self) -> Option<u64> {
        let rx = self.rx.as_ref()?;
        let seq = &rx.sink.seq;
        Some(match &self.tx {
            Some(tx) => tx.seq.saturating_sub(seq.unique),
            None => seq.next().saturating_sub(seq.unique),
        })
    }

    /// Every frame sent arrived once, in order and intact.
    pub fn lossless(&self) -> bool {
        let Some(rx) = &self.rx else {
            return false;
        };
        let s = &rx.sink;
        self.lost() == Some(0)
            && s.seq.duplicated == 0
            && s.seq.reordered == 0
            && s.corrupted == 0
            && self.error.is_none()
    }
}

/// Million frames per second, if any time passed.
fn mpps(frames: u64, secs: f64) -> Option<f64> {
    (secs > 0.0).then(|| frames as f64 / secs / 1e6)
}

/// An interface's memif counters, in the report.
fn counters_json(c: &Counters) -> serde_json::Value {
    json!({
        "rx_packets": c.rx_packets,
        "tx_packets": c.tx_packets,
        "tx_dropped": c.tx_dropped,
        "bad_descriptors": c.bad_desc_region + c.bad_desc_offset + c.bad_desc_zero_length
            + c.bad_desc_too_long + c.bad_desc_chain,
        "ring_index_overrun": c.ring_index_overrun,
        "connects": c.connects,
        "disconnects": c.disconnects,
    })
}

/// The report as one JSON object.
pub fn report_json(o: &Outcome, args: &Args, hz: f64) -> serde_json::Value {
    let tx = o.tx.as_ref();
    let rx = o.rx.as_ref();
    let sink = rx.map(|r| &r.sink);
    json!({
        "frame_size": args.size,
        "burst": args.burst,
        "threads": o.threads,
        "sent": tx.map(|t| t.seq),
        "tx_seconds": tx.map(TxSide::seconds),
        "tx_mpps": tx.and_then(|t| mpps(t.seq, t.seconds())),
        "tx_busy_cycles_per_packet": tx.and_then(|t| t.busy.per_packet()),
        "received": sink.map(|s| s.received),
        "unique": sink.map(|s| s.seq.unique),
        "lost": o.lost(),
        "duplicated": sink.map(|s| s.seq.duplicated),
        "reordered": sink.map(|s| s.seq.reordered),
        "corrupted": sink.map(|s| s.corrupted),
        "foreign": sink.map(|s| s.foreign),
        "rx_seconds": rx.map(RxSide::seconds),
        "mpps": rx.and_then(|r| mpps(r.sink.seq.unique, r.seconds())),
        "rx_busy_cycles_per_packet": rx.and_then(|r| r.busy.per_packet()),
        "verified": !args.no_verify,
        "lossless": rx.is_some().then(|| o.lossless()),
        "tsc_hz": hz,
        "tx_counters": o.tx_counters.as_ref().map(counters_json),
        "rx_counters": o.rx_counters.as_ref().map(counters_json),
        "error": o.error,
    })
}

/// `v` with `digits` decimals, or `-`.
fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The report as `traffic: …` lines.
pub fn report_human(o: &Outcome, args: &Args) -> String {
    let mut lines = Vec::new();
    if let Some(t) = &o.tx {
        lines.push(format!(
            "traffic: sent {} frames of {} B in {:.3} s ({} Mpps, {} busy cycles/frame)",
            t.seq,
            args.size,
            t.seconds(),
            fmt_opt(mpps(t.seq, t.seconds()), 3),
            fmt_opt(t.busy.per_packet(), 1)
        ));
    }
    if let Some(r) = &o.rx {
        let s = &r.sink;
        lines.push(format!(
            "traffic: received {} ({} unique) in {:.3} s ({} Mpps, {} busy cycles/frame); \
             lost {}, duplicated {}, reordered {}, corrupted {}, foreign {}{}",
            s.received,
            s.seq.unique,
            r.seconds(),
            fmt_opt(mpps(s.seq.unique, r.seconds()), 3),
            fmt_opt(r.busy.per_packet(), 1),
            o.lost().unwrap_or(0),
            s.seq.duplicated,
            s.seq.reordered,
            s.corrupted,
            s.foreign,
            if o.lossless() { " - lossless" } else { "" }
        ));
    }
    if let Some(e) = &o.error {
        lines.push(format!("traffic: error: {e}"));
    }
    lines.join("\n")
}

/// Both sides' errors, if any.
pub fn join_errors(tx: Option<String>, rx: Option<String>) -> Option<String> {
    match (tx, rx) {
        (Some(t), Some(r)) if t != r => Some(format!("tx: {t}; rx: {r}")),
        (t, r) => t.or(r),
    }
}
