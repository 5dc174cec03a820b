//! `lpm6`: Quiver's IPv6 FIB beside DPDK's `rte_fib6` (trie), on the same routes and addresses.
//!
//! The routes are shaped like a real IPv6 table (`lpm6_routes`); `dpdk-test-fib`'s own
//! generator spreads every length evenly over the whole address space (/1 to /128 alike, the
//! bits above each 32-bit word random), nothing like a real table, so both sides are given the
//! same files instead. The lookup addresses are drawn from the routes. Rounds alternate on the
//! same pinned core: our lookups (batches of 256, as a lookup node gets them), then
//! `dpdk-test-fib -6` on the files with its vector (AVX-512) lookup and with its scalar one; the
//! reference is the faster of the two. Figures are medians of the rounds; every sample is
//! reported.

use std::path::Path;
use std::process::Command;

use dataplane::cycles;
use dataplane::memory::HugepagePolicy;
use graph_nodes::fib6::{mask, Lpm6, Lpm6Table};
use serde_json::json;

use super::lpm6_routes;

/// The largest tbl8 count `dpdk-test-fib` configures (its `get_max_nh`: 21 bits).
const DPDK_MAX_TBL8: u64 = (1 << 21) - 1;

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn free_hugepage_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        * (2 << 20)
}

/// Hugepages added to the kernel's pool for this run, given back when dropped.
struct HugepageLoan {
    before: u64,
}

impl HugepageLoan {
    const PATH: &'static str = "/proc/sys/vm/nr_hugepages";

    /// Grows the pool so that `bytes` more are free, when the machine has the memory to spare
    /// (2 GiB left over) and we may (root); `None` when it has enough already or cannot.
    fn cover(bytes: u64) -> Option<HugepageLoan> {
        let free = free_hugepage_bytes();
        if free >= bytes {
            return None;
        }
        let before: u64 = std::fs::read_to_string(Self::PATH)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let pages = (bytes - free).div_ceil(2 << 20);
        let available = std::fs::read_to_string("/proc/meminfo")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()?
            * 1024;
        if pages * (2 << 20) + (2 << 30) > available {
            return None;
        }
        std::fs::write(Self::PATH, (before + pages).to_string()).ok()?;
        eprintln!(
            "  hugepages: {before} → {} for this run (given back at the end)",
            before + pages
        );
        Some(HugepageLoan { before })
    }
}

impl Drop for HugepageLoan {
    fn drop(&mut self) {
        if std::fs::write(Self::PATH, self.before.to_string()).is_err() {
            eprintln!(
                "  could not give the hugepages back: {} holds more than {}",
                Self::PATH,
                self.before
            );
        }
    }
}

/// How `dpdk-test-fib` runs: with hugepages, or with `--no-huge -m MB`.
#[derive(Clone, Copy)]
enum DpdkMemory {
    Hugepages,
    Ordinary(u64),
}

fn test_fib(
    core: usize,
    memory: DpdkMemory,
    eal: &[&str],
    args: &[&str],
) -> Result<String, String> {
    let mut cmd = Command::new("dpdk-test-fib");
    // In memory: no hugepage files left behind to hold the pages after the run.
    cmd.args([
        "-l",
        &core.to_string(),
        "--no-pci",
        "--in-memory",
        "--log-level=lib.eal:error",
    ]);
    // A prefix of this process's own: two runs at once must not share EAL runtime files.
    let prefix = format!("quiver-bench-lpm6-{}", std::process::id());
    cmd.arg(format!("--file-prefix={prefix}"));
    if let DpdkMemory::Ordinary(mb) = memory {
        cmd.args(["--no-huge", "-m", &mb.to_string()]);
    }
    cmd.args(eal).arg("--").args(args);
    let out = cmd.output();
    // Hugepage files of ours left behind (seen once here) would hold their pages for good.
    if let Ok(dir) = std::fs::read_dir("/dev/hugepages") {
        for entry in dir.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    let out = out.map_err(|e| format!("cannot run dpdk-test-fib (Debian package `dpdk`): {e}"))?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let tail: Vec<&str> = text.lines().rev().take(15).collect();
        return Err(format!(
            "dpdk-test-fib failed ({}):\n{}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    Ok(text)
}

/// tbl8 groups rte_fib6's trie reserves for `routes` added in this order (its `trie_modify`:
/// a route longer than /24 with nothing below its 8-bit-aligned prefix reserves one group per
/// 8 bits between its covering route, or /24, and itself).
fn trie_reservation(routes: &[(u128, u8, u32)]) -> u64 {
    use std::collections::HashSet;
    let ceil8 = |d: u8| d.div_ceil(8) * 8;
    let lens: Vec<u8> = lpm6_routes::histogram(routes).into_keys().collect();
    let mut present: HashSet<(u128, u8)> = HashSet::with_capacity(routes.len());
    let mut below: HashSet<(u128, u8)> = HashSet::with_capacity(routes.len() * 4);
    let mut reserved = 0u64;
    for &(p, len, _) in routes {
        if len > 24 {
            let floor = len / 8 * 8;
            if !below.contains(&(p & mask(floor), floor)) {
                let parent = lens
                    .iter()
                    .rev()
                    .filter(|&&l| l < len)
                    .find(|&&l| present.contains(&(p & mask(l), l)))
                    .copied()
                    .unwrap_or(0);
                reserved += ((ceil8(len) - ceil8(parent.max(24))) / 8) as u64;
            }
        }
        present.insert((p, len));
        for f in (24..=len).step_by(8) {
            below.insert((p & mask(f), f));
        }
    }
    reserved
}

fn write_files(dir: &Path, routes: &[(u128, u8, u32)], ips: &[u128]) -> Result<(), String> {
    use std::fmt::Write as _;
    let full = |a: u128| {
        let mut s = String::with_capacity(40);
        for (k, g) in a.to_be_bytes().chunks(2).enumerate() {
            let _ = write!(
                s,
                "{}{:02x}{:02x}",
                if k > 0 { ":" } else { "" },
                g[0],
                g[1]
            );
        }
        s
    };
    let mut text = String::with_capacity(routes.len() * 48);
    for &(p, l, v) in routes {
        let _ = writeln!(text, "{}/{l} {v}", full(p));
    }
    std::fs::write(dir.join("routes6.txt"), &text).map_err(|e| e.to_string())?;
    text.clear();
    for &a in ips {
        let _ = writeln!(text, "{}", full(a));
    }
    std::fs::write(dir.join("ips6.txt"), &text).map_err(|e| e.to_string())
}

/// Runs the scenario; returns the JSON line.
pub fn run(quick: bool) -> Result<String, String> {
    let core = super::pin_to_last_core()?;
    let (n_routes, n_lookups, rounds) = if quick {
        (100_000, 1_000_000, 3)
    } else {
        (1_000_000, 4_000_000, 3)
    };
    let routes = lpm6_routes::generate(n_routes, 0x1b6_2024);
    let ips = lpm6_routes::addresses(&routes, n_lookups, 0x1b6_2025);
    let mix = lpm6_routes::histogram(&routes);
    eprintln!(
        "lpm6: {} routes shaped like a real IPv6 table, {} lookup addresses drawn from them",
        routes.len(),
        ips.len()
    );
    let reserved = trie_reservation(&routes);
    if reserved > DPDK_MAX_TBL8 {
        return Err(format!(
            "rte_fib6's trie would reserve {reserved} tbl8 groups for these routes, more than \
             dpdk-test-fib configures ({DPDK_MAX_TBL8})"
        ));
    }
    let tbl8 = (reserved + reserved / 50 + 1024).min(DPDK_MAX_TBL8);
    // The trie: tbl24 (4-byte entries) and its groups; the RIB (2 nodes per route at most,
    // ~128 bytes each with the mempool's overhead); the test's own route and address arrays.
    let dpdk_bytes = (1u64 << 26)
        + (tbl8 + 1) * 1024
        + tbl8 * 4
        + routes.len() as u64 * 2 * 128
        + routes.len() as u64 * 32
        + ips.len() as u64 * 16;
    let dir = std::env::temp_dir().join(format!("quiver-bench-lpm6-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let result = write_files(&dir, &routes, &ips).and_then(|()| {
        measure(
            core, rounds, &routes, &ips, &dir, tbl8, dpdk_bytes, reserved,
        )
    });
    let _ = std::fs::remove_dir_all(&dir);
    let mut v = result?;
    v["route_mix"] = json!(mix
        .iter()
        .map(|(l, n)| (format!("/{l}"), json!(n)))
        .collect::<serde_json::Map<String, serde_json::Value>>());
    Ok(v.to_string())
}

#[allow(clippy::too_many_arguments)]
fn measure(
    core: usize,
    rounds: usize,
    routes: &[(u128, u8, u32)],
    ips: &[u128],
    dir: &Path,
    tbl8: u64,
    dpdk_bytes: u64,
    reserved: u64,
) -> Result<serde_json::Value, String> {
    // Node memory for our table: about 80 bytes per route of this mix are used, with room.
    let node_bytes = (routes.len() as u64 * 128).max(64 << 20);
    // Both sides on the same kind of pages: hugepages when both fit (the pool grown for the
    // run if need be), else ordinary ones.
    let need = node_bytes + (1 << 20) + dpdk_bytes + dpdk_bytes / 2;
    let loan = HugepageLoan::cover(need);
    let huge = free_hugepage_bytes() >= need;
    let (policy, memory) = if huge {
        (HugepagePolicy::Require, DpdkMemory::Hugepages)
    } else {
        let mb = (dpdk_bytes + dpdk_bytes / 4).div_ceil(1 << 20) + 256;
        eprintln!(
            "  not enough free hugepages for both tables ({} MiB for rte_fib6): both on ordinary pages",
            dpdk_bytes >> 20
        );
        (HugepagePolicy::Never, DpdkMemory::Ordinary(mb))
    };
    let (lpm, load_s) = load(routes, node_bytes, policy)?;
    let table = lpm.table().clone();
    let (rf, ipf) = (
        dir.join("routes6.txt").to_string_lossy().to_string(),
        dir.join("ips6.txt").to_string_lossy().to_string(),
    );
    let g = tbl8.to_string();
    let fib_args = ["-6", "-f", &rf, "-t", &ipf, "-g", &g];
    let vector_eal = ["--force-max-simd-bitwidth=512"];
    let mut ours = Vec::new();
    let mut ours64 = Vec::new();
    let mut vector = Vec::new();
    let mut scalar = Vec::new();
    let mut vector_error = None;
    for round in 1..=rounds {
        ours.push(quiver_cycles_per_lookup(&table, ips, 256)?);
        ours64.push(quiver_cycles_per_lookup(&table, ips, 64)?);
        if vector_error.is_none() {
            let args: Vec<&str> = fib_args.iter().copied().chain(["-v", "v"]).collect();
            match test_fib(core, memory, &vector_eal, &args).and_then(|t| avg_lookup(&t)) {
                Ok(c) => vector.push(c),
                Err(e) => {
                    eprintln!("  rte_fib6's vector lookup is not available here: {e}");
                    vector_error = Some(e);
                }
            }
        }
        let args: Vec<&str> = fib_args.iter().copied().chain(["-v", "s"]).collect();
        scalar.push(test_fib(core, memory, &[], &args).and_then(|t| avg_lookup(&t))?);
        eprintln!(
            "  round {round}: quiver {:.1} (batches of 64: {:.1}), rte_fib6 trie vector {}, scalar {:.1} cycles/lookup",
            ours[round - 1],
            ours64[round - 1],
            vector.get(round - 1).map_or("-".to_string(), |c| format!("{c:.1}")),
            scalar[round - 1]
        );
    }
    let o = median(&ours);
    let s = median(&scalar);
    let (reference, name) = match vector.is_empty() {
        false if median(&vector) <= s => (median(&vector), "vector (AVX-512, -v v)"),
        _ => (s, "scalar (-v s)"),
    };
    Ok(json!({
        "scenario": "lpm6",
        "routes": routes.len(),
        "lookups": ips.len(),
        "rounds": rounds,
        "packets": ips.len(),
        "cycles_per_lookup": o,
        "cycles_per_packet": o,
        "samples": ours,
        "batch64_cycles_per_lookup": median(&ours64),
        "batch64_samples": ours64,
        "tsc_hz": cycles::tsc_hz(),
        "load_seconds": load_s,
        "nodes": lpm.node_count(),
        "table_bytes": lpm.table_bytes(),
        "peak_node_bytes": lpm.peak_node_bytes(),
        "writer_bytes": lpm.writer_bytes(),
        "mapped_bytes": lpm.table().mapped_bytes(),
        "hugepages": lpm.table().is_hugepage_backed(),
        "reference": {
            "name": format!(
                "rte_fib6 trie (DPDK {}, 4-byte entries, {tbl8} tbl8 groups) by dpdk-test-fib -6 -f ROUTES -t IPS -g {tbl8}, AVG FIB lookup (bursts of 64) on the same routes and addresses, same core, same run; the faster of its lookups: {name}",
                dpdk_version()
            ),
            "cycles_per_lookup": reference,
            "vector_cycles_per_lookup": (!vector.is_empty()).then(|| median(&vector)),
            "vector_samples": vector,
            "vector_error": vector_error,
            "scalar_cycles_per_lookup": s,
            "scalar_samples": scalar,
            "tbl8_groups_reserved": reserved,
            "table_bytes": (1u64 << 26) + (tbl8 + 1) * 1024,
            "hugepages": huge,
        },
        "hugepages_lent": loan.is_some(),
        "ratio": o / reference,
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

fn avg_lookup(text: &str) -> Result<f64, String> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix("AVG FIB lookup ")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .ok_or_else(|| format!("dpdk-test-fib printed no 'AVG FIB lookup' line:\n{text}"))
}

/// Quiver's table loaded with `routes` in one batch, as a commit does it; the seconds it took.
fn load(
    routes: &[(u128, u8, u32)],
    node_bytes: u64,
    policy: HugepagePolicy,
) -> Result<(Lpm6, f64), String> {
    let mut lpm = Lpm6::new(node_bytes, policy).map_err(|e| e.to_string())?;
    let t0 = std::time::Instant::now();
    lpm.defer_updates();
    for &(p, l, v) in routes {
        lpm.insert(p, l, v).map_err(|e| e.to_string())?;
    }
    lpm.flush().map_err(|e| e.to_string())?;
    let load_s = t0.elapsed().as_secs_f64();
    eprintln!(
        "  quiver loaded {} routes in {load_s:.2} s: {} nodes, table {:.1} MiB, writer {:.1} MiB, hugepages {}",
        lpm.len(),
        lpm.node_count(),
        lpm.table_bytes() as f64 / (1 << 20) as f64,
        lpm.writer_bytes() as f64 / (1 << 20) as f64,
        lpm.table().is_hugepage_backed()
    );
    Ok((lpm, load_s))
}

/// Quiver's cycles per lookup of `ips` (after a warm-up) in batches of `batch`; every address
/// must be found.
fn quiver_cycles_per_lookup(table: &Lpm6Table, ips: &[u128], batch: usize) -> Result<f64, String> {
    let mut out = vec![0u32; batch];
    for chunk in ips.chunks(batch).take(4096) {
        table.lookup_batch(chunk, &mut out[..chunk.len()]);
    }
    let mut misses = 0u64;
    let c0 = cycles::now();
    for chunk in ips.chunks(batch) {
        table.lookup_batch(chunk, &mut out[..chunk.len()]);
        misses += out[..chunk.len()]
            .iter()
            .filter(|&&v| v == u32::MAX)
            .count() as u64;
    }
    let c = (cycles::now() - c0) as f64 / ips.len() as f64;
    if misses > 0 {
        return Err(format!(
            "{misses} lookups of addresses drawn from the routes found nothing"
        ));
    }
    Ok(c)
}
