//! grpcfd on Quiver's NSM socket with a recording data path: the data path gets the
//! `/proc/self/fd/<n>` of the file the client passed for an `inode://` URL; the fd lives as
//! long as the NSM connection (closed at expiry here; at Close in `tests/nsm_grpcfd.rs` and
//! `nsm_mtls.rs`), and fds passed but never used close with their transport connection.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use ctl_api::grpcfd::InodeKey;
use ctl_api::nsm::dataplane::{KernelSpec, MemifSpec};
use ctl_api::nsm::path::timestamp;
use ctl_api::nsm::server::bind;
use ctl_api::nsm::testing::TestEndpoint;
use ctl_api::nsm::{
    Dataplane, DataplaneError, LinkEvents, NsmConfig, NsmService, PortName, StaticEndpoint,
};
use ctl_api::proto::connection::{Connection, Mechanism, Path, PathSegment, State};
use ctl_api::proto::networkservice::network_service_client::NetworkServiceClient;
use ctl_api::proto::networkservice::NetworkServiceRequest;

/// Records the namespace path of each KERNEL port, by port name.
#[derive(Default)]
struct RecordingDp {
    kernel: Mutex<BTreeMap<String, (String, PathBuf)>>,
}

impl Dataplane for RecordingDp {
    fn create_memif(&self, _: &str, _: &MemifSpec) -> Result<(), DataplaneError> {
        Err(DataplaneError::InvalidArgument("KERNEL only here".into()))
    }
    fn create_kernel(&self, owner: &str, spec: &KernelSpec) -> Result<(), DataplaneError> {
        // What the real data path does first: open the namespace at the path.
        std::fs::metadata(&spec.netns)
            .map_err(|e| DataplaneError::NotFound(format!("{:?}: {e}", spec.netns)))?;
        self.kernel
            .lock()
            .unwrap()
            .insert(spec.name.0.clone(), (owner.to_string(), spec.netns.clone()));
        Ok(())
    }
    fn remove_port(&self, _: &str, port: &PortName) -> Result<(), DataplaneError> {
        self.kernel.lock().unwrap().remove(&port.0);
        Ok(())
    }
    fn l2_cross_connect(&self, _: &str, _: &PortName, _: &PortName) -> Result<(), DataplaneError> {
        Ok(())
    }
    fn l3_cross_connect(
        &self,
        _: &str,
        _: &PortName,
        _: &PortName,
        _: Option<IpAddr>,
        _: Option<IpAddr>,
    ) -> Result<(), DataplaneError> {
        Ok(())
    }
    fn disconnect(&self, _: &str, _: &PortName) -> Result<(), DataplaneError> {
        Ok(())
    }
    fn remove_owned(&self, owner: &str) -> Result<(), DataplaneError> {
        self.kernel.lock().unwrap().retain(|_, (o, _)| o != owner);
        Ok(())
    }
    fn owners(&self) -> Result<Vec<String>, DataplaneError> {
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

/// How many of this process's fds (the server's included) refer to `key`.
fn open_fds_of(key: InodeKey) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
        .filter(|m| m.dev() == key.dev && m.ino() == key.ino)
        .count()
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
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
    _nse: TestEndpoint,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let nse_sock = dir.path().join("nse.sock");
    // It runs a runtime of its own: started off this one.
    let sock = nse_sock.clone();
    let nse = tokio::task::spawn_blocking(move || {
        TestEndpoint::start(
            &sock,
            "nse",
            vec![kernel(&[
                ("inodeURL", "file:///proc/self/ns/net"),
                ("name", "nse0"),
            ])],
        )
    })
    .await
    .unwrap()
    .unwrap();
    let listen_on = format!("unix://{}", dir.path().join("quiver.sock").display());
    let cfg = NsmConfig {
        name: "quiver".into(),
        listen_on: listen_on.clone(),
        reconcile_at_start: false,
        ..NsmConfig::default()
    };
    let dp = Arc::new(RecordingDp::default());
    let service = NsmService::new(
        cfg.clone(),
        dp.clone(),
        Arc::new(StaticEndpoint(format!("unix://{}", nse_sock.display()))),
    );
    let listener = bind(&listen_on).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(service.clone().serve_on(listener, async {
        let _ = rx.await;
    }));
    Harness {
        dir,
        service,
        dp,
        listen_on,
        _nse: nse,
        _stop: tx,
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
    let h = harness().await;
    let (path, key) = h.file("ns");
    let channel = ctl_api::spiffe::connect(&h.listen_on, None).await.unwrap();
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

    wait_for("the connection to expire", || {
        h.service.core().connection_count() == 0
    })
    .await;
    wait_for("the passed fd to be closed", || open_fds_of(key) == 0).await;
    assert!(h.service.held_fds().is_empty());
    drop(channel);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fds_passed_and_never_used_close_with_their_transport_connection() {
    let h = harness().await;
    let (used_path, used) = h.file("used");
    let (unused_path, unused) = h.file("unused");
    let channel = ctl_api::spiffe::connect(&h.listen_on, None).await.unwrap();
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
