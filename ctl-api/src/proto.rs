//! Types and service stubs generated from `proto/*.proto`. The modules are named after the
//! proto packages, side by side, because generated code refers to other packages as
//! `super::<package>`.

#![allow(missing_docs, clippy::all)]

/// `package connectioncontext`: addresses, routes, neighbours, MTU of a connection.
pub mod connectioncontext {
    tonic::include_proto!("connectioncontext");
}

/// `package connection`: connections, mechanisms, paths, and the monitor service.
pub mod connection {
    tonic::include_proto!("connection");
}

/// `package networkservice`: Request and Close.
pub mod networkservice {
    tonic::include_proto!("networkservice");
}

/// `package registry`: the endpoint registry (Quiver is its client).
pub mod registry {
    tonic::include_proto!("registry");
}

/// `package quiver.admin`: Quiver's own admin API, served for `quiver ctl`.
pub mod quiver_admin {
    tonic::include_proto!("quiver.admin");
}

/// The SPIFFE Workload API (`SpiffeWorkloadAPI`, a proto without a package): Quiver is its
/// client, for X.509 SVIDs and trust bundles (see `crate::spiffe`).
pub mod spiffe_workload {
    tonic::include_proto!("_");
}
