//! The application-facing interface: link state, counters and the copy-mode data path.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use nix::poll::PollFlags;

use crate::counters::{Counters, SharedCounters};
use crate::msg::Mode;
use crate::queue::{
    self, fd_ready, PeerFrame, Queue, RxQueue, RxScratch, RxSink, Shared, TxQueue, TxSource,
};
use crate::refusal::{Refusal, Refusals};
use crate::region::Region;
use crate::ring::{RingRef, Role, MAX_FRAME};

/// Configuration of one interface (either role).
#[derive(Debug, Clone)]
pub struct InterfaceConfig {
    /// Interface id, unique per control socket.
    pub id: u32,
    /// Our interface name (sent in CONNECT / CONNECTED).
    pub name: String,
    /// ETHERNET or IP.
    pub mode: Mode,
    /// Shared secret (at most 23 bytes); `None` on a master accepts any secret.
    pub secret: Option<String>,
    /// Copy-mode buffer size (slave: size of each posted buffer; master: largest descriptor
    /// length accepted).
    pub buffer_size: u32,
    /// log2 of the ring size the slave asks for (≤ 14).
    pub log2_ring_size: u8,
    /// Queue pairs: a slave asks for this many (fewer when the master's HELLO allows fewer); a
    /// master accepts at most this many rings of each direction and refuses a slave offering
    /// more, as libmemif does.
    pub queue_pairs: u16,
}

impl InterfaceConfig {
    /// Defaults: ETHERNET, no secret, 2048-byte buffers, 1024-slot rings, one queue pair.
    pub fn new(id: u32) -> InterfaceConfig {
        InterfaceConfig {
            id,
            name: format!("memif{id}"),
            mode: Mode::Ethernet,
            secret: None,
            buffer_size: 2048,
            log2_ring_size: 10,
            queue_pairs: 1,
        }
    }
}

/// Link state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkState {
    /// Connected: the data path works.
    Up,
    /// Not connected, with why.
    Down(String),
}

/// What a connection's two sides settled on in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// Receive queues (rings toward this side).
    pub rx_queues: usize,
    /// Transmit queues.
    pub tx_queues: usize,
    /// Descriptors per ring (the first ring's: the slave makes them all alike).
    pub ring_size: u16,
    /// Bytes per buffer: the slave's own on a slave; on a master, the length of the slave's
    /// first master-to-slave descriptor as the slave set it up (libmemif and DPDK initialise
    /// every descriptor before CONNECT), `None` when it had not.
    pub buffer_size: Option<u32>,
}

/// A diagnostic snapshot of one ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingState {
    /// Descriptor count.
    pub size: u16,
    /// Shared head (written by the slave).
    pub head: u16,
    /// Shared tail (written by the master).
    pub tail: u16,
    /// Shared flags (bit 0 = MASK_INT).
    pub flags: u16,
    /// This side's private index (consumed or produced up to).
    pub local: u16,
}

/// The shared state of a live connection.
#[derive(Debug)]
pub(crate) struct Connection {
    /// Queues still owned by the interface (empty once detached).
    pub(crate) rx: Vec<Queue>,
    pub(crate) tx: Vec<Queue>,
    rx_count: usize,
    tx_count: usize,
    pub(crate) shared: Arc<Shared>,
    negotiated: Option<Negotiated>,
}

impl Connection {
    pub(crate) fn new(
        rx: Vec<Queue>,
        tx: Vec<Queue>,
        regions: Vec<Region>,
        buffer_size: u32,
    ) -> Connection {
        Connection {
            rx_count: rx.len(),
            tx_count: tx.len(),
            rx,
            tx,
            shared: Shared::new(regions, buffer_size),
            negotiated: None,
        }
    }

    fn ring(&self, q: &Queue) -> Option<RingRef<'_>> {
        self.shared.regions.get(q.region).map(|r| q.ring.at(r))
    }
}

/// Queues detached from an interface by [`Interface::detach_queues`].
#[derive(Debug)]
pub struct DetachedQueues {
    /// Receive queues, by queue index.
    pub rx: Vec<RxQueue>,
    /// Transmit queues, by queue index.
    pub tx: Vec<TxQueue>,
}

/// A memif interface: link state, counters and the burst API.
#[derive(Debug)]
pub struct Interface {
    pub(crate) config: InterfaceConfig,
    role: Role,
    link: LinkState,
    pub(crate) conn: Option<Connection>,
    counters: Counters,
    peer_name: String,
    rx_interrupt: Vec<bool>,
    scratch: Vec<u8>,
    rx_scratch: RxScratch,
    /// Counters of detached queues, by queue index (kept across reconnects).
    rx_stats: Vec<Arc<SharedCounters>>,
    tx_stats: Vec<Arc<SharedCounters>>,
    refusals: Refusals,
}

impl Interface {
    pub(crate) fn new(config: InterfaceConfig, role: Role) -> Interface {
        Interface {
            config,
            role,
            link: LinkState::Down("not connected".into()),
            conn: None,
            counters: Counters::default(),
            peer_name: String::new(),
            rx_interrupt: Vec::new(),
            scratch: Vec::with_capacity(MAX_FRAME),
            rx_scratch: RxScratch::new(),
            rx_stats: Vec::new(),
            tx_stats: Vec::new(),
            refusals: Refusals::default(),
        }
    }

    /// The interface id.
    pub fn id(&self) -> u32 {
        self.config.id
    }

    /// Master or slave.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The configuration.
    pub fn config(&self) -> &InterfaceConfig {
        &self.config
    }

    /// Current link state (with the reason of the last disconnect when down).
    pub fn link(&self) -> &LinkState {
        &self.link
    }

    /// Whether the link is up.
    pub fn is_up(&self) -> bool {
        self.link == LinkState::Up
    }

    /// The peer's interface name (from CONNECT / CONNECTED).
    pub fn peer_name(&self) -> &str {
        &self.peer_name
    }

    /// Counters, including the traffic of detached queues.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        for s in self.rx_stats.iter().chain(self.tx_stats.iter()) {
            c.add(&s.snapshot());
        }
        c
    }

    /// Total bad descriptors dropped, all reasons.
    pub fn bad_descriptors(&self) -> u64 {
        let c = self.counters();
        c.bad_desc_region
            + c.bad_desc_offset
            + c.bad_desc_zero_length
            + c.bad_desc_too_long
            + c.bad_desc_chain
    }

    /// What the handshake settled on, while connected.
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.conn.as_ref().and_then(|c| c.negotiated)
    }

    /// Why peers were refused (a master's interfaces; a slave's are always empty: its link's
    /// down reason says why the master refused it).
    pub fn refusals(&self) -> &Refusals {
        &self.refusals
    }

    /// Records a refusal; returns whether it is news (see [`Refusals::record`]).
    pub(crate) fn refuse(&mut self, r: Refusal) -> bool {
        self.refusals.record(r)
    }

    /// Number of receive queues while connected (0 when down).
    pub fn rx_queues(&self) -> usize {
        self.conn.as_ref().map_or(0, |c| c.rx_count)
    }

    /// Number of transmit queues while connected (0 when down).
    pub fn tx_queues(&self) -> usize {
        self.conn.as_ref().map_or(0, |c| c.tx_count)
    }

    pub(crate) fn set_up(&mut self, mut conn: Connection, peer_name: String) {
        let first_ring = conn.rx.first().or(conn.tx.first());
        let ring_size = first_ring.map_or(0, |q| q.ring.size());
        let buffer_size = match self.role {
            Role::Slave => Some(self.config.buffer_size),
            // The slave's buffers are what its master-to-slave descriptors describe.
            Role::Master => conn
                .tx
                .first()
                .and_then(|q| conn.ring(q))
                .map(|r| r.read_desc(0).length)
                .filter(|&l| l != 0),
        };
        conn.negotiated = Some(Negotiated {
            rx_queues: conn.rx_count,
            tx_queues: conn.tx_count,
            ring_size,
            buffer_size,
        });
        self.conn = Some(conn);
        self.peer_name = peer_name;
        self.link = LinkState::Up;
        self.counters.connects += 1;
        let n = self.rx_queues();
        self.rx_interrupt.resize(n, false);
        for q in 0..n {
            let on = self.rx_interrupt[q];
            self.apply_rx_mode(q, on);
        }
        // Start from the ring indices as they are now: a master (DPDK's, for one) may reset them
        // while connecting, so the slave posts its receive buffers only once CONNECTED arrived.
        if let Some(c) = self.conn.as_mut() {
            let role = self.role;
            let bsize = c.shared.buffer_size;
            for (is_rx, q) in
                c.rx.iter_mut()
                    .map(|q| (true, q))
                    .chain(c.tx.iter_mut().map(|q| (false, q)))
            {
                let Some(r) = c.shared.regions.get(q.region).map(|r| q.ring.at(r)) else {
                    continue;
                };
                let tail = r.tail().load(Ordering::Acquire);
                q.idx = tail;
                if role == Role::Slave {
                    q.posted = tail;
                    if is_rx {
                        queue::refill(r, q, bsize);
                    } else {
                        r.head().store(tail, Ordering::Release);
                    }
                }
            }
        }
    }

    pub(crate) fn set_down(&mut self, reason: String) {
        if let Some(c) = self.conn.take() {
            c.shared.set_dead();
            self.counters.disconnects += 1;
        }
        if self.link != LinkState::Down(reason.clone()) {
            tracing::info!(id = self.config.id, %reason, "memif link down");
            self.link = LinkState::Down(reason);
        }
    }

    fn apply_rx_mode(&mut self, queue: usize, interrupt: bool) {
        if let Some(c) = self.conn.as_ref() {
            if let Some(q) = c.rx.get(queue) {
                if let Some(r) = c.ring(q) {
                    r.set_mask_int(!interrupt);
                }
            }
        }
    }

    /// Diagnostic snapshot of receive ring `queue` (`tx == false`) or transmit ring `queue`.
    pub fn ring_state(&self, tx: bool, queue: usize) -> Option<RingState> {
        let c = self.conn.as_ref()?;
        let q = if tx {
            c.tx.get(queue)?
        } else {
            c.rx.get(queue)?
        };
        let r = c.ring(q)?;
        Some(RingState {
            size: r.size(),
            head: r.head().load(Ordering::Acquire),
            tail: r.tail().load(Ordering::Acquire),
            flags: r.flags().load(Ordering::Acquire),
            local: q.idx,
        })
    }

    /// Choose interrupt mode (`true`: the peer signals the rx eventfd after publishing) or polling
    /// mode (`false`, the default: MASK_INT set, no signals) for a receive queue. Kept across
    /// reconnects.
    pub fn set_rx_interrupt(&mut self, queue: usize, interrupt: bool) {
        if self.rx_interrupt.len() <= queue {
            self.rx_interrupt.resize(queue + 1, false);
        }
        self.rx_interrupt[queue] = interrupt;
        self.apply_rx_mode(queue, interrupt);
    }

    /// The eventfd the peer signals when it publishes on receive queue `queue` (poll it for
    /// `POLLIN`, then call [`clear_rx_event`](Self::clear_rx_event)).
    pub fn rx_event_fd(&self, queue: usize) -> Option<BorrowedFd<'_>> {
        self.conn
            .as_ref()
            .and_then(|c| c.rx.get(queue))
            .map(|q| q.eventfd.as_fd())
    }

    /// Drain the receive eventfd of `queue` without blocking; returns the count read.
    pub fn clear_rx_event(&self, queue: usize) -> u64 {
        let Some(fd) = self.rx_event_fd(queue) else {
            return 0;
        };
        if !fd_ready(fd, PollFlags::POLLIN) {
            return 0;
        }
        let mut b = [0u8; 8];
        match nix::unistd::read(fd, &mut b) {
            Ok(8) => u64::from_ne_bytes(b),
            _ => 0,
        }
    }

    /// Receive up to `max` frames from `queue`, calling `f` with each frame's bytes (a private
    /// copy: the peer cannot change it). Returns the number of frames delivered.
    pub fn rx_burst(&mut self, queue: usize, max: usize, f: &mut impl FnMut(&[u8])) -> usize {
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut sink = |frame: &PeerFrame<'_>| {
            scratch.resize(frame.len(), 0);
            if frame.copy_to(0, &mut scratch) {
                f(&scratch);
            }
            true
        };
        let n = self.rx_burst_to(queue, max, &mut sink);
        self.scratch = scratch;
        n
    }

    /// Receive up to `max` frames from `queue` into `sink`, which copies each frame straight out
    /// of the peer's memory (see [`PeerFrame`]). Returns the number of frames delivered.
    pub fn rx_burst_to(&mut self, queue: usize, max: usize, sink: &mut impl RxSink) -> usize {
        let role = self.role;
        let Some(c) = self.conn.as_mut() else {
            return 0;
        };
        let Some(q) = c.rx.get_mut(queue) else {
            return 0;
        };
        queue::receive(
            &c.shared,
            q,
            role,
            &mut self.rx_scratch,
            &mut self.counters,
            max,
            sink,
        )
    }

    /// Receive up to `bufs.len()` frames from `queue` into caller-provided vectors (each cleared
    /// and filled with one frame). Returns the number filled.
    pub fn rx_burst_into(&mut self, queue: usize, bufs: &mut [Vec<u8>]) -> usize {
        let mut i = 0;
        let max = bufs.len();
        self.rx_burst_to(queue, max, &mut |frame: &PeerFrame<'_>| {
            if let Some(b) = bufs.get_mut(i) {
                b.resize(frame.len(), 0);
                if !frame.copy_to(0, b) {
                    b.clear();
                }
            }
            i += 1;
            true
        })
    }

    /// Send frames on `queue`, in order, until the ring is full. Returns how many frames were
    /// taken (sent, or dropped and counted in `tx_dropped`); the caller still owns the rest.
    /// Frames larger than a buffer are split over NEXT-chained descriptors. Empty frames, frames
    /// over [`MAX_FRAME`] or needing more slots than the whole ring, and (master side) frames
    /// that meet a bad posted descriptor are dropped and counted.
    pub fn tx_burst(&mut self, queue: usize, frames: &[&[u8]]) -> usize {
        self.tx_burst_from(queue, frames)
    }

    /// Like [`Interface::tx_burst`], for frames from any [`TxSource`] (non-contiguous frames
    /// too): each is copied once, into the peer's buffers.
    pub fn tx_burst_from(&mut self, queue: usize, src: &(impl TxSource + ?Sized)) -> usize {
        let role = self.role;
        let Some(c) = self.conn.as_mut() else {
            return 0;
        };
        let Some(q) = c.tx.get_mut(queue) else {
            return 0;
        };
        queue::transmit(&c.shared, q, role, &mut self.counters, src, &mut 0)
    }

    /// Slots of transmit queue `queue` the peer has not consumed yet: for a slave, frames on the
    /// ring the master has not taken (they are lost if the link goes now); 0 for a master and
    /// when the link is down. A sender that is done waits for this to reach 0 before leaving.
    pub fn tx_unconsumed(&self, queue: usize) -> usize {
        let Some(c) = self.conn.as_ref() else {
            return 0;
        };
        c.tx.get(queue)
            .map_or(0, |q| queue::unconsumed(&c.shared, q, self.role))
    }

    /// Hand this connection's queues to other threads: every receive and transmit queue, by
    /// index, each usable from its own thread. Returns `None` when the link is down or the
    /// queues were already detached. Afterwards this interface's own burst calls do nothing for
    /// this connection; its counters still include the detached queues' traffic. When the
    /// connection goes down the detached queues stop working (see [`RxQueue::is_live`]) and are
    /// meant to be dropped; the next connection's queues are detached anew.
    pub fn detach_queues(&mut self) -> Option<DetachedQueues> {
        let role = self.role;
        let c = self.conn.as_mut()?;
        if c.rx.is_empty() && c.tx.is_empty() {
            return None;
        }
        let stats = |v: &mut Vec<Arc<SharedCounters>>, i: usize| {
            if v.len() <= i {
                v.resize_with(i + 1, Default::default);
            }
            v[i].clone()
        };
        let rx =
            c.rx.drain(..)
                .enumerate()
                .map(|(i, q)| RxQueue::new(c.shared.clone(), q, role, stats(&mut self.rx_stats, i)))
                .collect();
        let tx =
            c.tx.drain(..)
                .enumerate()
                .map(|(i, q)| TxQueue::new(c.shared.clone(), q, role, stats(&mut self.tx_stats, i)))
                .collect();
        Some(DetachedQueues { rx, tx })
    }
}
