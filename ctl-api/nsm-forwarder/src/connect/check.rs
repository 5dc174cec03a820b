//! What a Request asks for, checked before anything is touched ([`Checked`]): its id, payload,
//! context, path and mechanism.

use std::time::SystemTime;

use nsm_proto::connection::{Connection, Mechanism, Path};
use nsm_proto::networkservice::NetworkServiceRequest;
use tonic::Status;

use crate::config::NsmConfig;
use crate::limits::MAX_ID_LEN;
use crate::mechanism::{self, ClientMechanism, Remote, TunnelEnd};
use crate::mtu;
use crate::path::{self, Position};
use crate::validate::{self, Payload};

/// What a Request asks for, checked, before anything is touched.
pub(super) struct Checked {
    pub(super) conn: Connection,
    pub(super) payload: Payload,
    pub(super) mechanism: Mechanism,
    pub(super) client: ClientMechanism,
    pub(super) path: Path,
    pub(super) position: Position,
    /// The MTU the Request asks for (its context's, or NSM's default).
    pub(super) mtu: u32,
}

/// The id of the connection `req` asks for: not empty, at most [`MAX_ID_LEN`] bytes. Checked
/// first, as the id is needed for the connection's lock.
pub(super) fn connection_id(req: &NetworkServiceRequest) -> Result<String, Status> {
    let id = req
        .connection
        .as_ref()
        .map(|c| c.id.clone())
        .unwrap_or_default();
    if id.is_empty() {
        return Err(Status::invalid_argument("connection.id is empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(Status::invalid_argument(format!(
            "connection.id is longer than {MAX_ID_LEN} bytes"
        )));
    }
    Ok(id)
}

/// Quiver's end of tunnels to other nodes, when it has a tunnel address.
pub(super) fn tunnel_end(cfg: &NsmConfig) -> Option<TunnelEnd> {
    cfg.tunnel_ip.map(|ip| TunnelEnd {
        ip,
        port: cfg.vxlan_port,
        mtu: cfg.tunnel_mtu,
        wg_public_key: cfg.wireguard_public_key,
    })
}

/// The REMOTE mechanism Quiver serves for `payload`, if any: VXLAN for ETHERNET, WireGuard for
/// IP (with a key), both only with a tunnel address.
pub(super) fn remote_for(cfg: &NsmConfig, payload: Payload) -> Option<(TunnelEnd, Remote)> {
    let end = tunnel_end(cfg)?;
    Some((end, end.remote_for(payload == Payload::Ip)?))
}

/// Checks everything of `req` that can be checked before anything is built; `known_id` is
/// Quiver's segment id of the connection it holds already (a refresh).
pub(super) fn check(
    cfg: &NsmConfig,
    req: &NetworkServiceRequest,
    known_id: Option<&str>,
) -> Result<Checked, Status> {
    let conn = req
        .connection
        .clone()
        .ok_or_else(|| Status::invalid_argument("the request has no connection"))?;
    let payload = validate::payload(&conn.payload)?;
    validate::context(conn.context.as_ref())?;
    let mtu = mtu::requested(&conn)?;
    let (path, position) = path::advance(
        &conn,
        &cfg.name,
        known_id,
        cfg.max_token_lifetime,
        SystemTime::now(),
    )?;
    let (mechanism, client) = select_mechanism(cfg, &conn, req, payload)?;
    Ok(Checked {
        conn,
        payload,
        mechanism,
        client,
        path,
        position,
        mtu,
    })
}

/// The client's mechanism for `conn` with `payload` (a REMOTE one as [`remote_for`] says).
fn select_mechanism(
    cfg: &NsmConfig,
    conn: &Connection,
    req: &NetworkServiceRequest,
    payload: Payload,
) -> Result<(Mechanism, ClientMechanism), Status> {
    mechanism::select(
        conn.mechanism.as_ref(),
        &req.mechanism_preferences,
        remote_for(cfg, payload).map(|(_, r)| r),
    )
}

impl Checked {
    /// The same Request with `payload` (its network service's, for a Request that named
    /// none): the connection says it, and the client's mechanism is chosen again for it.
    pub(super) fn with_payload(
        mut self,
        cfg: &NsmConfig,
        req: &NetworkServiceRequest,
        payload: Payload,
    ) -> Result<Checked, Status> {
        self.conn.payload = payload.as_str().to_string();
        let (mechanism, client) = select_mechanism(cfg, &self.conn, req, payload)?;
        self.payload = payload;
        self.mechanism = mechanism;
        self.client = client;
        Ok(self)
    }
}

/// What [`check_request`] found a Request to ask for.
#[doc(hidden)]
#[derive(Debug)]
pub struct RequestPlan {
    /// The connection id (the key of Quiver's table).
    pub id: String,
    /// The client's mechanism chosen, as the Request gave it.
    pub mechanism: Mechanism,
    /// The client's mechanism, checked.
    pub client: ClientMechanism,
    /// The path with Quiver's segment in place.
    pub path: Path,
    /// Where the Request stands on it.
    pub position: Position,
    /// The MTU asked for.
    pub mtu: u32,
    /// The IP context, checked and split by side.
    pub ip: validate::SidesIp,
}

/// Everything `Core::request` checks of `req` before it touches anything (sizes, id, payload,
/// IP context, MTU, path, mechanism), without a `Core`: for the fuzz targets (`fuzz/`), which
/// assert an error `Status` or a consistent plan for any decoded Request. `known_id` is
/// Quiver's segment id of a connection it holds already.
#[doc(hidden)]
pub fn check_request(
    cfg: &NsmConfig,
    req: &NetworkServiceRequest,
    known_id: Option<&str>,
) -> Result<RequestPlan, Status> {
    crate::limits::request(req)?;
    let id = connection_id(req)?;
    let c = check(cfg, req, known_id)?;
    let ip = validate::context(c.conn.context.as_ref())?;
    Ok(RequestPlan {
        id,
        mechanism: c.mechanism,
        client: c.client,
        path: c.path,
        position: c.position,
        mtu: c.mtu,
        ip,
    })
}
