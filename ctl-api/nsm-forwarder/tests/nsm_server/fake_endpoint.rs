//! The endpoint (NSE) Quiver Requests, its MonitorConnections, and nsmgr's registry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nsm_forwarder::monitor::{EventStream, Monitor};
use nsm_forwarder::path::timestamp;
use nsm_proto::connection::monitor_connection_server::MonitorConnection;
use nsm_proto::connection::{Connection, Mechanism, MonitorScopeSelector, PathSegment};
use nsm_proto::networkservice::network_service_server::NetworkService;
use nsm_proto::networkservice::NetworkServiceRequest;
use nsm_proto::registry::network_service_endpoint_registry_server::NetworkServiceEndpointRegistry;
use nsm_proto::registry::{
    NetworkServiceEndpoint, NetworkServiceEndpointQuery, NetworkServiceEndpointResponse,
};
use tokio_stream::StreamExt;
use tonic::{Code, Request, Response, Status};

#[derive(Default, Debug)]
pub(crate) struct NseLog {
    pub(crate) requests: Vec<NetworkServiceRequest>,
    pub(crate) closes: Vec<Connection>,
    /// Every event in order: "request <id>" / "close <id>".
    pub(crate) order: Vec<String>,
    /// Requests that reached the gate (see `FakeNse::gate`).
    pub(crate) gated: usize,
}

#[derive(Clone, Default)]
pub(crate) struct FakeNse {
    pub(crate) log: Arc<Mutex<NseLog>>,
    pub(crate) refuse: Option<Code>,
    /// Each Request waits here for a permit first.
    pub(crate) gate: Option<Arc<tokio::sync::Semaphore>>,
    /// What the endpoint publishes on its MonitorConnections (see `NseMonitor`).
    pub(crate) monitor: Arc<Monitor>,
}

/// The endpoint's connection as it publishes it: its own segment's id and index.
pub(crate) fn nse_side(answer: &Connection) -> Connection {
    let mut c = answer.clone();
    let path = c.path.as_mut().unwrap();
    path.index += 1;
    c.id = path.path_segments[path.index as usize].id.clone();
    c
}

/// The endpoint's MonitorConnections: what `FakeNse` publishes, each stream cut (with an
/// error) whenever the test breaks them.
#[derive(Clone)]
pub(crate) struct NseMonitor {
    pub(crate) monitor: Arc<Monitor>,
    /// Every selector subscribed with, in order.
    pub(crate) subscribed: Arc<Mutex<Vec<MonitorScopeSelector>>>,
    pub(crate) breaks: Arc<tokio::sync::watch::Sender<u64>>,
    /// While set, each subscription waits for a permit first (counted in `waiting`).
    pub(crate) hold: Arc<Mutex<Option<Arc<tokio::sync::Semaphore>>>>,
    pub(crate) waiting: Arc<std::sync::atomic::AtomicUsize>,
}

#[tonic::async_trait]
impl MonitorConnection for NseMonitor {
    type MonitorConnectionsStream = EventStream;

    async fn monitor_connections(
        &self,
        request: Request<MonitorScopeSelector>,
    ) -> Result<Response<EventStream>, Status> {
        let selector = request.into_inner();
        let hold = self.hold.lock().unwrap().clone();
        if let Some(gate) = hold {
            self.waiting
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            gate.acquire().await.unwrap().forget();
        }
        let mut events = self.monitor.subscribe(selector.clone());
        let mut broken = self.breaks.subscribe();
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = broken.changed() => {
                        let _ = tx.send(Err(Status::unavailable("the endpoint restarted"))).await;
                        return;
                    }
                    ev = events.next() => {
                        let Some(ev) = ev else { return };
                        if tx.send(ev).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        self.subscribed.lock().unwrap().push(selector);
        Ok(Response::new(EventStream::new(rx)))
    }
}

pub(crate) const NS: &str = "file:///proc/self/ns/net";

#[tonic::async_trait]
impl NetworkService for FakeNse {
    async fn request(
        &self,
        request: Request<NetworkServiceRequest>,
    ) -> Result<Response<Connection>, Status> {
        if let Some(gate) = &self.gate {
            self.log.lock().unwrap().gated += 1;
            gate.acquire().await.unwrap().forget();
        }
        let req = request.into_inner();
        let mut log = self.log.lock().unwrap();
        let mut conn = req.connection.clone().unwrap();
        log.order.push(format!("request {}", conn.id));
        log.requests.push(req.clone());
        if let Some(code) = self.refuse {
            return Err(Status::new(code, "the endpoint refuses"));
        }
        let path = conn.path.as_mut().unwrap();
        let index = path.index as usize;
        assert_eq!(
            path.path_segments[index].id, conn.id,
            "the forwarder's segment id"
        );
        if path
            .path_segments
            .get(index + 1)
            .is_none_or(|s| s.name != "nse")
        {
            path.path_segments.truncate(index + 1);
            path.path_segments.push(PathSegment {
                name: "nse".into(),
                id: format!("nse-{}", conn.id),
                ..Default::default()
            });
        }
        let offered = req.mechanism_preferences[0].clone();
        let mut params = HashMap::from([("inodeURL".to_string(), NS.to_string())]);
        if offered.r#type == "MEMIF" {
            params.insert("socketfile".into(), format!("@nse/{}", conn.id));
        } else {
            params.insert("name".into(), offered.parameters["name"].clone());
        }
        conn.mechanism = Some(Mechanism {
            cls: "LOCAL".into(),
            r#type: offered.r#type,
            parameters: params,
        });
        if conn.payload == "IP" {
            let ctx = conn.context.get_or_insert_with(Default::default);
            let ip = ctx.ip_context.get_or_insert_with(Default::default);
            if ip.src_ip_addrs.is_empty() {
                ip.src_ip_addrs = vec!["172.16.0.2/31".into()];
                ip.dst_ip_addrs = vec!["172.16.0.3/31".into()];
            }
        }
        self.monitor.update(&nse_side(&conn));
        Ok(Response::new(conn))
    }

    async fn close(&self, request: Request<Connection>) -> Result<Response<()>, Status> {
        let conn = request.into_inner();
        let mut log = self.log.lock().unwrap();
        log.order.push(format!("close {}", conn.id));
        if conn.path.is_some() {
            self.monitor.delete(&nse_side(&conn));
        }
        log.closes.push(conn);
        Ok(Response::new(()))
    }
}
#[derive(Clone)]
pub(crate) struct FakeRegistry {
    pub(crate) known: HashMap<String, String>,
    pub(crate) registered: tokio::sync::mpsc::UnboundedSender<NetworkServiceEndpoint>,
}

#[tonic::async_trait]
impl NetworkServiceEndpointRegistry for FakeRegistry {
    async fn register(
        &self,
        request: Request<NetworkServiceEndpoint>,
    ) -> Result<Response<NetworkServiceEndpoint>, Status> {
        let mut nse = request.into_inner();
        let _ = self.registered.send(nse.clone());
        nse.expiration_time = Some(timestamp(SystemTime::now() + Duration::from_secs(60)));
        Ok(Response::new(nse))
    }

    type FindStream =
        tokio_stream::Iter<std::vec::IntoIter<Result<NetworkServiceEndpointResponse, Status>>>;

    async fn find(
        &self,
        request: Request<NetworkServiceEndpointQuery>,
    ) -> Result<Response<Self::FindStream>, Status> {
        let name = request
            .into_inner()
            .network_service_endpoint
            .map(|e| e.name)
            .unwrap_or_default();
        let answers: Vec<_> = self
            .known
            .get(&name)
            .map(|url| {
                Ok(NetworkServiceEndpointResponse {
                    network_service_endpoint: Some(NetworkServiceEndpoint {
                        name: name.clone(),
                        url: url.clone(),
                        ..Default::default()
                    }),
                    deleted: false,
                })
            })
            .into_iter()
            .collect();
        Ok(Response::new(tokio_stream::iter(answers)))
    }

    async fn unregister(&self, _: Request<NetworkServiceEndpoint>) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }
}
