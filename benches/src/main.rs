//! The bench runner: `benches/run SCENARIO [--quick]` builds in release mode and runs this.
//! It prints progress for people on stderr and ends with one JSON line on stdout
//! (see `shared/specs/benchmarks.md` in the project's steering docs, and `benches/README.md`).

mod scenarios;

const SCENARIOS: &str =
    "dispatch, lpm, graph-ip4, graph-l2xc, vxlan, memif-rate, memif-xc, dpdk, ctl-churn, kernel, wireguard, soak";

use clap::Parser;

/// Runs one benchmark scenario and prints its figures as one JSON line.
#[derive(Parser)]
#[command(name = "bench-runner", about)]
struct Args {
    /// The scenario: dispatch, lpm, graph-ip4, graph-l2xc, vxlan, memif-rate, memif-xc, dpdk,
    /// ctl-churn, kernel, wireguard, soak.
    scenario: String,
    /// A short run (under a minute; soak: about 3 minutes).
    #[arg(long)]
    quick: bool,
    /// How long a soak without --quick runs, in minutes (default 30; --quick does each fault
    /// once, about 3 minutes).
    #[arg(long)]
    minutes: Option<u64>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let result = match args.scenario.as_str() {
        "dispatch" => scenarios::dispatch::run(args.quick),
        "lpm" => scenarios::lpm::run(args.quick),
        "graph-ip4" => scenarios::graphs::ip4(args.quick),
        "graph-l2xc" => scenarios::graphs::l2xc(args.quick),
        "vxlan" => scenarios::graphs::vxlan(args.quick),
        "memif-rate" => scenarios::memif_rate::run(args.quick),
        "memif-xc" => scenarios::memif_xc::run(args.quick),
        "dpdk" | "dpdk-ring" => scenarios::dpdk::run(args.quick),
        "ctl-churn" => scenarios::ctl_churn::run(args.quick),
        "kernel" => scenarios::kernel::run(args.quick),
        "wireguard" => scenarios::wireguard::run(args.quick),
        "soak" => scenarios::soak::run(args.quick, args.minutes),
        other => Err(format!("unknown scenario `{other}` (known: {SCENARIOS})")),
    };
    match result {
        Ok(json) => {
            println!("{json}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench-runner: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
