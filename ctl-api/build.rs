//! Compiles every `.proto` file under `proto/` (imports by bare file name, as NSM's own files do)
//! with the protoc that `protoc-bin-vendored` ships, so a fresh machine needs no system protoc.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from("proto");
    let mut protos: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "proto"))
        // NSM v1's files are the nsm-proto crate's, the Workload API spiffe-identity's.
        .filter(|p| p.file_name().is_some_and(|n| n == "quiver_admin.proto"))
        .collect();
    protos.sort();
    println!("cargo:rerun-if-changed=proto");
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
