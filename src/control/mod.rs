//! The control plane's services over the forwarder.

pub mod admin;
pub mod nsm;
