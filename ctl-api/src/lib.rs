//! Quiver's gRPC control plane: the NSM v1 forwarder services (`networkservice.NetworkService`,
//! `connection.MonitorConnection`, health) and Quiver's own admin API, with the generated types
//! of the `.proto` files under `proto/`.

pub mod nsm;
pub mod proto;
