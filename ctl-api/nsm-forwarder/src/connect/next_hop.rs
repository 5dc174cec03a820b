//! Watching the next hop: after each successful Request of a connection, Quiver watches the
//! endpoint it Requested (nsmgr, another forwarder, or an NSE) with `MonitorConnections`, as
//! NSM forwarders do, so that a Close or expiry on the far side reaches this one.
//!
//! - The stream goes to the endpoint's URL on the cached channel of the Request (same mTLS
//!   identity; the channel is held while the stream lasts). Its selector is Quiver's own
//!   segment of the outgoing connection (name and id): only this connection matches.
//! - One stream per connection, not one per URL shared by the connections to it: NSM's
//!   monitor authorization (nsmgr's `authorize` policy) admits a selector only when its
//!   segment ids are connections the caller Requested, so a shared selector with an empty id
//!   is refused; and a selector is one contiguous run of segments, so it cannot name several
//!   connections. The streams share the one HTTP/2 connection of the channel.
//! - One watch per generation of the connection: a refresh stops the previous watch and starts
//!   another. A DELETE seen by a watch applies only while its generation is the connection's
//!   (checked under the connection's lock): a DELETE racing a refresh, which Requested the
//!   next hop again, leaves the refreshed connection alone.
//! - DELETE of the connection (the next hop closed it): Quiver removes the connection as Close
//!   does and publishes DELETE, but sends no Close to the next hop (it is gone there, and a
//!   Close toward an unreachable hop would hold the connection's lock for the endpoint
//!   timeout).
//! - UPDATE with state DOWN: the connection is published DOWN (nothing is torn down); UP
//!   again once the next hop says UP and no link of the connection is down.
//! - A connection absent from the INITIAL_STATE_TRANSFER of a generation's first stream was
//!   closed by the next hop after it answered the Request and before the watch began (a
//!   DELETE no watch saw: the previous generation's watch stopped at the refresh). It is
//!   closed here as for a DELETE.
//! - A stream that breaks (the next hop restarted) or cannot be opened tears nothing down: the
//!   watch subscribes again, with backoff, until the connection is closed or refreshed.
//!   A connection absent from a later stream's first event is left alone (after a restart
//!   the next hop knows nothing until the next refresh). A next hop that does not serve
//!   `MonitorConnections` (Unimplemented) is not watched.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::oneshot;
use tonic::{Code, Status, Streaming};

use super::{Core, Entry, Teardown};
use crate::channels::{self, Hold, Lease};
use crate::path::matches_selector;
use nsm_proto::connection::monitor_connection_client::MonitorConnectionClient;
use nsm_proto::connection::{
    ConnectionEvent, ConnectionEventType, MonitorScopeSelector, PathSegment, State,
};

/// The first wait before subscribing again after a stream broke; doubled each time after.
const FIRST_RETRY: Duration = Duration::from_millis(100);
/// The longest wait between two subscriptions.
const LAST_RETRY: Duration = Duration::from_secs(5);

/// What the next-hop watches did so far (for tests and operators).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NextHopStats {
    /// Watches running now (one per connection whose next hop serves `MonitorConnections`).
    pub watches: usize,
    /// Watches with their stream open now (the next hop has them subscribed).
    pub streaming: usize,
    /// DELETEs of a watched connection received (acted on, or found to be of an older
    /// generation of it), and connections missing from the first event of their first stream.
    pub deletes: u64,
    /// Subscriptions made again after a stream broke or could not be opened.
    pub retries: u64,
}

/// The counters behind [`NextHopStats`].
#[derive(Default)]
pub(super) struct Counters {
    watches: AtomicUsize,
    streaming: AtomicUsize,
    deletes: AtomicU64,
    retries: AtomicU64,
}

/// Counts one running watch until dropped (with the watch's task).
struct Running(Arc<Counters>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.watches.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts one open stream until dropped.
struct OpenStream(Arc<Counters>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.streaming.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connection's watch of its next hop, and what the next hop last said of it. Dropping it
/// (with the connection's entry) ends the watch.
pub(super) struct NextHop {
    /// The next hop published the connection DOWN.
    pub(super) down: bool,
    _stop: oneshot::Sender<()>,
}

/// What the watch of one generation of one connection looks for.
struct Target {
    owner: String,
    generation: u64,
    url: String,
    selector: MonitorScopeSelector,
}

/// A subscription: the stream, and the hold on its channel.
struct Subscription {
    events: Streaming<ConnectionEvent>,
    lease: Lease,
    _hold: Hold,
    _open: OpenStream,
}

/// What a watch does next.
enum Step {
    Event(ConnectionEvent),
    Broken(Status, Option<Lease>),
}

impl Core {
    /// What the next-hop watches did so far.
    pub fn next_hop_stats(&self) -> NextHopStats {
        let c = &self.next_hops;
        NextHopStats {
            watches: c.watches.load(Ordering::SeqCst),
            streaming: c.streaming.load(Ordering::SeqCst),
            deletes: c.deletes.load(Ordering::SeqCst),
            retries: c.retries.load(Ordering::SeqCst),
        }
    }

    /// Starts watching the endpoint at `url` for generation `generation` of connection
    /// `owner`, whose segment (Quiver's, toward the endpoint) has id `own_id`.
    pub(super) fn watch_next_hop(
        self: &Arc<Self>,
        owner: &str,
        generation: u64,
        url: &str,
        own_id: &str,
    ) -> NextHop {
        let (stop, stopped) = oneshot::channel();
        let target = Target {
            owner: owner.to_string(),
            generation,
            url: url.to_string(),
            selector: MonitorScopeSelector {
                path_segments: vec![PathSegment {
                    name: self.cfg.name.clone(),
                    id: own_id.to_string(),
                    ..Default::default()
                }],
                network_services: vec![],
            },
        };
        self.next_hops.watches.fetch_add(1, Ordering::SeqCst);
        let running = Running(Arc::clone(&self.next_hops));
        tokio::spawn(watch(Arc::downgrade(self), target, stopped, running));
        NextHop {
            down: false,
            _stop: stop,
        }
    }

    /// Subscribes to the endpoint's `MonitorConnections` for `t`.
    async fn subscribe(&self, t: &Target) -> Result<Subscription, (Status, Option<Lease>)> {
        let lease = self
            .channels
            .get(&t.url, self.cfg.dial_timeout, self.cfg.identity.as_ref())
            .await
            .map_err(|s| (s, None))?;
        let hold = lease.hold();
        let mut client = MonitorConnectionClient::new(lease.channel.channel());
        match client.monitor_connections(t.selector.clone()).await {
            Ok(events) => {
                self.next_hops.streaming.fetch_add(1, Ordering::SeqCst);
                Ok(Subscription {
                    events: events.into_inner(),
                    lease,
                    _hold: hold,
                    _open: OpenStream(Arc::clone(&self.next_hops)),
                })
            }
            Err(s) => Err((s, Some(lease))),
        }
    }

    /// The next hop closed generation `generation` of connection `owner`: unless a Request,
    /// Close or expiry replaced or removed it meanwhile, it is removed here as Close removes
    /// it, without a Close toward the next hop.
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

    /// The next hop published generation `generation` of connection `owner` UP or DOWN.
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

    /// Publishes `entry` DOWN while a link of it or its next hop is down, UP otherwise (when
    /// that changed).
    pub(super) fn publish_state(&self, entry: &mut Entry) {
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

/// Reads the next step of the watch: subscribes first when there is no stream. The core is
/// held only while subscribing, not while waiting for events.
async fn next_step(core: &Weak<Core>, t: &Target, sub: &mut Option<Subscription>) -> Step {
    if sub.is_none() {
        let Some(core) = core.upgrade() else {
            return Step::Broken(Status::cancelled("Quiver is stopping"), None);
        };
        match core.subscribe(t).await {
            Ok(s) => *sub = Some(s),
            Err((s, lease)) => return Step::Broken(s, lease),
        }
    }
    let s = sub.as_mut().expect("subscribed");
    match s.events.message().await {
        Ok(Some(ev)) => Step::Event(ev),
        Ok(None) => {
            let s = sub.take().expect("subscribed");
            Step::Broken(Status::unavailable("the stream ended"), Some(s.lease))
        }
        Err(e) => Step::Broken(e, sub.take().map(|s| s.lease)),
    }
}

/// The watch of one generation of one connection (see the module docs); ends when `stopped`
/// (its [`NextHop`] dropped), when the next hop deleted the connection, or when the core goes.
async fn watch(core: Weak<Core>, t: Target, mut stopped: oneshot::Receiver<()>, _running: Running) {
    let mut sub: Option<Subscription> = None;
    let mut backoff = FIRST_RETRY;
    // What this watch last told the connection (it starts UP): only a change takes its lock.
    let mut told_up = true;
    // Until the first stream's first event: the next hop's view right after the Request.
    let mut first = true;
    loop {
        let step = tokio::select! {
            biased;
            _ = &mut stopped => return,
            step = next_step(&core, &t, &mut sub) => step,
        };
        // Acted on outside the select: a teardown that drops this watch's NextHop must not be
        // cut short by it.
        let Some(c) = core.upgrade() else { return };
        match step {
            Step::Event(ev) => {
                backoff = FIRST_RETRY;
                let initial = ev.r#type == ConnectionEventType::InitialStateTransfer as i32;
                let missing = || {
                    !ev.connections
                        .values()
                        .any(|conn| matches_selector(conn, &t.selector))
                };
                if std::mem::take(&mut first) && initial && missing() {
                    tracing::info!(
                        id = t.owner,
                        url = t.url,
                        "the next hop no longer has the connection it answered"
                    );
                    c.next_hops.deletes.fetch_add(1, Ordering::SeqCst);
                    drop(sub.take());
                    c.next_hop_closed(&t.owner, t.generation).await;
                    return;
                }
                let ours = ev
                    .connections
                    .values()
                    .filter(|conn| matches_selector(conn, &t.selector));
                let mut state = None;
                for conn in ours {
                    if ev.r#type == ConnectionEventType::Delete as i32 {
                        c.next_hops.deletes.fetch_add(1, Ordering::SeqCst);
                        drop(sub.take());
                        c.next_hop_closed(&t.owner, t.generation).await;
                        // Either closed here now, or of an older generation: done either way.
                        return;
                    }
                    if conn.state == State::Up as i32 {
                        state = Some(true);
                    } else if conn.state == State::Down as i32 {
                        state = Some(false);
                    }
                }
                if let Some(up) = state.filter(|up| *up != told_up) {
                    told_up = up;
                    c.next_hop_state(&t.owner, t.generation, up).await;
                }
            }
            Step::Broken(s, lease) => {
                first = false;
                if let Some(lease) = lease.filter(|_| channels::transport_failure(&s)) {
                    c.channels.forget(&t.url, &lease);
                }
                if s.code() == Code::Unimplemented {
                    tracing::info!(
                        id = t.owner,
                        url = t.url,
                        "the next hop does not serve MonitorConnections: not watched"
                    );
                    return;
                }
                tracing::debug!(
                    id = t.owner,
                    url = t.url,
                    error = %s,
                    retry_in = ?backoff,
                    "the next hop's MonitorConnections stream broke: watching again"
                );
                drop(c);
                tokio::select! {
                    biased;
                    _ = &mut stopped => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(LAST_RETRY);
                if let Some(c) = core.upgrade() {
                    c.next_hops.retries.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
}
