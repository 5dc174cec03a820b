//! The control plane: the one owner of the running configuration (`owner`) and the services
//! that read and change it through its handle (`admin`, `nsm`).

pub mod admin;
pub mod nsm;
pub mod owner;
pub mod uplink;
