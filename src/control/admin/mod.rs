//! The admin API's backend over the running forwarder: what `quiver ctl` shows and changes.
//!
//! [`ForwarderAdmin`] implements [`AdminBackend`](quiver_admin_api::AdminBackend) over a [`Control`]: what it shows comes from
//! the owner's published view (never waiting for a change in progress), what it changes goes to
//! the owner as a [`Change`]. [`start`] serves it on the admin socket.
//!
//! - `backend.rs`: the `AdminBackend` implementation, one short method per call;
//! - `show.rs`: the owner's view and the data path's counters as the API's messages;
//! - `requests.rs`: the API's requests to make ports and tunnels as the owner's changes;
//! - `connections.rs`: where `show connections` finds the NSM service's connections.

mod backend;
mod connections;
mod requests;
mod show;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use drivers::PortStats;
use quiver_admin_api::proto as pb;
use quiver_admin_api::{AdminError, AdminResult, AdminServer, StartError};

use crate::control::owner::{Applied, Change, Control};
use crate::forwarder::{ForwarderError, PortEntry};

pub use connections::{nsm_connections, ConnectionSlot, ConnectionSource};

/// The admin backend over the configuration's owner.
pub struct ForwarderAdmin {
    control: Control,
    connections: ConnectionSlot,
    /// Port counters as of the last `clear counters`, by port (the driver's counters only
    /// grow; what is shown is the difference).
    baselines: Mutex<HashMap<usize, PortStats>>,
}

impl ForwarderAdmin {
    /// A backend over `control`, listing NSM connections from `connections`.
    pub fn new(control: Control, connections: ConnectionSlot) -> ForwarderAdmin {
        ForwarderAdmin {
            control,
            connections,
            baselines: Mutex::new(HashMap::new()),
        }
    }

    /// Applies `change`, its error as the admin API's.
    fn apply(&self, change: Change) -> AdminResult<Applied> {
        self.control.apply(change).map_err(admin_error)
    }

    /// Applies a change that makes an interface; its index.
    fn add_interface(&self, change: Change) -> AdminResult<u32> {
        match self.apply(change)? {
            Applied::Interface(i) => Ok(i.get()),
            other => Err(AdminError::Internal(format!(
                "made {other:?}, not an interface"
            ))),
        }
    }

    /// Applies a capture change; the capture.
    fn capture(&self, change: Change) -> AdminResult<pb::Capture> {
        match self.apply(change)? {
            Applied::Capture(c) => Ok(c.to_proto()),
            other => Err(AdminError::Internal(format!(
                "made {other:?}, not a capture"
            ))),
        }
    }

    /// A port's counters since the last `clear counters`.
    fn stats(&self, p: &PortEntry) -> PortStats {
        let mut s = p.port.stats();
        let baselines = self.baselines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = baselines.get(&port_key(p)) {
            s.rx_packets = s.rx_packets.saturating_sub(b.rx_packets);
            s.rx_bytes = s.rx_bytes.saturating_sub(b.rx_bytes);
            s.tx_packets = s.tx_packets.saturating_sub(b.tx_packets);
            s.tx_bytes = s.tx_bytes.saturating_sub(b.tx_bytes);
            s.rx_dropped = s.rx_dropped.saturating_sub(b.rx_dropped);
            s.tx_dropped = s.tx_dropped.saturating_sub(b.tx_dropped);
            for (k, v) in s.detail.iter_mut() {
                if let Some((_, old)) = b.detail.iter().find(|(n, _)| n == k) {
                    *v = v.saturating_sub(*old);
                }
            }
        }
        s
    }

    /// Counts from now on: every port's counters now become its baseline.
    fn reset_baselines(&self, ports: &[PortEntry]) {
        let mut baselines = self.baselines.lock().unwrap_or_else(|e| e.into_inner());
        baselines.clear();
        for p in ports {
            baselines.insert(port_key(p), p.port.stats());
        }
    }
}

/// Identifies a port object (a port removed and added again under its name is another one).
fn port_key(p: &PortEntry) -> usize {
    Arc::as_ptr(&p.port) as *const () as usize
}

/// The forwarder's error as the admin API's (which becomes a gRPC status).
fn admin_error(e: ForwarderError) -> AdminError {
    match e {
        ForwarderError::NotFound(m) => AdminError::NotFound(m),
        ForwarderError::AlreadyExists(m) => AdminError::AlreadyExists(m),
        ForwarderError::InvalidArgument(m) => AdminError::InvalidArgument(m),
        ForwarderError::Unavailable(m) => AdminError::Unavailable(m),
        ForwarderError::Internal(m) => AdminError::Internal(m),
    }
}

/// The admin socket `quiver run` serves and `quiver ctl` talks to unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/quiver/admin.sock";

/// Starts the admin service for `forwarder` on the unix socket `socket` (see
/// [`AdminServer::start`]); it runs until the returned server is dropped. An empty path: no
/// admin service. `None`: [`DEFAULT_SOCKET`], where a failure (a live quiver serves it, no
/// permission) is a warning and Quiver runs without the admin service.
pub fn start(control: &Control, socket: Option<&Path>) -> Result<Option<AdminServer>, StartError> {
    start_with(control, socket, ConnectionSlot::default())
}

/// [`start`], with `show connections` reading `connections`.
pub fn start_with(
    control: &Control,
    socket: Option<&Path>,
    connections: ConnectionSlot,
) -> Result<Option<AdminServer>, StartError> {
    let path = socket.unwrap_or(Path::new(DEFAULT_SOCKET));
    if path.as_os_str().is_empty() {
        return Ok(None);
    }
    let backend = Arc::new(ForwarderAdmin::new(control.clone(), connections));
    match AdminServer::start(backend, path) {
        Ok(server) => Ok(Some(server)),
        Err(e) if socket.is_none() => {
            tracing::warn!("{e}: running without the admin API (choose one with --admin-socket)");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
