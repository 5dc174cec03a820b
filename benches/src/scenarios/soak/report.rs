//! The soak's figures: a summary on stderr (every leaked object named) and the JSON line.

use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use super::super::ctl_churn::util::{quantile_ms, round3};
use super::world::{Outcome, World};

/// p50, p99 and max of `ms` (ms).
fn quantiles(ms: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<std::time::Duration> = ms
        .iter()
        .map(|m| std::time::Duration::from_secs_f64(m / 1e3))
        .collect();
    v.sort();
    (
        round3(quantile_ms(&v, 0.5)),
        round3(quantile_ms(&v, 0.99)),
        round3(quantile_ms(&v, 1.0)),
    )
}

/// Tears the world down and returns the JSON line (or the error that stopped the run, with
/// what it had measured printed first).
pub fn finish(mut w: World, out: Outcome, minutes: u64) -> Result<String, String> {
    let f = figures(&mut w, &out);
    print_summary(&mut w, &out, &f);
    let json = json_line(&w, out, minutes, f);
    w.stable.stop_peers();
    drop(w);
    Ok(json.to_string())
}

/// What the soak measured, summed up for the summary and the JSON line.
struct Figures {
    req_p50: f64,
    req_p99: f64,
    req_max: f64,
    by_backend: serde_json::Map<String, Value>,
    ref_p50: f64,
    ref_p99: f64,
    close_p50: f64,
    close_p99: f64,
    flows: Vec<Value>,
    lost: u64,
    at_kill: u64,
    bad: u64,
    rss_growth: Option<f64>,
    rss: Value,
    ep_requests: u64,
    ep_closes: u64,
    requests: u64,
    closes: u64,
    by_fault: serde_json::Map<String, Value>,
    leaked_total: i64,
    objects: Vec<String>,
}

/// The figures (the RSS sampler stops here).
fn figures(w: &mut World, out: &Outcome) -> Figures {
    let c = &out.churn;
    let (req_p50, req_p99, req_max) = quantiles(&c.request_ms);
    let by_backend: serde_json::Map<String, Value> = c
        .request_ms_by_backend
        .iter()
        .map(|(b, v)| {
            let (p50, p99, max) = quantiles(v);
            (
                b.to_string(),
                json!({"requests": v.len(), "p50_ms": p50, "p99_ms": p99, "max_ms": max}),
            )
        })
        .collect();
    let (ref_p50, ref_p99, _) = quantiles(&c.refresh_ms);
    let (close_p50, close_p99, _) = quantiles(&c.close_ms);
    let flows: Vec<Value> = w.stable.conns.iter().map(|s| s.flow.report()).collect();
    let lost: u64 = w.stable.conns.iter().map(|s| s.flow.lost()).sum();
    let at_kill: u64 = w
        .stable
        .conns
        .iter()
        .map(|s| s.flow.excused.load(Ordering::Relaxed))
        .sum();
    let bad: u64 = w
        .stable
        .conns
        .iter()
        .map(|s| {
            s.flow.duplicated.load(Ordering::Relaxed)
                + s.flow.reordered.load(Ordering::Relaxed)
                + s.flow.corrupted.load(Ordering::Relaxed)
        })
        .sum();
    let (rss_growth, rss) = w.rss.growth(if w.quick { 20.0 } else { 120.0 });
    w.rss.stop();
    let (ep_requests, ep_closes) = w.endpoints.seen();
    let stable_requests = 2 + w.stable.refreshes + w.stable.heals;
    let requests = c.requests + c.refreshes + c.heals + stable_requests + w.fault_calls.0;
    let closes = c.closes + 2 + w.fault_calls.1;
    let mut by_fault = serde_json::Map::new();
    for f in &out.faults {
        let k = f["fault"].as_str().unwrap_or("?").to_string();
        let n = by_fault.get(&k).and_then(Value::as_u64).unwrap_or(0);
        by_fault.insert(k, json!(n + 1));
    }
    let leaked_total = w.leaks.total();
    let objects: Vec<String> = w
        .leaks
        .0
        .iter()
        .flat_map(|(k, m)| m.iter().map(move |(i, n)| format!("{k}: {i} ×{n}")))
        .collect();
    Figures {
        req_p50,
        req_p99,
        req_max,
        by_backend,
        ref_p50,
        ref_p99,
        close_p50,
        close_p99,
        flows,
        lost,
        at_kill,
        bad,
        rss_growth,
        rss,
        ep_requests,
        ep_closes,
        requests,
        closes,
        by_fault,
        leaked_total,
        objects,
    }
}

/// The summary on stderr, every leaked object named; in trouble, the run's directory is kept.
fn print_summary(w: &mut World, out: &Outcome, f: &Figures) {
    let c = &out.churn;
    let Figures {
        req_p50,
        req_p99,
        req_max,
        by_backend,
        ref_p99,
        close_p99,
        flows,
        lost,
        at_kill,
        rss_growth,
        rss,
        leaked_total,
        objects,
        ..
    } = f;
    let (lost, leaked_total) = (*lost, *leaked_total);
    eprintln!(
        "soak: {:.0} s, {} faults, quiver incarnations {}, crashes {}",
        out.seconds,
        out.faults.len(),
        w.quiver.incarnation + 1,
        w.crashes.len()
    );
    eprintln!(
        "  churn: {} Requests ({} made: {:?}), {} refreshes, {} heals, {} Closes; Request p50 \
         {req_p50} ms, p99 {req_p99} ms, max {req_max} ms; refresh p99 {ref_p99} ms; Close p99 \
         {close_p99} ms",
        c.requests,
        c.request_ms.len(),
        c.made,
        c.refreshes,
        c.heals,
        c.closes
    );
    eprintln!(
        "  Requests by Quiver's KERNEL backend: {}",
        Value::Object(by_backend.clone())
    );
    eprintln!("  failures: {:?}", c.failures);
    for u in &c.unexpected {
        eprintln!("  unexpected failure: {u}");
    }
    for f in &w.stable.failures {
        eprintln!("  stable connection: {f}");
    }
    for (s, r) in w.stable.conns.iter().zip(flows) {
        eprintln!("  stable {}: {r}", s.flow.name);
    }
    eprintln!("  frames lost on the stable connections: {lost} (and {at_kill} in flight when Quiver was killed)");
    eprintln!("  RSS: growth {rss_growth:?} % after warm-up; {rss}");
    if leaked_total == 0 {
        eprintln!("  leaked: nothing");
    } else {
        eprintln!("  leaked: {leaked_total} objects:");
        for o in objects {
            eprintln!("    {o}");
        }
    }
    if let Some(e) = &out.exit {
        eprintln!("  quiver's exit after SIGTERM: {e}");
    }
    let trouble = leaked_total > 0
        || c.unexpected_failures() > 0
        || !w.crashes.is_empty()
        || lost > 0
        || out.error.is_some();
    if trouble {
        w.dir.keep = true;
        eprintln!(
            "  Quiver's logs (and the run's sockets) are kept in {}",
            w.dir.path.display()
        );
    }
}

/// The JSON line.
fn json_line(w: &World, out: Outcome, minutes: u64, f: Figures) -> Value {
    let c = &out.churn;
    let Figures {
        req_p50,
        req_p99,
        req_max,
        by_backend,
        ref_p50,
        ref_p99,
        close_p50,
        close_p99,
        flows,
        lost,
        at_kill,
        bad,
        rss_growth,
        rss,
        ep_requests,
        ep_closes,
        requests,
        closes,
        by_fault,
        leaked_total,
        objects,
        ..
    } = f;
    json!({
        "scenario": "soak",
        "quick": w.quick,
        "minutes": minutes,
        "seconds": out.seconds.round(),
        "requests": requests,
        "closes": closes,
        "faults": out.faults.len(),
        "faults_by_kind": by_fault,
        "frames_lost_on_stable_connections": lost,
        "frames_lost_at_quiver_kill": at_kill,
        "frames_duplicated_reordered_corrupted": bad,
        "leaked_total": leaked_total,
        "leaked": w.leaks.per_kind(),
        "leaked_objects": objects.iter().take(50).collect::<Vec<_>>(),
        "rss_growth_pct": rss_growth,
        "request_p99_ms": req_p99,
        "request_p50_ms": req_p50,
        "request_max_ms": req_max,
        "request_by_kernel_backend": by_backend,
        "refresh_p50_ms": ref_p50,
        "refresh_p99_ms": ref_p99,
        "close_p50_ms": close_p50,
        "close_p99_ms": close_p99,
        "churn": {
            "clients": super::world::CLIENTS,
            "requests": c.requests,
            "made": c.made,
            "refreshes": c.refreshes,
            "heals": c.heals,
            "closes": c.closes,
            "failures": c.failures,
            "unexpected_failures": c.unexpected_failures(),
            "unexpected": c.unexpected,
            "failure_examples": c.examples,
        },
        "stable": {
            "memif": flows.first(),
            "kernel": flows.get(1),
            "refreshes": w.stable.refreshes,
            "heals": w.stable.heals,
            "failures": w.stable.failures,
        },
        "endpoints_saw": {"requests": ep_requests, "closes": ep_closes},
        "rss": rss,
        "quiver": {
            "incarnations": w.quiver.incarnation + 1,
            "crashes": w.crashes,
            "exit_after_sigterm": out.exit,
        },
        "fault_records": out.faults,
        "checkpoints": out.checkpoints,
        "error": out.error,
    })
}
