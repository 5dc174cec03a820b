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
    run(
        Command::new(SYSTEM_PYTHON).args(["-m", "venv"]).arg(dir),
        &format!("{SYSTEM_PYTHON} -m venv (Debian's python3-venv)"),
    )?;
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet"])
            .args(packages),
        &format!("pip install {} (from PyPI)", packages.join(" ")),
    )?;
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
