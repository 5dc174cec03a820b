//! [`MemifPort`]: one memif port: its queue pairs, one per worker, its link and counters, and
//! the cut-through from its receive queues to another memif port's transmit queues.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use memif::Mode;

use super::config::MemifPortConfig;
use super::counters::read;
use super::cut_through::CutThrough;
use super::into_buffers::{ip_mode_header, ETH_HEADER};
use super::rx::MemifRx;
use super::tx::MemifTx;
use super::worker::WorkerSlots;
use crate::port::{LinkStatus, Port, PortError, PortStats, QueuePair};

/// A memif port (see the module docs). Created by [`super::MemifControl::add_port`].
pub struct MemifPort {
    pub(super) config: MemifPortConfig,
    link: Mutex<LinkStatus>,
    /// Each worker's end of the port.
    pub(super) workers: Vec<Arc<WorkerSlots>>,
    taken: Mutex<Vec<bool>>,
    /// The interface as last seen by the control thread.
    status: Mutex<MemifStatus>,
}

/// What the control thread last saw of a port's memif interface.
#[derive(Debug, Clone, Default)]
pub struct MemifStatus {
    /// Its counters (bad descriptors by reason, connects …).
    pub counters: memif::Counters,
    /// What the current connection's handshake settled on (`None` while down).
    pub negotiated: Option<memif::Negotiated>,
    /// Why peers were refused (a master's).
    pub refusals: memif::Refusals,
}

impl MemifPort {
    /// A port set up as `config`, with one queue pair for each of `workers` workers; its link
    /// is down until the control thread connects it.
    pub(super) fn new(config: MemifPortConfig, workers: usize) -> MemifPort {
        MemifPort {
            link: Mutex::new(LinkStatus::Down("not connected yet".into())),
            workers: (0..workers).map(|_| Arc::new(WorkerSlots::new())).collect(),
            taken: Mutex::new(vec![false; workers]),
            status: Mutex::new(MemifStatus::default()),
            config,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MemifPortConfig {
        &self.config
    }

    /// The memif interface's own counters (bad descriptors by reason, connects …), as of the
    /// control thread's last look.
    pub fn memif_counters(&self) -> memif::Counters {
        self.status().counters
    }

    /// The memif interface as of the control thread's last look: counters, what the current
    /// connection settled on, refusals.
    pub fn status(&self) -> MemifStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Queue pairs usable on the current connection (0 when down): the fewer of its receive
    /// and transmit queues.
    pub fn connected_queues(&self) -> usize {
        self.status()
            .negotiated
            .map_or(0, |n| n.rx_queues.min(n.tx_queues))
    }

    pub(super) fn set_link(&self, l: LinkStatus) {
        *self.link.lock().unwrap_or_else(|e| e.into_inner()) = l;
    }

    /// Records what the control thread sees of the interface (the refusals copied only when
    /// there are new ones).
    pub(super) fn set_status(&self, iface: &memif::Interface) {
        let mut s = self.status.lock().unwrap_or_else(|e| e.into_inner());
        s.counters = iface.counters();
        s.negotiated = iface.negotiated();
        if s.refusals.total() != iface.refusals().total() {
            s.refusals = iface.refusals().clone();
        }
    }

    /// Cuts this port through to `to` on worker `worker`: from its next burst, this port's
    /// receive queue on that worker sends the frames its peer sends straight into `to`'s
    /// transmit ring on the same worker (one copy, peer to peer, no Quiver buffer, no graph
    /// node), whenever the input node polling it allows a bypass (no trace, no capture) and
    /// `to`'s link is up, for as long as `on` stays set (clearing it ends the cut-through from
    /// the next burst) and `to`'s transmit queue there is not dropped. `count` is told the
    /// (packets, bytes) of each burst, on the worker's thread. Replaces an earlier cut-through
    /// of this port on that worker.
    ///
    /// Returns false, changing nothing, when either port is in IP mode (which adds or strips a
    /// header: that needs a Quiver buffer) or either queue is not taken on that worker.
    pub fn cut_through(
        &self,
        worker: usize,
        to: &MemifPort,
        count: Box<dyn FnMut(u64, u64) + Send>,
        on: Arc<AtomicBool>,
    ) -> bool {
        if self.config.mode != Mode::Ethernet || to.config.mode != Mode::Ethernet {
            return false;
        }
        let (Some(from), Some(to)) = (self.workers.get(worker), to.workers.get(worker)) else {
            return false;
        };
        if !from.rx_open.load(Ordering::Acquire) || !to.tx.is_open() {
            return false;
        }
        let c = CutThrough::new(to.tx.clone(), count, on);
        from.rx.update(|change| change.cut_through = Some(c));
        true
    }
}

impl Port for MemifPort {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn mac(&self) -> [u8; 6] {
        self.config.mac
    }

    fn link(&self) -> LinkStatus {
        self.link.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn queue_pair(&self, worker: usize) -> Result<QueuePair, PortError> {
        let slots = self.workers.get(worker).ok_or_else(|| {
            PortError::Config(format!(
                "{}: worker {worker} out of range (opened for {})",
                self.config.name,
                self.workers.len()
            ))
        })?;
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        if std::mem::replace(&mut taken[worker], true) {
            return Err(PortError::Config(format!(
                "{}: queue pair {worker} already taken",
                self.config.name
            )));
        }
        let ip = self.config.mode == Mode::Ip;
        Ok(QueuePair {
            rx: Box::new(MemifRx::new(
                slots.clone(),
                ip.then(|| ip_mode_header(self.config.mac)),
            )),
            tx: Box::new(MemifTx::new(
                slots.tx.clone(),
                if ip { ETH_HEADER } else { 0 },
            )),
        })
    }

    fn point_to_point(&self) -> bool {
        self.config.mode == Mode::Ip
    }

    fn stats(&self) -> PortStats {
        let mut s = PortStats::default();
        let mut no_buffer = 0;
        let (mut link_down, mut too_short) = (0, 0);
        let (mut zero_copy, mut copied, mut held, mut p2p) = (0, 0, 0, 0);
        let mut cut_through = 0;
        for w in &self.workers {
            let (r, t) = (&w.rx_counters, &w.tx.counters);
            zero_copy += read(&r.zero_copy);
            cut_through += read(&r.cut_through);
            copied += read(&r.copied);
            held += read(&r.held);
            p2p += read(&t.peer_to_peer);
            s.rx_packets += read(&r.packets);
            s.rx_bytes += read(&r.bytes);
            no_buffer += read(&r.no_buffer);
            s.tx_packets += read(&t.packets);
            s.tx_bytes += read(&t.bytes);
            link_down += read(&t.link_down);
            too_short += read(&t.too_short);
        }
        let m = self.memif_counters();
        let bad = m.bad_desc_region
            + m.bad_desc_offset
            + m.bad_desc_zero_length
            + m.bad_desc_too_long
            + m.bad_desc_chain;
        s.rx_dropped = bad + no_buffer;
        s.tx_dropped = m.tx_dropped + link_down + too_short;
        s.detail = vec![
            ("rx-no-buffer".into(), no_buffer),
            ("rx-zero-copy".into(), zero_copy),
            ("rx-copied".into(), copied),
            ("rx-held".into(), held),
            ("rx-cut-through".into(), cut_through),
            ("tx-peer-to-peer".into(), p2p),
            ("tx-link-down".into(), link_down),
            ("tx-too-short".into(), too_short),
            ("memif-tx-dropped".into(), m.tx_dropped),
            ("bad-desc-region".into(), m.bad_desc_region),
            ("bad-desc-offset".into(), m.bad_desc_offset),
            ("bad-desc-zero-length".into(), m.bad_desc_zero_length),
            ("bad-desc-too-long".into(), m.bad_desc_too_long),
            ("bad-desc-chain".into(), m.bad_desc_chain),
            ("ring-index-overrun".into(), m.ring_index_overrun),
            ("connects".into(), m.connects),
            ("disconnects".into(), m.disconnects),
        ];
        let refusals = self.status().refusals;
        s.detail.extend(
            refusals
                .counts()
                .map(|(kind, n)| (kind.counter_name().to_string(), n)),
        );
        s
    }
}
