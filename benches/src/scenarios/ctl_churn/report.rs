//! `ctl-churn`'s figures: what is printed, and its JSON line (the contract: every key stays).

use std::sync::atomic::Ordering;

use serde_json::json;

use super::churn::Churned;
use super::concurrent::{self, Concurrent};
use super::mix;
use super::options::Options;
use super::peers::{PeerStats, RATE};
use super::util::round3;

/// The goal, printed beside the figures.
pub(super) const GOAL_P99_MS: f64 = 5.0;
/// The goal, printed beside the figures.
pub(super) const GOAL_PAIRS_PER_S: f64 = 500.0;
/// The goal of a Request with KERNEL on both sides (issue 24), printed beside the figures.
pub(super) const GOAL_KERNEL_P99_MS: f64 = 10.0;

/// What the run measured, for [`report`].
pub(super) struct Outcome {
    pub(super) pairs: usize,
    pub(super) churned: Churned,
    pub(super) at_once: Concurrent,
    pub(super) sent_during: u64,
    pub(super) breakdown: serde_json::Value,
    pub(super) probe: serde_json::Value,
    pub(super) fds_before: usize,
    pub(super) fds_after: usize,
    pub(super) sockets_left: usize,
    pub(super) ports_left: usize,
    pub(super) owned_left: usize,
    pub(super) start_free: usize,
    pub(super) free_running: usize,
    pub(super) end_free: usize,
    pub(super) nsc_left: Vec<String>,
    pub(super) nse_left: Vec<String>,
    pub(super) host_ends_left: Vec<String>,
    pub(super) links_left: usize,
    pub(super) ports_final: usize,
    pub(super) churn_links: u64,
}

/// Prints the figures and returns the JSON line.
pub(super) fn report(mut o: Outcome, stats: &PeerStats, opts: &Options) -> String {
    // Figures: MEMIF's are the scenario's headline (as before the KERNEL mix), KERNEL's beside.
    o.churned.memif.sort();
    o.churned.kernel.sort();
    let d = Derived::new(&o, stats);
    print_figures(&o, &d, stats, opts);
    json_line(o, &d, stats, opts)
}

/// What the figures compute from an [`Outcome`].
struct Derived {
    sent: u64,
    unique: u64,
    lost: u64,
    leaked_fds: usize,
    leaked_buffers: usize,
    leaked_total: usize,
    pairs_per_s: f64,
    memif_pairs_per_s: Option<f64>,
}

impl Derived {
    fn new(o: &Outcome, stats: &PeerStats) -> Derived {
        let sent = stats.sent.load(Ordering::Relaxed);
        let unique = stats.unique.load(Ordering::Relaxed);
        let leaked_fds = o.fds_after.saturating_sub(o.fds_before);
        let leaked_buffers = o.start_free.saturating_sub(o.end_free);
        Derived {
            sent,
            unique,
            lost: sent - unique,
            leaked_fds,
            leaked_buffers,
            leaked_total: leaked_fds
                + o.sockets_left
                + o.ports_left
                + o.owned_left
                + leaked_buffers
                + o.links_left,
            pairs_per_s: (o.pairs - o.churned.failures.len()) as f64 / o.churned.secs,
            memif_pairs_per_s: o.churned.memif.pairs_per_s(),
        }
    }
}

/// The figures as a person reads them, on stderr.
fn print_figures(o: &Outcome, d: &Derived, stats: &PeerStats, opts: &Options) {
    let Outcome {
        pairs,
        churned:
            Churned {
                memif,
                kernel,
                failures,
                kernel_links_seen,
                secs: churn_secs,
            },
        sent_during,
        breakdown,
        probe,
        fds_before,
        fds_after,
        sockets_left,
        ports_left,
        owned_left,
        start_free,
        end_free,
        nsc_left,
        nse_left,
        host_ends_left,
        links_left,
        churn_links,
        ..
    } = o;
    let Derived {
        sent,
        lost,
        leaked_fds,
        leaked_buffers,
        pairs_per_s,
        ..
    } = d;
    eprintln!(
        "ctl-churn: {pairs} Request/Close pairs in {churn_secs:.2} s, {pairs_per_s:.0} pairs/s; \
         {} failures; KERNEL backend {}",
        failures.len(),
        opts.backend_name()
    );
    eprintln!("{}", mix::table_header());
    eprintln!("{}", memif.row("MEMIF", GOAL_P99_MS));
    eprintln!("{}", kernel.row("KERNEL", GOAL_KERNEL_P99_MS));
    eprintln!(
        "  (pairs/s: pairs per second of their own calls; MEMIF goal ≥ {GOAL_PAIRS_PER_S}; \
         KERNEL pairs whose two interfaces were there when answered: {kernel_links_seen} of {})",
        kernel.pairs
    );
    eprintln!(
        "  steady connection: {sent} frames sent ({sent_during} during the churn), {} received, \
         {lost} lost ({} dropped by the sender; its ring was full in {} passes), {} duplicated, {} reordered, {} \
         foreign (goal: none lost)",
        stats.received.load(Ordering::Relaxed),
        stats.sender_dropped.load(Ordering::Relaxed),
        stats.ring_full.load(Ordering::Relaxed),
        stats.duplicated.load(Ordering::Relaxed),
        stats.reordered.load(Ordering::Relaxed),
        stats.foreign.load(Ordering::Relaxed),
    );
    eprintln!(
        "  left behind: {leaked_fds} fds ({fds_before} → {fds_after}), {sockets_left} memif \
         sockets, {ports_left} ports, {owned_left} owned objects, {leaked_buffers} buffers \
         ({start_free} free before, {end_free} after stop), {links_left} links \
         (client namespace {nsc_left:?}, endpoint namespace {nse_left:?}, veth ends here \
         {host_ends_left:?}); churn links that came up: {churn_links}"
    );
    let at_once = &o.at_once;
    eprintln!(
        "  {} clients at once ({}): Request p50/p99/max {} ms (goal p99 ≤ {} ms: {}), Close p99 \
         {} ms, {} failures",
        at_once.calls.pairs,
        at_once.mechanism,
        [0.5, 0.99, 1.0]
            .map(|q| at_once
                .calls
                .request_ms(q)
                .map_or_else(|| "-".into(), |v| format!("{v:.2}")))
            .join("/"),
        concurrent::GOAL_P99_MS,
        match at_once.calls.meets(concurrent::GOAL_P99_MS) {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "-",
        },
        at_once
            .calls
            .close_ms(0.99)
            .map_or_else(|| "-".into(), |v| format!("{v:.2}")),
        at_once.failures.len(),
    );
    for f in at_once.failures.iter().take(5) {
        eprintln!("  concurrent failure: {f}");
    }
    eprintln!("  where the time goes (data-path calls during the churn): {breakdown}");
    eprintln!("  probes (traffic flowing): {probe}");
    for f in failures.iter().take(5) {
        eprintln!("  failure: {f}");
    }
}

/// The JSON line: every key the scenario has always written.
fn json_line(o: Outcome, d: &Derived, stats: &PeerStats, opts: &Options) -> String {
    let leaks = leaks_json(&o, d);
    let goal = goal_json(&o.churned, &o.at_once, d);
    let concurrent_json = {
        let mut c = o.at_once.calls.json();
        c["clients"] = json!(o.at_once.calls.pairs);
        c["mechanism"] = json!(o.at_once.mechanism);
        c
    };
    let Outcome {
        pairs,
        churned:
            Churned {
                memif,
                kernel,
                failures,
                kernel_links_seen,
                secs: churn_secs,
            },
        sent_during,
        breakdown,
        probe,
        ports_final,
        churn_links,
        ..
    } = o;
    let &Derived {
        sent,
        unique,
        lost,
        leaked_total,
        pairs_per_s,
        memif_pairs_per_s,
        ..
    } = d;
    let r = |v: Option<f64>| v.map(round3);
    json!({
        "scenario": "ctl-churn",
        "pairs": pairs,
        "memif_pairs": memif.pairs,
        "kernel_pairs": kernel.pairs,
        "kernel_share_pct": opts.kernel_share,
        "kernel_backend": opts.backend_name(),
        "failures": failures.len(),
        "seconds": round3(churn_secs),
        "pairs_per_s": round3(pairs_per_s),
        "memif_pairs_per_s": r(memif_pairs_per_s),
        "p50_ms": r(memif.request_ms(0.50)),
        "p99_ms": r(memif.request_ms(0.99)),
        "max_ms": r(memif.request_ms(1.0)),
        "close_p50_ms": r(memif.close_ms(0.50)),
        "close_p99_ms": r(memif.close_ms(0.99)),
        "kernel_request_p50_ms": r(kernel.request_ms(0.50)),
        "kernel_request_p99_ms": r(kernel.request_ms(0.99)),
        "kernel_request_max_ms": r(kernel.request_ms(1.0)),
        "kernel_close_p50_ms": r(kernel.close_ms(0.50)),
        "kernel_close_p99_ms": r(kernel.close_ms(0.99)),
        "kernel_close_max_ms": r(kernel.close_ms(1.0)),
        "kernel_links_seen": kernel_links_seen,
        "by_mechanism": {
            "memif": memif.json(),
            "kernel": kernel.json(),
        },
        "concurrent": concurrent_json,
        "frames": {
            "rate_per_s": RATE,
            "sent": sent,
            "sent_during_churn": sent_during,
            "received": stats.received.load(Ordering::Relaxed),
            "unique": unique,
            "sender_dropped": stats.sender_dropped.load(Ordering::Relaxed),
            "sender_ring_full_passes": stats.ring_full.load(Ordering::Relaxed),
            "duplicated": stats.duplicated.load(Ordering::Relaxed),
            "reordered": stats.reordered.load(Ordering::Relaxed),
            "foreign": stats.foreign.load(Ordering::Relaxed),
        },
        "lost_frames": lost,
        "leaked": leaked_total,
        "leaks": leaks,
        "ports_after_steady_close": ports_final,
        "churn_links_up": churn_links,
        "breakdown": breakdown,
        "probe": probe,
        "memif_poll_errors": stats.poll_errors.load(Ordering::Relaxed),
        "goal": goal,
    })
    .to_string()
}

/// `leaks` of the JSON line: what the churn left behind.
fn leaks_json(o: &Outcome, d: &Derived) -> serde_json::Value {
    let Outcome {
        fds_before,
        fds_after,
        sockets_left,
        ports_left,
        owned_left,
        start_free,
        free_running,
        end_free,
        nsc_left,
        nse_left,
        host_ends_left,
        links_left,
        ..
    } = o;
    let Derived {
        leaked_fds,
        leaked_buffers,
        ..
    } = d;
    json!({
        "fds": leaked_fds,
        "fds_before": fds_before,
        "fds_after": fds_after,
        "memif_sockets": sockets_left,
        "ports": ports_left,
        "owned_objects": owned_left,
        "buffers": leaked_buffers,
        "buffers_free_before": start_free,
        "buffers_free_running_after": free_running,
        "buffers_free_after_stop": end_free,
        "links": links_left,
        "links_client_netns": nsc_left,
        "links_endpoint_netns": nse_left,
        "veth_ends_in_own_netns": host_ends_left,
    })
}

/// `goal` of the JSON line: the goals, and whether the run met them.
fn goal_json(churned: &Churned, at_once: &Concurrent, d: &Derived) -> serde_json::Value {
    let (memif, kernel) = (&churned.memif, &churned.kernel);
    let (lost, leaked_total) = (d.lost, d.leaked_total);
    let meets = json!({
        "p99_ms": memif.meets(GOAL_P99_MS),
        "pairs_per_s": d.memif_pairs_per_s.map(|p| p >= GOAL_PAIRS_PER_S),
        "kernel_p99_ms": kernel.meets(GOAL_KERNEL_P99_MS),
        "concurrent_request_p99_ms": at_once.calls.meets(concurrent::GOAL_P99_MS),
        "no_frame_lost": lost == 0,
        "nothing_leaked": leaked_total == 0,
    });
    json!({
        "p99_ms_max": GOAL_P99_MS,
        "pairs_per_s_min": GOAL_PAIRS_PER_S,
        "kernel_request_p99_ms_max": GOAL_KERNEL_P99_MS,
        "concurrent_request_p99_ms_max": concurrent::GOAL_P99_MS,
        "lost_frames": 0,
        "leaked": 0,
        "met": meets,
    })
}
