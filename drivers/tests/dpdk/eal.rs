//! The test binary's one EAL (started by the first test, then shared; the tests take turns), and
//! Quiver buffer pools with their DPDK mempools, checked on the way out for every buffer back.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use drivers::dpdk::{DpdkMempool, Eal, EalConfig, EalMemory, PREFIX_SIZE};
use testkit::{free_hugepages, require, Needs};

/// Free 2 MiB hugepages below which the EAL uses ordinary pages instead.
const HUGEPAGES_WANTED: u64 = 64;

static SERIAL: Mutex<()> = Mutex::new(());

/// The test binary's EAL, started by the first test that needs it; `None` (after saying why)
/// when the test should skip.
pub(crate) fn eal(test: &str) -> Option<(&'static Eal, MutexGuard<'static, ()>)> {
    let root = Needs {
        root: true,
        ..Needs::default()
    };
    if !require(test, &root) {
        return None;
    }
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    static CONFIG: OnceLock<EalConfig> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let mut c = EalConfig::vdevs_only();
        c.file_prefix = format!("quiver-dpdk-test-{}", std::process::id());
        if free_hugepages() < HUGEPAGES_WANTED {
            c.memory = EalMemory::NoHuge { megabytes: 256 };
        }
        c
    });
    let affinity_before = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    let eal = Eal::init(config).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert_eq!(
        nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap(),
        affinity_before,
        "rte_eal_init left the calling thread pinned"
    );
    Some((eal, guard))
}

pub(crate) fn pool(buffers: u32) -> Arc<BufferPool> {
    BufferPool::new(&BufferPoolConfig {
        buffers,
        prefix_size: PREFIX_SIZE,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap()
}

/// Drops the last handle of `mempool` (its ports and queues must be gone) and checks that freeing
/// it left every buffer on Quiver's free stack: `rte_mempool_free` takes each object back through
/// the ops' dequeue, which must not empty the pool.
fn mempool_freed_with_every_buffer_back(pool: &Arc<BufferPool>, mempool: Arc<DpdkMempool>) {
    assert_eq!(
        Arc::strong_count(&mempool),
        1,
        "ports still hold the mempool"
    );
    drop(mempool);
    assert_eq!(
        pool.free_count(),
        pool.capacity() as usize,
        "buffers kept by freeing the mempool"
    );
    assert_eq!(pool.double_free_count(), 0);
    assert_eq!(pool.in_use_count(), 0);
}

/// No buffer leaked while `mempool` still lives; then
/// [`mempool_freed_with_every_buffer_back`].
pub(crate) fn every_buffer_back(pool: &Arc<BufferPool>, mempool: Arc<DpdkMempool>) {
    assert_eq!(
        pool.free_count(),
        pool.capacity() as usize,
        "buffers leaked"
    );
    assert_eq!(pool.double_free_count(), 0);
    mempool_freed_with_every_buffer_back(pool, mempool);
}

/// A test's EAL and its turn ([`eal`]), a pool and the pool's mempool.
pub(crate) type EalAndPool = (
    &'static Eal,
    MutexGuard<'static, ()>,
    Arc<BufferPool>,
    Arc<DpdkMempool>,
);

/// The test's EAL ([`eal`]), a pool of `buffers` and its mempool; `None` when the test skips.
pub(crate) fn eal_and_pool(test: &str, buffers: u32) -> Option<EalAndPool> {
    let (eal, serial) = eal(test)?;
    let pool = pool(buffers);
    let mempool = DpdkMempool::new(eal, pool.clone()).unwrap();
    Some((eal, serial, pool, mempool))
}
