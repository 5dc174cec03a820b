//! The bench runner: `benches/run SCENARIO [--quick]` builds in release mode and runs this
//! (`ctl-churn` also takes `--kernel-share PERCENT`, `--kernel`, `--kernel-backend tap|veth`).
//! It prints progress for people on stderr and ends with one JSON line on stdout
//! (see `shared/specs/benchmarks.md` in the project's steering docs, and `benches/README.md`).

mod scenarios;

const SCENARIOS: &str =
    "dispatch, lpm, lpm6, acl, graph-ip4, graph-ip6, graph-l2xc, vxlan, memif-rate, memif-xc, dpdk, ctl-churn, kernel, wireguard, soak";

use clap::Parser;

/// Runs one benchmark scenario and prints its figures as one JSON line.
#[derive(Parser)]
#[command(name = "bench-runner", about)]
struct Args {
    /// The scenario: dispatch, lpm, lpm6, acl, graph-ip4, graph-ip6, graph-l2xc, vxlan, memif-rate,
    /// memif-xc, dpdk, ctl-churn, kernel, wireguard, soak.
    scenario: String,
    /// A short run (under a minute; soak: about 3 minutes).
    #[arg(long)]
    quick: bool,
    /// How long a soak without --quick runs, in minutes (default 30; --quick does each fault
    /// once, about 3 minutes).
    #[arg(long)]
    minutes: Option<u64>,
    /// ctl-churn: the share of the churned pairs, in percent, Requested with KERNEL on both
    /// sides instead of MEMIF (default 25: every fourth pair; 0: MEMIF only).
    #[arg(long, value_name = "PERCENT")]
    kernel_share: Option<u8>,
    /// ctl-churn: every churned pair with KERNEL on both sides (--kernel-share 100).
    #[arg(long)]
    kernel: bool,
    /// ctl-churn: the interfaces KERNEL mechanisms get, tap (Quiver's default) or veth.
    #[arg(long, value_name = "tap|veth", default_value = "tap")]
    kernel_backend: String,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let result = match args.scenario.as_str() {
        "dispatch" => scenarios::dispatch::run(args.quick),
        "lpm" => scenarios::lpm::run(args.quick),
        "lpm6" => scenarios::lpm6::run(args.quick),
        "acl" => scenarios::acl::run(args.quick),
        "graph-ip4" => scenarios::graphs::ip4(args.quick),
        "graph-ip6" => scenarios::graph_ip6::ip6(args.quick),
        "graph-l2xc" => scenarios::graphs::l2xc(args.quick),
        "vxlan" => scenarios::graphs::vxlan(args.quick),
        "memif-rate" => scenarios::memif_rate::run(args.quick),
        "memif-xc" => scenarios::memif_xc::run(args.quick),
        "dpdk" | "dpdk-ring" => scenarios::dpdk::run(args.quick),
        "ctl-churn" => scenarios::ctl_churn::Options::parse(
            args.kernel_share,
            args.kernel,
            &args.kernel_backend,
        )
        .and_then(|opts| scenarios::ctl_churn::run(args.quick, &opts)),
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
