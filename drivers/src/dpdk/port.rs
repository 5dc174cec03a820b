//! DPDK ethdev ports: one receive and one transmit queue per worker, RSS across them.

use dataplane::BufferIndex;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dataplane::{RxQueue, TxQueue, WorkerBuffers};
use dpdk_sys as sys;

use super::burst::{self, RxTally, BURST};
use super::eal::DpdkError;
use super::lcore::Lcore;
use super::mempool::{DpdkMempool, MbufMap};
use crate::port::{LinkStatus, Port, PortError, PortStats, QueuePair};

/// How a port is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkPortConfig {
    /// The device: a vdev name (`net_ring0`) or a PCI address (`0000:01:00.0`).
    pub name: String,
    /// Receive and transmit queues: one each per worker.
    pub queues: usize,
    /// Receive descriptors per queue (the driver may adjust).
    pub rx_descriptors: u16,
    /// Transmit descriptors per queue (the driver may adjust).
    pub tx_descriptors: u16,
    /// The MTU; `None` keeps the device's default (1500 for most).
    pub mtu: Option<u16>,
    /// Receive every frame whatever its destination MAC.
    pub promiscuous: bool,
}

impl DpdkPortConfig {
    /// `queues` queue pairs on device `name`, 1024 descriptors each way, default MTU,
    /// promiscuous.
    pub fn new(name: &str, queues: usize) -> DpdkPortConfig {
        DpdkPortConfig {
            name: name.into(),
            queues,
            rx_descriptors: 1024,
            tx_descriptors: 1024,
            mtu: None,
            promiscuous: true,
        }
    }
}

/// Counters the queues keep beside the device's own (each written by its queue's worker only).
#[derive(Default)]
struct QueueCounters {
    chained: AtomicU64,
    foreign: AtomicU64,
    bad_length: AtomicU64,
    tx_refused: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    // Single writer (the queue's worker): a plain load and store, no locked instruction.
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

struct PortInner {
    name: String,
    port_id: u16,
    queues: u16,
    mac: [u8; 6],
    rss: bool,
    mempool: Arc<DpdkMempool>,
    taken: Vec<AtomicBool>,
    counters: Vec<QueueCounters>,
    /// The device mapped for DMA of Quiver's region (PCI devices), as an address.
    dma_device: Option<usize>,
}

/// An ethdev port, started. Shared (`Arc<dyn Port>`) between the control side and the workers;
/// stopped and closed when the last handle and the last of its queues are gone.
pub struct DpdkPort {
    inner: Arc<PortInner>,
}

fn check(what: &str, rc: i32) -> Result<(), DpdkError> {
    if rc < 0 {
        Err(DpdkError::call(what, rc))
    } else {
        Ok(())
    }
}

impl DpdkPort {
    /// Configures and starts the ethdev named `config.name`, its receive queues filling buffers
    /// from `mempool`.
    pub fn open(
        mempool: &Arc<DpdkMempool>,
        config: &DpdkPortConfig,
    ) -> Result<DpdkPort, DpdkError> {
        let name = &config.name;
        let queues = u16::try_from(config.queues)
            .ok()
            .filter(|&q| q > 0)
            .ok_or_else(|| DpdkError::Config(format!("{name}: {} queues", config.queues)))?;
        let cname = CString::new(name.as_str())
            .map_err(|_| DpdkError::Config("NUL in a port name".into()))?;
        let mut port_id = 0u16;
        // SAFETY: a valid C string and an out-parameter.
        check(&format!("no DPDK port named {name}"), unsafe {
            sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut port_id)
        })?;
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: a valid port id and an out-parameter.
        check(&format!("{name}: rte_eth_dev_info_get"), unsafe {
            sys::rte_eth_dev_info_get(port_id, &mut info)
        })?;
        if queues > info.max_rx_queues || queues > info.max_tx_queues {
            return Err(DpdkError::Config(format!(
                "{name}: {queues} queue pairs asked for, the device has {} rx and {} tx",
                info.max_rx_queues, info.max_tx_queues
            )));
        }
        let (conf, rss) = Self::eth_conf(config, &info, mempool, queues)?;
        let (nb_rx, nb_tx) = Self::set_up_queues(config, port_id, &conf, mempool, queues)?;
        let dma_device = Self::map_for_dma(name, &info, mempool)?;
        let mac = Self::start(config, port_id, dma_device, mempool)?;
        // From here on, dropping `inner` stops and closes the device.
        let inner = PortInner {
            name: name.clone(),
            port_id,
            queues,
            mac,
            rss,
            mempool: mempool.clone(),
            taken: (0..queues).map(|_| AtomicBool::new(false)).collect(),
            counters: (0..queues).map(|_| QueueCounters::default()).collect(),
            dma_device,
        };
        tracing::info!(
            port = %name, port_id, queues, rss, rx_descriptors = nb_rx, tx_descriptors = nb_tx,
            mac = ?inner.mac, "DPDK port started"
        );
        Ok(DpdkPort {
            inner: Arc::new(inner),
        })
    }

    /// The device configuration for `queues` queue pairs: RSS when the device has it, the MTU,
    /// scatter and multi-segment offloads when frames are longer than one buffer. Also tells
    /// whether RSS is on.
    fn eth_conf(
        config: &DpdkPortConfig,
        info: &sys::rte_eth_dev_info,
        mempool: &DpdkMempool,
        queues: u16,
    ) -> Result<(sys::rte_eth_conf, bool), DpdkError> {
        let name = &config.name;
        let mut conf = sys::rte_eth_conf::default();
        // RSS spreads flows over the workers' queues: IPv4/6 addresses and TCP/UDP ports, as far
        // as the device can hash them. A device without RSS still gets its queues (each worker
        // polls its own), but flows land where the device puts them.
        // SAFETY: reads constants.
        let wanted =
            unsafe { sys::QUIVER_ETH_RSS_IP | sys::QUIVER_ETH_RSS_UDP | sys::QUIVER_ETH_RSS_TCP };
        let rss_hf = wanted & info.flow_type_rss_offloads;
        let rss = queues > 1 && rss_hf != 0;
        if rss {
            conf.rxmode.mq_mode = sys::RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
        } else if queues > 1 {
            tracing::warn!(port = %name, "no RSS on this device: flows are not spread over the queues");
        }
        if let Some(mtu) = config.mtu {
            conf.rxmode.mtu = mtu as u32;
        }
        // SAFETY: reads constants.
        let (scatter, multi_segs) = unsafe {
            (
                sys::QUIVER_ETH_RX_OFFLOAD_SCATTER,
                sys::QUIVER_ETH_TX_OFFLOAD_MULTI_SEGS,
            )
        };
        // Frames longer than one buffer arrive as mbuf chains (Quiver chains) when the device
        // can scatter them; they leave as chains, which devices send only when asked to.
        let frame = config.mtu.unwrap_or(1500) as u32 + 14 + 4 + 4; // + Ethernet, VLAN, CRC
        if frame > mempool.pool().data_size() as u32 {
            if info.rx_offload_capa & scatter == 0 {
                return Err(DpdkError::Config(format!(
                    "{name}: MTU {} needs frames of {frame} bytes, more than a buffer's {}, and                      the device cannot scatter them over several",
                    config.mtu.unwrap_or(1500),
                    mempool.pool().data_size()
                )));
            }
            conf.rxmode.offloads |= scatter;
        }
        conf.txmode.offloads |= info.tx_offload_capa & multi_segs;
        Ok((conf, rss))
    }

    /// Configures the device with `conf` and sets up its `queues` queue pairs on the device's
    /// NUMA node; returns the (receive, transmit) ring sizes the device took.
    fn set_up_queues(
        config: &DpdkPortConfig,
        port_id: u16,
        conf: &sys::rte_eth_conf,
        mempool: &DpdkMempool,
        queues: u16,
    ) -> Result<(u16, u16), DpdkError> {
        let name = &config.name;
        // SAFETY: a valid port and a fully initialised configuration.
        check(&format!("{name}: rte_eth_dev_configure"), unsafe {
            sys::rte_eth_dev_configure(port_id, queues, queues, conf)
        })?;
        let (mut nb_rx, mut nb_tx) = (config.rx_descriptors, config.tx_descriptors);
        // SAFETY: a configured port and two in/out parameters.
        let rc = unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &mut nb_rx, &mut nb_tx) };
        check(&format!("{name}: rte_eth_dev_adjust_nb_rx_tx_desc"), rc)?;
        // SAFETY: a valid port.
        let socket = unsafe { sys::rte_eth_dev_socket_id(port_id) };
        let socket = if socket < 0 {
            sys::SOCKET_ID_ANY
        } else {
            socket
        };
        for q in 0..queues {
            // SAFETY: a configured, stopped port; default queue configurations (NULL); the
            // mempool outlives the port (the port holds it).
            unsafe {
                check(
                    &format!("{name}: rte_eth_rx_queue_setup({q})"),
                    sys::rte_eth_rx_queue_setup(
                        port_id,
                        q,
                        nb_rx,
                        socket as u32,
                        std::ptr::null(),
                        mempool.raw(),
                    ),
                )?;
                check(
                    &format!("{name}: rte_eth_tx_queue_setup({q})"),
                    sys::rte_eth_tx_queue_setup(port_id, q, nb_tx, socket as u32, std::ptr::null()),
                )?;
            }
        }
        Ok((nb_rx, nb_tx))
    }

    /// Reads the MAC address, turns promiscuous mode on if asked and starts the device; on
    /// failure leaves it configured but stopped (a later open configures it again) and
    /// unmapped from `dma_device`.
    fn start(
        config: &DpdkPortConfig,
        port_id: u16,
        dma_device: Option<usize>,
        mempool: &DpdkMempool,
    ) -> Result<[u8; 6], DpdkError> {
        let name = &config.name;
        let mut mac = sys::rte_ether_addr::default();
        // SAFETY: a valid port and an out-parameter.
        let mut rc = unsafe { sys::rte_eth_macaddr_get(port_id, &mut mac) };
        let mut what = "rte_eth_macaddr_get";
        if rc >= 0 && config.promiscuous {
            // SAFETY: a valid port.
            rc = unsafe { sys::rte_eth_promiscuous_enable(port_id) };
            what = "promiscuous mode";
            if rc == -libc::ENOTSUP {
                rc = 0;
            }
        }
        if rc >= 0 {
            // SAFETY: a configured port with every queue set up.
            rc = unsafe { sys::rte_eth_dev_start(port_id) };
            what = "rte_eth_dev_start";
        }
        if rc < 0 {
            if let Some(dev) = dma_device {
                let (base, len) = mempool.pool().memory();
                // SAFETY: the mapping `map_for_dma` made for this device, before this call.
                unsafe {
                    sys::rte_dev_dma_unmap(
                        dev as *mut sys::rte_device,
                        base.cast(),
                        base as u64,
                        len,
                    )
                };
            }
            return Err(DpdkError::call(format!("{name}: {what}"), rc));
        }
        Ok(mac.addr_bytes)
    }

    /// Physical devices read and write Quiver's region directly: map it into the device's
    /// IOMMU domain (IOVA = VA). Virtual devices only ever see virtual addresses.
    fn map_for_dma(
        name: &str,
        info: &sys::rte_eth_dev_info,
        mempool: &DpdkMempool,
    ) -> Result<Option<usize>, DpdkError> {
        if info.device.is_null() {
            return Ok(None);
        }
        // SAFETY: a device pointer from dev_info, valid while the port exists; the bus name is
        // a static string.
        let bus = unsafe {
            let bus = sys::rte_dev_bus(info.device);
            if bus.is_null() {
                return Ok(None);
            }
            CStr::from_ptr(sys::rte_bus_name(bus))
                .to_string_lossy()
                .into_owned()
        };
        if bus != "pci" {
            return Ok(None);
        }
        let eal_va = super::eal::Eal::get().is_some_and(|e| e.iova_is_va());
        if !eal_va || !mempool.is_registered() {
            return Err(DpdkError::Config(format!(
                "{name}: a PCI device needs IOVA as VA (vfio-pci with an IOMMU) and the buffer \
                 region registered with DPDK"
            )));
        }
        let (base, len) = mempool.pool().memory();
        // SAFETY: the device is valid; the region is registered external memory that outlives
        // the mapping (the port holds the mempool, which holds the pool; unmapped in Drop).
        check(&format!("{name}: rte_dev_dma_map"), unsafe {
            sys::rte_dev_dma_map(info.device, base.cast(), base as u64, len)
        })?;
        Ok(Some(info.device as usize))
    }

    /// The ethdev port id.
    pub fn port_id(&self) -> u16 {
        self.inner.port_id
    }

    /// Queue pairs (one per worker).
    pub fn queues(&self) -> usize {
        self.inner.queues as usize
    }

    /// Whether RSS spreads flows over the queues.
    pub fn rss(&self) -> bool {
        self.inner.rss
    }

    /// The mempool its receive queues fill buffers from.
    pub fn mempool(&self) -> &Arc<DpdkMempool> {
        &self.inner.mempool
    }
}

impl Port for DpdkPort {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn mac(&self) -> [u8; 6] {
        self.inner.mac
    }

    fn link(&self) -> LinkStatus {
        let mut link = sys::rte_eth_link::default();
        // SAFETY: a valid port and an out-parameter.
        let rc = unsafe { sys::rte_eth_link_get_nowait(self.inner.port_id, &mut link) };
        if rc < 0 {
            return LinkStatus::Down(DpdkError::call("rte_eth_link_get_nowait", rc).to_string());
        }
        if link.link_status() == sys::RTE_ETH_LINK_UP as u16 {
            LinkStatus::Up
        } else {
            LinkStatus::Down("the device reports its link down".into())
        }
    }

    fn queue_pair_on_worker(&self) -> bool {
        true
    }

    fn queue_pair(&self, worker: usize) -> Result<QueuePair, PortError> {
        let inner = &self.inner;
        let q = u16::try_from(worker)
            .ok()
            .filter(|&q| q < inner.queues)
            .ok_or_else(|| {
                PortError::Config(format!(
                    "{}: worker {worker}, but the port has {} queue pairs",
                    inner.name, inner.queues
                ))
            })?;
        if inner.taken[q as usize].swap(true, Ordering::AcqRel) {
            return Err(PortError::Config(format!(
                "{}: queue pair {q} was already handed out",
                inner.name
            )));
        }
        let lcore = Lcore::current().inspect_err(|_| {
            inner.taken[q as usize].store(false, Ordering::Release);
        })?;
        tracing::debug!(port = %inner.name, queue = q, lcore = lcore.id(), "DPDK queue pair");
        let map = inner.mempool.map();
        Ok(QueuePair {
            rx: Box::new(DpdkRxQueue {
                port: inner.clone(),
                queue: q,
                map,
                mbufs: Box::new([std::ptr::null_mut(); BURST]),
                lcore: lcore.clone(),
            }),
            tx: Box::new(DpdkTxQueue {
                port: inner.clone(),
                queue: q,
                map,
                mbufs: Box::new([std::ptr::null_mut(); BURST]),
                lcore,
            }),
        })
    }

    fn stats(&self) -> PortStats {
        let inner = &self.inner;
        let mut s = sys::rte_eth_stats::default();
        // SAFETY: a valid port and an out-parameter.
        let rc = unsafe { sys::rte_eth_stats_get(inner.port_id, &mut s) };
        if rc < 0 {
            tracing::warn!(port = %inner.name, error = %DpdkError::call("rte_eth_stats_get", rc), "no port counters");
        }
        let sum = |f: fn(&QueueCounters) -> &AtomicU64| -> u64 {
            inner
                .counters
                .iter()
                .map(|c| f(c).load(Ordering::Relaxed))
                .sum()
        };
        let refused = sum(|c| &c.tx_refused);
        PortStats {
            rx_packets: s.ipackets,
            rx_bytes: s.ibytes,
            tx_packets: s.opackets,
            tx_bytes: s.obytes,
            rx_dropped: s.imissed + s.ierrors + s.rx_nombuf,
            tx_dropped: s.oerrors + refused,
            detail: vec![
                ("imissed".into(), s.imissed),
                ("ierrors".into(), s.ierrors),
                ("rx-nombuf".into(), s.rx_nombuf),
                ("oerrors".into(), s.oerrors),
                ("tx-ring-full".into(), refused),
                ("rx-chained".into(), sum(|c| &c.chained)),
                ("rx-foreign-mbuf".into(), sum(|c| &c.foreign)),
                ("rx-bad-length".into(), sum(|c| &c.bad_length)),
                ("mempool-cached".into(), inner.mempool.cached() as u64),
            ],
        }
    }
}

impl Drop for PortInner {
    fn drop(&mut self) {
        let id = self.port_id;
        // SAFETY: no queue of this port is in use (each holds this struct); stopping and closing
        // releases the device's queues, whose posted buffers go back to the mempool.
        unsafe {
            let rc = sys::rte_eth_dev_stop(id);
            if rc < 0 {
                tracing::warn!(port = %self.name, error = %DpdkError::call("rte_eth_dev_stop", rc), "stopping");
            }
            if let Some(dev) = self.dma_device {
                let (base, len) = self.mempool.pool().memory();
                sys::rte_dev_dma_unmap(dev as *mut sys::rte_device, base.cast(), base as u64, len);
            }
            let rc = sys::rte_eth_dev_close(id);
            if rc < 0 {
                tracing::warn!(port = %self.name, error = %DpdkError::call("rte_eth_dev_close", rc), "closing");
            }
        }
        // Buffers the driver released on this thread may sit in its lcore cache (the main
        // lcore's, if this is the thread that started the EAL).
        self.mempool.flush_current_lcore_cache();
        tracing::info!(port = %self.name, "DPDK port closed");
    }
}

/// One worker's receive queue of a [`DpdkPort`].
pub struct DpdkRxQueue {
    port: Arc<PortInner>,
    queue: u16,
    map: MbufMap,
    mbufs: Box<[*mut sys::rte_mbuf; BURST]>,
    lcore: Arc<Lcore>,
}

// SAFETY: the raw pointers are scratch space for one burst at a time; the queue is used by one
// thread at a time (RxQueue takes `&mut self`), as DPDK requires of a queue.
unsafe impl Send for DpdkRxQueue {}

impl RxQueue for DpdkRxQueue {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        let n = out.len().min(BURST);
        // SAFETY: a started port's queue owned by this worker; room for `n` mbuf pointers.
        let got = unsafe {
            sys::rte_eth_rx_burst(
                self.port.port_id,
                self.queue,
                self.mbufs.as_mut_ptr(),
                n as u16,
            )
        } as usize;
        if got == 0 {
            return 0;
        }
        let mut tally = RxTally::default();
        // SAFETY: the driver handed us `got` valid mbufs of its mempool (ours) or another's;
        // `buffers` draws from the pool our mempool is built over.
        let k = unsafe { burst::receive(&self.map, buffers, &self.mbufs[..got], out, &mut tally) };
        if tally.chained | tally.foreign | tally.bad_length != 0 {
            let c = &self.port.counters[self.queue as usize];
            bump(&c.chained, tally.chained);
            bump(&c.foreign, tally.foreign);
            bump(&c.bad_length, tally.bad_length);
        }
        k
    }
}

impl Drop for DpdkRxQueue {
    fn drop(&mut self) {
        if self.lcore.is_current_thread() {
            self.port.mempool.flush_current_lcore_cache();
        }
    }
}

/// One worker's transmit queue of a [`DpdkPort`].
pub struct DpdkTxQueue {
    port: Arc<PortInner>,
    queue: u16,
    map: MbufMap,
    mbufs: Box<[*mut sys::rte_mbuf; BURST]>,
    lcore: Arc<Lcore>,
}

// SAFETY: as for DpdkRxQueue.
unsafe impl Send for DpdkTxQueue {}

impl TxQueue for DpdkTxQueue {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        let mut sent = 0;
        for chunk in packets.chunks(BURST) {
            // SAFETY: the caller owns `packets` (TxQueue contract), from the pool our mempool is
            // built over; `mbufs` holds BURST pointers.
            unsafe { burst::prepare_transmit(&self.map, buffers, chunk, &mut self.mbufs[..]) };
            // SAFETY: a started port's queue owned by this worker; `chunk.len()` prepared mbufs,
            // which the driver now owns as far as it takes them.
            let n = unsafe {
                sys::rte_eth_tx_burst(
                    self.port.port_id,
                    self.queue,
                    self.mbufs.as_mut_ptr(),
                    chunk.len() as u16,
                )
            } as usize;
            sent += n;
            if n < chunk.len() {
                // SAFETY: the rest are still ours.
                unsafe { burst::unlink_refused(&self.map, buffers, &chunk[n..]) };
                bump(
                    &self.port.counters[self.queue as usize].tx_refused,
                    (packets.len() - sent) as u64,
                );
                break;
            }
        }
        sent
    }
}

impl Drop for DpdkTxQueue {
    fn drop(&mut self) {
        if self.lcore.is_current_thread() {
            self.port.mempool.flush_current_lcore_cache();
        }
    }
}
