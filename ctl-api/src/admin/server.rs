//! The admin service on its unix socket, on a tokio runtime of its own thread.

use std::net::Ipv4Addr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

use super::{
    parse_ip, parse_mac, parse_prefix, AdminBackend, AdminError, AdminResult, AfPacketSpec,
    L3Peers, MemifSpec,
};
use crate::proto::quiver_admin as pb;
use pb::admin_server::{Admin, AdminServer as AdminService};

/// The admin socket's permissions: owner and group read and write.
pub const SOCKET_MODE: u32 = 0o660;

/// Why the admin socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another live process serves on the socket.
    #[error("{0} is in use by a running process (another quiver?)")]
    InUse(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
    /// A system call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SocketError + 'a {
    move |source| SocketError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Binds the admin socket at `path`: creates its directory, replaces a stale socket (one no
/// process accepts on), refuses a live one, and sets mode 0660.
pub fn bind_socket(path: &Path) -> Result<UnixListener, SocketError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(SocketError::InUse(path.to_path_buf())),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                tracing::info!(socket = %path.display(), "replacing a stale admin socket");
                std::fs::remove_file(path).map_err(io("cannot remove", path))?;
            }
            Err(e) => return Err(io("cannot probe", path)(e)),
        },
        Ok(_) => return Err(SocketError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("cannot inspect", path)(e)),
    }
    let listener = UnixListener::bind(path).map_err(io("cannot bind", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(io("cannot set the mode of", path))?;
    listener
        .set_nonblocking(true)
        .map_err(io("cannot configure", path))?;
    Ok(listener)
}

/// The running admin service. Dropping it (or [`AdminServer::stop`]) stops the service, waits
/// for calls in progress, and removes the socket.
pub struct AdminServer {
    path: PathBuf,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl AdminServer {
    /// Binds `path` (see [`bind_socket`]) and serves `backend` on it from a new thread
    /// (`quiver-admin`) running a tokio runtime.
    pub fn start(backend: Arc<dyn AdminBackend>, path: &Path) -> Result<AdminServer, String> {
        let listener = bind_socket(path).map_err(|e| format!("admin socket: {e}"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("quiver-admin")
            .build()
            .map_err(|e| format!("admin service: cannot start a tokio runtime: {e}"))?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let shown = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("quiver-admin".into())
            .spawn(move || {
                runtime.block_on(async move {
                    if let Err(e) = serve(backend, listener, async {
                        let _ = rx.await;
                    })
                    .await
                    {
                        tracing::error!(socket = %shown.display(), "admin service failed: {e}");
                    }
                });
                // Dropping the runtime waits for blocking calls still running.
            })
            .map_err(|e| format!("admin service: cannot start its thread: {e}"))?;
        tracing::info!(socket = %path.display(), "admin API listening");
        Ok(AdminServer {
            path: path.to_path_buf(),
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops serving, waits for calls in progress, removes the socket.
    pub fn stop(mut self) {
        self.shutdown_now();
    }

    fn shutdown_now(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.shutdown_now();
    }
}

/// Serves `backend` on `listener` (non-blocking, from [`bind_socket`]) until `shutdown`
/// completes. Must run inside a tokio runtime.
pub async fn serve(
    backend: Arc<dyn AdminBackend>,
    listener: UnixListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), String> {
    let listener = tokio::net::UnixListener::from_std(listener).map_err(|e| e.to_string())?;
    // Clients of any gRPC stack: grpcio and grpc-java put the socket path in :authority.
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener)
        .map(|s| s.map(grpc_unix::LenientAuthority::new));
    tonic::transport::Server::builder()
        .add_service(AdminService::new(Service { backend }))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|e| e.to_string())
}

/// The gRPC service over a backend.
struct Service {
    backend: Arc<dyn AdminBackend>,
}

impl Service {
    /// Runs `f` on the backend in tokio's blocking pool.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn AdminBackend) -> AdminResult<T> + Send + 'static,
    ) -> Result<Response<T>, Status> {
        let backend = self.backend.clone();
        tokio::task::spawn_blocking(move || f(backend.as_ref()))
            .await
            .map_err(|e| Status::internal(format!("the admin call failed: {e}")))?
            .map(Response::new)
            .map_err(Status::from)
    }
}

fn name(what: &str, s: &str) -> AdminResult<String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(AdminError::InvalidArgument(format!("{what} is empty")));
    }
    Ok(s.to_string())
}

fn u16_or(what: &str, v: u32, default: u16) -> AdminResult<u16> {
    match v {
        0 => Ok(default),
        v => u16::try_from(v)
            .map_err(|_| AdminError::InvalidArgument(format!("{what} {v} is too large"))),
    }
}

fn memif_spec(r: &pb::AddMemifRequest) -> AdminResult<MemifSpec> {
    let master = match r.role.trim() {
        "" | "master" => true,
        "slave" => false,
        other => {
            return Err(AdminError::InvalidArgument(format!(
                "memif role `{other}`: master or slave"
            )))
        }
    };
    let ip_mode = match r.mode.trim() {
        "" | "ethernet" => false,
        "ip" => true,
        other => {
            return Err(AdminError::InvalidArgument(format!(
                "memif mode `{other}`: ethernet or ip"
            )))
        }
    };
    Ok(MemifSpec {
        name: name("interface name", &r.name)?,
        master,
        socket: name("memif socket", &r.socket)?,
        id: r.id,
        ip_mode,
        ring_size: if r.ring_size == 0 { 1024 } else { r.ring_size },
        buffer_size: if r.buffer_size == 0 {
            2048
        } else {
            r.buffer_size
        },
        secret: (!r.secret.is_empty()).then(|| r.secret.clone()),
        mac: match r.mac.trim() {
            "" => None,
            m => Some(parse_mac(m)?),
        },
        mtu: u16_or("MTU", r.mtu, 1500)?,
    })
}

fn l3_peers(r: &pb::AddCrossConnectRequest) -> AdminResult<Option<L3Peers>> {
    match (r.peer_a.trim(), r.peer_b.trim()) {
        ("", "") => Ok(None),
        (a, b) if !a.is_empty() && !b.is_empty() => Ok(Some(L3Peers {
            peer_a: parse_ip("peer", a)?,
            peer_b: parse_ip("peer", b)?,
        })),
        _ => Err(AdminError::InvalidArgument(
            "an L3 cross-connect needs both peers".into(),
        )),
    }
}

#[tonic::async_trait]
impl Admin for Service {
    async fn show_interfaces(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowInterfacesReply>, Status> {
        self.call(|b| {
            b.interfaces()
                .map(|interfaces| pb::ShowInterfacesReply { interfaces })
        })
        .await
    }

    async fn show_runtime(
        &self,
        r: Request<pb::ShowRuntimeRequest>,
    ) -> Result<Response<pb::ShowRuntimeReply>, Status> {
        let per_worker = r.into_inner().per_worker;
        self.call(move |b| b.runtime(per_worker)).await
    }

    async fn show_errors(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowErrorsReply>, Status> {
        self.call(|b| b.errors().map(|errors| pb::ShowErrorsReply { errors }))
            .await
    }

    async fn show_fib(&self, _: Request<pb::Empty>) -> Result<Response<pb::ShowFibReply>, Status> {
        self.call(|b| b.fib().map(|routes| pb::ShowFibReply { routes }))
            .await
    }

    async fn show_neighbors(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowNeighborsReply>, Status> {
        self.call(|b| {
            b.neighbors()
                .map(|neighbors| pb::ShowNeighborsReply { neighbors })
        })
        .await
    }

    async fn show_cross_connects(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowCrossConnectsReply>, Status> {
        self.call(|b| {
            b.cross_connects()
                .map(|cross_connects| pb::ShowCrossConnectsReply { cross_connects })
        })
        .await
    }

    async fn show_memif(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowMemifReply>, Status> {
        self.call(|b| b.memifs().map(|memifs| pb::ShowMemifReply { memifs }))
            .await
    }

    async fn show_connections(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowConnectionsReply>, Status> {
        self.call(|b| {
            b.connections()
                .map(|connections| pb::ShowConnectionsReply { connections })
        })
        .await
    }

    async fn show_trace(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowTraceReply>, Status> {
        self.call(|b| b.trace_show().map(|packets| pb::ShowTraceReply { packets }))
            .await
    }

    async fn trace_add(
        &self,
        r: Request<pb::TraceAddRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let node = name("node", &r.node)?;
            if r.count == 0 {
                return Err(AdminError::InvalidArgument(
                    "trace count must be at least 1".into(),
                ));
            }
            b.trace_add(&node, r.count).map(|()| pb::Empty {})
        })
        .await
    }

    async fn trace_clear(&self, _: Request<pb::Empty>) -> Result<Response<pb::Empty>, Status> {
        self.call(|b| b.trace_clear().map(|()| pb::Empty {})).await
    }

    async fn add_route(
        &self,
        r: Request<pb::AddRouteRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let (prefix, len) = parse_prefix(&r.prefix)?;
            let via = r
                .via
                .iter()
                .map(|v| {
                    Ok((
                        parse_ip("next hop", &v.next_hop)?,
                        name("next hop interface", &v.interface)?,
                    ))
                })
                .collect::<AdminResult<Vec<(Ipv4Addr, String)>>>()?;
            b.add_route(prefix, len, &via).map(|()| pb::Empty {})
        })
        .await
    }

    async fn delete_route(
        &self,
        r: Request<pb::DeleteRouteRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let (prefix, len) = parse_prefix(&r.prefix)?;
            b.delete_route(prefix, len).map(|()| pb::Empty {})
        })
        .await
    }

    async fn add_neighbor(
        &self,
        r: Request<pb::AddNeighborRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let interface = name("interface", &r.interface)?;
            let ip = parse_ip("neighbour", &r.ip)?;
            let mac = parse_mac(&r.mac)?;
            b.add_neighbor(&interface, ip, mac).map(|()| pb::Empty {})
        })
        .await
    }

    async fn delete_neighbor(
        &self,
        r: Request<pb::DeleteNeighborRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let interface = name("interface", &r.interface)?;
            let ip = parse_ip("neighbour", &r.ip)?;
            b.delete_neighbor(&interface, ip).map(|()| pb::Empty {})
        })
        .await
    }

    async fn add_cross_connect(
        &self,
        r: Request<pb::AddCrossConnectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let (a, z) = (name("interface a", &r.a)?, name("interface b", &r.b)?);
            let peers = l3_peers(&r)?;
            b.add_cross_connect(&a, &z, peers).map(|()| pb::Empty {})
        })
        .await
    }

    async fn delete_cross_connect(
        &self,
        r: Request<pb::DeleteCrossConnectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let interface = name("interface", &r.interface)?;
            b.delete_cross_connect(&interface).map(|()| pb::Empty {})
        })
        .await
    }

    async fn add_memif(
        &self,
        r: Request<pb::AddMemifRequest>,
    ) -> Result<Response<pb::AddInterfaceReply>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let spec = memif_spec(&r)?;
            b.add_memif(&spec)
                .map(|index| pb::AddInterfaceReply { index })
        })
        .await
    }

    async fn add_af_packet(
        &self,
        r: Request<pb::AddAfPacketRequest>,
    ) -> Result<Response<pb::AddInterfaceReply>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let spec = AfPacketSpec {
                name: name("interface name", &r.name)?,
                host_interface: name("host interface", &r.host_interface)?,
                promiscuous: r.promiscuous.unwrap_or(true),
                mtu: u16_or("MTU", r.mtu, 1500)?,
            };
            b.add_af_packet(&spec)
                .map(|index| pb::AddInterfaceReply { index })
        })
        .await
    }

    async fn delete_interface(
        &self,
        r: Request<pb::DeleteInterfaceRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let n = name("interface name", &r.name)?;
            b.delete_interface(&n).map(|()| pb::Empty {})
        })
        .await
    }

    async fn clear_counters(&self, _: Request<pb::Empty>) -> Result<Response<pb::Empty>, Status> {
        self.call(|b| b.clear_counters().map(|()| pb::Empty {}))
            .await
    }

    async fn capture_start(
        &self,
        r: Request<pb::CaptureStartRequest>,
    ) -> Result<Response<pb::Capture>, Status> {
        let r = r.into_inner();
        self.call(move |b| b.capture_start(&super::capture::spec(&r)?))
            .await
    }

    async fn capture_stop(
        &self,
        r: Request<pb::CaptureStopRequest>,
    ) -> Result<Response<pb::Capture>, Status> {
        let r = r.into_inner();
        self.call(move |b| b.capture_stop(&name("interface", &r.interface)?))
            .await
    }

    async fn show_captures(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowCapturesReply>, Status> {
        self.call(|b| {
            b.captures()
                .map(|captures| pb::ShowCapturesReply { captures })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::AdminClient;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ctl-api-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn the_socket_gets_its_directory_and_mode_and_only_a_stale_one_is_replaced() {
        let dir = scratch("bind");
        let path = dir.join("run/admin.sock");
        let live = bind_socket(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, SOCKET_MODE);
        assert!(matches!(bind_socket(&path), Err(SocketError::InUse(_))));
        drop(live);
        // The file outlives its listener: stale now, so it is replaced.
        assert!(path.exists());
        let again = bind_socket(&path).unwrap();
        drop(again);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"not a socket").unwrap();
        assert!(matches!(
            bind_socket(&path),
            Err(SocketError::NotASocket(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Records what it was asked; refuses what does not exist.
    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<String>>);

    impl Recorder {
        fn log(&self, s: String) -> AdminResult<()> {
            self.0.lock().unwrap().push(s);
            Ok(())
        }
    }

    impl AdminBackend for Recorder {
        fn interfaces(&self) -> AdminResult<Vec<pb::Interface>> {
            Ok(vec![pb::Interface {
                name: "memif0".into(),
                ..Default::default()
            }])
        }
        fn runtime(&self, per_worker: bool) -> AdminResult<pb::ShowRuntimeReply> {
            Ok(pb::ShowRuntimeReply {
                tsc_hz: u64::from(per_worker),
                workers: Vec::new(),
            })
        }
        fn errors(&self) -> AdminResult<Vec<pb::ErrorCounter>> {
            Ok(Vec::new())
        }
        fn fib(&self) -> AdminResult<Vec<pb::Route>> {
            Ok(Vec::new())
        }
        fn neighbors(&self) -> AdminResult<Vec<pb::Neighbor>> {
            Ok(Vec::new())
        }
        fn cross_connects(&self) -> AdminResult<Vec<pb::CrossConnect>> {
            Ok(Vec::new())
        }
        fn memifs(&self) -> AdminResult<Vec<pb::Memif>> {
            Ok(Vec::new())
        }
        fn trace_add(&self, node: &str, count: u32) -> AdminResult<()> {
            self.log(format!("trace {node} {count}"))
        }
        fn trace_show(&self) -> AdminResult<Vec<pb::TracedPacket>> {
            Ok(Vec::new())
        }
        fn trace_clear(&self) -> AdminResult<()> {
            self.log("trace clear".into())
        }
        fn add_route(
            &self,
            prefix: Ipv4Addr,
            len: u8,
            via: &[(Ipv4Addr, String)],
        ) -> AdminResult<()> {
            self.log(format!("route {prefix}/{len} {via:?}"))
        }
        fn delete_route(&self, prefix: Ipv4Addr, len: u8) -> AdminResult<()> {
            Err(AdminError::NotFound(format!("no route {prefix}/{len}")))
        }
        fn add_neighbor(&self, interface: &str, ip: Ipv4Addr, mac: [u8; 6]) -> AdminResult<()> {
            self.log(format!("neighbor {interface} {ip} {mac:?}"))
        }
        fn delete_neighbor(&self, interface: &str, ip: Ipv4Addr) -> AdminResult<()> {
            self.log(format!("del neighbor {interface} {ip}"))
        }
        fn add_cross_connect(&self, a: &str, b: &str, l3: Option<L3Peers>) -> AdminResult<()> {
            self.log(format!("xc {a} {b} {l3:?}"))
        }
        fn delete_cross_connect(&self, interface: &str) -> AdminResult<()> {
            self.log(format!("del xc {interface}"))
        }
        fn add_memif(&self, spec: &MemifSpec) -> AdminResult<u32> {
            self.log(format!("{spec:?}"))?;
            Ok(7)
        }
        fn add_af_packet(&self, spec: &AfPacketSpec) -> AdminResult<u32> {
            Err(AdminError::AlreadyExists(format!(
                "a port named `{}` exists",
                spec.name
            )))
        }
        fn delete_interface(&self, name: &str) -> AdminResult<()> {
            self.log(format!("del {name}"))
        }
        fn clear_counters(&self) -> AdminResult<()> {
            self.log("clear".into())
        }
    }

    #[test]
    fn requests_reach_the_backend_typed_and_refusals_come_back_as_statuses() {
        let dir = scratch("serve");
        let path = dir.join("admin.sock");
        let backend = Arc::new(Recorder::default());
        let server = AdminServer::start(backend.clone(), &path).unwrap();
        let client = AdminClient::connect(&path).unwrap();
        let mut s = client.stub();

        let r = client.block_on(s.show_interfaces(pb::Empty {})).unwrap();
        assert_eq!(r.into_inner().interfaces[0].name, "memif0");
        let r = client
            .block_on(s.show_runtime(pb::ShowRuntimeRequest { per_worker: true }))
            .unwrap();
        assert_eq!(r.into_inner().tsc_hz, 1);
        // The default: no connections.
        let r = client.block_on(s.show_connections(pb::Empty {})).unwrap();
        assert!(r.into_inner().connections.is_empty());

        client
            .block_on(s.add_route(pb::AddRouteRequest {
                prefix: "10.1.2.0/24".into(),
                via: vec![pb::NextHop {
                    next_hop: "10.0.0.2".into(),
                    interface: "memif0".into(),
                }],
            }))
            .unwrap();
        client
            .block_on(s.add_cross_connect(pb::AddCrossConnectRequest {
                a: "a".into(),
                b: "b".into(),
                peer_a: "10.0.0.2".into(),
                peer_b: "10.0.1.2".into(),
            }))
            .unwrap();
        let index = client
            .block_on(s.add_memif(pb::AddMemifRequest {
                name: "m".into(),
                socket: "@q".into(),
                role: "slave".into(),
                ..Default::default()
            }))
            .unwrap()
            .into_inner()
            .index;
        assert_eq!(index, 7);

        let refused = |r: Result<tonic::Response<pb::Empty>, Status>| r.unwrap_err();
        let e = refused(client.block_on(s.delete_route(pb::DeleteRouteRequest {
            prefix: "10.9.0.0/16".into(),
        })));
        assert_eq!(e.code(), tonic::Code::NotFound);
        assert_eq!(e.message(), "no route 10.9.0.0/16");
        let e = client
            .block_on(s.add_af_packet(pb::AddAfPacketRequest {
                name: "x".into(),
                host_interface: "eth0".into(),
                ..Default::default()
            }))
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::AlreadyExists);
        // Syntax errors never reach the backend.
        let invalid = |e: Status| assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        invalid(refused(client.block_on(s.add_route(pb::AddRouteRequest {
            prefix: "10.1.2.0/40".into(),
            via: Vec::new(),
        }))));
        invalid(refused(client.block_on(s.add_neighbor(
            pb::AddNeighborRequest {
                interface: "memif0".into(),
                ip: "10.0.0.2".into(),
                mac: "02:00".into(),
            },
        ))));
        invalid(refused(client.block_on(s.trace_add(pb::TraceAddRequest {
            node: "port-input".into(),
            count: 0,
        }))));
        invalid(refused(client.block_on(s.add_cross_connect(
            pb::AddCrossConnectRequest {
                a: "a".into(),
                b: "b".into(),
                peer_a: "10.0.0.2".into(),
                peer_b: String::new(),
            },
        ))));
        let e = client
            .block_on(s.add_memif(pb::AddMemifRequest {
                name: "m".into(),
                socket: "@q".into(),
                mode: "token-ring".into(),
                ..Default::default()
            }))
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert_eq!(e.message(), "memif mode `token-ring`: ethernet or ip");

        let log = backend.0.lock().unwrap().clone();
        assert_eq!(
            log,
            [
                "route 10.1.2.0/24 [(10.0.0.2, \"memif0\")]".to_string(),
                "xc a b Some(L3Peers { peer_a: 10.0.0.2, peer_b: 10.0.1.2 })".to_string(),
                format!(
                    "{:?}",
                    MemifSpec {
                        name: "m".into(),
                        master: false,
                        socket: "@q".into(),
                        id: 0,
                        ip_mode: false,
                        ring_size: 1024,
                        buffer_size: 2048,
                        secret: None,
                        mac: None,
                        mtu: 1500,
                    }
                ),
            ]
        );
        drop(client);
        server.stop();
        assert!(
            !path.exists(),
            "the socket is removed when the server stops"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
