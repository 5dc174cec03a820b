//! The SPIFFE Workload API (`SpiffeWorkloadAPI`, a proto without a package), generated from
//! `ctl-api/proto/workload.proto`: Quiver is its client, for X.509 SVIDs and trust bundles.

#![allow(missing_docs, clippy::all)]

tonic::include_proto!("_");
