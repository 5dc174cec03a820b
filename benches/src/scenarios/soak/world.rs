//! What a soak run holds (`World`) and does beyond its own records (`Outcome`), with the
//! parts of the run every fault and checkpoint share: the churn's clock, a crashed Quiver's
//! restart. The faults (`faults`), the accounting (`account`) and the report (`report`) add
//! their own methods.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nsm_forwarder::testing::BlockingClient;
use serde_json::Value;

use super::churn::{ChurnStats, Ctx};
use super::host::{Netns, TempDir};
use super::inventory::{Leaks, Snapshot};
use super::nsm::Endpoints;
use super::quiver::{Quiver, QuiverSpec};
use super::rss::Rss;
use super::stable::Stable;

/// Churn clients.
pub const CLIENTS: usize = 3;
/// How often the stable connections are refreshed.
pub const REFRESH_EVERY: Duration = Duration::from_secs(10);

/// The KERNEL backend of Quiver's incarnation `n`: veth first (a killed Quiver leaves veths
/// for the next one to reap), then TAP, alternating.
pub fn backend(n: u32) -> &'static str {
    if n.is_multiple_of(2) {
        "veth"
    } else {
        "tap"
    }
}

/// The soak's namespaces.
pub struct Namespaces {
    /// Quiver's.
    pub fwd: Netns,
    /// Every endpoint side's.
    pub nse: Netns,
    /// The stable connections' clients'.
    pub st: Netns,
    /// The killed CNF's.
    pub cnf: Netns,
    /// One per churn client.
    pub clients: Vec<Netns>,
}

/// Everything a run holds.
pub struct World {
    pub(super) quick: bool,
    pub(super) tag: String,
    pub(super) id_prefix: String,
    pub(super) traffic: PathBuf,
    pub(super) spec: QuiverSpec,
    pub(super) quiver: Quiver,
    pub(super) ns: Namespaces,
    pub(super) endpoints: Endpoints,
    pub(super) stable: Stable,
    pub(super) stable_up: bool,
    pub(super) ctx: Arc<Ctx>,
    pub(super) clients: Vec<JoinHandle<ChurnStats>>,
    pub(super) grpc: Option<BlockingClient>,
    pub(super) cnf_n: u32,
    pub(super) doom_n: u32,
    pub(super) rss: Arc<Rss>,
    pub(super) started: Instant,
    pub(super) next_refresh: Instant,
    pub(super) leaks: Leaks,
    pub(super) base_host: Snapshot,
    pub(super) base_empty: Snapshot,
    /// The process kinds' baseline of the Quiver running (stable connections up).
    pub(super) base_process: Snapshot,
    pub(super) api_dir: String,
    pub(super) crashes: Vec<Value>,
    /// Requests and Closes the faults sent (their own connections).
    pub(super) fault_calls: (u64, u64),
    pub(super) dir: TempDir,
}

impl World {
    /// Lets the churn run for `d`, refreshing the stable connections on time and watching
    /// that Quiver lives (a crash is recorded, Quiver started again and the stable
    /// connections healed).
    pub(super) fn churn_for(&mut self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if !self.quiver.alive() {
                self.crashed();
            }
            if self.stable_up && Instant::now() >= self.next_refresh {
                self.stable.refresh();
                self.next_refresh = Instant::now() + REFRESH_EVERY;
                // The endpoints' logs are counted and emptied as the run goes.
                self.endpoints.seen();
            }
            // The schedule's clock, not a hand-off: the churn runs on its own threads.
            std::thread::sleep(Duration::from_millis(100).min(end - Instant::now().min(end)));
        }
    }

    /// Quiver died on its own: recorded with its log's end, started again, healed.
    pub(super) fn crashed(&mut self) {
        let n = self.quiver.incarnation;
        self.stable.mark_kill();
        let tail = self.quiver.log_tail(40);
        eprintln!("soak: CRASH: quiver #{n} died on its own:\n{tail}");
        let at = self.started.elapsed().as_secs();
        let prev = self.ctx.fault.lock().map(|f| *f).unwrap_or(None);
        *self.ctx.fault.lock().unwrap_or_else(|e| e.into_inner()) = Some("crash");
        let restarted = self
            .restart(n + 1)
            .and_then(|()| self.stable.heal().map(|_| ()));
        *self.ctx.fault.lock().unwrap_or_else(|e| e.into_inner()) = prev;
        self.crashes.push(serde_json::json!({
            "incarnation": n, "at_s": at, "log_tail": tail,
            "restarted": restarted.is_ok(), "restart_error": restarted.err(),
        }));
    }

    /// Starts Quiver's incarnation `n` in place of the (dead) current one.
    pub(super) fn restart(&mut self, n: u32) -> Result<(), String> {
        self.quiver.kill9();
        self.quiver = Quiver::start(&self.spec, n, backend(n))?;
        self.rss.set_pid(self.quiver.pid, n);
        *self.ctx.backend.lock().unwrap_or_else(|e| e.into_inner()) = backend(n);
        self.grpc = None;
        eprintln!(
            "soak: quiver #{n} up ({} backend, answered after {:.2} s)",
            self.quiver.backend,
            self.quiver.ready_after.as_secs_f64()
        );
        Ok(())
    }

    /// Failed churn calls so far.
    pub(super) fn churn_failures(&self) -> u64 {
        self.ctx.failures.load(Ordering::Relaxed)
    }
}

/// What the run did beyond the world's own records.
pub struct Outcome {
    /// The checkpoints' records.
    pub checkpoints: Vec<Value>,
    /// The faults' records.
    pub faults: Vec<Value>,
    /// The churn's figures, all clients.
    pub churn: ChurnStats,
    /// Why the run stopped early, if it did.
    pub error: Option<String>,
    /// Quiver's exit at the end (SIGTERM).
    pub exit: Option<String>,
    /// Seconds the run took.
    pub seconds: f64,
}
