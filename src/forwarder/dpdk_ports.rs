//! DPDK ports, when Quiver is built with the `dpdk` feature (a stub that refuses them without).

#[cfg(feature = "dpdk")]
mod imp {
    use std::sync::Arc;

    use dataplane::BufferPool;
    use drivers::dpdk::{
        DpdkError, DpdkMempool, DpdkPort, DpdkPortConfig, Eal, EalConfig, PciDevices,
    };
    use drivers::Port;

    use crate::config::{Config, DpdkSection};

    pub use drivers::dpdk::PREFIX_SIZE;

    /// Why the EAL or its mempool could not start.
    pub type StartError = DpdkError;

    /// The EAL and the mempool over Quiver's buffers.
    pub struct Dpdk {
        mempool: Arc<DpdkMempool>,
    }

    impl Dpdk {
        /// Starts the EAL from `[dpdk]` (once per process) and makes Quiver's buffers its mbufs.
        pub fn start(cfg: &Config, pool: Arc<BufferPool>) -> Result<Dpdk, DpdkError> {
            let mut eal = EalConfig::vdevs_only();
            if !cfg.dpdk.pci.is_empty() {
                eal.pci = PciDevices::Allow(cfg.dpdk.pci.clone());
            }
            eal.vdevs = cfg.dpdk.vdevs.clone();
            eal.extra_args = cfg.dpdk.eal_args.clone();
            let eal = Eal::init(&eal)?;
            let mempool = DpdkMempool::new(eal, pool)?;
            Ok(Dpdk { mempool })
        }

        /// Opens a port with one queue pair per worker.
        pub fn open(&self, d: &DpdkSection, workers: usize) -> Result<Arc<dyn Port>, DpdkError> {
            let mut c = DpdkPortConfig::new(&d.device, workers);
            c.rx_descriptors = d.rx_descriptors;
            c.tx_descriptors = d.tx_descriptors;
            c.mtu = Some(d.mtu);
            let port = DpdkPort::open(&self.mempool, &c)?;
            Ok(Arc::new(port))
        }
    }
}

/// Without the `dpdk` feature, a `type = "dpdk"` port is refused with a clear message.
#[cfg(not(feature = "dpdk"))]
mod imp {
    use std::sync::Arc;

    use dataplane::BufferPool;
    use drivers::Port;

    use crate::config::{Config, DpdkSection};

    /// No room needed: DPDK ports cannot be opened.
    pub const PREFIX_SIZE: u16 = 0;

    /// Never made.
    pub enum Dpdk {}

    /// Why there is no DPDK: this build has none.
    #[derive(Debug, thiserror::Error)]
    #[error("this quiver was built without the `dpdk` feature (cargo build --features dpdk)")]
    pub struct NotBuilt;

    /// Why DPDK could not start: this build has none.
    pub type StartError = NotBuilt;

    impl Dpdk {
        /// Always an error: this build has no DPDK.
        pub fn start(_: &Config, _: Arc<BufferPool>) -> Result<Dpdk, NotBuilt> {
            Err(NotBuilt)
        }

        /// Unreachable: no `Dpdk` exists.
        pub fn open(&self, _: &DpdkSection, _: usize) -> Result<Arc<dyn Port>, NotBuilt> {
            match *self {}
        }
    }
}

pub use imp::{Dpdk, StartError as DpdkStartError, PREFIX_SIZE};
