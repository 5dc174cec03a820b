//! Workers: one pinned OS thread per configured core, each running its own graph instance.

use std::collections::VecDeque;
use std::error::Error;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::buffer::{BufferPool, WorkerBuffers};
use crate::counters::RuntimeSnapshot;
use crate::graph::{Graph, GraphError, GraphHandle};
use crate::snapshot::{Epochs, Published};
use crate::trace::TracedPacket;

/// What a worker does when a loop pass finds nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdlePolicy {
    /// Spin: lowest latency, one full core per worker (as DPDK applications do).
    #[default]
    Poll,
    /// After `after` consecutive empty passes, sleep `sleep` between passes until traffic
    /// returns: for shared or small machines.
    Sleep {
        /// Empty passes before sleeping.
        after: u32,
        /// Sleep between passes while idle.
        sleep: Duration,
    },
}

impl IdlePolicy {
    /// Sleep 50 µs after 10,000 empty passes.
    pub const ADAPTIVE: IdlePolicy = IdlePolicy::Sleep {
        after: 10_000,
        sleep: Duration::from_micros(50),
    };
}

/// How the workers are laid out.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// One worker per entry, pinned to that CPU core.
    pub cores: Vec<usize>,
    /// Behaviour when idle.
    pub idle: IdlePolicy,
}

/// What a graph builder is told about the worker it builds for.
#[derive(Clone)]
pub struct WorkerInit {
    /// The worker's index, 0-based.
    pub index: usize,
    /// The core it is pinned to.
    pub core: usize,
    /// How many workers there are (queue counts, RSS).
    pub workers: usize,
    /// The buffer pool.
    pub pool: Arc<BufferPool>,
}

/// Why the workers could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No cores configured.
    #[error("no worker cores configured")]
    NoCores,
    /// Pinning failed (the core does not exist or is not allowed to this process).
    #[error("cannot pin worker {worker} to core {core}: {source}")]
    Pin {
        /// Worker index.
        worker: usize,
        /// Requested core.
        core: usize,
        /// OS error.
        source: nix::Error,
    },
    /// The graph builder failed.
    #[error("worker {worker}: cannot build its graph: {source}")]
    Build {
        /// Worker index.
        worker: usize,
        /// What went wrong.
        #[source]
        source: WorkerError,
    },
    /// The worker thread ended (it panicked) before it reported its graph built.
    #[error(
        "worker {worker}: cannot build its graph: the worker thread died while building its graph"
    )]
    Died {
        /// Worker index.
        worker: usize,
    },
    /// The thread could not be spawned.
    #[error("cannot spawn worker thread: {0}")]
    Spawn(std::io::Error),
}

/// Why a worker could not build its graph or run a command. The data plane's own failures
/// have their variants; what the caller's code fails with (a driver's error …) is kept whole,
/// its type reachable through [`Error::source`] and downcasting.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The graph did not build.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The worker's graph has no node of that name (and type).
    #[error("the graph has no {node} node")]
    NoNode {
        /// The node's name.
        node: String,
    },
    /// The interface has queues on this worker already.
    #[error("interface {interface} is attached already")]
    AttachedAlready {
        /// The interface.
        interface: u32,
    },
    /// A port's queue pair for this worker could not be taken.
    #[error("{port}: {source}")]
    Queues {
        /// The port's name.
        port: String,
        /// The driver's error.
        #[source]
        source: Box<dyn Error + Send + Sync>,
    },
    /// Anything else the caller's code failed with.
    #[error(transparent)]
    Other(Box<dyn Error + Send + Sync>),
}

impl WorkerError {
    /// `e` as a worker error: a [`WorkerError`] or [`GraphError`] as itself, anything else
    /// (another error type, a message) as [`WorkerError::Other`].
    pub fn other(e: impl Into<Box<dyn Error + Send + Sync>>) -> WorkerError {
        let e = e.into();
        let e = match e.downcast::<WorkerError>() {
            Ok(w) => return *w,
            Err(e) => e,
        };
        match e.downcast::<GraphError>() {
            Ok(g) => WorkerError::Graph(*g),
            Err(e) => WorkerError::Other(e),
        }
    }

    /// The graph lacks node `node`.
    pub fn no_node(node: &str) -> WorkerError {
        WorkerError::NoNode {
            node: node.to_string(),
        }
    }

    /// Port `port`'s queue pair could not be taken: `source` says why.
    pub fn queues(port: &str, source: impl Into<Box<dyn Error + Send + Sync>>) -> WorkerError {
        WorkerError::Queues {
            port: port.to_string(),
            source: source.into(),
        }
    }
}

/// What a worker command sees: the worker's graph, buffers and current configuration, on the
/// worker's own thread, between two loop passes (no frame of the previous pass is pending
/// unless that pass hit its dispatch cap; [`Graph::drain`] finishes them).
pub struct WorkerControl<'a, S> {
    /// The worker's index.
    pub worker: usize,
    /// How many workers there are.
    pub workers: usize,
    /// The worker's graph.
    pub graph: &'a mut Graph<S>,
    /// The worker's buffers.
    pub buffers: &'a mut WorkerBuffers,
    /// The configuration snapshot the worker reads now.
    pub state: &'a S,
}

/// A change a worker applies to its own graph between loop passes (attach or detach a port's
/// queues …). It runs on the worker's thread, so drivers that must be touched by the thread that
/// polls them (DPDK lcores, memif queues) are. `Err` is reported to the caller.
pub type WorkerCommand<S> =
    Box<dyn FnOnce(&mut WorkerControl<'_, S>) -> Result<(), WorkerError> + Send + 'static>;

/// A command and where its worker acknowledges it.
struct Posted<S> {
    command: WorkerCommand<S>,
    ack: mpsc::Sender<(usize, Result<(), WorkerError>)>,
}

/// A worker's mailbox. The worker checks `pending` with one atomic load per loop pass and
/// takes the lock only when something was posted, so the data path neither locks nor
/// allocates while no command arrives.
struct Mailbox<S> {
    pending: AtomicUsize,
    queue: Mutex<VecDeque<Posted<S>>>,
}

impl<S> Mailbox<S> {
    fn new() -> Self {
        Mailbox {
            pending: AtomicUsize::new(0),
            queue: Mutex::new(VecDeque::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Posted<S>>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn post(&self, p: Posted<S>) {
        self.lock().push_back(p);
        self.pending.fetch_add(1, Ordering::Release);
    }

    /// Takes the next command, if any (the worker side).
    fn take(&self) -> Option<Posted<S>> {
        if self.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let p = self.lock().pop_front()?;
        self.pending.fetch_sub(1, Ordering::Release);
        Some(p)
    }
}

/// How long [`Dataplane::command`] waits for every worker's acknowledgement.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// A worker command that did not complete everywhere.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// A worker ran the command and it failed (other workers may have applied it).
    #[error("worker {worker}: {source}")]
    Failed {
        /// The worker.
        worker: usize,
        /// Why.
        #[source]
        source: WorkerError,
    },
    /// A worker did not acknowledge in time, or has stopped.
    #[error("worker {worker} did not acknowledge the command ({why})")]
    NoAck {
        /// The first worker missing.
        worker: usize,
        /// Timed out or stopped.
        why: String,
    },
}

use crate::observer::DataplaneObserver;
/// Trace arming failed.
pub use crate::observer::UnknownInputNode;

struct Worker<S> {
    mailbox: Arc<Mailbox<S>>,
    thread: JoinHandle<()>,
    graph: GraphHandle,
    tid: i32,
    core: usize,
}

/// The running data plane: workers, the buffer pool, and the published configuration.
pub struct Dataplane<S: Send + Sync + 'static> {
    pool: Arc<BufferPool>,
    state: Arc<Published<S>>,
    workers: Vec<Worker<S>>,
    input_nodes: Vec<String>,
    stop: Arc<AtomicBool>,
}

type Ready = Result<(GraphHandle, i32, Vec<String>), StartError>;

/// A graph builder as the workers call it: its error made a [`WorkerError`].
type Build<S> = dyn Fn(&WorkerInit) -> Result<Graph<S>, WorkerError> + Send + Sync;

impl<S: Send + Sync + 'static> Dataplane<S> {
    /// Starts one pinned worker per configured core. Each worker builds its own graph with
    /// `build` on its own thread; this returns once every worker is running, or the first
    /// error after stopping the others. `build` may fail with any error (a [`WorkerError`], a
    /// [`GraphError`], a driver's error, a message); it reaches the caller as
    /// [`StartError::Build`].
    pub fn start<F, E>(
        config: &WorkerConfig,
        pool: Arc<BufferPool>,
        initial: S,
        build: F,
    ) -> Result<Dataplane<S>, StartError>
    where
        F: Fn(&WorkerInit) -> Result<Graph<S>, E> + Send + Sync + 'static,
        E: Into<Box<dyn Error + Send + Sync>>,
    {
        if config.cores.is_empty() {
            return Err(StartError::NoCores);
        }
        let epochs = Epochs::new();
        let state = Arc::new(Published::new(&epochs, initial));
        let stop = Arc::new(AtomicBool::new(false));
        let build: Arc<Build<S>> =
            Arc::new(move |init: &WorkerInit| build(init).map_err(WorkerError::other));
        let mut dp = Dataplane {
            pool: pool.clone(),
            state: state.clone(),
            workers: Vec::new(),
            input_nodes: Vec::new(),
            stop: stop.clone(),
        };
        for (index, &core) in config.cores.iter().enumerate() {
            let init = WorkerInit {
                index,
                core,
                workers: config.cores.len(),
                pool: pool.clone(),
            };
            let (tx, rx) = mpsc::channel::<Ready>();
            let mailbox = Arc::new(Mailbox::new());
            let (state, stop, build, idle, mb) = (
                state.clone(),
                stop.clone(),
                build.clone(),
                config.idle,
                mailbox.clone(),
            );
            let thread = std::thread::Builder::new()
                .name(format!("quiver-wk{index}"))
                .spawn(move || worker_main(init, state, stop, idle, &*build, tx, mb))
                .map_err(StartError::Spawn)?;
            match rx.recv() {
                Ok(Ok((graph, tid, inputs))) => {
                    if dp.input_nodes.is_empty() {
                        dp.input_nodes = inputs;
                    }
                    dp.workers.push(Worker {
                        mailbox,
                        thread,
                        graph,
                        tid,
                        core,
                    });
                }
                Ok(Err(e)) => {
                    let _ = thread.join();
                    return Err(e);
                }
                Err(_) => {
                    let _ = thread.join();
                    return Err(StartError::Died { worker: index });
                }
            }
        }
        tracing::info!(workers = dp.workers.len(), cores = ?config.cores, "workers running");
        Ok(dp)
    }

    /// Replaces the configuration; every worker picks it up at its next loop pass.
    pub fn publish(&self, state: S) {
        self.state.publish(state);
    }

    /// Waits until every worker has started a loop pass after this call (so none still uses
    /// anything unlinked before it). Never stops a worker.
    pub fn synchronize(&self) {
        self.state.domain().synchronize();
    }

    /// Frees replaced configurations no worker can see any more; returns how many.
    pub fn reclaim(&self) -> usize {
        self.state.domain().reclaim()
    }

    /// Replaced configurations still waiting for a worker to move on.
    pub fn pending_reclaim(&self) -> usize {
        self.state.domain().pending()
    }

    /// Runs a command on every worker, between two of its loop passes, on its own thread
    /// (`make(w)` gives worker `w`'s), and returns once every worker has acknowledged: on `Ok`
    /// every worker has applied it. Workers keep forwarding meanwhile; only the worker running
    /// a command pauses, for as long as the command takes. On `Err` some workers may have
    /// applied it: the caller undoes with another command.
    pub fn command(
        &self,
        mut make: impl FnMut(usize) -> WorkerCommand<S>,
    ) -> Result<(), CommandError> {
        let (ack, acks) = mpsc::channel();
        for (w, worker) in self.workers.iter().enumerate() {
            worker.mailbox.post(Posted {
                command: make(w),
                ack: ack.clone(),
            });
        }
        drop(ack);
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let mut done = vec![false; self.workers.len()];
        let mut failed = None;
        while done.iter().any(|d| !d) {
            let left = deadline.saturating_duration_since(Instant::now());
            let missing = done.iter().position(|d| !d).unwrap_or(0);
            match acks.recv_timeout(left) {
                Ok((w, result)) => {
                    done[w] = true;
                    if let Err(source) = result {
                        failed.get_or_insert(CommandError::Failed { worker: w, source });
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(CommandError::NoAck {
                        worker: missing,
                        why: format!("no answer in {COMMAND_TIMEOUT:?}"),
                    })
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(CommandError::NoAck {
                        worker: missing,
                        why: "the worker has stopped".into(),
                    })
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// How many workers run.
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// The buffer pool.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// A handle on every worker's counters and trace that readers may keep and use from any
    /// thread, without this.
    pub fn observer(&self) -> DataplaneObserver {
        DataplaneObserver::new(
            self.workers.iter().map(|w| w.graph.clone()).collect(),
            self.input_nodes.clone(),
        )
    }

    /// Every worker's counters.
    pub fn runtime(&self) -> RuntimeSnapshot {
        self.observer().runtime()
    }

    /// Zeroes every worker's counters (as later snapshots see them).
    pub fn clear_counters(&self) {
        self.observer().clear_counters()
    }

    /// Traces the next `count` packets (in total, over all workers) that the input node `node`
    /// produces.
    pub fn trace_add(&self, node: &str, count: u32) -> Result<(), UnknownInputNode> {
        self.observer().trace_add(node, count)
    }

    /// Every traced packet so far, worker by worker.
    pub fn trace_show(&self) -> Vec<TracedPacket> {
        self.observer().trace_show()
    }

    /// Forgets trace records and stops tracing.
    pub fn trace_clear(&self) {
        self.observer().trace_clear()
    }

    /// The worker threads' kernel thread ids and cores, in worker order.
    pub fn worker_threads(&self) -> Vec<(i32, usize)> {
        self.workers.iter().map(|w| (w.tid, w.core)).collect()
    }

    /// Stops every worker and waits for them; each frees what its graph holds first.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers.drain(..) {
            if w.thread.join().is_err() {
                tracing::error!(core = w.core, "a worker thread panicked");
            }
        }
        self.state.domain().reclaim();
    }
}

impl<S: Send + Sync + 'static> Drop for Dataplane<S> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Keeps the calling thread, and every thread it spawns from now on (they inherit its
/// affinity), off the workers' `cores`: the control plane then never waits for a time slice
/// on a core a worker polls, and never takes one from it. Returns the CPUs the thread may now
/// use, or `None` (affinity unchanged) when the workers take every CPU this thread may use.
pub fn keep_off_worker_cores(cores: &[usize]) -> nix::Result<Option<Vec<usize>>> {
    let me = nix::unistd::Pid::from_raw(0);
    let allowed = nix::sched::sched_getaffinity(me)?;
    let mut control = nix::sched::CpuSet::new();
    let mut cpus = Vec::new();
    for c in 0..nix::sched::CpuSet::count() {
        if allowed.is_set(c)? && !cores.contains(&c) {
            control.set(c)?;
            cpus.push(c);
        }
    }
    if cpus.is_empty() {
        return Ok(None);
    }
    nix::sched::sched_setaffinity(me, &control)?;
    Ok(Some(cpus))
}

fn pin_to(core: usize) -> nix::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(core)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
}

fn worker_main<S: Send + Sync + 'static>(
    init: WorkerInit,
    state: Arc<Published<S>>,
    stop: Arc<AtomicBool>,
    idle: IdlePolicy,
    build: &Build<S>,
    ready: mpsc::Sender<Ready>,
    mailbox: Arc<Mailbox<S>>,
) {
    if let Err(source) = pin_to(init.core) {
        let _ = ready.send(Err(StartError::Pin {
            worker: init.index,
            core: init.core,
            source,
        }));
        return;
    }
    let mut buffers = init.pool.worker_buffers();
    let mut graph = match build(&init) {
        Ok(g) => g,
        Err(source) => {
            let _ = ready.send(Err(StartError::Build {
                worker: init.index,
                source,
            }));
            return;
        }
    };
    let handle = graph.handle();
    handle.set_placement(init.index, Some(init.core));
    let inputs = graph.input_node_names();
    let mut reader = state.domain().reader();
    let tid = nix::unistd::gettid().as_raw();
    if ready.send(Ok((handle, tid, inputs))).is_err() {
        return;
    }
    tracing::debug!(worker = init.index, core = init.core, tid, "worker started");

    let mut idle_passes = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let current = reader.read(&state);
        while let Some(posted) = mailbox.take() {
            let mut control = WorkerControl {
                worker: init.index,
                workers: init.workers,
                graph: &mut graph,
                buffers: &mut buffers,
                state: current,
            };
            let result = (posted.command)(&mut control);
            let _ = posted.ack.send((init.index, result));
        }
        if graph.run_pass(&mut buffers, current) > 0 {
            idle_passes = 0;
            continue;
        }
        if let IdlePolicy::Sleep { after, sleep } = idle {
            idle_passes = idle_passes.saturating_add(1);
            if idle_passes >= after {
                std::thread::sleep(sleep);
            }
        }
    }
    let current = reader.read(&state);
    graph.shutdown(&mut buffers, current);
    // Commands posted too late are dropped unrun: their callers see the worker has stopped.
    while let Some(posted) = mailbox.take() {
        drop(posted);
    }
    tracing::debug!(worker = init.index, "worker stopped");
}
