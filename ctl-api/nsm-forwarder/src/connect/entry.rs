//! One connection as Quiver holds it ([`Entry`]), as `quiver ctl show connections` lists it
//! ([`ConnectionSummary`]), and the names Quiver gives the ports and sockets it makes for it.

use std::time::SystemTime;

use nsm_proto::connection::{Connection, State};

use crate::dataplane::{FrameMode, L3NextHops, PortName, PortSpec};
use crate::mechanism;
use crate::next_hop::NextHop;
use crate::pod_watch::PodWatch;
use crate::validate::Payload;

/// How the two ports are joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CrossConnect {
    /// Both ways at layer 2 (payload ETHERNET).
    L2,
    /// Each way toward the other side's address (payload IP).
    L3 {
        to_endpoint: L3NextHops,
        to_client: L3NextHops,
    },
}

/// One connection as Quiver holds it.
pub(crate) struct Entry {
    pub(super) own_id: String,
    pub(super) generation: u64,
    pub(super) client: PortSpec,
    pub(super) endpoint: PortSpec,
    pub(super) cross_connect: CrossConnect,
    pub(super) endpoint_url: String,
    /// The endpoint's registered name (see [`crate::endpoint::Candidate::name`]): a refresh
    /// that names it, or none, goes on to it.
    pub(super) endpoint_name: String,
    /// The endpoint's last answer (its connection id is Quiver's segment id).
    pub(super) endpoint_conn: Connection,
    /// What the monitor shows: Quiver's segment id and index.
    pub(super) published: Connection,
    /// The caller's connection id and path index, for the answer.
    pub(super) caller: (String, u32),
    pub(super) expiry: tokio::task::AbortHandle,
    /// The watch of the endpoint (see `next_hop`), and whether it says DOWN.
    pub(super) next_hop: NextHop,
    /// The watch of the client's and endpoint's pods (see `crate::pod_watch`).
    pub(super) pods: PodWatch,
    /// The data path reported a port of it down.
    pub(super) link_down: bool,
}

impl Entry {
    /// The answer to the caller: the published connection with the caller's id and index.
    pub(super) fn answer(&self) -> Connection {
        let mut a = self.published.clone();
        a.id = self.caller.0.clone();
        if let Some(p) = a.path.as_mut() {
            p.index = self.caller.1;
        }
        a
    }

    /// The line `show connections` lists for this connection of `owner`.
    pub(super) fn summary(&self, owner: &str) -> ConnectionSummary {
        let p = &self.published;
        let expires = p.path.as_ref().and_then(|path| {
            let own = path.path_segments.get(path.index as usize)?;
            let t = own.expires.as_ref()?;
            let secs = u64::try_from(t.seconds).ok()?;
            Some(std::time::UNIX_EPOCH + std::time::Duration::new(secs, t.nanos.max(0) as u32))
        });
        ConnectionSummary {
            id: p.id.clone(),
            owner: owner.to_string(),
            network_service: p.network_service.clone(),
            nsc: p
                .path
                .as_ref()
                .and_then(|path| path.path_segments.first())
                .map(|s| s.name.clone())
                .unwrap_or_default(),
            up: p.state == State::Up as i32,
            client: mechanism_and_port(&self.client),
            endpoint: mechanism_and_port(&self.endpoint),
            expires,
        }
    }
}

/// One connection as `quiver ctl show connections` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSummary {
    /// Quiver's own segment id (what MonitorConnections publishes).
    pub id: String,
    /// The caller's connection id (owner of everything built for it).
    pub owner: String,
    /// The network service.
    pub network_service: String,
    /// The client's name: the first path segment's.
    pub nsc: String,
    /// UP or DOWN.
    pub up: bool,
    /// The client side: mechanism type and Quiver's port.
    pub client: (String, String),
    /// The endpoint side: mechanism type and Quiver's port.
    pub endpoint: (String, String),
    /// When the connection expires unless refreshed, if it does.
    pub expires: Option<SystemTime>,
}

fn mechanism_and_port(spec: &PortSpec) -> (String, String) {
    (mechanism_type(spec).to_string(), spec.name().0.clone())
}

/// The NSM mechanism type of a side (`MEMIF`, `KERNEL`, `VXLAN`, `WIREGUARD`, `VLAN`).
fn mechanism_type(spec: &PortSpec) -> &'static str {
    match spec {
        PortSpec::Memif(_) => mechanism::MEMIF,
        PortSpec::Kernel(_) => mechanism::KERNEL,
        PortSpec::Vxlan(_) => mechanism::VXLAN,
        PortSpec::Wireguard(_) => mechanism::WIREGUARD,
        PortSpec::Vlan(_) => mechanism::VLAN,
    }
}

/// The first 8 letters and digits of `id`, for interface names.
pub(super) fn short(id: &str) -> String {
    id.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect::<String>()
        .to_ascii_lowercase()
}

/// Quiver's port toward the client of connection `owner`.
pub(super) fn client_port(owner: &str) -> PortName {
    PortName(format!("nsm-{owner}-client"))
}

/// Quiver's port toward the endpoint of connection `owner`.
pub(super) fn endpoint_port(owner: &str) -> PortName {
    PortName(format!("nsm-{owner}-endpoint"))
}

/// The abstract socket Quiver listens on, in the client's namespace.
pub fn memif_socket(owner: &str) -> String {
    format!("@quiver/{owner}/memif.socket")
}

/// What a memif of a connection with payload `p` carries.
pub(super) fn frame_mode(p: Payload) -> FrameMode {
    match p {
        Payload::Ethernet => FrameMode::Ethernet,
        Payload::Ip => FrameMode::Ip,
    }
}
