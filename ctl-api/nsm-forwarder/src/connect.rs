//! Request and Close: the forwarder's state machine for one connection.
//!
//! A Request checks everything it can first (nothing is touched for a bad request), then, under
//! the connection's lock, reconciles what the data path holds with what the Request asks for:
//! the client-side port, then the endpoint (Quiver Requests it as a client), the endpoint-side
//! port, and the cross-connect. What is already right is left alone; what differs is torn down
//! and rebuilt. If anything fails once the data path or the endpoint was touched, everything
//! the connection owned is removed and the endpoint side is closed: a failed Request leaves
//! no state. After each successful Request Quiver watches the endpoint's MonitorConnections
//! (`next_hop`): a Close or expiry on the far side closes the connection here too.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tonic::Status;

use super::channels::{self, Channels};
use super::config::NsmConfig;
use super::dataplane::{
    Dataplane, DataplaneError, FrameMode, KernelSpec, LinkEvent, MemifRole, MemifSpec, PortName,
    PortSpec, VxlanSpec,
};
use super::endpoint::EndpointDiscovery;
use super::fds::HeldFds;
use super::mechanism::{self, ClientMechanism, EndpointMechanism};
use super::monitor::Monitor;
use super::path::{self, Position};
use super::table::Table;
use super::validate::{self, Payload, SidesIp};
use super::vni::VniTable;
use grpc_unix::ReceivedFds;
use nsm_proto::connection::{Connection, Mechanism, State};
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use nsm_proto::networkservice::NetworkServiceRequest;

mod next_hop;
pub use next_hop::NextHopStats;

/// How long Quiver waits for the endpoint to answer a Request or Close.
pub const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(15);

/// The longest connection id Quiver accepts (it names sockets and ports; NSM's are UUIDs).
pub const MAX_ID_LEN: usize = 48;

/// How the two ports are joined.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CrossConnect {
    /// Both ways at layer 2 (payload ETHERNET).
    L2,
    /// Each way toward the other side's address (payload IP).
    L3 {
        to_endpoint: Option<IpAddr>,
        to_client: Option<IpAddr>,
    },
}

/// Why a connection is torn down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Teardown {
    /// Close, or a reselect: the expiry timer is stopped; the endpoint is closed.
    Close,
    /// The expiry timer fired (the task tearing down: it must not abort itself); the endpoint
    /// is closed.
    Expired,
    /// The next hop closed it (see `next_hop`): nothing is sent there again.
    NextHopGone,
}

/// One connection as Quiver holds it.
pub struct Entry {
    own_id: String,
    generation: u64,
    client: PortSpec,
    endpoint: PortSpec,
    cross_connect: CrossConnect,
    endpoint_url: String,
    /// The endpoint's last answer (its connection id is Quiver's segment id).
    endpoint_conn: Connection,
    /// What the monitor shows: Quiver's segment id and index.
    published: Connection,
    /// The caller's connection id and path index, for the answer.
    caller: (String, u32),
    expiry: tokio::task::AbortHandle,
    /// The watch of the endpoint (see `next_hop`), and whether it says DOWN.
    next_hop: next_hop::NextHop,
    /// The data path reported a port of it down.
    link_down: bool,
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
    /// UP or DOWN.
    pub up: bool,
    /// The client side: mechanism type and Quiver's port.
    pub client: (String, String),
    /// The endpoint side: mechanism type and Quiver's port.
    pub endpoint: (String, String),
    /// When the connection expires unless refreshed, if it does.
    pub expires: Option<std::time::SystemTime>,
}

fn mechanism_and_port(spec: &PortSpec) -> (String, String) {
    (spec.mechanism_type().to_string(), spec.name().0.clone())
}

/// The NSM forwarder's state: settings, the data path, the way to endpoints, the connections
/// and their monitor.
pub struct Core {
    /// Settings.
    pub cfg: NsmConfig,
    dp: Arc<dyn Dataplane>,
    discovery: Arc<dyn EndpointDiscovery>,
    table: Table<Entry>,
    /// The published connections and the MonitorConnections subscribers.
    pub monitor: Monitor,
    generation: AtomicU64,
    /// The VNIs of the VXLAN tunnels Quiver answers for.
    vnis: VniTable,
    /// One gRPC channel per endpoint URL, for the Requests and Closes sent there.
    channels: Channels,
    /// The fds endpoints passed with their answers, held by connection (see `fds`).
    answer_fds: HeldFds,
    /// What the watches of next hops did (see `next_hop`).
    next_hops: Arc<next_hop::Counters>,
}

fn dp_status(e: DataplaneError) -> Status {
    match e {
        DataplaneError::NotFound(m) => Status::not_found(m),
        DataplaneError::AlreadyExists(m) => Status::already_exists(m),
        DataplaneError::InvalidArgument(m) => Status::invalid_argument(m),
        DataplaneError::Failed(m) => Status::internal(m),
    }
}

/// The first 8 letters and digits of `id`, for interface names.
fn short(id: &str) -> String {
    id.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect::<String>()
        .to_ascii_lowercase()
}

fn client_port(owner: &str) -> PortName {
    PortName(format!("nsm-{owner}-client"))
}

fn endpoint_port(owner: &str) -> PortName {
    PortName(format!("nsm-{owner}-endpoint"))
}

/// The abstract socket Quiver listens on, in the client's namespace.
pub fn memif_socket(owner: &str) -> String {
    format!("@quiver/{owner}/memif.socket")
}

fn frame_mode(p: Payload) -> FrameMode {
    match p {
        Payload::Ethernet => FrameMode::Ethernet,
        Payload::Ip => FrameMode::Ip,
    }
}

/// What a Request asks for, checked, before anything is touched.
struct Checked {
    conn: Connection,
    payload: Payload,
    mechanism: Mechanism,
    client: ClientMechanism,
    path: nsm_proto::connection::Path,
    position: Position,
}

impl Core {
    /// A core over `dp`, finding endpoints through `discovery`.
    pub fn new(
        cfg: NsmConfig,
        dp: Arc<dyn Dataplane>,
        discovery: Arc<dyn EndpointDiscovery>,
    ) -> Core {
        Core {
            cfg,
            dp,
            discovery,
            table: Table::default(),
            monitor: Monitor::default(),
            generation: AtomicU64::new(0),
            vnis: VniTable::default(),
            channels: Channels::default(),
            answer_fds: HeldFds::default(),
            next_hops: Arc::default(),
        }
    }

    /// Quiver's end of VXLAN tunnels, when it has a tunnel address (IPv4).
    fn tunnel_end(&self) -> Option<mechanism::TunnelEnd> {
        match self.cfg.tunnel_ip {
            Some(std::net::IpAddr::V4(ip)) => Some(mechanism::TunnelEnd {
                ip,
                port: self.cfg.vxlan_port,
            }),
            _ => None,
        }
    }

    /// Whether Quiver holds connection `id` (waits for a Request, Close or expiry of it in
    /// progress to finish).
    pub async fn holds(&self, id: &str) -> bool {
        self.table.lock(id).await.is_some()
    }

    /// How many connections Quiver holds.
    pub fn connection_count(&self) -> usize {
        self.table.len()
    }

    /// The connections Quiver holds, without waiting (one being changed right now is left out).
    pub fn summaries(&self) -> Vec<ConnectionSummary> {
        let mut out = Vec::new();
        self.table.peek(|owner, e| {
            let p = &e.published;
            let expires = p.path.as_ref().and_then(|path| {
                let own = path.path_segments.get(path.index as usize)?;
                let t = own.expires.as_ref()?;
                let secs = u64::try_from(t.seconds).ok()?;
                Some(std::time::UNIX_EPOCH + std::time::Duration::new(secs, t.nanos.max(0) as u32))
            });
            out.push(ConnectionSummary {
                id: p.id.clone(),
                owner: owner.to_string(),
                network_service: p.network_service.clone(),
                up: p.state == nsm_proto::connection::State::Up as i32,
                client: mechanism_and_port(&e.client),
                endpoint: mechanism_and_port(&e.endpoint),
                expires,
            });
        });
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    async fn dp<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Dataplane) -> Result<T, DataplaneError> + Send + 'static,
    ) -> Result<T, Status> {
        let dp = self.dp.clone();
        tokio::task::spawn_blocking(move || f(&*dp))
            .await
            .map_err(|e| Status::internal(format!("data-path task failed: {e}")))?
            .map_err(dp_status)
    }

    /// Removes what no connection owns (at startup: everything a previous run left).
    pub async fn reconcile(&self) -> Result<usize, Status> {
        let owners = self.dp(|d| d.owners()).await?;
        let mut removed = 0;
        for owner in owners {
            let slot = self.table.lock(&owner).await;
            if slot.is_none() {
                tracing::info!(owner, "removing what no connection owns");
                let o = owner.clone();
                self.dp(move |d| d.remove_owned(&o)).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn check(
        &self,
        req: &NetworkServiceRequest,
        known_id: Option<&str>,
    ) -> Result<Checked, Status> {
        let conn = req
            .connection
            .clone()
            .ok_or_else(|| Status::invalid_argument("the request has no connection"))?;
        let payload = validate::payload(&conn.payload)?;
        validate::context(conn.context.as_ref())?;
        let (path, position) = path::advance(
            &conn,
            &self.cfg.name,
            known_id,
            self.cfg.max_token_lifetime,
            SystemTime::now(),
        )?;
        let (mechanism, client) = mechanism::select(
            conn.mechanism.as_ref(),
            &req.mechanism_preferences,
            self.tunnel_end().is_some() && payload == Payload::Ethernet,
        )?;
        Ok(Checked {
            conn,
            payload,
            mechanism,
            client,
            path,
            position,
        })
    }

    /// `networkservice.NetworkService/Request`.
    pub async fn request(
        self: &Arc<Self>,
        req: NetworkServiceRequest,
    ) -> Result<Connection, Status> {
        let id = req
            .connection
            .as_ref()
            .map(|c| c.id.clone())
            .unwrap_or_default();
        if id.is_empty() {
            // Checked here too, as the id is needed for the lock.
            return Err(Status::invalid_argument("connection.id is empty"));
        }
        if id.len() > MAX_ID_LEN {
            return Err(Status::invalid_argument(format!(
                "connection.id is longer than {MAX_ID_LEN} bytes"
            )));
        }
        let mut slot = self.table.lock(&id).await;
        let reselect =
            req.connection.as_ref().map(|c| c.state) == Some(State::ReselectRequested as i32);
        let checked = self.check(&req, slot.as_ref().map(|e| e.own_id.as_str()))?;
        if reselect {
            if let Some(old) = slot.take() {
                tracing::info!(id, "reselect requested: closing the old connection first");
                if let Err(e) = self.teardown(&id, old, Teardown::Close).await {
                    tracing::error!(id, error = %e, "cannot remove the old connection");
                }
            }
        }
        let old = slot.take();
        let old_published = old.as_ref().map(|o| o.published.clone());
        match self.build(&id, checked, old).await {
            Ok(entry) => {
                let answer = entry.answer();
                self.monitor.update(&entry.published);
                *slot = Some(entry);
                Ok(answer)
            }
            Err((e, endpoint)) => {
                tracing::warn!(id, error = %e, "Request failed: removing what it owned");
                let o = id.clone();
                if let Err(err) = self.dp(move |d| d.remove_owned(&o)).await {
                    tracing::error!(id, error = %err, "cannot remove what the connection owned");
                }
                self.vnis.release(&id);
                self.answer_fds.release(&id);
                if let Some((url, conn)) = endpoint {
                    self.close_endpoint(&url, conn).await;
                }
                if let Some(p) = old_published {
                    self.monitor.delete(&p);
                }
                Err(e)
            }
        }
    }

    /// Builds or refreshes one connection. On error, returns the endpoint connection to close
    /// (if the endpoint holds one).
    async fn build(
        self: &Arc<Self>,
        owner: &str,
        c: Checked,
        old: Option<Entry>,
    ) -> Result<Entry, (Status, Option<(String, Connection)>)> {
        let Checked {
            conn,
            payload,
            mechanism: client_mech,
            client,
            path,
            position,
        } = c;
        if let Some(o) = &old {
            o.expiry.abort();
        }
        // Before a port of the old connection goes, its cross-connects go (once).
        let mut disconnected = old.is_none();
        // What to close toward the endpoint if this fails: the previous answer, until a new one.
        let mut endpoint_hold: Option<(String, Connection)> = old
            .as_ref()
            .map(|o| (o.endpoint_url.clone(), o.endpoint_conn.clone()));
        macro_rules! tryb {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(e) => return Err((e, endpoint_hold.take())),
                }
            };
        }
        let caller_ip = validate::context(conn.context.as_ref()).unwrap_or_default();
        let own_short = short(&position.own_id);
        let tunnel = self.tunnel_end().filter(|_| payload == Payload::Ethernet);
        // As the answering end of a VXLAN tunnel, Quiver chooses the VNI (kept on refresh).
        let client_vni = match &client {
            ClientMechanism::Vxlan { remote, vni, .. } => {
                let kept = old.as_ref().and_then(|o| match &o.client {
                    PortSpec::Vxlan(v) if v.remote == *remote => Some(v.vni),
                    _ => None,
                });
                tryb!(self
                    .vnis
                    .claim(*remote, owner, vni.or(kept))
                    .ok_or_else(|| Status::resource_exhausted(format!(
                        "every VNI toward {remote} is in use"
                    ))))
            }
            _ => 0,
        };
        let client_spec = |ip: &SidesIp| -> PortSpec {
            match &client {
                ClientMechanism::Memif { netns, mtu } => PortSpec::Memif(MemifSpec {
                    name: client_port(owner),
                    role: MemifRole::Master,
                    socket: memif_socket(owner),
                    netns: Some(netns.clone()),
                    mode: frame_mode(payload),
                    mtu: *mtu,
                }),
                ClientMechanism::Kernel { netns, ifname, mtu } => PortSpec::Kernel(KernelSpec {
                    name: client_port(owner),
                    netns: netns.clone(),
                    ifname: ifname.clone().unwrap_or_else(|| format!("nsm-{own_short}")),
                    mtu: *mtu,
                    ip: ip.client.clone(),
                }),
                ClientMechanism::Vxlan {
                    remote,
                    remote_port,
                    ..
                } => PortSpec::Vxlan(VxlanSpec {
                    name: client_port(owner),
                    local: tunnel.map_or(std::net::Ipv4Addr::UNSPECIFIED, |t| t.ip),
                    remote: *remote,
                    vni: client_vni,
                    dst_port: *remote_port,
                }),
            }
        };

        // 1. The client side.
        let mut want_client = client_spec(&caller_ip);
        let mut rebuilt = false;
        // The endpoint-side port to make, when it is new (with the cross-connect, step 5).
        let mut create_endpoint: Option<PortSpec> = None;
        if old.as_ref().map(|o| &o.client) != Some(&want_client) {
            if let Some(o) = &old {
                if !std::mem::replace(&mut disconnected, true) {
                    tryb!(self.disconnect(owner, o).await);
                }
                tryb!(self.remove_port(owner, o.client.name().clone()).await);
            }
            tryb!(self.create(owner, want_client.clone()).await);
            rebuilt = true;
        }

        // 2. The endpoint: Quiver Requests it as a client.
        let url = match old.as_ref().filter(|o| {
            o.endpoint_conn.network_service_endpoint_name == conn.network_service_endpoint_name
        }) {
            Some(o) => o.endpoint_url.clone(),
            None => tryb!(self.discovery.find(&conn).await),
        };
        let suggested = format!("nse-{own_short}");
        let outgoing = Connection {
            id: position.own_id.clone(),
            network_service: conn.network_service.clone(),
            mechanism: old.as_ref().and_then(|o| o.endpoint_conn.mechanism.clone()),
            context: conn.context.clone(),
            labels: conn.labels.clone(),
            path: Some(path),
            network_service_endpoint_name: conn.network_service_endpoint_name.clone(),
            payload: conn.payload.clone(),
            state: State::Up as i32,
        };
        let request = NetworkServiceRequest {
            connection: Some(outgoing),
            mechanism_preferences: mechanism::offers(
                &client_mech.r#type,
                &suggested,
                tunnel,
                url.starts_with("tcp://"),
            ),
        };
        let (answer, passed) = tryb!(self.request_endpoint(&url, request).await);
        endpoint_hold = Some((url.clone(), answer.clone()));
        let ip = tryb!(validate::context(answer.context.as_ref()).map_err(|e| {
            Status::failed_precondition(format!(
                "the endpoint answered with a bad context: {}",
                e.message()
            ))
        }));
        // inode:// URLs name fds the endpoint passed: read with those (`answer` is kept as is).
        let (answer_mech, answer_fds) =
            tryb!(self
                .answer_fds
                .resolve_answer(owner, &passed, answer.mechanism.as_ref()));
        let ep = tryb!(mechanism::endpoint_side(
            answer_mech.as_ref(),
            &suggested,
            tunnel.is_some()
        ));

        // 3. The client side again, if the endpoint's context changed its addresses.
        let with_answer = client_spec(&ip);
        if with_answer != want_client {
            if let Some(o) = old.as_ref().filter(|_| !disconnected) {
                disconnected = true;
                tryb!(self.disconnect(owner, o).await);
            }
            tryb!(self.remove_port(owner, want_client.name().clone()).await);
            want_client = with_answer;
            tryb!(self.create(owner, want_client.clone()).await);
            rebuilt = true;
        }

        // 4. The endpoint side.
        let want_endpoint = match ep {
            EndpointMechanism::Memif { netns, socket, mtu } => PortSpec::Memif(MemifSpec {
                name: endpoint_port(owner),
                role: MemifRole::Slave,
                socket,
                netns,
                mode: frame_mode(payload),
                mtu,
            }),
            EndpointMechanism::Kernel { netns, ifname, mtu } => PortSpec::Kernel(KernelSpec {
                name: endpoint_port(owner),
                netns,
                ifname,
                mtu,
                ip: ip.endpoint.clone(),
            }),
            EndpointMechanism::Vxlan {
                remote,
                remote_port,
                vni,
            } => PortSpec::Vxlan(VxlanSpec {
                name: endpoint_port(owner),
                // Offered only with a tunnel end.
                local: tunnel.map_or(std::net::Ipv4Addr::UNSPECIFIED, |t| t.ip),
                remote,
                vni,
                dst_port: remote_port,
            }),
        };
        if old.as_ref().map(|o| &o.endpoint) != Some(&want_endpoint) {
            if let Some(o) = &old {
                if !std::mem::replace(&mut disconnected, true) {
                    tryb!(self.disconnect(owner, o).await);
                }
                tryb!(self.remove_port(owner, o.endpoint.name().clone()).await);
            }
            // Made with the cross-connect below, in one data-path call.
            create_endpoint = Some(want_endpoint.clone());
            rebuilt = true;
        }

        // 5. The cross-connect.
        let xc = match payload {
            Payload::Ethernet => CrossConnect::L2,
            Payload::Ip => CrossConnect::L3 {
                to_endpoint: ip.endpoint_hop(),
                to_client: ip.client_hop(),
            },
        };
        let connect = rebuilt || old.as_ref().map(|o| &o.cross_connect) != Some(&xc);
        if connect {
            if let Some(o) = old.as_ref().filter(|_| !disconnected) {
                tryb!(self.disconnect(owner, o).await);
            }
            let (o, a, b, x) = (
                owner.to_string(),
                want_client.name().clone(),
                want_endpoint.name().clone(),
                xc.clone(),
            );
            // The endpoint-side port (when it is new) and the cross-connect: one hand-off.
            tryb!(
                self.dp(move |d| {
                    if let Some(spec) = &create_endpoint {
                        create_port(d, &o, spec)?;
                    }
                    match x {
                        CrossConnect::L2 => d.l2_cross_connect(&o, &a, &b),
                        CrossConnect::L3 {
                            to_endpoint,
                            to_client,
                        } => d.l3_cross_connect(&o, &a, &b, to_endpoint, to_client),
                    }
                })
                .await
            );
        }

        // 6. The answer, and the expiry timer.
        let mut client_answer = client_mech;
        match &want_client {
            PortSpec::Memif(m) => {
                client_answer
                    .parameters
                    .insert(mechanism::SOCKETFILE.into(), m.socket.clone());
            }
            PortSpec::Vxlan(v) => {
                let port = tunnel.map_or(mechanism::VXLAN_DEFAULT_PORT, |t| t.port);
                for (k, val) in [
                    (mechanism::DST_IP, v.local.to_string()),
                    (mechanism::DST_PORT, port.to_string()),
                    (mechanism::VNI, v.vni.to_string()),
                ] {
                    client_answer.parameters.insert(k.into(), val);
                }
            }
            PortSpec::Kernel(_) => {}
        }
        let mut published = answer.clone();
        published.id = position.own_id.clone();
        if let Some(p) = published.path.as_mut() {
            p.index = position.own_index;
        }
        published.mechanism = Some(client_answer);
        published.state = State::Up as i32;
        if published.context.is_none() {
            published.context = conn.context.clone();
        }
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let expiry = self.schedule_expiry(owner.to_string(), generation, position.expires);
        self.answer_fds.keep_only(owner, &answer_fds);
        let next_hop = self.watch_next_hop(owner, generation, &url, &position.own_id);
        Ok(Entry {
            own_id: position.own_id.clone(),
            generation,
            client: want_client,
            endpoint: want_endpoint,
            cross_connect: xc,
            endpoint_url: url,
            endpoint_conn: answer,
            published,
            caller: (position.prev_id, position.prev_index),
            expiry,
            next_hop,
            link_down: false,
        })
    }

    async fn create(&self, owner: &str, spec: PortSpec) -> Result<(), Status> {
        let o = owner.to_string();
        self.dp(move |d| create_port(d, &o, &spec)).await
    }

    /// Removes the cross-connects of both ports of `entry`.
    async fn disconnect(&self, owner: &str, entry: &Entry) -> Result<(), Status> {
        for p in [entry.client.name().clone(), entry.endpoint.name().clone()] {
            let o = owner.to_string();
            ignore_not_found(self.dp(move |d| d.disconnect(&o, &p)).await)?;
        }
        Ok(())
    }

    async fn remove_port(&self, owner: &str, port: PortName) -> Result<(), Status> {
        let o = owner.to_string();
        ignore_not_found(self.dp(move |d| d.remove_port(&o, &port)).await)
    }

    /// Requests the endpoint at `url`: its answer, and the fds passed on the channel (grpcfd;
    /// Quiver's own `file://` URLs, if it offers any, go as `inode://` with their fds).
    async fn request_endpoint(
        &self,
        url: &str,
        request: NetworkServiceRequest,
    ) -> Result<(Connection, ReceivedFds), Status> {
        let unix = url.starts_with("unix://");
        self.call_endpoint(url, request, |channel, mut r| async move {
            if unix {
                super::fds::pass_offered_files(channel.fds(), r.get_mut())?;
            }
            let answer = NetworkServiceClient::new(channel.channel())
                .request(r)
                .await?;
            Ok(answer.map(|a| (a, channel.received().clone())))
        })
        .await
        .map_err(|s| Status::new(s.code(), format!("endpoint {url}: {}", s.message())))
    }

    /// Makes one call to the endpoint at `url` on the cached channel there (see `channels`):
    /// with mTLS and Quiver's path token when it has a SPIFFE identity (see `secure`). A
    /// transport failure drops the channel; on a channel that had served calls before (the
    /// endpoint may have closed it meanwhile) the call is made once more on a new one: Request
    /// and Close are idempotent.
    async fn call_endpoint<T, R, F, Fut>(&self, url: &str, msg: T, call: F) -> Result<R, Status>
    where
        T: super::secure::CarriesConnection + Clone,
        F: Fn(spiffe_identity::PeerChannel, tonic::Request<T>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<R>, Status>>,
    {
        let identity = self.cfg.identity.as_ref();
        let mut retried = false;
        loop {
            let lease = self
                .channels
                .get(url, self.cfg.dial_timeout, identity)
                .await?;
            let mut r = super::secure::sign(
                identity,
                lease.channel.peer().as_ref(),
                self.cfg.max_token_lifetime,
                msg.clone(),
            )?;
            r.set_timeout(ENDPOINT_TIMEOUT);
            match call(lease.channel.clone(), r).await {
                Ok(answer) => return Ok(answer.into_inner()),
                Err(s) if channels::transport_failure(&s) => {
                    self.channels.forget(url, &lease);
                    if !lease.reused || retried {
                        return Err(s);
                    }
                    retried = true;
                    tracing::debug!(url, error = %s, "endpoint channel failed: dialing again");
                }
                Err(s) => return Err(s),
            }
        }
    }

    /// Closes `conn` toward the endpoint at `url`; failures are logged (the endpoint's own
    /// expiry cleans up after an endpoint that cannot be reached).
    async fn close_endpoint(&self, url: &str, conn: Connection) {
        let close = self.call_endpoint(url, conn, |channel, r| async move {
            NetworkServiceClient::new(channel.channel()).close(r).await
        });
        if let Err(e) = close.await {
            tracing::warn!(url, error = %e, "Close toward the endpoint failed");
        }
    }

    /// Removes everything of `entry` and closes it toward the endpoint (unless it is gone there).
    async fn teardown(&self, owner: &str, entry: Entry, why: Teardown) -> Result<(), Status> {
        if why != Teardown::Expired {
            entry.expiry.abort();
        }
        // The watch of the endpoint ends first: its DELETE after our Close is no news.
        drop(entry.next_hop);
        // The endpoint's side and Quiver's are independent: both at once, both done before
        // the connection's lock is released.
        let o = owner.to_string();
        let close = async {
            if why != Teardown::NextHopGone {
                self.close_endpoint(&entry.endpoint_url, entry.endpoint_conn.clone())
                    .await
            }
        };
        let ((), removed) = tokio::join!(close, self.dp(move |d| d.remove_owned(&o)));
        self.vnis.release(owner);
        self.answer_fds.release(owner);
        self.monitor.delete(&entry.published);
        removed
    }

    /// `networkservice.NetworkService/Close`. An unknown id succeeds: Quiver still removes
    /// anything tagged with it and closes toward the endpoint when the path names one.
    pub async fn close(self: &Arc<Self>, conn: Connection) -> Result<(), Status> {
        if conn.id.is_empty() {
            return Err(Status::invalid_argument("connection.id is empty"));
        }
        let mut slot = self.table.lock(&conn.id).await;
        if let Some(entry) = slot.take() {
            tracing::info!(id = conn.id, "Close");
            return self.teardown(&conn.id, entry, Teardown::Close).await;
        }
        tracing::info!(id = conn.id, "Close of an unknown connection");
        if let Some(next) = self.next_hop_of_unknown(&conn) {
            match self.discovery.find(&conn).await {
                Ok(url) => self.close_endpoint(&url, next).await,
                Err(e) => {
                    tracing::warn!(id = conn.id, error = %e, "cannot find the endpoint to close")
                }
            }
        }
        let o = conn.id.clone();
        ignore_not_found(self.dp(move |d| d.remove_owned(&o)).await)
    }

    /// For a Close of an unknown connection: the connection as Quiver would have sent it to
    /// the endpoint, when the path has Quiver's segment after the caller's.
    fn next_hop_of_unknown(&self, conn: &Connection) -> Option<Connection> {
        let path = path::check(conn).ok()?;
        let own = path.path_segments.get(path.index as usize + 1)?;
        if own.name != self.cfg.name || own.id.is_empty() {
            return None;
        }
        let mut next = conn.clone();
        next.id = own.id.clone();
        next.path.as_mut()?.index = path.index + 1;
        Some(next)
    }

    fn schedule_expiry(
        self: &Arc<Self>,
        owner: String,
        generation: u64,
        at: SystemTime,
    ) -> tokio::task::AbortHandle {
        let core = Arc::downgrade(self);
        let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if let Some(core) = core.upgrade() {
                core.expire(&owner, generation).await;
            }
        })
        .abort_handle()
    }

    async fn expire(&self, owner: &str, generation: u64) {
        let mut slot = self.table.lock(owner).await;
        if slot.as_ref().is_some_and(|e| e.generation == generation) {
            let entry = slot.take().expect("checked");
            tracing::info!(id = owner, "expired: closing");
            if let Err(e) = self.teardown(owner, entry, Teardown::Expired).await {
                tracing::error!(id = owner, error = %e, "cannot remove an expired connection");
            }
        }
    }

    /// Applies a link change reported by the data path: the owning connection is published
    /// DOWN (or UP again).
    pub async fn link_changed(&self, ev: LinkEvent) {
        let mut slot = self.table.lock(&ev.owner).await;
        let Some(entry) = slot.as_mut() else { return };
        tracing::info!(id = ev.owner, port = %ev.port, up = ev.up, reason = ev.reason, "link changed");
        entry.link_down = !ev.up;
        self.publish_state(entry);
    }
}

impl Entry {
    /// The answer to the caller: the published connection with the caller's id and index.
    fn answer(&self) -> Connection {
        let mut a = self.published.clone();
        a.id = self.caller.0.clone();
        if let Some(p) = a.path.as_mut() {
            p.index = self.caller.1;
        }
        a
    }
}

/// Creates the port `spec` for `owner`.
fn create_port(d: &dyn Dataplane, owner: &str, spec: &PortSpec) -> Result<(), DataplaneError> {
    match spec {
        PortSpec::Memif(m) => d.create_memif(owner, m),
        PortSpec::Kernel(k) => d.create_kernel(owner, k),
        PortSpec::Vxlan(v) => d.create_vxlan(owner, v),
    }
}

fn ignore_not_found(r: Result<(), Status>) -> Result<(), Status> {
    match r {
        Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
        other => other,
    }
}
