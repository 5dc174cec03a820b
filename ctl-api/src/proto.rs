//! NSM v1's generated types (the nsm-proto crate's), under their old path while ctl-api is
//! split.

pub use nsm_proto::{connection, connectioncontext, networkservice, registry};
