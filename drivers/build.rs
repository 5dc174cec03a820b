//! Builds the XDP program of AF_XDP ports (`bpf/xsk_redirect.c`) with clang's BPF target.
//!
//! Without clang the crate still builds: AF_XDP ports then refuse to open, saying why (the cfg
//! `quiver_xdp_program` is unset). `scripts/setup-host` installs clang.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = "bpf/xsk_redirect.c";

fn main() {
    println!("cargo::rerun-if-changed={SOURCE}");
    println!("cargo::rerun-if-env-changed=CLANG");
    println!("cargo::rustc-check-cfg=cfg(quiver_xdp_program)");
    let out =
        PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("xsk_redirect.o");
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let built = Command::new(&clang)
        .args([
            "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-c", SOURCE, "-o",
        ])
        .arg(&out)
        .status();
    match built {
        Ok(status) if status.success() => println!("cargo::rustc-cfg=quiver_xdp_program"),
        Ok(status) => panic!("{clang} failed to build {SOURCE} ({status})"),
        Err(e) => println!(
            "cargo::warning=no XDP program for AF_XDP ports: cannot run `{clang}` ({e}); \
             AF_XDP ports will not open"
        ),
    }
}
