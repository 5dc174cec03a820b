//! Watching the next hop (the endpoint's MonitorConnections).

use std::sync::Arc;
use std::time::Duration;

use nsm_forwarder::NsmBackend;
use nsm_proto::connection::{
    Connection, ConnectionEventType, MonitorScopeSelector, PathSegment, State,
};

use crate::fake_dataplane::*;
use crate::harness::*;

// ---------------------------------------------------------------------------------------------
// Watching the next hop (the endpoint's MonitorConnections).

/// Polls `cond` until it holds; fails after 60 s (a deadline only so that a broken test fails
/// instead of hanging).
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Requests `id` (MEMIF) and waits until Quiver watches the endpoint for it: Quiver's answer
/// and its own segment id.
async fn watched(h: &Harness, id: &str) -> (Connection, String) {
    let before = h.nse_subscriptions();
    let answer = h.request(memif_request(id)).await.unwrap();
    until("Quiver watches the endpoint", || {
        h.nse_subscriptions() > before
    })
    .await;
    let own_id = segments(&answer)[1].1.clone();
    (answer, own_id)
}

/// The endpoint's side of Quiver's connection `own_id`, as the endpoint publishes it.
fn published_by_nse(h: &Harness, own_id: &str) -> Connection {
    h.nse_monitor
        .monitor
        .get(&format!("nse-{own_id}"))
        .expect("the endpoint published the connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_hop_closing_closes_the_connection_here_and_publishes_delete() {
    let h = harness(DEFAULT).await;
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    next_event(&mut events).await;
    let (_, own_id) = watched(&h, "c1").await;
    assert_eq!(
        next_event(&mut events).await.r#type,
        ConnectionEventType::Update as i32
    );
    // Quiver watches only its own connection: its segment, by name and id.
    assert_eq!(
        h.nse_monitor.subscribed.lock().unwrap()[0].path_segments,
        [PathSegment {
            name: "quiver".into(),
            id: own_id.clone(),
            ..Default::default()
        }]
    );
    assert_eq!(h.core.next_hop_stats().watches, 1);

    // The endpoint closes its side (it went away, or its own caller closed it).
    let gone = published_by_nse(&h, &own_id);
    h.nse_monitor.monitor.delete(&gone);

    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Delete as i32);
    assert!(ev.connections.contains_key(&own_id), "{ev:?}");
    h.assert_no_state("after the endpoint closed");
    assert!(h.dp.removed().contains(&"nsm-c1-client".to_string()));
    assert!(
        h.nse.lock().unwrap().closes.is_empty(),
        "no Close is sent to a next hop that closed already"
    );
    until("the watch ends", || h.core.next_hop_stats().watches == 0).await;
    assert_eq!(h.core.next_hop_stats().deletes, 1);
    // The connection can be Requested again.
    h.request(memif_request("c1")).await.unwrap();
    assert_eq!(h.core.connection_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_hop_down_is_published_down_and_nothing_is_torn_down() {
    let h = harness(DEFAULT).await;
    let (_, own_id) = watched(&h, "c1").await;
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    next_event(&mut events).await;
    let created = h.dp.created();

    let mut down = published_by_nse(&h, &own_id);
    down.state = State::Down as i32;
    h.nse_monitor.monitor.update(&down);
    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Update as i32);
    assert_eq!(ev.connections[&own_id].state, State::Down as i32);
    assert!(!h.core.summaries()[0].up);
    // Nothing was torn down or closed.
    assert_eq!(h.dp.created(), created);
    assert!(h.dp.removed().is_empty());
    assert_eq!(
        h.dp.xc("nsm-c1-client"),
        Some(Xc::L2("nsm-c1-endpoint".into()))
    );
    assert!(h.nse.lock().unwrap().closes.is_empty());

    // UP again from the next hop: UP again here.
    down.state = State::Up as i32;
    h.nse_monitor.monitor.update(&down);
    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Update as i32);
    assert_eq!(ev.connections[&own_id].state, State::Up as i32);
    assert_eq!(h.core.connection_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_next_hop_stream_tears_nothing_down_and_is_watched_again() {
    let h = harness(DEFAULT).await;
    let (_, own_id) = watched(&h, "c1").await;
    h.break_nse_streams();
    until("Quiver watches the endpoint again", || {
        h.nse_subscriptions() == 2
    })
    .await;
    assert!(h.core.next_hop_stats().retries >= 1);
    // Nothing torn down, nothing closed, still published UP.
    assert!(h.core.holds("c1").await);
    assert!(h.dp.removed().is_empty());
    assert_eq!(h.dp.owners().unwrap(), ["c1"]);
    assert!(h.nse.lock().unwrap().closes.is_empty());
    assert_eq!(
        h.core.monitor.get(&own_id).map(|c| c.state),
        Some(State::Up as i32)
    );
    assert_eq!(h.core.next_hop_stats().watches, 1);
    // The new stream is watched: a DELETE on it closes the connection.
    h.nse_monitor.monitor.delete(&published_by_nse(&h, &own_id));
    until("the connection is closed", || {
        h.core.connection_count() == 0
    })
    .await;
    h.assert_no_state("after the endpoint closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_connection_is_watched_until_it_is_closed() {
    let h = harness(DEFAULT).await;
    let (a, _) = watched(&h, "a").await;
    let (b, _) = watched(&h, "b").await;
    assert_eq!(h.core.next_hop_stats().watches, 2);
    // A refresh watches anew (one watch per generation): still one per connection.
    h.request(refresh_of(&a, &memif_request("a").mechanism_preferences))
        .await
        .unwrap();
    until("the refreshed connection is watched anew", || {
        h.nse_subscriptions() == 3 && h.core.next_hop_stats().watches == 2
    })
    .await;
    h.close(a).await.unwrap();
    until("a's watch ends", || h.core.next_hop_stats().watches == 1).await;
    h.close(b).await.unwrap();
    until("every watch ends", || h.core.next_hop_stats().watches == 0).await;
    h.assert_no_state("after both Closes");
    // One Close each toward the endpoint: its DELETEs that followed changed nothing.
    assert_eq!(h.nse.lock().unwrap().closes.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_of_an_older_generation_does_not_close_the_refreshed_connection() {
    let h = Arc::new(
        harness(Setup {
            gated: true,
            ..DEFAULT
        })
        .await,
    );
    let gate = h.gate.clone().unwrap();
    gate.add_permits(1);
    let (answer, own_id) = watched(&h, "c1").await;

    // A refresh, held at the endpoint: Quiver holds the connection's lock meanwhile.
    let refresh = {
        let h = h.clone();
        let req = refresh_of(&answer, &memif_request("c1").mechanism_preferences);
        tokio::spawn(async move { h.request(req).await })
    };
    until("the refresh reaches the endpoint", || {
        h.nse.lock().unwrap().gated == 2
    })
    .await;
    // The endpoint had closed the connection just before (the refresh makes it again): the
    // first generation's watch sees the DELETE and waits for the connection's lock.
    h.nse_monitor.monitor.delete(&published_by_nse(&h, &own_id));
    until("the old watch saw the DELETE", || {
        h.core.next_hop_stats().deletes == 1
    })
    .await;
    gate.add_permits(1);
    let again = refresh.await.unwrap().unwrap();
    assert_eq!(segments(&again), segments(&answer));
    // The old watch ends once it has had the lock and found a newer generation.
    until("the old watch ends", || {
        h.core.next_hop_stats().watches == 1
    })
    .await;
    assert!(
        h.core.holds("c1").await,
        "the refreshed connection was closed"
    );
    assert!(h.dp.removed().is_empty());
    assert_eq!(h.dp.owners().unwrap(), ["c1"]);
    assert_eq!(
        h.core.monitor.get(&own_id).map(|c| c.state),
        Some(State::Up as i32)
    );
    // The new generation is watched: a DELETE now closes it.
    until("the refreshed connection is watched", || {
        h.nse_subscriptions() == 2
    })
    .await;
    h.nse_monitor.monitor.delete(&published_by_nse(&h, &own_id));
    until("the connection is closed", || {
        h.core.connection_count() == 0
    })
    .await;
    h.assert_no_state("after the endpoint closed");
}

/// The next hop closes the connection after answering a refresh and before Quiver's watch of
/// the refreshed generation is subscribed: no DELETE reaches a watch, but the new stream's
/// first event lacks the connection, and that closes it here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_between_a_refresh_and_its_watch_still_closes_the_connection() {
    let h = harness(DEFAULT).await;
    let (answer, own_id) = watched(&h, "c1").await;
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    next_event(&mut events).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *h.nse_monitor.hold.lock().unwrap() = Some(gate.clone());
    h.request(refresh_of(
        &answer,
        &memif_request("c1").mechanism_preferences,
    ))
    .await
    .unwrap();
    assert_eq!(
        next_event(&mut events).await.r#type,
        ConnectionEventType::Update as i32
    );
    until("the refreshed generation's watch is subscribing", || {
        h.nse_monitor
            .waiting
            .load(std::sync::atomic::Ordering::SeqCst)
            == 1
    })
    .await;
    // The previous generation's watch has stopped; the endpoint closes its side now.
    until("one watch left", || h.core.next_hop_stats().watches == 1).await;
    h.nse_monitor.monitor.delete(&published_by_nse(&h, &own_id));
    assert!(h.core.holds("c1").await);
    gate.add_permits(1);

    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Delete as i32);
    assert!(ev.connections.contains_key(&own_id), "{ev:?}");
    until("the watch ends", || h.core.next_hop_stats().watches == 0).await;
    assert_eq!(h.core.next_hop_stats().deletes, 1);
    h.assert_no_state("after the endpoint closed");
    assert!(
        h.nse.lock().unwrap().closes.is_empty(),
        "no Close is sent to a next hop that closed already"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_hop_without_monitor_connections_is_not_watched() {
    let h = harness(Setup {
        nse_monitor: false,
        ..DEFAULT
    })
    .await;
    h.request(memif_request("c1")).await.unwrap();
    until("the watch gives up", || {
        h.core.next_hop_stats().watches == 0
    })
    .await;
    assert_eq!(h.core.next_hop_stats().retries, 0);
    assert_eq!(h.core.connection_count(), 1);
    assert!(h.dp.removed().is_empty());
}
