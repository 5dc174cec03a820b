//! Python packages from PyPI for tests that drive Quiver with an independent Python peer.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's Python, which `scripts/setup-host` installs with `python3-venv`.
pub const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// The Python of a virtual environment at `dir` holding `packages` from PyPI, made with
/// [`SYSTEM_PYTHON`] the first time it is asked for (and reused after). Err says what failed.
pub fn python_venv(dir: &Path, packages: &[&str]) -> Result<PathBuf, String> {
    let python = dir.join("bin/python");
    let ready = dir.join("ready");
    if ready.exists() {
        return Ok(python);
    }
    // A half-made environment (an earlier run stopped mid-install) is made again from scratch.
    let _ = std::fs::remove_dir_all(dir);
    run(
        Command::new(SYSTEM_PYTHON).args(["-m", "venv"]).arg(dir),
        &format!("{SYSTEM_PYTHON} -m venv (Debian's python3-venv)"),
    )?;
    // A registry that drops a connection mid-download should not fail a test run: pip retries
    // each request, and a failed install is tried once more whole before the error is returned.
    let install = || {
        run(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", "--retries", "10"])
                .args(["--timeout", "60"])
                .args(packages),
            &format!("pip install {} (from PyPI)", packages.join(" ")),
        )
    };
    if let Err(first) = install() {
        eprintln!("{first}\ntrying the install once more");
        install()?;
    }
    std::fs::write(&ready, b"").map_err(|e| format!("{}: {e}", ready.display()))?;
    Ok(python)
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what} could not run: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}
