//! Where `show connections` finds NSM connections: the NSM service starts after the admin
//! service, so the admin backend reads them through a slot the NSM side fills in.

use std::sync::{Arc, Mutex};

use quiver_admin_api::proto as pb;

/// Lists NSM connections (the NSM service's table).
pub type ConnectionSource = Box<dyn Fn() -> Vec<pb::Connection> + Send + Sync>;

/// Where `show connections` finds NSM connections: empty until the NSM service, started after
/// the admin service, [`ConnectionSlot::set`]s its table's lister.
#[derive(Clone, Default)]
pub struct ConnectionSlot(Arc<Mutex<Option<ConnectionSource>>>);

impl ConnectionSlot {
    /// From now on, connections come from `source`.
    pub fn set(&self, source: ConnectionSource) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(source);
    }

    /// The connections now (none without a source).
    pub fn list(&self) -> Vec<pb::Connection> {
        let source = self.0.lock().unwrap_or_else(|p| p.into_inner());
        source.as_ref().map(|c| c()).unwrap_or_default()
    }
}

/// What `quiver ctl show connections` lists: the connections of the NSM service `nsm` runs,
/// none once it has stopped. A reader: it holds the service weakly, so that stopping NSM lets
/// go of everything the service holds (the forwarder among it).
pub fn nsm_connections(nsm: &nsm_forwarder::NsmHandle) -> ConnectionSource {
    let core = Arc::downgrade(nsm.core());
    Box::new(move || {
        let Some(core) = core.upgrade() else {
            return Vec::new();
        };
        core.summaries()
            .into_iter()
            .map(|c| pb::Connection {
                id: c.id,
                network_service: c.network_service,
                state: if c.up { "up" } else { "down" }.to_string(),
                client_mechanism: c.client.0,
                client_interface: c.client.1,
                endpoint_mechanism: c.endpoint.0,
                endpoint_interface: c.endpoint.1,
                expires_unix: c
                    .expires
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs()),
            })
            .collect()
    })
}
