//! `package quiver.admin`, generated from `ctl-api/proto/quiver_admin.proto`: Quiver's own
//! admin API, served for `quiver ctl` (messages, the `Admin` service's server and client).

#![allow(missing_docs, clippy::all)]

tonic::include_proto!("quiver.admin");
