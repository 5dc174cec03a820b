//! The WireGuard implementations we test against, built once and cached under
//! `$QUIVER_INTEROP_CACHE` (/var/cache/quiver-interop): wireguard-go at the version
//! interop/wireguard-go/go.mod pins, boringtun-cli 0.7.1 from crates.io. Builds are bounded in
//! time (`timeout`) and say what they do.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Says what a build does (stderr, so `cargo test` shows it).
fn say(msg: &str) {
    eprintln!("[wg-peers] {msg}");
}

/// Runs a command to completion; panics with its output if it fails.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// boringtun-cli's version.
pub const BORINGTUN_VERSION: &str = "0.7.1";
const GO_BUILD_SECS: &str = "900";
const CARGO_INSTALL_SECS: &str = "1500";

static BUILD: Mutex<()> = Mutex::new(());

fn cache() -> PathBuf {
    std::env::var_os("QUIVER_INTEROP_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/quiver-interop"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Finds `tool` on PATH (or in Go's usual place).
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/local/go/bin")])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// A peer implementation.
#[derive(Debug, Clone, Copy)]
pub enum Peer {
    /// golang.zx2c4.com/wireguard.
    WireguardGo,
    /// boringtun-cli.
    Boringtun,
}

impl Peer {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Peer::WireguardGo => "wireguard-go",
            Peer::Boringtun => "boringtun",
        }
    }

    /// Its binary, built if not cached; `Err` says why it cannot be (for a skip).
    pub fn binary(self) -> Result<PathBuf, String> {
        let _one_at_a_time = BUILD.lock().unwrap_or_else(|p| p.into_inner());
        match self {
            Peer::WireguardGo => build_wireguard_go(),
            Peer::Boringtun => build_boringtun(),
        }
    }

    /// The command line that runs it in the foreground on TUN `ifname`, logging to `log`.
    pub fn command(self, bin: &Path, ifname: &str, log: &str) -> Vec<String> {
        let bin = bin.display().to_string();
        match self {
            Peer::WireguardGo => vec![
                "env".into(),
                "LOG_LEVEL=verbose".into(),
                bin,
                "-f".into(),
                ifname.into(),
            ],
            Peer::Boringtun => vec![
                bin,
                ifname.into(),
                "--foreground".into(),
                "--disable-drop-privileges".into(),
                "--threads".into(),
                "1".into(),
                "--verbosity".into(),
                "debug".into(),
                "--log".into(),
                log.into(),
            ],
        }
    }
}

fn build_wireguard_go() -> Result<PathBuf, String> {
    let go = which("go").ok_or("no go command")?;
    let module = repo().join("interop/wireguard-go");
    // The cache key: Go's version and the module files that pin wireguard-go.
    let key_input = format!(
        "{}{}{}",
        run(Command::new(&go).arg("version")),
        std::fs::read_to_string(module.join("go.mod")).map_err(|e| e.to_string())?,
        std::fs::read_to_string(module.join("go.sum")).map_err(|e| e.to_string())?,
    );
    let key = format!("{:016x}", fnv1a(key_input.as_bytes()));
    let dir = cache().join("wireguard-go").join(&key);
    let bin = dir.join("wireguard-go");
    if bin.is_file() {
        say(&format!("wireguard-go: cached {}", bin.display()));
        return Ok(bin);
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let tmp = dir.join(format!("wireguard-go.tmp{}", std::process::id()));
    say(&format!(
        "wireguard-go: go build golang.zx2c4.com/wireguard (interop/wireguard-go/go.mod) into {} (at most {GO_BUILD_SECS} s)",
        bin.display()
    ));
    let c = cache();
    run(Command::new("timeout")
        .arg(GO_BUILD_SECS)
        .arg(&go)
        .args(["build", "-mod=readonly", "-o"])
        .arg(&tmp)
        .arg("golang.zx2c4.com/wireguard")
        .current_dir(&module)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-trimpath -buildvcs=false")
        .env("GOMODCACHE", c.join("gomod"))
        .env("GOCACHE", c.join("go-build")));
    std::fs::rename(&tmp, &bin).map_err(|e| e.to_string())?;
    say("wireguard-go: built");
    Ok(bin)
}

fn build_boringtun() -> Result<PathBuf, String> {
    let root = cache().join("boringtun");
    let bin = root.join("bin/boringtun-cli");
    let version = Command::new(&bin).arg("--version").output();
    if let Ok(out) = version {
        if String::from_utf8_lossy(&out.stdout).contains(BORINGTUN_VERSION) {
            say(&format!("boringtun: cached {}", bin.display()));
            return Ok(bin);
        }
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    say(&format!(
        "boringtun: cargo install boringtun-cli --version {BORINGTUN_VERSION} --locked --root {} (at most {CARGO_INSTALL_SECS} s)",
        root.display()
    ));
    run(Command::new("timeout")
        .arg(CARGO_INSTALL_SECS)
        .arg(cargo)
        .args([
            "install",
            "boringtun-cli",
            "--version",
            BORINGTUN_VERSION,
            "--locked",
            "--root",
        ])
        .arg(&root)
        // Its own target directory, not the workspace's.
        .env_remove("CARGO_TARGET_DIR")
        .current_dir(std::env::temp_dir()));
    say("boringtun: built");
    Ok(bin)
}

/// FNV-1a, enough for a cache key.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
