//! NSM v1's gRPC types and service stubs, generated from `ctl-api/proto/` (see
//! `specs/nsm.md`): what the NSM forwarder service serves and calls, and what path tokens are
//! stamped into. The modules are named after the proto packages, side by side, because
//! generated code refers to other packages as `super::<package>`.

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

/// `package registry`: the registry of network services and their endpoints (Quiver is its
/// client).
pub mod registry {
    tonic::include_proto!("registry");
}
