//! memif ports: Quiver's end of memif interfaces, master or slave, one queue pair per worker.
//!
//! The control side (sockets, handshakes, reconnects) runs on one thread, [`MemifControl`], that
//! serves every memif port: it listens on each master socket (one socket serves many interface
//! ids) and drives each slave. When a link comes up it detaches the connection's queues and hands
//! queue pair `w` to worker `w` through a [`QueueSlot`]; the worker picks it up on its next poll
//! with one atomic load (a lock is taken only when the slot changed).
//!
//! Copies: between two memif ports a frame is copied once, from one peer's buffer straight into
//! the other's. In ETHERNET mode a one-descriptor frame that fits a Quiver buffer is received
//! without a copy: the Quiver buffer is an external-payload buffer (see
//! `dataplane::buffer::ExternalSource`) naming the frame in the queue's
//! [`HeldFrames`](memif::queue::HeldFrames), and the frame's ring slot stays taken (slots go
//! back to the peer in ring order) until the buffer is freed or copied in. The peer's memory is
//! still never parsed in place: a node that reads or writes the bytes gets them copied into the
//! Quiver buffer first. A memif transmit copies an external frame from the other peer's memory
//! straight into its own peer's (`tx-peer-to-peer`); any other frame from the Quiver buffer.
//! Chained frames and IP mode (which adds a header) copy on receive (`rx-copied`).
//!
//! Cut-through: a receive queue paired with another memif port's transmit queue
//! ([`RxQueue::pair`]) forwards straight to it ([`RxQueue::forward`], with
//! [`memif::RxQueue::forward_to`]): no Quiver buffer at all, counted as `rx-cut-through`. The
//! transmit queue then has two users on the worker, `interface-output` and the paired receive
//! queue; it lives in a `TxHome` each takes it from for one call.
//!
//! In IP mode the peer sends bare IP packets: a receive adds an Ethernet header (to the port's
//! MAC, ethertype from the IP version) so the graph sees what it always sees, and a transmit
//! leaves the Ethernet header out.

use std::cell::Cell;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_utils::atomic::AtomicCell;
use dataplane::buffer::ExternalSource;
use dataplane::{CutThrough, RxQueue, TxQueue, WorkerBuffers};
use memif::queue::{HeldFrames, Hold, HoldSink, Taken};
use memif::{
    Interface, InterfaceConfig, Master, MasterConfig, Mode, PeerFrame, Role, Slave, SocketAddress,
    TxSource,
};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::netns::{NetNs, NetNsId};
use crate::port::{LinkStatus, Port, PortError, PortStats, QueuePair};

const ETH_HEADER: usize = 14;

/// How one memif port is set up.
#[derive(Debug, Clone)]
pub struct MemifPortConfig {
    /// The port's name in Quiver.
    pub name: String,
    /// Master (listen) or slave (connect).
    pub role: Role,
    /// The control socket (`/path` or `@abstract`).
    pub socket: SocketAddress,
    /// The memif interface id on that socket.
    pub id: u32,
    /// Shared secret, if any.
    pub secret: Option<String>,
    /// ETHERNET or IP.
    pub mode: Mode,
    /// log2 of the ring size (slave: asked for).
    pub log2_ring_size: u8,
    /// Size of each memif buffer (slave) or largest descriptor accepted (master).
    pub buffer_size: u32,
    /// The port's MAC address.
    pub mac: [u8; 6],
    /// The network namespace the control socket lives in (`None`: Quiver's own). A master
    /// binds its socket there (an abstract `@name` is then reachable from that namespace only);
    /// a slave connects, and reconnects, from there.
    pub netns: Option<NetNs>,
}

impl MemifPortConfig {
    /// A port called `name` on `socket` with interface `id`: ETHERNET mode, 1024-slot rings,
    /// 2048-byte buffers, no secret, a locally administered MAC derived from the id.
    pub fn new(name: &str, role: Role, socket: SocketAddress, id: u32) -> Self {
        let b = id.to_be_bytes();
        MemifPortConfig {
            name: name.into(),
            role,
            socket,
            id,
            secret: None,
            mode: Mode::Ethernet,
            log2_ring_size: 10,
            buffer_size: 2048,
            mac: [0x02, 0xfe, b[0], b[1], b[2], b[3]],
            netns: None,
        }
    }
}

/// Where the control thread leaves a worker's current queue (or `None` when the link is down).
struct QueueSlot<Q> {
    generation: AtomicU64,
    queue: Mutex<Option<Q>>,
}

impl<Q> QueueSlot<Q> {
    fn new() -> Self {
        QueueSlot {
            generation: AtomicU64::new(0),
            queue: Mutex::new(None),
        }
    }

    fn put(&self, q: Option<Q>) {
        *self.queue.lock().unwrap_or_else(|e| e.into_inner()) = q;
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The new queue if the slot changed since generation `seen`.
    #[inline]
    fn take_if_changed(&self, seen: &mut u64) -> Option<Option<Q>> {
        let g = self.generation.load(Ordering::Acquire);
        if g == *seen {
            return None;
        }
        *seen = g;
        Some(self.queue.lock().unwrap_or_else(|e| e.into_inner()).take())
    }
}

/// Single-writer counters of one worker's queue pair.
#[derive(Default)]
struct QueueCounters {
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    rx_no_buffer: AtomicU64,
    /// Frames received without a copy (left in the peer's memory).
    rx_zero_copy: AtomicU64,
    /// Frames copied into Quiver buffers on receive.
    rx_copied: AtomicU64,
    /// Frames received without a copy and not released yet, as of the queue's last poll.
    rx_held: AtomicU64,
    /// Frames received and sent straight to the cross-connected memif port (no Quiver buffer).
    rx_cut_through: AtomicU64,
    /// Frames copied straight from another memif peer's memory into this one's.
    tx_peer_to_peer: AtomicU64,
    tx_packets: AtomicU64,
    tx_bytes: AtomicU64,
    tx_link_down: AtomicU64,
    tx_too_short: AtomicU64,
}

#[inline]
fn bump(c: &AtomicU64, n: u64) {
    if n != 0 {
        // Single writer: a plain load and store, no locked instruction.
        c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }
}

/// One worker's end of a port.
struct WorkerSlots {
    rx: QueueSlot<memif::RxQueue>,
    tx: QueueSlot<memif::TxQueue>,
    counters: QueueCounters,
}

/// A memif port (see the module docs). Created by [`MemifControl::add_port`].
pub struct MemifPort {
    config: MemifPortConfig,
    link: Mutex<LinkStatus>,
    workers: Vec<Arc<WorkerSlots>>,
    taken: Mutex<Vec<bool>>,
    /// The interface's counters as last seen by the control thread.
    memif_counters: Mutex<memif::Counters>,
    peer_queues: AtomicU64,
}

impl MemifPort {
    /// The configuration.
    pub fn config(&self) -> &MemifPortConfig {
        &self.config
    }

    /// The memif interface's own counters (bad descriptors by reason, connects …), as of the
    /// control thread's last look.
    pub fn memif_counters(&self) -> memif::Counters {
        *self
            .memif_counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Queue pairs the peer agreed to on the current connection (0 when down).
    pub fn connected_queues(&self) -> usize {
        self.peer_queues.load(Ordering::Relaxed) as usize
    }

    fn set_link(&self, l: LinkStatus) {
        *self.link.lock().unwrap_or_else(|e| e.into_inner()) = l;
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
            rx: Box::new(MemifRx {
                slots: slots.clone(),
                seen: 0,
                queue: None,
                ip_header: ip.then(|| ip_mode_header(self.config.mac)),
                allocated: [0; 256],
                held_rx: [memif::HeldRx::default(); 256],
                source: None,
                retiring: Vec::new(),
                paired: None,
            }),
            tx: Box::new(MemifTx {
                home: Arc::new(TxHome {
                    slots: slots.clone(),
                    state: AtomicCell::new(Some(Box::new(TxState {
                        seen: 0,
                        queue: None,
                    }))),
                }),
                skip: if ip { ETH_HEADER } else { 0 },
            }),
        })
    }

    fn stats(&self) -> PortStats {
        let mut s = PortStats::default();
        let mut no_buffer = 0;
        let (mut link_down, mut too_short) = (0, 0);
        let (mut zero_copy, mut copied, mut held, mut p2p) = (0, 0, 0, 0);
        let mut cut_through = 0;
        for w in &self.workers {
            let c = &w.counters;
            zero_copy += c.rx_zero_copy.load(Ordering::Relaxed);
            cut_through += c.rx_cut_through.load(Ordering::Relaxed);
            copied += c.rx_copied.load(Ordering::Relaxed);
            held += c.rx_held.load(Ordering::Relaxed);
            p2p += c.tx_peer_to_peer.load(Ordering::Relaxed);
            s.rx_packets += c.rx_packets.load(Ordering::Relaxed);
            s.rx_bytes += c.rx_bytes.load(Ordering::Relaxed);
            no_buffer += c.rx_no_buffer.load(Ordering::Relaxed);
            s.tx_packets += c.tx_packets.load(Ordering::Relaxed);
            s.tx_bytes += c.tx_bytes.load(Ordering::Relaxed);
            link_down += c.tx_link_down.load(Ordering::Relaxed);
            too_short += c.tx_too_short.load(Ordering::Relaxed);
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
        s
    }
}

/// The Ethernet header put in front of packets received in IP mode (ethertype patched per
/// packet).
fn ip_mode_header(mac: [u8; 6]) -> [u8; ETH_HEADER] {
    let mut h = [0u8; ETH_HEADER];
    h[..6].copy_from_slice(&mac);
    h[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    h
}

/// A worker's receive queue of a memif port.
struct MemifRx {
    slots: Arc<WorkerSlots>,
    seen: u64,
    queue: Option<memif::RxQueue>,
    ip_header: Option<[u8; ETH_HEADER]>,
    allocated: [u32; 256],
    /// The frames a burst's fast path held ([`memif::RxQueue::receive_held`]).
    held_rx: [memif::HeldRx; 256],
    /// The current connection's held frames and their source id in the worker's buffers
    /// (ETHERNET mode: IP mode adds a header, so it copies).
    source: Option<(u32, Arc<HeldFrames>)>,
    /// Held frames of earlier connections still in flight: forgotten by the worker's buffers
    /// once all are released.
    retiring: Vec<Arc<HeldFrames>>,
    /// The transmit queue of the memif port this one is cut through to ([`RxQueue::pair`]).
    paired: Option<Arc<TxHome>>,
}

/// A memif queue's held frames as the source of Quiver's external-payload buffers.
struct HeldSource(Arc<HeldFrames>);

impl ExternalSource for HeldSource {
    fn copy_out(&self, token: u32, dst: &mut [u8]) -> bool {
        self.0.copy_out(token, 0, dst)
    }

    fn release(&self, token: u32) {
        self.0.release(token);
    }

    fn release_many(&self, tokens: &[u32]) {
        self.0.release_many(tokens);
    }

    fn is_retired(&self) -> bool {
        self.0.is_retired()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl MemifRx {
    /// Takes a new queue (or none) from the control thread: the old connection's held frames
    /// retire, the new queue holds frames when the port is in ETHERNET mode.
    fn switch(&mut self, buffers: &mut WorkerBuffers, q: Option<memif::RxQueue>) {
        self.queue = q;
        if let Some((_, old)) = self.source.take() {
            self.retiring.push(old);
        }
        if let (Some(q), None) = (self.queue.as_mut(), self.ip_header) {
            let held = q.enable_holding();
            let id = buffers.register_external(Arc::new(HeldSource(held.clone())));
            self.source = Some((id, held));
        }
    }

    /// Picks up a new queue from the control thread, and lets go of the memory of old
    /// connections whose frames are all released.
    #[inline]
    fn refresh(&mut self, buffers: &mut WorkerBuffers) {
        if let Some(q) = self.slots.rx.take_if_changed(&mut self.seen) {
            self.switch(buffers, q);
        }
        if !self.retiring.is_empty() {
            let before = self.retiring.len();
            self.retiring.retain(|h| !h.is_retired());
            if self.retiring.len() < before {
                buffers.prune_external();
            }
        }
    }
}

impl RxQueue for MemifRx {
    /// Pairs with another memif port's transmit queue when both are in ETHERNET mode (IP
    /// mode adds or strips a header, which needs a Quiver buffer).
    fn pair(&mut self, tx: &mut dyn TxQueue) -> bool {
        let Some(tx) = tx.as_any_mut().and_then(|t| t.downcast_mut::<MemifTx>()) else {
            return false;
        };
        if self.ip_header.is_some() || tx.skip != 0 {
            return false;
        }
        self.paired = Some(tx.home.clone());
        true
    }

    fn unpair(&mut self) {
        self.paired = None;
    }

    /// Frames straight from this port's peer into the paired port's
    /// ([`memif::RxQueue::forward_to`]): never more than its ring takes, so a slow peer there
    /// holds frames back here instead of losing them. Not while that port is down (its
    /// transmit queue drops and counts, as the graph path does) or gone.
    fn forward(&mut self, buffers: &mut WorkerBuffers, max: usize) -> Option<CutThrough> {
        self.paired.as_ref()?;
        self.refresh(buffers);
        let home = self.paired.as_ref()?;
        let q = self.queue.as_mut()?;
        let (_, held) = self.source.as_ref()?;
        let mut tx = home.state.take()?;
        tx.refresh(&home.slots);
        let done = tx.live_queue().map(|txq| q.forward_to(txq, max));
        home.state.store(Some(tx));
        let f = done?;
        let c = &self.slots.counters;
        bump(&c.rx_packets, f.received as u64);
        bump(&c.rx_bytes, f.bytes);
        bump(&c.rx_zero_copy, f.received as u64);
        bump(&c.rx_cut_through, f.received as u64);
        c.rx_held.store(held.in_flight(), Ordering::Relaxed);
        let t = &home.slots.counters;
        bump(&t.tx_packets, f.sent);
        bump(&t.tx_bytes, f.sent_bytes);
        bump(&t.tx_peer_to_peer, f.sent);
        Some(CutThrough {
            packets: f.received,
            bytes: f.bytes,
            more: f.more,
        })
    }

    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [u32]) -> usize {
        self.refresh(buffers);
        let Some(q) = self.queue.as_mut() else {
            return 0;
        };
        let c = &self.slots.counters;
        let want = q.ready().min(out.len()).min(self.allocated.len());
        if want == 0 {
            // Slots of frames released since the last burst go back to the peer.
            q.give_back();
            if let Some((_, h)) = &self.source {
                c.rx_held.store(h.in_flight(), Ordering::Relaxed);
            }
            return 0;
        }
        let got = buffers.alloc_up_to(&mut self.allocated[..want]);
        // The common case first: frames held where they are, attached to buffers in one pass.
        let fast = match &self.source {
            Some((id, held)) => {
                let k = q.receive_held(&mut self.held_rx[..got], u32::from(buffers.data_size()));
                attach_held(buffers, *id, held, &self.allocated[..k], &self.held_rx[..k])
            }
            None => FastRx::default(),
        };
        let k = fast.frames;
        let mut sink = IntoBuffers {
            buffers,
            bufs: &self.allocated[k..got],
            filled: 0,
            held: 0,
            bytes: 0,
            header: self.ip_header,
            source: self.source.as_ref().map(|(id, _)| *id),
            no_buffer: false,
        };
        // The rest (chained or long frames, or IP mode) the general way.
        let n = if k < got && q.ready() > 0 {
            k + q.receive_holding(got - k, &mut sink)
        } else {
            k
        };
        let (bytes, held, no_buffer) = (
            sink.bytes + fast.bytes,
            sink.held + fast.held,
            sink.no_buffer,
        );
        out[..n].copy_from_slice(&self.allocated[..n]);
        buffers.free(&self.allocated[n..got]);
        bump(&c.rx_packets, n as u64);
        bump(&c.rx_bytes, bytes);
        bump(&c.rx_zero_copy, held);
        bump(&c.rx_copied, n as u64 - held);
        if let Some((_, h)) = &self.source {
            c.rx_held.store(h.in_flight(), Ordering::Relaxed);
        }
        if no_buffer || (got < want && n == got) {
            bump(&c.rx_no_buffer, 1);
        }
        n
    }
}

/// What [`attach_held`] made of a burst's held frames.
#[derive(Default)]
struct FastRx {
    frames: usize,
    /// Of them, attached as external-payload buffers (the rest were copied).
    held: u64,
    bytes: u64,
}

/// Makes `bufs[i]` the Quiver buffer of held frame `frames[i]`: an external-payload buffer of
/// source `source`, or (should the buffers refuse that) a copy, the frame then released.
#[inline(always)]
fn attach_held(
    buffers: &mut WorkerBuffers,
    source: u32,
    held: &HeldFrames,
    bufs: &[u32],
    frames: &[memif::HeldRx],
) -> FastRx {
    let mut r = FastRx {
        frames: frames.len(),
        ..FastRx::default()
    };
    for (&bi, f) in bufs.iter().zip(frames) {
        // `receive_held` kept frames to the buffers' data size, so the length fits a u16.
        let len = f.len as u16;
        r.bytes += u64::from(f.len);
        if buffers.attach_external(bi, source, f.token, len) {
            r.held += 1;
        } else {
            buffers.set_length(bi, len);
            held.copy_out(f.token, 0, buffers.data_mut(bi));
            held.release(f.token);
        }
    }
    r
}

/// Puts received frames into freshly allocated Quiver buffers: a one-descriptor frame that
/// fits one buffer stays in the peer's memory (an external-payload buffer, copied only when
/// something reads it, or straight into another memif peer's memory on transmit); others
/// are copied.
struct IntoBuffers<'a> {
    buffers: &'a mut WorkerBuffers,
    bufs: &'a [u32],
    filled: usize,
    held: u64,
    bytes: u64,
    header: Option<[u8; ETH_HEADER]>,
    /// The held frames' source id in `buffers`, when this queue holds frames.
    source: Option<u32>,
    no_buffer: bool,
}

impl HoldSink for IntoBuffers<'_> {
    #[inline(always)]
    fn take(&mut self, frame: &PeerFrame<'_>, hold: Option<Hold>) -> Taken {
        let Some(&bi) = self.bufs.get(self.filled) else {
            return Taken::NoRoom;
        };
        if let (Some(h), Some(source), None) = (hold, self.source, self.header) {
            let fits = u16::try_from(frame.len()).ok();
            if fits.is_some_and(|len| self.buffers.attach_external(bi, source, h.token(), len)) {
                self.filled += 1;
                self.held += 1;
                self.bytes += frame.len() as u64;
                return Taken::Held;
            }
        }
        if self.copy(bi, frame) {
            Taken::Copied
        } else {
            Taken::NoRoom
        }
    }
}

impl IntoBuffers<'_> {
    /// Copies `frame` into `bi` (and a chain when it is longer than one buffer).
    #[inline]
    fn copy(&mut self, bi: u32, frame: &PeerFrame<'_>) -> bool {
        let prefix = if self.header.is_some() { ETH_HEADER } else { 0 };
        let total = frame.len() + prefix;
        let seg_size = usize::from(self.buffers.data_size());
        let first = total.min(seg_size);
        self.buffers.set_length(bi, first as u16);
        let dst = self.buffers.data_mut(bi);
        if let Some(mut h) = self.header {
            let mut v = [0u8; 1];
            frame.copy_to(0, &mut v);
            let ethertype: u16 = if v[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
            h[12..].copy_from_slice(&ethertype.to_be_bytes());
            dst[..ETH_HEADER].copy_from_slice(&h);
        }
        frame.copy_to(0, &mut dst[prefix..first]);
        // Frames longer than one Quiver buffer continue in a chain.
        let mut done = first - prefix;
        while done < frame.len() {
            let Some(seg) = self.buffers.alloc_one() else {
                // Out of buffers: leave the frame in the ring for the next burst.
                self.buffers.unchain(bi);
                self.no_buffer = true;
                return false;
            };
            let take = (frame.len() - done).min(seg_size);
            self.buffers.set_length(seg, take as u16);
            frame.copy_to(done, self.buffers.data_mut(seg));
            self.buffers.chain_append(bi, seg);
            done += take;
        }
        self.filled += 1;
        self.bytes += frame.len() as u64;
        true
    }
}

/// A worker's transmit queue of a memif port.
struct MemifTx {
    home: Arc<TxHome>,
    /// Bytes of Ethernet header left out (IP mode).
    skip: usize,
}

/// Where a worker's memif transmit queue lives: used by the port's `interface-output` and by
/// a receive queue cut through to the port ([`MemifRx::forward`]), both on the worker's
/// thread, each taking the state for the length of one call and putting it back (an atomic
/// swap each way, never a wait). Empty once the [`MemifTx`] is dropped.
struct TxHome {
    slots: Arc<WorkerSlots>,
    state: AtomicCell<Option<Box<TxState>>>,
}

// The swap is one atomic instruction, not crossbeam's lock-based fallback.
const _: () = assert!(AtomicCell::<Option<Box<TxState>>>::is_lock_free());

/// A worker's memif transmit queue, as handed over by the control thread.
struct TxState {
    seen: u64,
    queue: Option<memif::TxQueue>,
}

impl TxState {
    /// Picks up a new queue (or none) from the control thread.
    #[inline]
    fn refresh(&mut self, slots: &WorkerSlots) {
        if let Some(q) = slots.tx.take_if_changed(&mut self.seen) {
            self.queue = q;
        }
    }

    /// The queue, while its connection is up.
    #[inline]
    fn live_queue(&mut self) -> Option<&mut memif::TxQueue> {
        self.queue.as_mut().filter(|q| q.is_live())
    }
}

impl Drop for MemifTx {
    fn drop(&mut self) {
        // A receive queue still cut through to this one finds nothing and leaves its frames
        // to the graph from now on.
        drop(self.home.state.take());
    }
}

impl TxQueue for MemifTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[u32]) -> usize {
        let home = &*self.home;
        let c = &home.slots.counters;
        // Always here between calls: only a call on this worker's thread takes it.
        let mut state = home.state.take();
        if let Some(s) = state.as_mut() {
            s.refresh(&home.slots);
        }
        let Some(q) = state.as_mut().and_then(|s| s.live_queue()) else {
            // Link down: the frames are dropped here, counted, not left to look like a full ring.
            home.state.store(state);
            bump(&c.tx_link_down, packets.len() as u64);
            buffers.free(packets);
            return packets.len();
        };
        let src = FromBuffers {
            buffers,
            packets,
            skip: self.skip,
            short: Cell::new(0),
            last_source: Cell::new(None),
        };
        let report = q.transmit_report(&src);
        let n = report.taken;
        bump(&c.tx_packets, report.sent);
        bump(&c.tx_bytes, report.bytes);
        bump(&c.tx_too_short, src.short.get());
        bump(&c.tx_peer_to_peer, report.held_copies);
        home.state.store(state);
        buffers.free(&packets[..n]);
        n
    }

    fn copies_external(&self) -> bool {
        true
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

/// Quiver packets (chains too) as a memif transmit source.
struct FromBuffers<'a> {
    buffers: &'a WorkerBuffers,
    packets: &'a [u32],
    skip: usize,
    /// Frames no longer than the header left out (sent as nothing).
    short: Cell<u64>,
    /// The external source last looked up, by id: a burst's held frames mostly come from one.
    last_source: Cell<Option<(u32, &'a HeldFrames)>>,
}

impl<'a> FromBuffers<'a> {
    /// The memif queue's held frames behind external source `id`, if it is one.
    #[inline]
    fn held_frames(&self, id: u32) -> Option<&'a HeldFrames> {
        match self.last_source.get() {
            Some((last, held)) if last == id => Some(held),
            _ => {
                let buffers: &'a WorkerBuffers = self.buffers;
                let held = &buffers
                    .external_source(id)?
                    .as_any()
                    .downcast_ref::<HeldSource>()?
                    .0;
                self.last_source.set(Some((id, held)));
                Some(held)
            }
        }
    }
}

impl TxSource for FromBuffers<'_> {
    fn frames(&self) -> usize {
        self.packets.len()
    }

    #[inline]
    fn frame_len(&self, i: usize) -> usize {
        let len = self.buffers.meta(self.packets[i]).total_length() as usize;
        // A frame no longer than the header left out is sent as nothing: memif drops and counts
        // empty frames (and takes them, so each is counted here once).
        if len <= self.skip {
            self.short.set(self.short.get() + 1);
        }
        len.saturating_sub(self.skip)
    }

    /// A frame received on a memif port of this worker and not copied yet is copied from
    /// that peer's memory straight into this one's.
    #[inline]
    fn held(&self, i: usize) -> Option<(&HeldFrames, u32, usize)> {
        let bi = self.packets[i];
        let (source, token) = self.buffers.external_ref(bi)?;
        let held = self.held_frames(source)?;
        let meta = self.buffers.meta(bi);
        if meta.next().is_some() {
            return None;
        }
        // The window may have moved (metadata only) inside the frame; a window reaching past
        // the frame is refused by the copy, which then reads the bytes the usual way.
        let start =
            usize::from(meta.data_offset()).checked_sub(usize::from(self.buffers.headroom()))?;
        Some((held, token, start + self.skip))
    }

    #[inline]
    fn bytes_at(&self, i: usize, offset: usize) -> &[u8] {
        let mut off = offset + self.skip;
        for bi in self.buffers.chain(self.packets[i]) {
            let d = self.buffers.data(bi);
            if off < d.len() {
                return &d[off..];
            }
            off -= d.len();
        }
        &[]
    }
}

enum Command {
    Add(Arc<MemifPort>, mpsc::Sender<Result<(), PortError>>),
    Remove(String, mpsc::Sender<bool>),
    Stop,
}

/// The control thread of every memif port: handshakes, reconnects, link state, and handing
/// queues to workers.
pub struct MemifControl {
    commands: mpsc::Sender<Command>,
    wake: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
    workers: usize,
}

impl MemifControl {
    /// Starts the control thread for ports used by `workers` workers (each port gets that many
    /// queue pairs; a slave asks for that many).
    pub fn start(workers: usize) -> Result<MemifControl, PortError> {
        let wake = Arc::new(
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).map_err(|e| {
                PortError::Sys {
                    what: "eventfd".into(),
                    source: e,
                }
            })?,
        );
        let (tx, rx) = mpsc::channel();
        let w = wake.clone();
        let thread = std::thread::Builder::new()
            .name("quiver-memif".into())
            .spawn(move || ControlLoop::new(rx, w, workers).run())
            .map_err(|e| PortError::Device(format!("cannot start the memif thread: {e}")))?;
        Ok(MemifControl {
            commands: tx,
            wake,
            thread: Some(thread),
            workers: workers.max(1),
        })
    }

    fn send(&self, c: Command) {
        let _ = self.commands.send(c);
        let _ = self.wake.write(1);
    }

    /// Adds a port: a master starts listening (sharing the socket with other masters on the same
    /// address), a slave starts connecting. Its link comes up on its own.
    pub fn add_port(&self, config: MemifPortConfig) -> Result<Arc<MemifPort>, PortError> {
        if config.log2_ring_size > memif::ring::MAX_LOG2_RING_SIZE {
            return Err(PortError::Config(format!(
                "{}: log2 ring size {} is above 14",
                config.name, config.log2_ring_size
            )));
        }
        let port = Arc::new(MemifPort {
            link: Mutex::new(LinkStatus::Down("not connected yet".into())),
            workers: (0..self.workers)
                .map(|_| {
                    Arc::new(WorkerSlots {
                        rx: QueueSlot::new(),
                        tx: QueueSlot::new(),
                        counters: QueueCounters::default(),
                    })
                })
                .collect(),
            taken: Mutex::new(vec![false; self.workers]),
            memif_counters: Mutex::new(memif::Counters::default()),
            peer_queues: AtomicU64::new(0),
            config,
        });
        let (tx, rx) = mpsc::channel();
        self.send(Command::Add(port.clone(), tx));
        rx.recv()
            .map_err(|_| PortError::Device("the memif thread is gone".into()))??;
        Ok(port)
    }

    /// Removes the port called `name` (disconnecting its peer). Returns whether it existed.
    pub fn remove_port(&self, name: &str) -> bool {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Remove(name.into(), tx));
        rx.recv().unwrap_or(false)
    }
}

impl Drop for MemifControl {
    fn drop(&mut self) {
        self.send(Command::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A master socket: its address and the namespace it was bound in (`None`: Quiver's own).
/// Ports with the same key share one socket.
type MasterKey = (SocketAddress, Option<NetNsId>);

/// Where a port's interface lives on the control thread.
enum Endpoint {
    /// On the master listening on this socket, with this id.
    Master(MasterKey, u32),
    /// Its own slave.
    Slave(Box<Slave>),
}

struct Managed {
    port: Arc<MemifPort>,
    endpoint: Endpoint,
    view: LinkView,
}

/// What the workers were last given.
#[derive(Default)]
struct LinkView {
    /// The interface's `connects` count whose queues were handed out.
    handed: u64,
    up: bool,
}

struct ControlLoop {
    commands: mpsc::Receiver<Command>,
    wake: Arc<EventFd>,
    workers: usize,
    masters: Vec<(MasterKey, Master)>,
    ports: HashMap<String, Managed>,
}

impl ControlLoop {
    fn new(commands: mpsc::Receiver<Command>, wake: Arc<EventFd>, workers: usize) -> Self {
        ControlLoop {
            commands,
            wake,
            workers: workers.max(1),
            masters: Vec::new(),
            ports: HashMap::new(),
        }
    }

    fn run(mut self) {
        loop {
            while let Ok(c) = self.commands.try_recv() {
                match c {
                    Command::Add(port, reply) => {
                        let _ = reply.send(self.add(port));
                    }
                    Command::Remove(name, reply) => {
                        let _ = reply.send(self.remove(&name));
                    }
                    Command::Stop => return,
                }
            }
            self.step();
            self.wait();
        }
    }

    fn add(&mut self, port: Arc<MemifPort>) -> Result<(), PortError> {
        let cfg = port.config.clone();
        if self.ports.contains_key(&cfg.name) {
            return Err(PortError::Config(format!(
                "a memif port named {} exists",
                cfg.name
            )));
        }
        let mut icfg = InterfaceConfig::new(cfg.id);
        icfg.name = cfg.name.clone();
        icfg.mode = cfg.mode;
        icfg.secret = cfg.secret.clone();
        icfg.buffer_size = cfg.buffer_size;
        icfg.log2_ring_size = cfg.log2_ring_size;
        icfg.queue_pairs = u16::try_from(self.workers).unwrap_or(u16::MAX);
        let bad = |e: memif::Error| PortError::Config(format!("{}: {e}", cfg.name));
        let endpoint = match cfg.role {
            Role::Master => {
                let key: MasterKey = (cfg.socket.clone(), cfg.netns.as_ref().map(NetNs::id));
                let k = match self.masters.iter().position(|(k, _)| *k == key) {
                    Some(k) => k,
                    None => {
                        let mcfg = MasterConfig {
                            max_ring: u16::try_from(self.workers.saturating_sub(1))
                                .unwrap_or(u16::MAX),
                            ..MasterConfig::default()
                        };
                        let master = match &cfg.netns {
                            None => Master::bind(cfg.socket.clone(), mcfg).map_err(bad)?,
                            Some(ns) => Master::from_listener(
                                ns.listen_memif(&cfg.socket)
                                    .map_err(|e| PortError::Config(format!("{}: {e}", cfg.name)))?,
                                cfg.socket.clone(),
                                mcfg,
                            ),
                        };
                        self.masters.push((key.clone(), master));
                        self.masters.len() - 1
                    }
                };
                self.masters[k].1.add_interface(icfg).map_err(bad)?;
                Endpoint::Master(key, cfg.id)
            }
            Role::Slave => {
                let mut slave = Slave::new(cfg.socket.clone(), icfg).map_err(bad)?;
                if let Some(ns) = cfg.netns.clone() {
                    // Every (re)connect from inside the namespace, where the master's socket is.
                    slave.set_connector(Box::new(move |addr| {
                        ns.run(|| memif::socket::ControlSocket::connect(addr))
                            .unwrap_or_else(|e| Err(memif::Error::Config(e.to_string())))
                    }));
                }
                Endpoint::Slave(Box::new(slave))
            }
        };
        tracing::info!(port = %cfg.name, role = ?cfg.role, socket = %cfg.socket, id = cfg.id, "memif port added");
        self.ports.insert(
            cfg.name.clone(),
            Managed {
                port,
                endpoint,
                view: LinkView::default(),
            },
        );
        Ok(())
    }

    fn remove(&mut self, name: &str) -> bool {
        let Some(m) = self.ports.remove(name) else {
            return false;
        };
        for w in &m.port.workers {
            w.rx.put(None);
            w.tx.put(None);
        }
        m.port.set_link(LinkStatus::Down("removed".into()));
        match m.endpoint {
            Endpoint::Master(key, id) => {
                if let Some(k) = self.masters.iter().position(|(x, _)| *x == key) {
                    self.masters[k].1.remove_interface(id, "interface removed");
                    if self.masters[k].1.is_empty() {
                        self.masters.remove(k);
                    }
                }
            }
            Endpoint::Slave(mut s) => s.disconnect("interface removed"),
        }
        true
    }

    /// Advances every handshake and hands out or withdraws queues on link changes.
    fn step(&mut self) {
        let ports = &mut self.ports;
        for (key, m) in &mut self.masters {
            // Queues go to the workers before the slave reads CONNECTED: it may transmit at
            // once, and the frames it sends to another port must find that port's queues.
            let up = m.poll_with(|iface| {
                let id = iface.id();
                let served =
                    |e: &Endpoint| matches!(e, Endpoint::Master(k, i) if k == key && *i == id);
                if let Some(managed) = ports.values_mut().find(|p| served(&p.endpoint)) {
                    sync(&managed.port, &mut managed.view, iface);
                }
            });
            if let Err(e) = up {
                tracing::warn!(socket = %m.address(), "memif master: {e}");
            }
        }
        let masters = &mut self.masters;
        for managed in self.ports.values_mut() {
            let iface = match &mut managed.endpoint {
                Endpoint::Master(key, id) => masters
                    .iter_mut()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, m)| m.interface_mut(*id)),
                Endpoint::Slave(s) => {
                    if let Err(e) = s.poll() {
                        tracing::warn!(port = %managed.port.config.name, "memif slave: {e}");
                    }
                    Some(s.interface_mut())
                }
            };
            if let Some(iface) = iface {
                sync(&managed.port, &mut managed.view, iface);
            }
        }
    }

    /// Sleeps until a control socket or the command channel has something, or 50 ms pass (slaves
    /// retry connecting on a timer).
    fn wait(&self) {
        let mut fds: Vec<BorrowedFd<'_>> = vec![self.wake.as_fd()];
        for (_, m) in &self.masters {
            fds.extend(m.control_fds());
        }
        for managed in self.ports.values() {
            if let Endpoint::Slave(s) = &managed.endpoint {
                fds.extend(s.control_fd());
            }
        }
        let mut pfds: Vec<PollFd<'_>> = fds
            .into_iter()
            .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
            .collect();
        let _ = nix::poll::poll(&mut pfds, PollTimeout::from(50u8));
        drop(pfds);
        let _ = self.wake.read();
    }
}

/// Brings a port's view in line with its interface: new connection → queues to the workers;
/// link lost → queues withdrawn.
fn sync(port: &MemifPort, view: &mut LinkView, iface: &mut Interface) {
    let counters = iface.counters();
    if iface.is_up() && counters.connects != view.handed {
        if let Some(q) = iface.detach_queues() {
            let (nrx, ntx) = (q.rx.len(), q.tx.len());
            let mut rx = q.rx.into_iter();
            let mut tx = q.tx.into_iter();
            for w in &port.workers {
                w.rx.put(rx.next());
                w.tx.put(tx.next());
            }
            let usable = nrx.min(ntx);
            if usable < port.workers.len() {
                tracing::warn!(port = %port.config.name, queues = usable, workers = port.workers.len(),
                    "memif peer gave fewer queue pairs than workers: the other workers' frames to it are dropped");
            }
            port.peer_queues.store(usable as u64, Ordering::Relaxed);
            view.handed = counters.connects;
            view.up = true;
            port.set_link(LinkStatus::Up);
            tracing::info!(port = %port.config.name, peer = iface.peer_name(), queues = usable, "memif link up");
        }
    } else if !iface.is_up() && view.up {
        for w in &port.workers {
            w.rx.put(None);
            w.tx.put(None);
        }
        view.up = false;
        port.peer_queues.store(0, Ordering::Relaxed);
        let why = match iface.link() {
            memif::LinkState::Down(r) => r.clone(),
            memif::LinkState::Up => String::new(),
        };
        port.set_link(LinkStatus::Down(why));
    } else if !iface.is_up() {
        if let memif::LinkState::Down(r) = iface.link() {
            port.set_link(LinkStatus::Down(r.clone()));
        }
    }
    *port
        .memif_counters
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = counters;
}
