//! Compiles Quiver's admin API (`../proto/quiver_admin.proto`) with the protoc that
//! `protoc-bin-vendored` ships, so a fresh machine needs no system protoc.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from("../proto");
    let proto = dir.join("quiver_admin.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    // Build scripts run single-threaded: nothing reads the environment concurrently.
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&[proto], &[dir])?;
    Ok(())
}
