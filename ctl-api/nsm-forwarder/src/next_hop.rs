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

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use nsm_proto::connection::monitor_connection_client::MonitorConnectionClient;
use nsm_proto::connection::{
    ConnectionEvent, ConnectionEventType, MonitorScopeSelector, PathSegment, State,
};
use spiffe_identity::Identity;
use tokio::sync::oneshot;
use tonic::{Code, Status, Streaming};

use crate::channels::{self, Channels, Hold, Lease};
use crate::path::matches_selector;

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
pub(crate) struct Counters {
    watches: AtomicUsize,
    streaming: AtomicUsize,
    deletes: AtomicU64,
    retries: AtomicU64,
}

impl Counters {
    /// What the next-hop watches did so far.
    pub(crate) fn stats(&self) -> NextHopStats {
        NextHopStats {
            watches: self.watches.load(Ordering::SeqCst),
            streaming: self.streaming.load(Ordering::SeqCst),
            deletes: self.deletes.load(Ordering::SeqCst),
            retries: self.retries.load(Ordering::SeqCst),
        }
    }
}

/// What a watch needs of the connections it watches for (the NSM core): the channels to next
/// hops and how to dial them, the counters, and what to do when a next hop closes a connection
/// or changes its state. A watch holds it weakly, and only while it acts.
pub(crate) trait Watched: Send + Sync + 'static {
    /// The cached channels to next hops (the Requests' own).
    fn channels(&self) -> &Channels;
    /// How long dialing a next hop may take, and the identity to dial it with.
    fn dial_with(&self) -> (Duration, Option<&Identity>);
    /// The watches' counters.
    fn counters(&self) -> &Arc<Counters>;
    /// The next hop closed generation `generation` of connection `owner` (unless a Request,
    /// Close or expiry replaced or removed it meanwhile, it is to be removed without a Close
    /// toward the next hop).
    fn next_hop_closed(&self, owner: &str, generation: u64) -> impl Future<Output = ()> + Send;
    /// The next hop published generation `generation` of connection `owner` UP or DOWN.
    fn next_hop_state(
        &self,
        owner: &str,
        generation: u64,
        up: bool,
    ) -> impl Future<Output = ()> + Send;
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
pub(crate) struct NextHop {
    /// The next hop published the connection DOWN.
    pub(crate) down: bool,
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

/// Starts watching the endpoint at `url` for generation `generation` of connection `owner`,
/// whose segment (Quiver's, named `name`, toward the endpoint) has id `own_id`.
pub(crate) fn start<W: Watched>(
    core: &Arc<W>,
    name: &str,
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
                name: name.to_string(),
                id: own_id.to_string(),
                ..Default::default()
            }],
            network_services: vec![],
        },
    };
    let counters = core.counters();
    counters.watches.fetch_add(1, Ordering::SeqCst);
    let running = Running(Arc::clone(counters));
    tokio::spawn(watch(Arc::downgrade(core), target, stopped, running));
    NextHop {
        down: false,
        _stop: stop,
    }
}

/// Subscribes to the endpoint's `MonitorConnections` for `t`.
async fn subscribe<W: Watched>(
    core: &W,
    t: &Target,
) -> Result<Subscription, (Status, Option<Lease>)> {
    let (timeout, identity) = core.dial_with();
    let lease = core
        .channels()
        .get(&t.url, timeout, identity)
        .await
        .map_err(|s| (s, None))?;
    let hold = lease.hold();
    let mut client = MonitorConnectionClient::new(lease.channel.channel());
    match client.monitor_connections(t.selector.clone()).await {
        Ok(events) => {
            let counters = core.counters();
            counters.streaming.fetch_add(1, Ordering::SeqCst);
            Ok(Subscription {
                events: events.into_inner(),
                lease,
                _hold: hold,
                _open: OpenStream(Arc::clone(counters)),
            })
        }
        Err(s) => Err((s, Some(lease))),
    }
}

/// Reads the next step of the watch: subscribes first when there is no stream. The core is
/// held only while subscribing, not while waiting for events.
async fn next_step<W: Watched>(core: &Weak<W>, t: &Target, sub: &mut Option<Subscription>) -> Step {
    if sub.is_none() {
        let Some(core) = core.upgrade() else {
            return Step::Broken(Status::cancelled("Quiver is stopping"), None);
        };
        match subscribe(&*core, t).await {
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
async fn watch<W: Watched>(
    core: Weak<W>,
    t: Target,
    mut stopped: oneshot::Receiver<()>,
    _running: Running,
) {
    let mut sub: Option<Subscription> = None;
    let mut backoff = FIRST_RETRY;
    let mut seen = Seen {
        told_up: true,
        first: true,
    };
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
                if on_event(&*c, &t, ev, &mut seen, &mut sub).await {
                    return;
                }
            }
            Step::Broken(s, lease) => {
                seen.first = false;
                if let Some(lease) = lease.filter(|_| channels::transport_failure(&s)) {
                    c.channels().forget(&t.url, &lease);
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
                    c.counters().retries.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
}

/// What a watch saw so far.
struct Seen {
    /// What this watch last told the connection (it starts UP): only a change takes its lock.
    told_up: bool,
    /// Until the first stream's first event: the next hop's view right after the Request.
    first: bool,
}

/// Acts on `ev`, an event of the watch of `t` (see the module docs); true when the watch is
/// over (the next hop closed the connection).
async fn on_event<W: Watched>(
    c: &W,
    t: &Target,
    ev: ConnectionEvent,
    seen: &mut Seen,
    sub: &mut Option<Subscription>,
) -> bool {
    let initial = ev.r#type == ConnectionEventType::InitialStateTransfer as i32;
    let missing = || {
        !ev.connections
            .values()
            .any(|conn| matches_selector(conn, &t.selector))
    };
    if std::mem::take(&mut seen.first) && initial && missing() {
        tracing::info!(
            id = t.owner,
            url = t.url,
            "the next hop no longer has the connection it answered"
        );
        c.counters().deletes.fetch_add(1, Ordering::SeqCst);
        drop(sub.take());
        c.next_hop_closed(&t.owner, t.generation).await;
        return true;
    }
    let ours = ev
        .connections
        .values()
        .filter(|conn| matches_selector(conn, &t.selector));
    let mut state = None;
    for conn in ours {
        if ev.r#type == ConnectionEventType::Delete as i32 {
            c.counters().deletes.fetch_add(1, Ordering::SeqCst);
            drop(sub.take());
            c.next_hop_closed(&t.owner, t.generation).await;
            // Either closed here now, or of an older generation: done either way.
            return true;
        }
        if conn.state == State::Up as i32 {
            state = Some(true);
        } else if conn.state == State::Down as i32 {
            state = Some(false);
        }
    }
    if let Some(up) = state.filter(|up| *up != seen.told_up) {
        seen.told_up = up;
        c.next_hop_state(&t.owner, t.generation, up).await;
    }
    false
}
