//! Compiles NSM v1's `.proto` files from `../proto` (imports by bare file name, as NSM's own
//! files do) with the protoc that `protoc-bin-vendored` ships, so a fresh machine needs no
//! system protoc.

use std::path::PathBuf;

/// The NSM v1 files; the other files in `../proto` belong to other crates.
const PROTOS: [&str; 4] = [
    "connection.proto",
    "connectioncontext.proto",
    "networkservice.proto",
    "registry.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from("../proto");
    let protos: Vec<PathBuf> = PROTOS.iter().map(|p| dir.join(p)).collect();
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    // Build scripts run single-threaded: nothing reads the environment concurrently.
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    // The well-known types (Timestamp, Empty) ship beside the vendored protoc.
    let well_known = protoc_bin_vendored::include_path()?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&protos, &[dir, well_known])?;
    Ok(())
}
