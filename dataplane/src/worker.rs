//! Workers: one pinned OS thread per configured core, each running its own graph instance.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::buffer::BufferPool;
use crate::counters::RuntimeSnapshot;
use crate::graph::{Graph, GraphHandle};
use crate::snapshot::{Epochs, Published};
use crate::trace::{TraceArm, TracedPacket};

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
    #[error("worker {worker}: cannot build its graph: {reason}")]
    Build {
        /// Worker index.
        worker: usize,
        /// What went wrong.
        reason: String,
    },
    /// The thread could not be spawned.
    #[error("cannot spawn worker thread: {0}")]
    Spawn(std::io::Error),
}

/// Trace arming failed.
#[derive(Debug, thiserror::Error)]
#[error("no input node named `{0}` (input nodes: {1})")]
pub struct UnknownInputNode(String, String);

struct Worker {
    thread: JoinHandle<()>,
    graph: GraphHandle,
    tid: i32,
    core: usize,
}

/// The running data plane: workers, the buffer pool, and the published configuration.
pub struct Dataplane<S: Send + Sync + 'static> {
    pool: Arc<BufferPool>,
    state: Arc<Published<S>>,
    workers: Vec<Worker>,
    input_nodes: Vec<String>,
    stop: Arc<AtomicBool>,
}

type Ready = Result<(GraphHandle, i32, Vec<String>), StartError>;

impl<S: Send + Sync + 'static> Dataplane<S> {
    /// Starts one pinned worker per configured core. Each worker builds its own graph with
    /// `build` on its own thread; this returns once every worker is running, or the first
    /// error after stopping the others.
    pub fn start<F>(
        config: &WorkerConfig,
        pool: Arc<BufferPool>,
        initial: S,
        build: F,
    ) -> Result<Dataplane<S>, StartError>
    where
        F: Fn(&WorkerInit) -> Result<Graph<S>, String> + Send + Sync + 'static,
    {
        if config.cores.is_empty() {
            return Err(StartError::NoCores);
        }
        let epochs = Epochs::new();
        let state = Arc::new(Published::new(&epochs, initial));
        let stop = Arc::new(AtomicBool::new(false));
        let build = Arc::new(build);
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
            let (state, stop, build, idle) =
                (state.clone(), stop.clone(), build.clone(), config.idle);
            let thread = std::thread::Builder::new()
                .name(format!("quiver-wk{index}"))
                .spawn(move || worker_main(init, state, stop, idle, &*build, tx))
                .map_err(StartError::Spawn)?;
            match rx.recv() {
                Ok(Ok((graph, tid, inputs))) => {
                    if dp.input_nodes.is_empty() {
                        dp.input_nodes = inputs;
                    }
                    dp.workers.push(Worker {
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
                    return Err(StartError::Build {
                        worker: index,
                        reason: "the worker thread died while building its graph".into(),
                    });
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

    /// The buffer pool.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// Every worker's counters.
    pub fn runtime(&self) -> RuntimeSnapshot {
        RuntimeSnapshot {
            tsc_hz: crate::cycles::tsc_hz(),
            workers: self.workers.iter().map(|w| w.graph.runtime()).collect(),
        }
    }

    /// Zeroes every worker's counters (as later snapshots see them).
    pub fn clear_counters(&self) {
        self.workers.iter().for_each(|w| w.graph.clear_counters());
    }

    /// Traces the next `count` packets (in total, over all workers) that the input node `node`
    /// produces.
    pub fn trace_add(&self, node: &str, count: u32) -> Result<(), UnknownInputNode> {
        if !self.input_nodes.iter().any(|n| n == node) {
            return Err(UnknownInputNode(node.into(), self.input_nodes.join(", ")));
        }
        let arm = TraceArm::new(node, count);
        self.workers
            .iter()
            .for_each(|w| w.graph.trace_arm(Some(arm.clone())));
        Ok(())
    }

    /// Every traced packet so far, worker by worker.
    pub fn trace_show(&self) -> Vec<TracedPacket> {
        self.workers
            .iter()
            .flat_map(|w| w.graph.trace_packets())
            .collect()
    }

    /// Forgets trace records and stops tracing.
    pub fn trace_clear(&self) {
        self.workers.iter().for_each(|w| w.graph.trace_clear());
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
    build: &(dyn Fn(&WorkerInit) -> Result<Graph<S>, String> + Send + Sync),
    ready: mpsc::Sender<Ready>,
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
        Err(reason) => {
            let _ = ready.send(Err(StartError::Build {
                worker: init.index,
                reason,
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
    tracing::debug!(worker = init.index, "worker stopped");
}
