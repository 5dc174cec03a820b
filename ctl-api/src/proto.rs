//! Types and service stubs generated from `proto/*.proto`. The modules are named after the
//! proto packages, side by side, because generated code refers to other packages as
//! `super::<package>`.

#![allow(missing_docs, clippy::all)]

pub use nsm_proto::{connection, connectioncontext, networkservice, registry};

/// `package quiver.admin`: Quiver's own admin API, served for `quiver ctl`.
pub mod quiver_admin {
    tonic::include_proto!("quiver.admin");
}
