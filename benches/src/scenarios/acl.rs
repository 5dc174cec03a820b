//! `acl`: Quiver's ACL classifier beside DPDK's `rte_acl` (by `dpdk-test-acl`), on the same
//! ClassBench-like rule sets of 100, 1,000 and 10,000 rules and the same traces.
//!
//! Per set: the rules and a trace of 65,536 headers are generated (`acl_rules`) and written in
//! ClassBench's format; Quiver compiles them (the build time reported) and must agree with its
//! linear scan on a sample; `dpdk-test-acl --verbose=2` prints its rule for the first 2,000
//! headers, which must be ours. Then rounds alternate on the same pinned core: our
//! classify over the trace in batches of 256 (a frame), and `dpdk-test-acl` over the same file
//! (`--tracestep=256`, one category) with each of its algorithms; the reference is the fastest
//! algorithm's median. `ratio_*` = our median cycles per packet ÷ the reference's.

use std::path::Path;
use std::process::Command;

use dataplane::cycles;
use graph_nodes::acl::{Action, Classifier, Key4, RuleList};
use serde_json::{json, Value};

use super::acl_rules;

/// Headers per trace: `dpdk-test-acl`'s default `--tracenum`.
const TRACE: usize = 65_536;
/// Headers both sides' results are compared on.
const AGREE: usize = 2_000;

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn free_hugepage_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 2
}

/// How `dpdk-test-acl` gets its memory.
#[derive(Clone, Copy)]
enum DpdkMemory {
    Hugepages,
    Ordinary,
}

/// Memory rte_acl may need for 10,000 rules, with room.
const DPDK_MIB: u64 = 512;

fn test_acl(core: usize, memory: DpdkMemory, args: &[String]) -> Result<String, String> {
    let mut cmd = Command::new("dpdk-test-acl");
    cmd.args([
        "-l",
        &core.to_string(),
        "--no-pci",
        "--in-memory",
        "--log-level=lib.eal:error",
        // EAL caps SIMD at 256 bits unless told: the AVX-512 algorithms need this.
        "--force-max-simd-bitwidth=512",
    ]);
    let prefix = format!("quiver-bench-acl-{}", std::process::id());
    cmd.arg(format!("--file-prefix={prefix}"));
    if let DpdkMemory::Ordinary = memory {
        cmd.args(["--no-huge", "-m", &DPDK_MIB.to_string()]);
    }
    cmd.arg("--").args(args);
    let out = cmd.output();
    if let Ok(dir) = std::fs::read_dir("/dev/hugepages") {
        for entry in dir.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    let out = out.map_err(|e| format!("cannot run dpdk-test-acl (Debian package `dpdk`): {e}"))?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let tail: Vec<&str> = text.lines().rev().take(8).collect();
        return Err(format!(
            "dpdk-test-acl failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    Ok(text)
}

fn cycles_per_pkt(text: &str) -> Result<f64, String> {
    text.lines()
        .filter(|l| l.starts_with("search_ip5tuples "))
        .find_map(|l| {
            let end = l.find(" cycles/pkt")?;
            l[..end].rsplit(' ').next()?.parse::<f64>().ok()
        })
        .ok_or_else(|| format!("dpdk-test-acl printed no cycles/pkt:\n{text}"))
}

fn num_tries(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("num_tries="))
        .and_then(|v| v.parse().ok())
}

/// rte_acl's rule for each of the first headers (`--verbose=2`), `None` for no match.
fn dpdk_results(text: &str) -> Vec<Option<u32>> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("ipv4_5tuple: ")?;
            let r = rest.rsplit("result: ").next()?.trim().parse::<u32>().ok()?;
            Some((r != u32::MAX).then_some(r))
        })
        .collect()
}

/// Our cycles per packet over `keys` `iters` times, in batches of 256.
fn ours(c: &Classifier, keys: &[Key4], iters: usize) -> f64 {
    let mut out = vec![None; 256];
    for chunk in keys.chunks(256) {
        c.classify4(chunk, &mut out);
    }
    let mut hits = 0u64;
    let c0 = cycles::now();
    for _ in 0..iters {
        for chunk in keys.chunks(256) {
            c.classify4(chunk, &mut out);
            hits += out[..chunk.len()].iter().filter(|r| r.is_some()).count() as u64;
        }
    }
    let cy = (cycles::now() - c0) as f64 / (iters * keys.len()) as f64;
    std::hint::black_box(hits);
    cy
}

struct Plan {
    rounds: usize,
    iters: usize,
    algs: &'static [&'static str],
}

fn one_set(
    core: usize,
    memory: DpdkMemory,
    dir: &Path,
    n: usize,
    plan: &Plan,
) -> Result<Value, String> {
    let gen = acl_rules::rules(n, 0xac1_0000 + n as u64);
    let keys = acl_rules::trace(&gen, TRACE, 0x7ace_0000 + n as u64);
    let list = RuleList::new(gen.iter().map(acl_rules::spec).collect(), Action::Deny)
        .map_err(|e| format!("generated rule refused: {e}"))?;
    let mut builds = Vec::new();
    let mut c = Classifier::compile(&list);
    for _ in 0..3 {
        c = Classifier::compile(&list);
        builds.push(c.build_time().as_secs_f64() * 1e3);
    }
    let build_ms = median(&builds);
    let mut got = vec![None; keys.len()];
    c.classify4(&keys, &mut got);
    for (k, g) in keys.iter().zip(&got).step_by(7) {
        if *g != list.first_match4(k) {
            return Err(format!(
                "{n} rules: classifier and linear scan disagree on {k:?}"
            ));
        }
    }
    let matched = got.iter().filter(|g| g.is_some()).count() as f64 / keys.len() as f64;
    let rf = dir.join(format!("rules{n}.txt"));
    let tf = dir.join(format!("trace{n}.txt"));
    std::fs::write(&rf, acl_rules::rules_file(&gen)).map_err(|e| e.to_string())?;
    std::fs::write(&tf, acl_rules::trace_file(&keys)).map_err(|e| e.to_string())?;
    // The agreement's headers in a file of their own: given a `--tracenum` smaller than its
    // file, dpdk-test-acl 22.11 reads one header past its array (and crashed here).
    let af = dir.join(format!("agree{n}.txt"));
    std::fs::write(&af, acl_rules::trace_file(&keys[..AGREE])).map_err(|e| e.to_string())?;
    let base = |alg: &str, iter: usize, verbose: u32, traces: usize| {
        let file = if traces == AGREE { &af } else { &tf };
        vec![
            format!("--rulesf={}", rf.display()),
            format!("--tracef={}", file.display()),
            format!("--rulenum={}", n.max(1)),
            format!("--tracenum={traces}"),
            "--tracestep=256".to_string(),
            "--bldcat=1".to_string(),
            "--runcat=1".to_string(),
            format!("--iter={iter}"),
            format!("--verbose={verbose}"),
            format!("--alg={alg}"),
        ]
    };
    // Agreement: rte_acl's rule for the first headers must be ours.
    let text = test_acl(core, memory, &base(plan.algs[0], 1, 2, AGREE))?;
    let theirs = dpdk_results(&text);
    if theirs.len() != AGREE {
        return Err(format!(
            "dpdk-test-acl printed {} results for {AGREE} headers",
            theirs.len()
        ));
    }
    let disagree = theirs.iter().zip(&got).filter(|(a, b)| a != b).count();
    if disagree > 0 {
        let (i, (a, b)) = theirs
            .iter()
            .zip(&got)
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .unwrap_or((0, (&None, &None)));
        return Err(format!(
            "{n} rules: rte_acl and Quiver disagree on {disagree} of {AGREE} headers (first: header {i} {:?}: rte_acl {a:?}, Quiver {b:?})",
            keys[i]
        ));
    }
    let tries = num_tries(&text);
    let mut mine = Vec::new();
    let mut per_alg: Vec<(&str, Vec<f64>, Option<String>)> =
        plan.algs.iter().map(|a| (*a, Vec::new(), None)).collect();
    for round in 1..=plan.rounds {
        mine.push(ours(&c, &keys, plan.iters));
        let mut line = format!("  {n} rules, round {round}: quiver {:.1}", mine[round - 1]);
        for (alg, samples, err) in per_alg.iter_mut() {
            if err.is_some() {
                continue;
            }
            match test_acl(core, memory, &base(alg, plan.iters, 0, TRACE))
                .and_then(|t| cycles_per_pkt(&t))
            {
                Ok(v) => {
                    samples.push(v);
                    let _ = std::fmt::Write::write_fmt(&mut line, format_args!(", {alg} {v:.1}"));
                }
                Err(e) => {
                    eprintln!("  rte_acl's {alg} is not available here: {e}");
                    *err = Some(e);
                }
            }
        }
        eprintln!("{line} cycles/packet");
    }
    let (best_alg, best) = per_alg
        .iter()
        .filter(|(_, s, _)| !s.is_empty())
        .map(|(a, s, _)| (*a, median(s)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .ok_or("no rte_acl algorithm ran")?;
    let o = median(&mine);
    eprintln!(
        "  {n} rules: quiver {o:.1} cycles/packet (build {build_ms:.2} ms, {} KiB), rte_acl {best_alg} {best:.1}: ratio {:.2}",
        c.lookup_bytes() / 1024,
        o / best
    );
    Ok(json!({
        "rules": n,
        "packets": keys.len(),
        "matched_share": matched,
        "cycles_per_packet": o,
        "samples": mine,
        "build_ms": build_ms,
        "lookup_bytes": c.lookup_bytes(),
        "agreement_checked": AGREE,
        "reference": {
            "name": format!("rte_acl by dpdk-test-acl (DPDK {}), --tracestep=256, one category, {best_alg}", dpdk_version()),
            "algorithm": best_alg,
            "cycles_per_packet": best,
            "tries": tries,
            "algorithms": per_alg.iter().map(|(a, s, e)| (a.to_string(), json!({
                "cycles_per_packet": (!s.is_empty()).then(|| median(s)),
                "samples": s,
                "error": e,
            }))).collect::<serde_json::Map<String, Value>>(),
        },
        "ratio": o / best,
    }))
}

fn dpdk_version() -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "dpdk"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "22.11".to_string())
}

/// Runs the scenario; returns the JSON line.
pub fn run(quick: bool) -> Result<String, String> {
    let core = super::pin_to_last_core()?;
    let plan = if quick {
        Plan {
            rounds: 1,
            iters: 4,
            algs: &["avx512x16", "avx512x32", "avx2"],
        }
    } else {
        Plan {
            rounds: 3,
            iters: 30,
            algs: &["avx512x16", "avx512x32", "avx2", "sse", "scalar"],
        }
    };
    let memory = if free_hugepage_mib() >= DPDK_MIB {
        DpdkMemory::Hugepages
    } else {
        eprintln!(
            "  fewer than {DPDK_MIB} MiB of free hugepages: rte_acl on ordinary pages (--no-huge)"
        );
        DpdkMemory::Ordinary
    };
    eprintln!("acl: ClassBench-like IPv4 5-tuple rules, {TRACE} headers per trace, core {core}");
    let dir = std::env::temp_dir().join(format!("quiver-bench-acl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut sets = Vec::new();
    let mut result = Ok(());
    for n in [100, 1_000, 10_000] {
        match one_set(core, memory, &dir, n, &plan) {
            Ok(v) => sets.push(v),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    let f = |i: usize, k: &str| sets[i][k].clone();
    Ok(json!({
        "scenario": "acl",
        "ratio_100": f(0, "ratio"),
        "ratio_1k": f(1, "ratio"),
        "ratio_10k": f(2, "ratio"),
        "cycles_per_packet": f(2, "cycles_per_packet"),
        "reference_cycles_per_packet": sets[2]["reference"]["cycles_per_packet"].clone(),
        "build_ms_10k": f(2, "build_ms"),
        "hugepages_for_rte_acl": matches!(memory, DpdkMemory::Hugepages),
        "rounds": plan.rounds,
        "iterations": plan.iters,
        "tsc_hz": cycles::tsc_hz(),
        "sets": sets,
    })
    .to_string())
}
