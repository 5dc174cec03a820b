//! DPDK ethdev ports (cargo feature `dpdk`): physical NICs bound to vfio-pci and DPDK's virtual
//! devices (`net_ring`, `net_null`, `net_memif`, `net_tap` …), with no copy of packet data
//! between a device and the graph.
//!
//! Using it:
//!
//! 1. [`Eal::init`] once per process with an [`EalConfig`] (`--no-pci` or a PCI allow list,
//!    vdevs, memory, a unique file prefix). The calling thread keeps its CPU affinity.
//! 2. Make the buffer pool with `prefix_size` = [`PREFIX_SIZE`], and a [`DpdkMempool`] over it:
//!    Quiver's buffers become the mempool's mbufs (the module [`mempool`] explains the layout and
//!    who holds a free buffer when).
//! 3. [`DpdkPort::open`] each device by vdev name or PCI address with one queue pair per worker,
//!    and hand it (as `Arc<dyn Port>`) to the workers' graph builders, which call
//!    [`crate::Port::queue_pair`] on their own threads. A worker becomes a DPDK lcore
//!    (`rte_thread_register`) when it takes its first queue pair, so that it gets a mempool
//!    cache; it gives the lcore back when its queues are dropped as it stops.
//!
//! On the hot path a receive burst is `rte_eth_rx_burst` (DPDK's inline function, through a C
//! wrapper) and, per mbuf, a multiply to find its buffer index and a rewrite of that buffer's
//! 64-byte metadata from the mbuf's offset and length; a transmit burst writes the offset and
//! lengths back into each buffer's mbuf and calls `rte_eth_tx_burst`. Nothing is allocated,
//! nothing locked; the pool's mutex is taken only when an lcore's mempool cache runs dry or
//! overflows, for a whole cache's worth of buffers.

mod burst;
pub mod eal;
mod lcore;
pub mod mempool;
pub mod port;
pub mod ring;

pub use eal::{DpdkError, Eal, EalConfig, EalMemory, PciDevices};
pub use mempool::{DpdkMempool, PREFIX_SIZE};
pub use port::{DpdkPort, DpdkPortConfig, DpdkRxQueue, DpdkTxQueue};
pub use ring::{ring_port, Ring};
