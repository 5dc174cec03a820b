//! What the memif port tests share: Quiver's forwarding graph over memif ports on two workers
//! (ports, pool, forwarding state set up by the test), and waiting with a deadline.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::{
    BufferPool, BufferPoolConfig, Dataplane, GraphBuilder, HugepagePolicy, IdlePolicy, PortInput,
    TxQueue, WorkerConfig,
};
use drivers::memif_port::{MemifControl, MemifPort, MemifPortConfig};
use drivers::Port;
use graph_nodes::{
    add_forwarding_nodes, names, FibConfig, Forwarding, ForwardingState, IfIndex, LocalState,
};

/// Workers (and queue pairs per port).
pub const WORKERS: usize = 2;

/// Polls `step` until it holds; fails the test after `secs`.
pub fn wait_for(what: &str, secs: u64, mut step: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !step() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// CPUs this machine has (workers share them when there are fewer than [`WORKERS`]).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Quiver's forwarding graph over memif ports, one `port-input` per port and worker.
pub struct Quiver {
    /// The workers (`None` once stopped).
    pub dp: Option<Dataplane<ForwardingState>>,
    /// The buffer pool, to check that every buffer came back.
    pub pool: Arc<BufferPool>,
    /// The ports, in the order of their configurations.
    pub ports: Vec<Arc<MemifPort>>,
    /// Kept alive for the ports' control side.
    _control: MemifControl,
}

impl Quiver {
    /// Opens `configs`, a pool of `buffers`, and starts the workers on the forwarding state
    /// `setup` makes of the ports' interfaces.
    pub fn start(
        configs: Vec<MemifPortConfig>,
        buffers: u32,
        setup: impl FnOnce(&mut Forwarding, &[IfIndex]),
    ) -> Quiver {
        let control = MemifControl::start(WORKERS).unwrap();
        let ports: Vec<Arc<MemifPort>> = configs
            .into_iter()
            .map(|c| control.add_port(c).unwrap())
            .collect();
        let pool = BufferPool::new(&BufferPoolConfig {
            buffers,
            hugepages: HugepagePolicy::Never,
            ..BufferPoolConfig::default()
        })
        .unwrap();
        let mut forwarding = Forwarding::new(FibConfig {
            long_prefix_groups: 16,
            hugepages: HugepagePolicy::Never,
        })
        .unwrap();
        let interfaces: Vec<IfIndex> = ports
            .iter()
            .map(|p| forwarding.add_port(p.name(), p.mac(), 9000).unwrap())
            .collect();
        setup(&mut forwarding, &interfaces);
        forwarding.commit(&LocalState::default()).unwrap();
        let cores: Vec<usize> = (0..WORKERS).map(|w| w % available_cores()).collect();
        let (graph_ports, ifs) = (ports.clone(), interfaces.clone());
        let dp = Dataplane::start(
            &WorkerConfig {
                cores,
                idle: IdlePolicy::ADAPTIVE,
            },
            pool.clone(),
            forwarding.snapshot(),
            move |init| {
                let mut b = GraphBuilder::new();
                let mut tx: Vec<(IfIndex, Box<dyn TxQueue>)> = Vec::new();
                for (p, &i) in graph_ports.iter().zip(&ifs) {
                    let qp = p.queue_pair(init.index).map_err(|e| e.to_string())?;
                    let name = format!("{}-input", p.name());
                    b.add(PortInput::new(&name, names::ETHERNET_INPUT, i, qp.rx));
                    tx.push((i, qp.tx));
                }
                add_forwarding_nodes(&mut b, tx);
                b.build().map_err(|e| e.to_string())
            },
        )
        .unwrap();
        Quiver {
            dp: Some(dp),
            pool,
            ports,
            _control: control,
        }
    }

    /// Stops the workers (every buffer goes back to the pool).
    pub fn stop(&mut self) {
        if let Some(dp) = self.dp.take() {
            dp.stop();
        }
    }
}

impl Drop for Quiver {
    fn drop(&mut self) {
        self.stop();
    }
}
