//! Quiver the daemon, as a library: the configuration file, the forwarder it assembles from
//! ports and forwarding state, the control plane's services over it, and the built-in demo. The `quiver` binary, the bench runner and
//! the end-to-end tests all start Quiver through this.

pub mod capture;
pub mod config;
pub mod control;
pub mod demo;
pub mod forwarder;
pub mod logging;
pub mod metrics;

pub use config::Config;
pub use forwarder::{Forwarder, ForwarderError, Owned, PortEntry, TunnelEntry};
