//! Request and Close: the forwarder's state machine for one connection.
//!
//! A Request checks everything it can first (`check`: nothing is touched for a bad request),
//! then, under the connection's lock, finds the endpoints it may go to (`route`: the one it
//! holds, or those discovery finds for its network service, round robin) and reconciles what
//! the data path holds with what the Request asks for (`build`): the client-side port, then
//! the endpoint (Quiver Requests it as a client, `endpoint_client`, trying the endpoints in
//! turn until one accepts), the endpoint-side port, and the cross-connect. What is already
//! right is left alone; what differs is torn down and rebuilt. If anything fails once the data
//! path or the endpoint was touched, everything the connection owned is removed and the
//! endpoint side is closed: a failed Request leaves no state. After each successful Request
//! Quiver watches the endpoint's MonitorConnections (`crate::next_hop`): a Close or expiry on
//! the far side closes the connection here too.
//!
//! Modules: `entry` (a connection as held, and the names of its ports), `check`, `route`,
//! `data_path` (data-path calls from async code), `endpoint_client`, `build`, [`metrics`] (the
//! ports' counters in Quiver's path segment); [`Core`] here uses them all.

mod answer;
mod build;
mod check;
mod data_path;
mod endpoint_client;
mod entry;
pub mod metrics;
mod route;
mod vlan;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nsm_proto::connection::{Connection, State};
use nsm_proto::networkservice::NetworkServiceRequest;
use spiffe_identity::Identity;
use tonic::Status;

use self::build::{Build, Built, EndpointHold, Parts};
use self::check::{check, connection_id, tunnel_end, Checked};
use self::data_path::{ignore_not_found, DataPath};
use self::endpoint_client::EndpointClient;
use self::entry::Entry;
use self::route::{RoundRobin, Router};
use crate::channels::Channels;
use crate::config::NsmConfig;
use crate::dataplane::{LinkEvent, NsmBackend, PortSpec};
use crate::endpoint::EndpointDiscovery;
use crate::fds::HeldFds;
use crate::monitor::Monitor;
use crate::next_hop::{self, Counters, NextHopStats, Watched};
use crate::path;
use crate::pod_watch::{self, PodWatch};
use crate::table::Table;
use crate::vni::VniTable;
use crate::wg_ports::WgPorts;

pub use crate::limits::MAX_ID_LEN;
#[doc(hidden)]
pub use check::{check_request, RequestPlan};
pub use endpoint_client::ENDPOINT_TIMEOUT;
pub use entry::{memif_socket, ConnectionSummary};

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

/// The NSM forwarder's state: settings, the data path, the way to endpoints, the connections
/// and their monitor.
pub struct Core {
    /// Settings.
    pub cfg: NsmConfig,
    dp: DataPath,
    discovery: Arc<dyn EndpointDiscovery>,
    /// Where the next Request of each network service starts among its endpoints.
    round_robin: RoundRobin,
    /// Shared with the tasks that finish a failed teardown's removal (see `remove_later`).
    table: Arc<Table<Entry>>,
    /// The published connections and the MonitorConnections subscribers.
    pub monitor: Monitor,
    generation: AtomicU64,
    /// The VNIs of the VXLAN tunnels Quiver answers for.
    vnis: VniTable,
    /// The UDP ports of the WireGuard tunnels Quiver made for connections.
    wg_ports: WgPorts,
    /// One gRPC channel per endpoint URL, for the Requests and Closes sent there.
    channels: Channels,
    /// The fds endpoints passed with their answers, held by connection (see `fds`).
    answer_fds: HeldFds,
    /// What the watches of next hops did (see `next_hop`).
    next_hops: Arc<Counters>,
}

impl Core {
    /// A core over `dp`, finding endpoints through `discovery`.
    pub fn new(
        cfg: NsmConfig,
        dp: Arc<dyn NsmBackend>,
        discovery: Arc<dyn EndpointDiscovery>,
    ) -> Core {
        Core {
            cfg,
            dp: DataPath::new(dp),
            discovery,
            round_robin: RoundRobin::default(),
            table: Arc::default(),
            monitor: Monitor::default(),
            generation: AtomicU64::new(0),
            vnis: VniTable::default(),
            wg_ports: WgPorts::default(),
            channels: Channels::default(),
            answer_fds: HeldFds::default(),
            next_hops: Arc::default(),
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
        self.table.peek(|owner, e| out.push(e.summary(owner)));
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// What the next-hop watches did so far.
    pub fn next_hop_stats(&self) -> NextHopStats {
        self.next_hops.stats()
    }

    /// Removes what no connection owns (at startup: everything a previous run left).
    pub async fn reconcile(&self) -> Result<usize, Status> {
        let owners = self.dp.call(|d| d.owners()).await?;
        let mut removed = 0;
        for owner in owners {
            let slot = self.table.lock(&owner).await;
            if slot.is_none() {
                tracing::info!(owner, "removing what no connection owns");
                self.dp.remove_owned(&owner).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// `networkservice.NetworkService/Request`.
    pub async fn request(
        self: &Arc<Self>,
        req: NetworkServiceRequest,
    ) -> Result<Connection, Status> {
        // The sizes first (the gRPC server checked them already; other callers too).
        crate::limits::request(&req)?;
        let id = connection_id(&req)?;
        let mut slot = self.table.lock(&id).await;
        let reselect =
            req.connection.as_ref().map(|c| c.state) == Some(State::ReselectRequested as i32);
        let checked = check(&self.cfg, &req, slot.as_ref().map(|e| e.own_id.as_str()))?;
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
        match self.build(&id, &req, checked, old.as_ref()).await {
            Ok(built) => {
                // Found before the answer: a pod that dies right after it is still seen to.
                let pods = self.find_pods(&built).await;
                let mut entry = self.hold(&id, built, pods);
                if let Some(o) = old.as_ref().filter(|o| route::moved(o, &entry)) {
                    // The Request went to another endpoint: the old one's connection ends.
                    self.endpoints()
                        .close(&o.endpoint_url, o.endpoint_conn.clone())
                        .await;
                }
                // The old watch of the next hop stops once the new one runs.
                drop(old);
                // The ports' counters in Quiver's segment: the answer and the event carry them.
                self.fill_metrics(&mut entry).await;
                let answer = entry.answer();
                self.monitor.update(&entry.published);
                *slot = Some(entry);
                Ok(answer)
            }
            Err((e, endpoint)) => {
                drop(old);
                tracing::warn!(id, error = %e, "Request failed: removing what it owned");
                if let Err(err) = self.dp.remove_owned(&id).await {
                    tracing::error!(id, error = %err, "cannot remove what the connection owned");
                }
                self.vnis.release(&id);
                self.wg_ports.release(&id);
                self.answer_fds.release(&id);
                if let Some((url, conn)) = endpoint {
                    self.endpoints().close(&url, conn).await;
                }
                if let Some(p) = old_published {
                    self.monitor.delete(&p);
                }
                Err(e)
            }
        }
    }

    /// Builds or refreshes one connection (see `route` and `build`) for `c`, checked of
    /// `req`. On error, returns the endpoint connection to close (if the endpoint holds one).
    async fn build(
        &self,
        owner: &str,
        req: &NetworkServiceRequest,
        c: Checked,
        old: Option<&Entry>,
    ) -> Result<Built, (Status, EndpointHold)> {
        if let Some(o) = old {
            o.expiry.abort();
        }
        let router = Router {
            cfg: &self.cfg,
            discovery: &*self.discovery,
            round_robin: &self.round_robin,
        };
        let (c, endpoints) = router.route(req, c, old).await.map_err(|e| {
            let hold = old.map(|o| (o.endpoint_url.clone(), o.endpoint_conn.clone()));
            (e, hold)
        })?;
        let parts = Parts {
            dp: &self.dp,
            endpoints: self.endpoints(),
            vnis: &self.vnis,
            wg_ports: &self.wg_ports,
            answer_fds: &self.answer_fds,
            tunnel_end: tunnel_end(&self.cfg),
        };
        Build::new(owner, old, parts).run(c, endpoints).await
    }

    /// The connection `built` as Quiver holds it: its generation, expiry timer, the fds it
    /// holds, and the watch of its next hop.
    fn hold(self: &Arc<Self>, owner: &str, built: Built, pods: Vec<pod_watch::Pod>) -> Entry {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let expiry = self.schedule_expiry(owner.to_string(), generation, built.expires);
        self.answer_fds.keep_only(owner, &built.answer_fds);
        let pods = self.watch_pods(owner.to_string(), generation, pods);
        let next_hop = next_hop::start(
            self,
            &self.cfg.name,
            owner,
            generation,
            &built.endpoint_url,
            &built.own_id,
        );
        Entry {
            own_id: built.own_id,
            generation,
            client: built.client,
            endpoint: built.endpoint,
            cross_connect: built.cross_connect,
            endpoint_url: built.endpoint_url,
            endpoint_name: built.endpoint_name,
            endpoint_conn: built.endpoint_conn,
            published: built.published,
            caller: built.caller,
            expiry,
            next_hop,
            pods,
            link_down: false,
        }
    }

    /// The pods behind `built`: its client's and endpoint's namespaces' first processes, when
    /// the namespaces are not Quiver's (none unless [`NsmConfig::watch_pods`]).
    async fn find_pods(&self, built: &Built) -> Vec<pod_watch::Pod> {
        if !self.cfg.watch_pods {
            return Vec::new();
        }
        let netns = |p: &PortSpec| match p {
            PortSpec::Memif(m) => m.netns.clone(),
            PortSpec::Kernel(k) => Some(k.netns.clone()),
            PortSpec::Vxlan(_) | PortSpec::Wireguard(_) | PortSpec::Vlan(_) => None,
        };
        let paths = [netns(&built.client), netns(&built.endpoint)];
        tokio::task::spawn_blocking(move || {
            pod_watch::pod_namespaces(paths)
                .iter()
                .filter_map(|p| pod_watch::Pod::find(p))
                .collect()
        })
        .await
        .unwrap_or_default()
    }

    /// Watches `pods` (see [`crate::pod_watch`]): once one is gone, the connection is closed.
    fn watch_pods(
        self: &Arc<Self>,
        owner: String,
        generation: u64,
        pods: Vec<pod_watch::Pod>,
    ) -> PodWatch {
        if pods.is_empty() {
            return PodWatch::default();
        }
        let core = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            pod_watch::until_one_is_gone(pods).await;
            if let Some(core) = core.upgrade() {
                core.pod_gone(&owner, generation).await;
            }
        });
        PodWatch::new(task.abort_handle())
    }

    /// A pod of connection `owner` is gone: unless a Request or Close replaced or removed it
    /// meanwhile, it is closed as Close closes it.
    async fn pod_gone(&self, owner: &str, generation: u64) {
        let mut slot = self.table.lock(owner).await;
        let Some(mut entry) = slot.take_if(|e| e.generation == generation) else {
            return;
        };
        // This task is the watch: it must not be cut short by the teardown.
        entry.pods.disarm();
        tracing::info!(id = owner, "a pod of the connection is gone: closing it");
        if let Err(e) = self.teardown(owner, entry, Teardown::Close).await {
            tracing::error!(id = owner, error = %e, "cannot remove what the connection owned");
        }
    }

    /// Calls to endpoints, on the cached channels.
    fn endpoints(&self) -> EndpointClient<'_> {
        EndpointClient {
            channels: &self.channels,
            cfg: &self.cfg,
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
        let close = async {
            if why != Teardown::NextHopGone {
                self.endpoints()
                    .close(&entry.endpoint_url, entry.endpoint_conn.clone())
                    .await
            }
        };
        let ((), removed) = tokio::join!(close, self.dp.remove_owned(owner));
        if let Err(e) = &removed {
            tracing::warn!(id = owner, error = %e, "cannot remove what the connection owned: trying again");
            self.remove_later(owner);
        }
        self.vnis.release(owner);
        self.wg_ports.release(owner);
        self.answer_fds.release(owner);
        self.monitor.delete(&entry.published);
        removed
    }

    /// Removes what `owner` owns again, in the background, after a teardown failed to (the
    /// data path refused, or a worker did not answer in time): the connection is gone from the
    /// table, so nothing else would, and its ports would keep their names and sockets from the
    /// next connections. Tried 250 ms later, then at twice the pause each time (at most 30 s
    /// apart) for 10 minutes, each time under the connection's lock, and given up on once a
    /// connection of that id exists again (its Request made, or rolled back, what it has).
    fn remove_later(&self, owner: &str) {
        let (table, dp, owner) = (self.table.clone(), self.dp.clone(), owner.to_string());
        tokio::spawn(async move {
            let give_up = tokio::time::Instant::now() + Duration::from_secs(600);
            let mut pause = Duration::from_millis(250);
            loop {
                tokio::time::sleep(pause).await;
                let slot = table.lock(&owner).await;
                if slot.is_some() {
                    return;
                }
                match ignore_not_found(dp.remove_owned(&owner).await) {
                    Ok(()) => {
                        tracing::info!(id = owner, "removed what a failed teardown left");
                        return;
                    }
                    Err(e) if tokio::time::Instant::now() >= give_up => {
                        tracing::error!(id = owner, error = %e, "giving up removing what a failed teardown left");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(id = owner, error = %e, "cannot remove what a failed teardown left: trying again");
                        pause = (pause * 2).min(Duration::from_secs(30));
                    }
                }
            }
        });
    }

    /// `networkservice.NetworkService/Close`. An unknown id succeeds: Quiver still removes
    /// anything tagged with it and closes toward the endpoint when the path names one.
    pub async fn close(self: &Arc<Self>, conn: Connection) -> Result<(), Status> {
        if conn.id.is_empty() {
            return Err(Status::invalid_argument("connection.id is empty"));
        }
        crate::limits::connection(&conn)?;
        let mut slot = self.table.lock(&conn.id).await;
        if let Some(entry) = slot.take() {
            tracing::info!(id = conn.id, "Close");
            return self.teardown(&conn.id, entry, Teardown::Close).await;
        }
        tracing::info!(id = conn.id, "Close of an unknown connection");
        if let Some(next) = self.next_hop_of_unknown(&conn) {
            // Only the endpoint the connection names: no other one holds it.
            let name = &conn.network_service_endpoint_name;
            match self.discovery.find(&conn).await {
                Ok(found) => match found.endpoints.iter().find(|c| c.name == *name) {
                    Some(c) => self.endpoints().close(&c.url, next).await,
                    None => tracing::warn!(id = conn.id, "no endpoint named {name:?} to close"),
                },
                Err(e) => {
                    tracing::warn!(id = conn.id, error = %e, "cannot find the endpoint to close")
                }
            }
        }
        ignore_not_found(self.dp.remove_owned(&conn.id).await)
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

    /// Publishes `entry` DOWN while a link of it or its next hop is down, UP otherwise (when
    /// that changed).
    fn publish_state(&self, entry: &mut Entry) {
        let state = if entry.link_down || entry.next_hop.down {
            State::Down
        } else {
            State::Up
        } as i32;
        if entry.published.state != state {
            entry.published.state = state;
            self.monitor.update(&entry.published);
        }
    }
}

/// What the watches of next hops ask of the core.
impl Watched for Core {
    fn channels(&self) -> &Channels {
        &self.channels
    }

    fn dial_with(&self) -> (Duration, Option<&Identity>) {
        (self.cfg.dial_timeout, self.cfg.identity.as_ref())
    }

    fn counters(&self) -> &Arc<Counters> {
        &self.next_hops
    }

    /// Unless a Request, Close or expiry replaced or removed it meanwhile, the connection is
    /// removed here as Close removes it, without a Close toward the next hop.
    async fn next_hop_closed(&self, owner: &str, generation: u64) {
        let mut slot = self.table.lock(owner).await;
        let Some(entry) = slot.take_if(|e| e.generation == generation) else {
            tracing::debug!(
                id = owner,
                "a DELETE from the next hop for an older generation"
            );
            return;
        };
        tracing::info!(
            id = owner,
            url = entry.endpoint_url,
            "the next hop closed the connection: closing it here"
        );
        if let Err(e) = self.teardown(owner, entry, Teardown::NextHopGone).await {
            tracing::error!(id = owner, error = %e, "cannot remove what the connection owned");
        }
    }

    async fn next_hop_state(&self, owner: &str, generation: u64, up: bool) {
        let mut slot = self.table.lock(owner).await;
        let Some(entry) = slot.as_mut().filter(|e| e.generation == generation) else {
            return;
        };
        if entry.next_hop.down == up {
            tracing::info!(
                id = owner,
                up,
                "the next hop changed the connection's state"
            );
            entry.next_hop.down = !up;
            self.publish_state(entry);
        }
    }
}
