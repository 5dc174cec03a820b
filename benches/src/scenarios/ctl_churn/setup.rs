//! `ctl-churn`'s setting up: root, the forwarder, the endpoints and the NSM server, the steady
//! connection and its traffic.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, IdlePolicy, WorkerConfig};
use nsm_forwarder::testing::{BlockingClient, TestEndpoint};
use nsm_forwarder::{NsmConfig, NsmHandle};
use nsm_proto::connection::{Connection, State};
use quiver::control::nsm::ForwarderDataplane;
use quiver::control::owner::{ConfigOwner, Control};
use quiver::{Config, Forwarder};

use super::mix::KernelEnds;
use super::nsm::{mech, request};
use super::options::Options;
use super::peers::{run_peers, PeerStats};
use super::timed::{ByName, Timed};
use super::util::wait_until;

/// What the run talks to: the forwarder and its owner, the NSM server with its endpoints, a
/// client. Fields drop in this order on an error; [`Setup::tear_down`] is the orderly way.
pub(super) struct Setup {
    pub(super) client: BlockingClient,
    pub(super) server: NsmHandle,
    /// What the server calls, timed.
    pub(super) dp: Arc<Timed>,
    pub(super) churn_nse: TestEndpoint,
    pub(super) steady_nse: TestEndpoint,
    pub(super) fwd: Control,
    pub(super) owner: ConfigOwner,
    pub(super) pool: Arc<BufferPool>,
    /// The pool's free buffers before the forwarder forwarded anything.
    pub(super) start_free: usize,
    /// The steady endpoint's memif socket.
    pub(super) steady_memif: String,
    /// The churn endpoint's memif socket.
    pub(super) churn_memif: String,
    /// The server's socket (`unix://…`), for more clients.
    pub(super) listen: String,
}

impl Setup {
    /// Starts the forwarder (one worker, ordinary pages), the endpoints (NSEs) and the NSM
    /// server, and connects a client.
    pub(super) fn start(
        dir: &Path,
        netns: &str,
        ends: Option<&KernelEnds>,
        opts: &Options,
        pid: u32,
    ) -> Result<Setup, String> {
        let (pool, owner) = start_forwarder()?;
        let start_free = pool.free_count();
        let fwd = owner.control();
        let steady_memif = format!("@quiver-bench-steady-nse-{pid}");
        let churn_memif = format!("@quiver-bench-churn-nse-{pid}");
        let (steady_nse, churn_nse, dp, server, listen) =
            start_nsm(dir, netns, ends, &fwd, opts, &steady_memif, &churn_memif)?;
        let client = BlockingClient::connect(&listen).map_err(|e| e.to_string())?;
        Ok(Setup {
            client,
            server,
            dp,
            churn_nse,
            steady_nse,
            fwd,
            owner,
            pool,
            start_free,
            steady_memif,
            churn_memif,
            listen,
        })
    }

    /// The names of the forwarder's ports.
    pub(super) fn port_names(&self) -> Vec<String> {
        self.fwd
            .view()
            .ports()
            .iter()
            .map(|p| p.name.clone())
            .collect::<Vec<_>>()
    }

    /// Stops everything in order (the client, the server, the endpoints, the forwarder);
    /// returns the pool's free buffers after.
    pub(super) fn tear_down(self) -> Result<usize, String> {
        let Setup {
            client,
            server,
            dp,
            churn_nse,
            steady_nse,
            fwd,
            owner,
            pool,
            ..
        } = self;
        drop(client);
        drop(server);
        drop(dp);
        drop(steady_nse);
        drop(churn_nse);
        drop(fwd);
        owner
            .stop()
            .map_err(|e| format!("the configuration owner: {e}"))?
            .stop();
        Ok(pool.free_count())
    }
}

/// `ctl-churn` needs root.
pub(super) fn check_root() -> Result<(), String> {
    // /proc/self belongs to the process's effective user.
    let euid = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata("/proc/self").map_err(|e| e.to_string())?,
    );
    if euid != 0 {
        return Err(
            "ctl-churn needs root: Quiver makes each memif socket inside the client's \
                    network namespace (setns, CAP_SYS_ADMIN)"
                .into(),
        );
    }
    Ok(())
}

/// The forwarder: one worker, ordinary pages, owned as in the daemon (housekeeping every
/// millisecond); and its buffer pool.
fn start_forwarder() -> Result<(Arc<BufferPool>, ConfigOwner), String> {
    let cfg = Config::parse("[buffers]\nhugepages = \"never\"\n").map_err(|e| e.to_string())?;
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 16384,
        hugepages: HugepagePolicy::Never,
        ..BufferPoolConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let workers = WorkerConfig {
        cores: vec![0],
        idle: IdlePolicy::ADAPTIVE,
    };
    // Owned as in the daemon, housekeeping every millisecond.
    let owner = ConfigOwner::start(
        Forwarder::start(&cfg, &workers, pool.clone()).map_err(|e| e.to_string())?,
        Duration::from_millis(1),
    );
    Ok((pool, owner))
}

/// The endpoints (NSEs) and the NSM server; what the server calls, timed; its address.
fn start_nsm(
    dir: &Path,
    netns: &str,
    ends: Option<&KernelEnds>,
    fwd: &Control,
    opts: &Options,
    steady_memif: &str,
    churn_memif: &str,
) -> Result<(TestEndpoint, TestEndpoint, Arc<Timed>, NsmHandle, String), String> {
    let steady_sock = dir.join("steady-nse.sock");
    let churn_sock = dir.join("churn-nse.sock");
    // Each answers with the mechanism Quiver offers first (the client's type): MEMIF on its
    // socket, or KERNEL in the endpoint's namespace, the interface's name left to Quiver.
    let endpoint = |sock: &Path, name: &str, memif: &str| {
        let mut answers = vec![mech("MEMIF", &[("inodeURL", netns), ("socketfile", memif)])];
        if let Some(e) = ends {
            answers.push(mech("KERNEL", &[("inodeURL", &e.nse.url())]));
        }
        TestEndpoint::start(sock, name, answers).map_err(|e| format!("endpoint {name}: {e}"))
    };
    let steady_nse = endpoint(&steady_sock, "steady-nse", steady_memif)?;
    let churn_nse = endpoint(&churn_sock, "churn-nse", churn_memif)?;
    let discovery = ByName(HashMap::from([
        (
            "steady-nse".to_string(),
            format!("unix://{}", steady_sock.display()),
        ),
        (
            "churn-nse".to_string(),
            format!("unix://{}", churn_sock.display()),
        ),
    ]));
    let listen = format!("unix://{}", dir.join("quiver.sock").display());
    let dp = Arc::new(Timed {
        inner: ForwarderDataplane::new(fwd.clone()),
        times: Mutex::new(HashMap::new()),
        client_side_done: Mutex::new(None),
    });
    dp.inner
        .set_kernel_backend(opts.kernel_backend)
        .map_err(|e| e.to_string())?;
    let server = NsmHandle::spawn(
        NsmConfig {
            name: "quiver".into(),
            listen_on: listen.clone(),
            // Reconciliation removes every quiver-tagged veth host-wide: not in a benchmark.
            reconcile_at_start: false,
            ..NsmConfig::default()
        },
        dp.clone(),
        Arc::new(discovery),
        2,
    )
    .map_err(|e| e.to_string())?;
    Ok((steady_nse, churn_nse, dp, server, listen))
}

/// The steady connection, Requested, and its memif peers sending through it; traffic is
/// flowing when this returns.
pub(super) fn start_steady(
    client: &mut BlockingClient,
    netns: &str,
    pid: u32,
    steady_memif: &str,
    churn_memif: &str,
) -> Result<(Connection, Arc<PeerStats>, PeersThread), String> {
    let steady_id = format!("steady-{pid}");
    let steady = client
        .request(request(&steady_id, "steady-nse", netns))
        .map_err(|e| format!("steady Request: {e}"))?;
    if steady.state != State::Up as i32 {
        return Err(format!("steady connection not UP: {steady:?}"));
    }
    let nsc_socket = steady
        .mechanism
        .as_ref()
        .and_then(|m| m.parameters.get("socketfile").cloned())
        .ok_or("the steady connection's answer has no socketfile")?;
    let stats = Arc::new(PeerStats::default());
    let peers = {
        let (s, nse, churn) = (
            stats.clone(),
            steady_memif.to_string(),
            churn_memif.to_string(),
        );
        std::thread::Builder::new()
            .name("churn-peers".into())
            .spawn(move || run_peers(s, nsc_socket, nse, churn))
            .map_err(|e| e.to_string())?
    };
    if !wait_until(20, || {
        stats.up.load(Ordering::Relaxed) || peers.is_finished()
    }) {
        return Err("the steady connection's memifs did not come up in 20 s".into());
    }
    if peers.is_finished() {
        return Err(peers
            .join()
            .map_err(|_| "the memif peers panicked".to_string())?
            .err()
            .unwrap_or_else(|| "the memif peers stopped".into()));
    }
    stats.sending.store(true, Ordering::Relaxed);
    // Traffic must be flowing before the churn starts.
    wait_until(5, || stats.unique.load(Ordering::Relaxed) > 0);
    Ok((steady, stats, peers))
}

/// The thread running the memif peers.
pub(super) type PeersThread = JoinHandle<Result<(), String>>;
