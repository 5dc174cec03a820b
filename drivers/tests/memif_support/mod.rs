//! What the memif port tests share: Quiver's forwarding graph over memif ports on two workers
//! (ports, pool, forwarding state set up by the test), our memif slaves as its peers, and
//! waiting with a deadline.

#![allow(dead_code)]

use std::sync::Arc;

use dataplane::{
    BufferPool, BufferPoolConfig, Dataplane, GraphBuilder, HugepagePolicy, IdlePolicy, PortInput,
    TxQueue, WorkerConfig,
};
use drivers::memif_port::{MemifControl, MemifPort, MemifPortConfig};
use drivers::{LinkStatus, Port};
use graph_nodes::{
    add_forwarding_nodes, names, FibConfig, Forwarding, ForwardingState, IfIndex, LocalState,
};
use memif::{InterfaceConfig, Mode, Role, Slave, SocketAddress};

/// Workers (and queue pairs per port).
pub const WORKERS: usize = 2;

pub use testkit::wait_for;

/// The configuration of a memif slave of interface `id` with [`WORKERS`] queue pairs.
pub fn slave_config(id: u32, mode: Mode) -> InterfaceConfig {
    let mut c = InterfaceConfig::new(id);
    c.queue_pairs = WORKERS as u16;
    c.mode = mode;
    c
}

/// Port `name` on `socket` with interface `id`, a queue pair per worker.
pub fn port_config(name: &str, role: Role, socket: SocketAddress, id: u32) -> MemifPortConfig {
    let mut c = MemifPortConfig::new(name, role, socket, id);
    c.queues = WORKERS as u16;
    c
}

/// Waits until every one of `slaves` and every port of `quiver` is up, with all its queues.
pub fn connect(quiver: &Quiver, slaves: &mut [&mut Slave]) {
    wait_for("memif links up", 20, || {
        for s in slaves.iter_mut() {
            s.poll().unwrap();
        }
        slaves.iter().all(|s| s.interface().is_up())
            && quiver
                .ports
                .iter()
                .all(|p| p.link() == LinkStatus::Up && p.connected_queues() == WORKERS)
    });
}

/// A frame of `len` bytes for queue `q` with sequence `seq`: Ethernet (local experimental
/// ethertype), then the queue and sequence, then a payload every byte of which is derived from
/// them and `pattern`.
pub fn queue_frame(q: u8, seq: u32, len: usize, pattern: u32) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(pattern).wrapping_add(seq) as u8 ^ q)
        .collect();
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xbb]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xaa]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14] = q;
    f[15..19].copy_from_slice(&seq.to_be_bytes());
    f
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
            ..FibConfig::default()
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
                    b.add(PortInput::new(&name, names::ETHERNET_INPUT, i.get(), qp.rx));
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
