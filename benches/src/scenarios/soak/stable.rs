//! The stable connections: Requested once, refreshed on a timer, Requested again after Quiver
//! comes back from a kill (as NSM heals), each carrying numbered frames the whole run (see
//! `flow` and `peers`): one MEMIF on both sides, one KERNEL on both sides.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nsm_forwarder::testing::BlockingClient;
use nsm_proto::connection::{Connection, State};

use super::churn::DEADLINE;
use super::flow::Flow;
use super::host::{wait_for, Netns};
use super::nsm::{first_request, refresh_of, ClientSide, Mech};
use super::peers::{kernel_peers, memif_peers};

/// Frames per second on the MEMIF connection.
const MEMIF_RATE: u64 = 10_000;
/// Frames per second on the KERNEL connection.
const KERNEL_RATE: u64 = 2_000;

/// One stable connection.
pub struct StableConn {
    /// Its id.
    pub id: String,
    endpoint: &'static str,
    side: ClientSide,
    answer: Option<Connection>,
    /// Its traffic.
    pub flow: Arc<Flow>,
}

/// The stable connections and their peers.
pub struct Stable {
    /// The connections.
    pub conns: Vec<StableConn>,
    nsm_url: String,
    grpc: Option<BlockingClient>,
    peers: Vec<JoinHandle<Result<(), String>>>,
    /// Refreshes sent.
    pub refreshes: u64,
    /// Re-Requests after a kill of Quiver.
    pub heals: u64,
    /// Refreshes and heals that failed, with why.
    pub failures: Vec<String>,
}

impl Stable {
    /// Requests both connections from the client namespace `st` (endpoints `stm`, `stk`
    /// building in `nse`; `tag` names the NSE's memif socket), starts their peers and their
    /// traffic.
    pub fn start(
        nsm_url: &str,
        st: &Netns,
        nse: &Netns,
        tag: &str,
        id_prefix: &str,
    ) -> Result<Stable, String> {
        let side = |mech, ifname: &str| ClientSide {
            ns_url: st.url(),
            mech,
            ifname: ifname.into(),
        };
        let mut s = Stable {
            conns: vec![
                StableConn {
                    id: format!("{id_prefix}st-memif"),
                    endpoint: "stm",
                    side: side(Mech::Memif, ""),
                    answer: None,
                    flow: Arc::new(Flow::new("memif", MEMIF_RATE)),
                },
                StableConn {
                    id: format!("{id_prefix}st-kernel"),
                    endpoint: "stk",
                    side: side(Mech::Kernel, "sk-c"),
                    answer: None,
                    flow: Arc::new(Flow::new("kernel", KERNEL_RATE)),
                },
            ],
            nsm_url: nsm_url.into(),
            grpc: None,
            peers: Vec::new(),
            refreshes: 0,
            heals: 0,
            failures: Vec::new(),
        };
        for i in 0..s.conns.len() {
            s.request(i, false)?;
        }
        let socketfile = s.conns[0]
            .answer
            .as_ref()
            .and_then(|a| a.mechanism.as_ref())
            .and_then(|m| m.parameters.get("socketfile").cloned())
            .ok_or("the stable MEMIF connection's answer has no socketfile")?;
        let (f0, f1) = (s.conns[0].flow.clone(), s.conns[1].flow.clone());
        let (nse_path, st_path, nse_sock) = (nse.path(), st.path(), format!("@{tag}-stm"));
        let spawn = |name: &str, f: Box<dyn FnOnce() -> Result<(), String> + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|e| e.to_string())
        };
        s.peers.push(spawn(
            "soak-memif",
            Box::new(move || memif_peers(f0, nse_path, nse_sock, st_path, socketfile)),
        )?);
        let (f1c, nse_path, st_path) = (f1.clone(), nse.path(), st.path());
        s.peers.push(spawn(
            "soak-kernel",
            Box::new(move || kernel_peers(f1c, nse_path, "sk-e", st_path, "sk-c")),
        )?);
        s.wait_up(Duration::from_secs(30))?;
        s.resume();
        let flowing = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
            s.conns
                .iter()
                .all(|c| c.flow.unique.load(Ordering::Relaxed) > 0)
        });
        if !flowing {
            return Err(format!(
                "no frame arrived on the stable connections in 10 s: {} / {}",
                s.conns[0].flow.report(),
                s.conns[1].flow.report()
            ));
        }
        Ok(s)
    }

    /// The connections' ids.
    pub fn ids(&self) -> Vec<String> {
        self.conns.iter().map(|c| c.id.clone()).collect()
    }

    fn grpc(&mut self) -> Result<&mut BlockingClient, String> {
        if self.grpc.is_none() {
            self.grpc = Some(BlockingClient::connect(&self.nsm_url).map_err(|e| e.to_string())?);
        }
        self.grpc.as_mut().ok_or_else(|| "no client".to_string())
    }

    /// Requests connection `i`: the first time, or again with what was answered.
    fn request(&mut self, i: usize, again: bool) -> Result<(), String> {
        let c = &self.conns[i];
        let req = match (&c.answer, again) {
            (Some(a), true) => refresh_of(a, &c.side),
            _ => first_request(&c.id, c.endpoint, &c.side, None),
        };
        let id = c.id.clone();
        let r = self.grpc()?.request_within(req, DEADLINE);
        match r {
            Ok(a) if a.state == State::Up as i32 => {
                self.conns[i].answer = Some(a);
                Ok(())
            }
            Ok(a) => Err(format!("{id}: answered but not UP: {a:?}")),
            Err(e) => {
                self.grpc = None;
                Err(format!("{id}: {:?}: {}", e.code(), e.message()))
            }
        }
    }

    fn wait_up(&self, within: Duration) -> Result<(), String> {
        if wait_for(within, Duration::from_millis(20), || {
            self.conns.iter().all(|c| c.flow.up.load(Ordering::Relaxed))
        }) {
            return Ok(());
        }
        let down: Vec<&str> = self
            .conns
            .iter()
            .filter(|c| !c.flow.up.load(Ordering::Relaxed))
            .map(|c| c.flow.name)
            .collect();
        Err(format!(
            "stable connections not up within {within:?}: {down:?}"
        ))
    }

    /// Quiver is about to be killed (or was found dead): see [`Flow::mark_kill`].
    pub fn mark_kill(&self) {
        for c in &self.conns {
            c.flow.mark_kill();
        }
    }

    /// Each connection's flow name and Quiver's own id of it (see `nsm::quiver_id`).
    pub fn quiver_ids(&self, name: &str) -> Vec<(&'static str, Option<String>)> {
        self.conns
            .iter()
            .map(|c| {
                let id = c
                    .answer
                    .as_ref()
                    .and_then(|a| super::nsm::quiver_id(a, name));
                (c.flow.name, id)
            })
            .collect()
    }

    /// Refreshes both (traffic keeps flowing).
    pub fn refresh(&mut self) {
        for i in 0..self.conns.len() {
            self.refreshes += 1;
            if let Err(e) = self.request(i, true) {
                self.failures.push(format!("refresh {e}"));
            }
        }
    }

    /// Stops sending; waits (at most `within`) until every frame sent arrived; whether all did.
    pub fn pause(&self, within: Duration) -> bool {
        self.conns.iter().all(|c| c.flow.pause_and_drain(within))
    }

    /// Sends again.
    pub fn resume(&self) {
        for c in &self.conns {
            c.flow.sending.store(true, Ordering::SeqCst);
        }
    }

    /// After Quiver came back: stop sending, Request both again (retrying for 30 s), open the
    /// kernel sockets again, wait for the links, count what died with Quiver as lost to its
    /// kill, send again. How long it took.
    pub fn heal(&mut self) -> Result<Duration, String> {
        let t0 = Instant::now();
        // The connection to the Quiver that died is of no use.
        self.grpc = None;
        for c in &self.conns {
            c.flow.sending.store(false, Ordering::SeqCst);
        }
        for i in 0..self.conns.len() {
            self.heals += 1;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                match self.request(i, true) {
                    Ok(()) => break,
                    Err(e) if Instant::now() >= deadline => {
                        return Err(format!("healing the stable connections: {e}"))
                    }
                    Err(e) => {
                        self.failures.push(format!("heal {e}"));
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
            self.conns[i].flow.reopen.fetch_add(1, Ordering::SeqCst);
        }
        self.wait_up(Duration::from_secs(30))?;
        for c in &self.conns {
            c.flow.excuse();
        }
        self.resume();
        Ok(t0.elapsed())
    }

    /// Drains, Closes both, stops the peers.
    pub fn close(&mut self) -> Result<(), String> {
        self.pause(Duration::from_secs(5));
        let mut errors = Vec::new();
        for i in 0..self.conns.len() {
            if let Some(a) = self.conns[i].answer.take() {
                let id = a.id.clone();
                if let Err(e) = self
                    .grpc()
                    .and_then(|g| g.close(a).map_err(|e| e.to_string()))
                {
                    errors.push(format!("Close {id}: {e}"));
                }
            }
        }
        self.stop_peers();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// Stops the peers' threads; the first error one of them ended with.
    pub fn stop_peers(&mut self) -> Option<String> {
        for c in &self.conns {
            c.flow.stop.store(true, Ordering::SeqCst);
        }
        let mut first = None;
        for t in self.peers.drain(..) {
            let r = t
                .join()
                .unwrap_or_else(|_| Err("a peer thread panicked".into()));
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        }
        first
    }
}

impl Drop for Stable {
    fn drop(&mut self) {
        self.stop_peers();
    }
}
