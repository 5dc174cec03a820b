//! The bench runner: `benches/run SCENARIO [--quick]` builds in release mode and runs this.
//! It prints progress for people on stderr and ends with one JSON line on stdout
//! (see `shared/specs/benchmarks.md` in the project's steering docs, and `benches/README.md`).

mod scenarios;

use clap::Parser;

/// Runs one benchmark scenario and prints its figures as one JSON line.
#[derive(Parser)]
#[command(name = "bench-runner", about)]
struct Args {
    /// The scenario: `dispatch`.
    scenario: String,
    /// A short run (under a minute).
    #[arg(long)]
    quick: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let result = match args.scenario.as_str() {
        "dispatch" => scenarios::dispatch::run(args.quick),
        other => Err(format!("unknown scenario `{other}` (known: dispatch)")),
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
