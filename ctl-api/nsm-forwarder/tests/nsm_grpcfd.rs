//! grpcfd on Quiver's NSM socket with a recording data path: the data path gets the
//! `/proc/self/fd/<n>` of the file the client passed for an `inode://` URL; the fd lives as
//! long as the NSM connection (closed at expiry here; at Close in `tests/nsm_grpcfd.rs` and
//! `nsm_mtls.rs`), and fds passed but never used close with their transport connection.
//!
//! Quiver as the client: the endpoint's answer names its file `inode://…` and passes the fd
//! back on Quiver's channel; Quiver builds the endpoint side with it, holds it while the
//! connection lives and sends the endpoint's own answer back on refresh and Close. An answer
//! naming a file it did not pass is refused with nothing left. A registry that passes the
//! endpoint's socket by fd gets it dialed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use grpc_unix::InodeKey;
use nsm_forwarder::dataplane::{KernelSpec, MemifSpec};
use nsm_forwarder::path::timestamp;
use nsm_forwarder::server::bind;
use nsm_forwarder::testing::TestEndpoint;
use nsm_forwarder::{
    BackendError, EndpointDiscovery, LinkEvents, NsmBackend, NsmConfig, NsmService, PortName,
    RegistryDiscovery, StaticEndpoint,
};
use nsm_proto::connection::{Connection, Mechanism, Path, PathSegment, State};
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use nsm_proto::networkservice::NetworkServiceRequest;
use nsm_proto::registry::network_service_endpoint_registry_server::{
    NetworkServiceEndpointRegistry, NetworkServiceEndpointRegistryServer,
};
use nsm_proto::registry::{
    NetworkServiceEndpoint, NetworkServiceEndpointQuery, NetworkServiceEndpointResponse,
};
use tonic::{Request, Response, Status};

/// Records the namespace path of each KERNEL port, by port name.
#[derive(Default)]
struct RecordingDp {
    kernel: Mutex<BTreeMap<String, (String, PathBuf)>>,
}

impl NsmBackend for RecordingDp {
    fn create_memif(&self, _: &str, _: &MemifSpec) -> Result<(), BackendError> {
        Err(BackendError::InvalidArgument("KERNEL only here".into()))
    }
    fn create_kernel(&self, owner: &str, spec: &KernelSpec) -> Result<(), BackendError> {
        // What the real data path does first: open the namespace at the path.
        std::fs::metadata(&spec.netns)
            .map_err(|e| BackendError::NotFound(format!("{:?}: {e}", spec.netns)))?;
        self.kernel
            .lock()
            .unwrap()
            .insert(spec.name.0.clone(), (owner.to_string(), spec.netns.clone()));
        Ok(())
    }
    fn remove_port(&self, _: &str, port: &PortName) -> Result<(), BackendError> {
        self.kernel.lock().unwrap().remove(&port.0);
        Ok(())
    }
    fn l2_cross_connect(&self, _: &str, _: &PortName, _: &PortName) -> Result<(), BackendError> {
        Ok(())
    }
    fn l3_cross_connect(
        &self,
        _: &str,
        _: &PortName,
        _: &PortName,
        _: nsm_forwarder::L3NextHops,
        _: nsm_forwarder::L3NextHops,
    ) -> Result<(), BackendError> {
        Ok(())
    }
    fn disconnect(&self, _: &str, _: &PortName) -> Result<(), BackendError> {
        Ok(())
    }
    fn remove_owned(&self, owner: &str) -> Result<(), BackendError> {
        self.kernel.lock().unwrap().retain(|_, (o, _)| o != owner);
        Ok(())
    }
    fn owners(&self) -> Result<Vec<String>, BackendError> {
        Ok(self
            .kernel
            .lock()
            .unwrap()
            .values()
            .map(|(o, _)| o.clone())
            .collect())
    }
    fn watch_links(&self, _: LinkEvents) {}
}

/// The tests compare this process's whole fd table before and after, which a test running
/// beside them in another thread would change: they run one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How many of this process's fds (the server's included) refer to `key`.
fn open_fds_of(key: InodeKey) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
        .filter(|m| m.dev() == key.dev && m.ino() == key.ino)
        .count()
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    wait_until(what, || if cond() { Ok(()) } else { Err(()) }).await;
}

/// Polls `check` until it passes (10 s at most); a failure shows its last `Err`.
async fn wait_until<E: std::fmt::Debug>(what: &str, mut check: impl FnMut() -> Result<(), E>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(why) = check() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {why:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn kernel(params: &[(&str, &str)]) -> Mechanism {
    Mechanism {
        cls: "LOCAL".into(),
        r#type: "KERNEL".into(),
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
    }
}

fn request(id: &str, url: &str, expires_in: Duration) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            id: id.into(),
            network_service: "fd".into(),
            network_service_endpoint_name: "nse".into(),
            payload: "ETHERNET".into(),
            path: Some(Path {
                index: 0,
                path_segments: vec![PathSegment {
                    name: "nsc".into(),
                    id: id.into(),
                    expires: Some(timestamp(SystemTime::now() + expires_in)),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        mechanism_preferences: vec![kernel(&[("inodeURL", url), ("name", "nsm0")])],
    }
}

struct Harness {
    dir: tempfile::TempDir,
    service: NsmService,
    dp: Arc<RecordingDp>,
    listen_on: String,
    nse: TestEndpoint,
    _stop: Vec<tokio::sync::oneshot::Sender<()>>,
}

/// How the test endpoint answers, and how Quiver finds it.
struct Setup {
    /// The endpoint's `inodeURL`.
    nse_netns: String,
    /// It passes the files of its `file://` URLs by fd (grpcfd).
    nse_passes_fds: bool,
    /// Quiver finds it through a registry that passes its socket by fd.
    registry: bool,
}

async fn harness() -> Harness {
    harness_with(Setup {
        nse_netns: "file:///proc/self/ns/net".into(),
        nse_passes_fds: false,
        registry: false,
    })
    .await
}

async fn harness_with(setup: Setup) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let nse_sock = dir.path().join("nse.sock");
    // It runs a runtime of its own: started off this one.
    let sock = nse_sock.clone();
    let nse = tokio::task::spawn_blocking(move || {
        let answers = vec![kernel(&[("inodeURL", &setup.nse_netns), ("name", "nse0")])];
        if setup.nse_passes_fds {
            TestEndpoint::start_passing_fds(&sock, "nse", answers)
        } else {
            TestEndpoint::start(&sock, "nse", answers)
        }
    })
    .await
    .unwrap()
    .unwrap();
    let listen_on = format!("unix://{}", dir.path().join("quiver.sock").display());
    let mut cfg = NsmConfig {
        name: "quiver".into(),
        listen_on: listen_on.clone(),
        reconcile_at_start: false,
        ..NsmConfig::default()
    };
    let mut stop = Vec::new();
    let discovery: Arc<dyn EndpointDiscovery> = if setup.registry {
        let registry = dir.path().join("registry.sock");
        cfg.connect_to = format!("unix://{}", registry.display());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        stop.push(tx);
        let router = tonic::transport::Server::builder().add_service(
            NetworkServiceEndpointRegistryServer::new(PassingRegistry {
                name: "nse".into(),
                socket: nse_sock.clone(),
            }),
        );
        tokio::spawn(spiffe_identity::serve(
            router,
            bind(&cfg.connect_to).unwrap(),
            None,
            async {
                let _ = rx.await;
            },
        ));
        Arc::new(RegistryDiscovery::new(&cfg))
    } else {
        Arc::new(StaticEndpoint(format!("unix://{}", nse_sock.display())))
    };
    let dp = Arc::new(RecordingDp::default());
    let service = NsmService::new(cfg.clone(), dp.clone(), discovery);
    let listener = bind(&listen_on).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    stop.push(tx);
    tokio::spawn(service.clone().serve_on(listener, async {
        let _ = rx.await;
    }));
    Harness {
        dir,
        service,
        dp,
        listen_on,
        nse,
        _stop: stop,
    }
}

/// nsmgr's registry as NSM's grpcfd has it: `Find` of `name` answers with the endpoint's
/// socket as `inode://<dev>/<ino>`, its fd passed with the answer.
struct PassingRegistry {
    name: String,
    socket: PathBuf,
}

#[tonic::async_trait]
impl NetworkServiceEndpointRegistry for PassingRegistry {
    async fn register(
        &self,
        request: Request<NetworkServiceEndpoint>,
    ) -> Result<Response<NetworkServiceEndpoint>, Status> {
        Ok(Response::new(request.into_inner()))
    }

    type FindStream =
        tokio_stream::Iter<std::vec::IntoIter<Result<NetworkServiceEndpointResponse, Status>>>;

    async fn find(
        &self,
        request: Request<NetworkServiceEndpointQuery>,
    ) -> Result<Response<Self::FindStream>, Status> {
        let sender = spiffe_identity::ConnectionInfo::from_request(&request)
            .expect("served over fd-passing streams")
            .sender
            .clone();
        let query = request.into_inner();
        let mut answers = Vec::new();
        if query.network_service_endpoint.map(|e| e.name) == Some(self.name.clone()) {
            let url = sender
                .send_file(&self.socket)
                .map_err(|e| Status::internal(e.to_string()))?
                .to_string();
            answers.push(Ok(NetworkServiceEndpointResponse {
                network_service_endpoint: Some(NetworkServiceEndpoint {
                    name: self.name.clone(),
                    url,
                    ..Default::default()
                }),
                deleted: false,
            }));
        }
        Ok(Response::new(tokio_stream::iter(answers)))
    }

    async fn unregister(&self, _: Request<NetworkServiceEndpoint>) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }
}

impl Harness {
    /// A file of its own (a unique inode) to pass.
    fn file(&self, name: &str) -> (PathBuf, InodeKey) {
        let path = self.dir.path().join(name);
        std::fs::write(&path, b"").unwrap();
        let m = std::fs::metadata(&path).unwrap();
        (
            path,
            InodeKey {
                dev: m.dev(),
                ino: m.ino(),
            },
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_path_gets_the_passed_fd_which_closes_when_the_connection_expires() {
    let _one = ONE_AT_A_TIME.lock().await;
    // The endpoint passes its "namespace" by fd too: both close at expiry.
    let files = tempfile::tempdir().unwrap();
    let (nse_url, nse_key) = endpoint_file(&files);
    let h = harness_with(Setup {
        nse_netns: nse_url,
        nse_passes_fds: true,
        registry: false,
    })
    .await;
    let (path, key) = h.file("ns");
    let channel = spiffe_identity::connect(&h.listen_on, None).await.unwrap();
    let mut client = NetworkServiceClient::new(channel.channel());
    assert_eq!(channel.fds().send_file(&path).unwrap(), key);
    // The connection expires soon: Quiver closes it by itself, and the fd with it.
    let answer = client
        .request(request("x1", &key.to_string(), Duration::from_millis(500)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.state, State::Up as i32);
    {
        let ports = h.dp.kernel.lock().unwrap();
        let (_, netns) = ports
            .values()
            .find(|(o, p)| o == "x1" && p.starts_with("/proc/self/fd/"))
            .expect("the client's port in the namespace passed by fd");
        let m = std::fs::metadata(netns).unwrap();
        assert_eq!((m.dev(), m.ino()), (key.dev, key.ino), "{netns:?}");
    }
    assert_eq!(open_fds_of(key), 1, "Quiver holds the fd");
    assert_eq!(h.service.held_fds().len(), 1);
    assert_eq!(open_fds_of(nse_key), 1, "and the endpoint's");

    wait_for("the connection to expire", || {
        h.service.core().connection_count() == 0
    })
    .await;
    wait_for("the passed fd to be closed", || open_fds_of(key) == 0).await;
    assert!(h.service.held_fds().is_empty());
    assert_eq!(
        open_fds_of(nse_key),
        0,
        "the endpoint's fd closed at expiry"
    );
    assert_eq!(h.nse.log().closes.len(), 1, "closed toward the endpoint");
    drop(channel);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fds_passed_and_never_used_close_with_their_transport_connection() {
    let _one = ONE_AT_A_TIME.lock().await;
    let h = harness().await;
    let (used_path, used) = h.file("used");
    let (unused_path, unused) = h.file("unused");
    let channel = spiffe_identity::connect(&h.listen_on, None).await.unwrap();
    let mut client = NetworkServiceClient::new(channel.channel());
    channel.fds().send_file(&used_path).unwrap();
    channel.fds().send_file(&unused_path).unwrap();
    let answer = client
        .request(request("y1", &used.to_string(), Duration::from_secs(600)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answer.mechanism.as_ref().unwrap().parameters["inodeURL"],
        used.to_string()
    );
    assert_eq!(open_fds_of(unused), 1, "held by the transport connection");
    drop(client);
    drop(channel);
    wait_for("the unused fd to close with its connection", || {
        open_fds_of(unused) == 0
    })
    .await;
    assert_eq!(open_fds_of(used), 1, "the connection still uses its fd");
    assert_eq!(h.service.core().connection_count(), 1);
}

/// A file standing for the endpoint's namespace: its `file://` URL and identity.
fn endpoint_file(dir: &tempfile::TempDir) -> (String, InodeKey) {
    let path = dir.path().join("nse-netns");
    std::fs::write(&path, b"").unwrap();
    let m = std::fs::metadata(&path).unwrap();
    (
        format!("file://{}", path.display()),
        InodeKey {
            dev: m.dev(),
            ino: m.ino(),
        },
    )
}

/// How many fds this process has open.
/// This process's open fds: (number, what it refers to), without the one the listing itself
/// opens.
fn fd_table() -> BTreeSet<(String, PathBuf)> {
    let listing = PathBuf::from(format!("/proc/{}/fd", std::process::id()));
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), target))
        })
        .filter(|(_, target)| *target != listing)
        // An async runtime's own epoll, eventfd and timerfd descriptors: the runtime of the
        // test before this one may still be shutting down while this one starts (its end comes
        // after the lock that keeps these tests apart is let go). The fds these tests follow
        // are namespaces and sockets, never these.
        .filter(|(_, target)| !target.to_string_lossy().starts_with("anon_inode:"))
        .collect()
}

/// [`fd_table`] once `client`'s connection to Quiver is accepted on both sides: after one
/// refused Request (no connection: InvalidArgument, nothing built), since the server may accept
/// a connection after the client has it.
async fn fd_table_when_connected(
    client: &mut NetworkServiceClient<tonic::transport::Channel>,
) -> BTreeSet<(String, PathBuf)> {
    let e = client
        .request(NetworkServiceRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    fd_table()
}

/// Waits until the fd table is `before` again; fails naming the fds opened since and still
/// open, and those of `before` closed since.
async fn wait_for_fds_as_before(before: &BTreeSet<(String, PathBuf)>) {
    wait_until("the fds to be back to where they were", || {
        let now = fd_table();
        if now == *before {
            return Ok(());
        }
        Err(format!(
            "still open {:?}, closed {:?}",
            now.difference(before).collect::<Vec<_>>(),
            before.difference(&now).collect::<Vec<_>>()
        ))
    })
    .await;
}

/// The namespace path of the KERNEL port `port` of connection `owner`.
fn netns_of(h: &Harness, owner: &str, port: &str) -> PathBuf {
    let ports = h.dp.kernel.lock().unwrap();
    let (o, netns) = ports.get(port).expect("the port is built");
    assert_eq!(o, owner);
    netns.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_side_is_built_with_the_fd_the_endpoint_passed_until_close() {
    let _one = ONE_AT_A_TIME.lock().await;
    // The endpoint's "namespace": a file of the test's, passed by fd with each answer.
    let files = tempfile::tempdir().unwrap();
    let (nse_url, nse_key) = endpoint_file(&files);
    let h = harness_with(Setup {
        nse_netns: nse_url,
        nse_passes_fds: true,
        registry: false,
    })
    .await;
    let (client_ns, _) = h.file("client-netns");
    let client_url = format!("file://{}", client_ns.display());
    let channel = spiffe_identity::connect(&h.listen_on, None).await.unwrap();
    let mut client = NetworkServiceClient::new(channel.channel());
    let before = fd_table_when_connected(&mut client).await;
    assert_eq!(open_fds_of(nse_key), 0);

    let answer = client
        .request(request("e1", &client_url, Duration::from_secs(600)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.state, State::Up as i32);
    let endpoint_ns = netns_of(&h, "e1", "nsm-e1-endpoint");
    assert!(
        endpoint_ns.starts_with("/proc/self/fd/"),
        "the endpoint side is built in the passed fd: {endpoint_ns:?}"
    );
    let m = std::fs::metadata(&endpoint_ns).unwrap();
    assert_eq!((m.dev(), m.ino()), (nse_key.dev, nse_key.ino));
    assert_eq!(open_fds_of(nse_key), 1, "Quiver holds the endpoint's fd");

    // A refresh: the endpoint gets its own answer back (inode://), passes the fd again;
    // Quiver keeps the one it holds, the same path, and closes the copy.
    let refreshed = client
        .request(NetworkServiceRequest {
            connection: Some(answer.clone()),
            mechanism_preferences: request("e1", &client_url, Duration::from_secs(600))
                .mechanism_preferences,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(refreshed.state, State::Up as i32);
    let log = h.nse.log();
    assert_eq!(log.requests.len(), 2);
    let sent_back = log.requests[1].connection.as_ref().unwrap();
    assert_eq!(
        sent_back.mechanism.as_ref().unwrap().parameters["inodeURL"],
        nse_key.to_string(),
        "the endpoint's answer as it wrote it"
    );
    assert_eq!(netns_of(&h, "e1", "nsm-e1-endpoint"), endpoint_ns);
    assert_eq!(open_fds_of(nse_key), 1, "one fd, the copy closed");

    client.close(refreshed).await.unwrap();
    let closes = h.nse.log().closes;
    assert_eq!(closes.len(), 1, "closed toward the endpoint");
    assert_eq!(
        closes[0].mechanism.as_ref().unwrap().parameters["inodeURL"],
        nse_key.to_string()
    );
    assert!(h.dp.kernel.lock().unwrap().is_empty(), "no port left");
    assert_eq!(open_fds_of(nse_key), 0, "the endpoint's fd closed at Close");
    // Quiver's channel to the endpoint idles out too: every fd is back.
    wait_for_fds_as_before(&before).await;
    drop(client);
    drop(channel);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_answer_naming_a_file_it_did_not_pass_is_refused_and_leaves_nothing() {
    let _one = ONE_AT_A_TIME.lock().await;
    let files = tempfile::tempdir().unwrap();
    let (_, nse_key) = endpoint_file(&files);
    // The endpoint names the file by inode:// and passes nothing.
    let h = harness_with(Setup {
        nse_netns: nse_key.to_string(),
        nse_passes_fds: false,
        registry: false,
    })
    .await;
    let (client_ns, _) = h.file("client-netns");
    let channel = spiffe_identity::connect(&h.listen_on, None).await.unwrap();
    let mut client = NetworkServiceClient::new(channel.channel());
    let before = fd_table_when_connected(&mut client).await;
    let e = client
        .request(request(
            "n1",
            &format!("file://{}", client_ns.display()),
            Duration::from_secs(600),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains(&format!(
            "the endpoint answered inodeURL = {nse_key} but passed no file descriptor"
        )),
        "{e:?}"
    );
    assert!(h.dp.kernel.lock().unwrap().is_empty(), "no port left");
    assert_eq!(h.service.core().connection_count(), 0);
    let log = h.nse.log();
    assert_eq!(log.requests.len(), 1);
    assert_eq!(log.closes.len(), 1, "the endpoint's connection was closed");
    wait_for_fds_as_before(&before).await;
    drop(client);
    drop(channel);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_socket_the_registry_passes_by_fd_is_dialed() {
    let _one = ONE_AT_A_TIME.lock().await;
    let h = harness_with(Setup {
        nse_netns: "file:///proc/self/ns/net".into(),
        nse_passes_fds: false,
        registry: true,
    })
    .await;
    let (client_ns, _) = h.file("client-netns");
    let channel = spiffe_identity::connect(&h.listen_on, None).await.unwrap();
    let mut client = NetworkServiceClient::new(channel.channel());
    let answer = client
        .request(request(
            "r1",
            &format!("file://{}", client_ns.display()),
            Duration::from_secs(600),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.state, State::Up as i32);
    assert_eq!(
        h.nse.log().requests.len(),
        1,
        "the endpoint found by its passed socket was Requested"
    );
    assert_eq!(
        netns_of(&h, "r1", "nsm-r1-endpoint"),
        PathBuf::from("/proc/self/ns/net")
    );
    client.close(answer).await.unwrap();
    assert_eq!(h.nse.log().closes.len(), 1, "and closed there");
    drop(client);
    drop(channel);
}
