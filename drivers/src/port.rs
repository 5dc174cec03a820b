//! The surface every driver's port offers.

use dataplane::{RxMode, RxQueue, TxQueue};

/// A port's link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkStatus {
    /// Frames flow.
    Up,
    /// No frames flow, with why.
    Down(String),
}

/// A port's counters, read on the control side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received into Quiver.
    pub rx_packets: u64,
    /// Bytes received into Quiver.
    pub rx_bytes: u64,
    /// Frames handed to the device or peer.
    pub tx_packets: u64,
    /// Bytes handed to the device or peer.
    pub tx_bytes: u64,
    /// Frames lost on receive (ring overrun, no buffer, bad descriptor …).
    pub rx_dropped: u64,
    /// Frames lost on transmit (ring full, peer down …).
    pub tx_dropped: u64,
    /// Driver-specific counters by name, for `show interfaces` detail.
    pub detail: Vec<(String, u64)>,
}

/// One worker's queues of a port.
pub struct QueuePair {
    /// The receive queue, polled by this worker's input node for the port.
    pub rx: Box<dyn RxQueue>,
    /// The transmit queue, used by this worker's `interface-output`.
    pub tx: Box<dyn TxQueue>,
}

/// Why a port could not be opened or give a queue.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Sys {
        /// What was being done.
        what: String,
        /// The OS error.
        source: nix::Error,
    },
    /// The configuration cannot work.
    #[error("{0}")]
    Config(String),
    /// The device or peer refused.
    #[error("{0}")]
    Device(String),
}

/// A port: a device Quiver receives from and transmits to, with one queue pair per worker.
///
/// Ports are shared (`Arc<dyn Port>`) between the control side and the workers' graph builders:
/// at start each worker calls [`Port::queue_pair`] once, on its own thread, while building its
/// graph; a port added at run time has its queue pairs made by the caller, off the workers,
/// unless [`Port::queue_pair_on_worker`] says otherwise.
pub trait Port: Send + Sync {
    /// The port's name (`memif0`, `veth-a`, `net_ring0` …).
    fn name(&self) -> &str;
    /// Its Ethernet address.
    fn mac(&self) -> [u8; 6];
    /// Its link state now.
    fn link(&self) -> LinkStatus;
    /// The queue pair for worker `worker` (0-based, less than the worker count the port was
    /// opened for). Called once per worker.
    fn queue_pair(&self, worker: usize) -> Result<QueuePair, PortError>;
    /// Whether [`Port::queue_pair`] must run on the worker's own thread (a DPDK queue is bound
    /// to the lcore that takes it). Other ports' queue pairs are made off the workers when a
    /// port is added at run time: setting up a kernel socket's ring waits in the kernel for an
    /// RCU grace period (`synchronize_net`), tens of milliseconds in which a worker would
    /// forward nothing and the other ports' receive rings would overflow.
    fn queue_pair_on_worker(&self) -> bool {
        false
    }
    /// Whether the port is a point-to-point L3 link with no link layer (an IP-mode memif
    /// port): its peer is the far end, so its next hops need no ARP, and whatever Ethernet
    /// header a frame for it carries is left out on transmit.
    fn point_to_point(&self) -> bool {
        false
    }
    /// Whether the port shares its NIC with the kernel, which keeps the NIC's neighbours (a
    /// node uplink: an AF_XDP port in tunnel mode). Quiver then sends no ARP request and no
    /// neighbour solicitation of its own there: the kernel's answers would never reach it,
    /// and the two must not compete on the link; its neighbours come from the kernel's table.
    fn neighbours_from_kernel(&self) -> bool {
        false
    }
    /// Counters summed over all queues.
    fn stats(&self) -> PortStats;
    /// Each receive queue's mode, by worker, for ports whose queues can sleep on a wake
    /// descriptor ([`dataplane::RxQueue::wake_fd`]): [`RxMode::Interrupt`] while the queue's
    /// worker waits on it, [`RxMode::Polling`] while it polls it. Empty (the default) for
    /// ports whose queues are always polled.
    fn rx_modes(&self) -> Vec<RxMode> {
        Vec::new()
    }
}
