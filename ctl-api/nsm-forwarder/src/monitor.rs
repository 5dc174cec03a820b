//! The connection monitor: the connections as last published, and the subscribers of
//! `MonitorConnections`, each with its selector. A subscriber first gets an
//! INITIAL_STATE_TRANSFER of every matching connection, then every later event that matches,
//! in order; the snapshot and the subscription are taken under one lock, so nothing is missed
//! or seen twice.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::mpsc;
use tonic::Status;

use super::path::matches_selector;
use nsm_proto::connection::{
    Connection, ConnectionEvent, ConnectionEventType, MonitorScopeSelector,
};

/// How many events a subscriber may fall behind before it is cut off.
const BACKLOG: usize = 1024;

/// What a subscriber receives.
pub type EventStream = tokio_stream::wrappers::ReceiverStream<Result<ConnectionEvent, Status>>;

struct Subscriber {
    selector: MonitorScopeSelector,
    tx: mpsc::Sender<Result<ConnectionEvent, Status>>,
}

#[derive(Default)]
struct Inner {
    connections: HashMap<String, Connection>,
    subscribers: Vec<Subscriber>,
    /// The server is stopping: streams end, new ones end at once.
    closed: bool,
}

/// The published connections and their subscribers.
#[derive(Default)]
pub struct Monitor {
    inner: Mutex<Inner>,
}

fn event(kind: ConnectionEventType, conns: HashMap<String, Connection>) -> ConnectionEvent {
    ConnectionEvent {
        r#type: kind as i32,
        connections: conns,
    }
}

impl Monitor {
    /// A new subscriber: its stream starts with the matching connections.
    pub fn subscribe(&self, selector: MonitorScopeSelector) -> EventStream {
        let (tx, rx) = mpsc::channel(BACKLOG);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let initial = inner
            .connections
            .iter()
            .filter(|(_, c)| matches_selector(c, &selector))
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        // A new channel has room for the first event.
        let _ = tx.try_send(Ok(event(
            ConnectionEventType::InitialStateTransfer,
            initial,
        )));
        if !inner.closed {
            inner.subscribers.push(Subscriber { selector, tx });
        }
        EventStream::new(rx)
    }

    /// Ends every subscriber's stream, and every later one's after its first event: the server
    /// is stopping, and a stream that never ends (nsmgr keeps one open to each forwarder) would
    /// hold its graceful stop forever.
    pub fn close(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.closed = true;
        inner.subscribers.clear();
    }

    /// Publishes `conn` as created or changed (UPDATE).
    pub fn update(&self, conn: &Connection) {
        self.publish(ConnectionEventType::Update, conn);
    }

    /// Publishes `conn` as gone (DELETE).
    pub fn delete(&self, conn: &Connection) {
        self.publish(ConnectionEventType::Delete, conn);
    }

    /// The connection published under `id`, if any.
    pub fn get(&self, id: &str) -> Option<Connection> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.connections.get(id).cloned()
    }

    /// Calls `f` on each published connection, under the monitor's lock (so `f` must be short
    /// and must not call the monitor).
    pub fn for_each(&self, mut f: impl FnMut(&Connection)) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.connections.values().for_each(&mut f);
    }

    /// How many connections are published.
    pub fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.connections.len()
    }

    /// True if no connection is published.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn publish(&self, kind: ConnectionEventType, conn: &Connection) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if kind == ConnectionEventType::Delete {
            inner.connections.remove(&conn.id);
        } else {
            inner.connections.insert(conn.id.clone(), conn.clone());
        }
        inner.subscribers.retain(|s| {
            if !matches_selector(conn, &s.selector) {
                return !s.tx.is_closed();
            }
            let ev = event(kind, HashMap::from([(conn.id.clone(), conn.clone())]));
            match s.tx.try_send(Ok(ev)) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::warn!(
                        "a MonitorConnections subscriber fell {BACKLOG} events behind: cut off"
                    );
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsm_proto::connection::{Path, PathSegment};
    use tokio_stream::StreamExt;

    fn conn(id: &str, seg: &str) -> Connection {
        Connection {
            id: id.into(),
            path: Some(Path {
                index: 0,
                path_segments: vec![PathSegment {
                    name: seg.into(),
                    id: id.into(),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn events_in_order_filtered_by_selector() {
        let m = Monitor::default();
        m.update(&conn("a", "x"));
        let sel = MonitorScopeSelector {
            path_segments: vec![PathSegment {
                name: "x".into(),
                ..Default::default()
            }],
            network_services: vec![],
        };
        let mut s = m.subscribe(sel);
        m.update(&conn("b", "y")); // filtered out
        m.update(&conn("c", "x"));
        m.delete(&conn("a", "x"));
        let mut kinds = Vec::new();
        for _ in 0..3 {
            // Every event was sent already: these are ready.
            let e = s.next().await.unwrap().unwrap();
            kinds.push((e.r#type, e.connections.keys().cloned().collect::<Vec<_>>()));
        }
        assert_eq!(
            kinds,
            vec![
                (
                    ConnectionEventType::InitialStateTransfer as i32,
                    vec!["a".to_string()]
                ),
                (ConnectionEventType::Update as i32, vec!["c".to_string()]),
                (ConnectionEventType::Delete as i32, vec!["a".to_string()]),
            ]
        );
        assert_eq!(m.len(), 2);
        drop(s);
        m.update(&conn("d", "x"));
        assert!(m.inner.lock().unwrap().subscribers.is_empty());
    }
}
