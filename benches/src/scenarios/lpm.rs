//! `lpm`: our FIB (one cache line per /17) beside `dpdk-test-fib`'s rte_lpm on the same workload.
//!
//! `dpdk-test-fib` generates the routes (the benchmarks' depth mix) and the lookup addresses
//! (drawn from the routes) and dumps them; we load exactly those into our table. Then rounds
//! alternate: our lookups (in batches of 256, as `ip4-lookup` does them), then
//! `dpdk-test-fib -c` on the same files (its "AVG LPM lookup" line is rte_lpm). The figures are
//! the medians of the rounds, all on the same pinned core; every round's samples are reported.

use std::path::Path;
use std::process::Command;

use dataplane::cycles;
use dataplane::memory::HugepagePolicy;
use graph_nodes::fib::lpm::{Lpm, LpmTable, MAX_VALUE};
use serde_json::json;

const DEPTHS: &str = "16:5%,20:15%,22:20%,24:55%,28:3%,32:2%";

fn test_fib(core: usize, args: &[&str]) -> Result<String, String> {
    let hugepages = std::fs::read_to_string("/proc/sys/vm/nr_hugepages")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let mut cmd = Command::new("dpdk-test-fib");
    cmd.args([
        "-l",
        &core.to_string(),
        "--no-pci",
        "--log-level=lib.eal:error",
    ]);
    // A prefix of this process's own: two runs at once must not share EAL runtime files.
    cmd.arg(format!(
        "--file-prefix=quiver-bench-lpm-{}",
        std::process::id()
    ));
    if hugepages == 0 {
        cmd.args(["--no-huge", "-m", "1536"]);
    }
    cmd.arg("--").args(args);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run dpdk-test-fib (Debian package `dpdk`): {e}"))?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("dpdk-test-fib failed:\n{text}"));
    }
    Ok(text)
}

fn parse_ip(s: &str) -> Option<u32> {
    s.trim().parse::<std::net::Ipv4Addr>().ok().map(u32::from)
}

fn read_routes(path: &Path) -> Result<Vec<(u32, u8, u32)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut it = l.split_whitespace();
            let (net, nh) = (it.next(), it.next());
            let (addr, len) = net
                .and_then(|n| n.split_once('/'))
                .ok_or_else(|| format!("bad route line `{l}`"))?;
            Ok((
                parse_ip(addr).ok_or_else(|| format!("bad address in `{l}`"))?,
                len.parse().map_err(|_| format!("bad length in `{l}`"))?,
                nh.and_then(|n| n.parse::<u64>().ok()).unwrap_or(0) as u32,
            ))
        })
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the scenario; returns the JSON line.
pub fn run(quick: bool) -> Result<String, String> {
    let core = super::pin_to_last_core()?;
    let (n_routes, n_lookups, rounds) = if quick {
        (200_000, 2_000_000, 1)
    } else {
        (1_000_000, 10_000_000, 3)
    };
    let dir = std::env::temp_dir().join(format!("quiver-bench-lpm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (routes_file, ips_file) = (dir.join("routes.txt"), dir.join("ips.txt"));
    let (rf, ipf) = (
        routes_file.to_string_lossy().to_string(),
        ips_file.to_string_lossy().to_string(),
    );
    eprintln!("lpm: dpdk-test-fib generates {n_routes} routes ({DEPTHS}) and {n_lookups} lookup addresses");
    let (nr, nl) = (n_routes.to_string(), n_lookups.to_string());
    test_fib(
        core,
        &[
            "-n", &nr, "-l", &nl, "-d", DEPTHS, "-s", "-w", &rf, "-u", &ipf,
        ],
    )?;
    let routes = read_routes(&routes_file)?;
    let ips: Vec<u32> = std::fs::read_to_string(&ips_file)
        .map_err(|e| e.to_string())?
        .lines()
        .filter_map(parse_ip)
        .collect();

    let (lpm, load_s) = load(&routes)?;
    let table = lpm.table().clone();
    let mut out = vec![0u32; 256];
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for round in 1..=rounds {
        let c = quiver_cycles_per_lookup(&table, &ips, &mut out)?;
        let r = rte_lpm_cycles_per_lookup(core, &rf, &ipf)?;
        eprintln!("  round {round}: quiver {c:.2}, rte_lpm {r:.2} cycles/lookup");
        ours.push(c);
        theirs.push(r);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (samples_ours, samples_theirs) = (ours.clone(), theirs.clone());
    let (o, t) = (median(&mut ours), median(&mut theirs));
    Ok(json!({
        "scenario": "lpm",
        "routes": routes.len(),
        "lookups": ips.len(),
        "packets": ips.len(),
        "cycles_per_packet": o,
        "samples": samples_ours,
        "tsc_hz": cycles::tsc_hz(),
        "load_seconds": load_s,
        "tbl8_groups": lpm.groups_in_use(),
        "table_bytes": lpm.table_bytes(),
        "hugepages": lpm.table().is_hugepage_backed(),
        "reference": {
            "name": "rte_lpm via dpdk-test-fib -c (AVG LPM lookup) on the same routes and addresses, same run",
            "cycles_per_packet": t,
            "samples": samples_theirs,
        },
        "ratio": o / t,
    })
    .to_string())
}

/// Quiver's table loaded with `routes` in one batch, as a commit does it; the seconds it took.
fn load(routes: &[(u32, u8, u32)]) -> Result<(Lpm, f64), String> {
    let mut lpm = Lpm::new(65536, HugepagePolicy::Auto).map_err(|e| e.to_string())?;
    let t0 = std::time::Instant::now();
    // One batch, as a commit does it: each /17 is encoded once.
    lpm.defer_updates();
    for &(p, l, nh) in routes {
        lpm.insert(p, l, nh % (MAX_VALUE + 1))
            .map_err(|e| e.to_string())?;
    }
    lpm.flush().map_err(|e| e.to_string())?;
    // No reader has seen the table yet: every line can go in place now (a commit does this
    // once the workers have moved on).
    lpm.recycle_retired();
    let load_s = t0.elapsed().as_secs_f64();
    eprintln!(
        "  quiver loaded {} routes in {load_s:.2} s ({} tbl8 groups, table {:.1} MiB, hugepages {})",
        lpm.len(),
        lpm.groups_in_use(),
        lpm.table_bytes() as f64 / (1 << 20) as f64,
        lpm.table().is_hugepage_backed()
    );
    Ok((lpm, load_s))
}

/// Quiver's cycles per lookup of `ips` (after a warm-up), in batches of 256 into `out`; every
/// address must be found.
fn quiver_cycles_per_lookup(table: &LpmTable, ips: &[u32], out: &mut [u32]) -> Result<f64, String> {
    for chunk in ips.chunks(256).take(4096) {
        table.lookup_batch(chunk, &mut out[..chunk.len()]);
    }
    let mut misses = 0u64;
    let c0 = cycles::now();
    for chunk in ips.chunks(256) {
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

/// rte_lpm's cycles per lookup, as dpdk-test-fib prints them for the same routes and addresses
/// (`rf`, `ipf`).
fn rte_lpm_cycles_per_lookup(core: usize, rf: &str, ipf: &str) -> Result<f64, String> {
    let text = test_fib(core, &["-f", rf, "-t", ipf, "-c", "-g", "65536"])?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("AVG LPM lookup ")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .ok_or_else(|| format!("dpdk-test-fib printed no 'AVG LPM lookup' line:\n{text}"))
}
