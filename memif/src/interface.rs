//! The application-facing interface: link state, counters and the copy-mode data path.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;

use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::msg::Mode;
use crate::region::Region;
use crate::ring::{Desc, Ring, RingRef, DESC_FLAG_NEXT};

/// Largest frame reassembled from a descriptor chain.
pub const MAX_FRAME: usize = 65536;

/// Which end of the connection an interface is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Listens; maps the slave's regions; writes ring tails.
    Master,
    /// Connects; owns the shared memory; writes ring heads.
    Slave,
}

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
    /// Number of queue pairs the slave asks for.
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

/// Interface counters. Bad-descriptor drops are counted by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames not sent for lack of ring space (or an empty/oversized frame).
    pub tx_dropped: u64,
    /// Descriptors naming a region that does not exist.
    pub bad_desc_region: u64,
    /// Descriptors whose offset + length lies outside their region.
    pub bad_desc_offset: u64,
    /// Descriptors of length zero.
    pub bad_desc_zero_length: u64,
    /// Descriptors longer than a buffer, or chains longer than [`MAX_FRAME`].
    pub bad_desc_too_long: u64,
    /// Descriptor chains whose NEXT flag runs past the last available slot.
    pub bad_desc_chain: u64,
    /// Times the peer advanced its ring index by more than the ring holds (clamped).
    pub ring_index_overrun: u64,
    /// Connections established.
    pub connects: u64,
    /// Disconnections.
    pub disconnects: u64,
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

/// One ring as used by this side.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) ring: Ring,
    pub(crate) region: usize,
    pub(crate) eventfd: OwnedFd,
    /// Master rx: consumed = tail written. Master tx: tail. Slave tx: head. Slave rx: consumed.
    pub(crate) idx: u16,
    /// Slave rx only: head (buffers posted).
    pub(crate) posted: u16,
    /// Slave only: offset in region 0 of this ring's first buffer.
    pub(crate) buf_base: u64,
}

/// The shared state of a live connection.
#[derive(Debug)]
pub(crate) struct Connection {
    /// Rx queues come before tx in field order so they are dropped before the regions (they hold
    /// no pointers, but keep the order obvious).
    pub(crate) rx: Vec<Queue>,
    pub(crate) tx: Vec<Queue>,
    pub(crate) regions: Vec<Region>,
    pub(crate) buffer_size: u32,
}

/// Bad-descriptor reasons.
#[derive(Debug, Clone, Copy)]
enum Bad {
    Region,
    Offset,
    Zero,
    TooLong,
    Chain,
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
}

fn ring_ref<'a>(c: &'a Connection, q: &Queue) -> Option<RingRef<'a>> {
    c.regions.get(q.region).map(|r| q.ring.at(r))
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

    /// Counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Total bad descriptors dropped, all reasons.
    pub fn bad_descriptors(&self) -> u64 {
        let c = &self.counters;
        c.bad_desc_region
            + c.bad_desc_offset
            + c.bad_desc_zero_length
            + c.bad_desc_too_long
            + c.bad_desc_chain
    }

    /// Number of receive queues while connected (0 when down).
    pub fn rx_queues(&self) -> usize {
        self.conn.as_ref().map_or(0, |c| c.rx.len())
    }

    /// Number of transmit queues while connected (0 when down).
    pub fn tx_queues(&self) -> usize {
        self.conn.as_ref().map_or(0, |c| c.tx.len())
    }

    pub(crate) fn set_up(&mut self, conn: Connection, peer_name: String) {
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
            let bsize = c.buffer_size;
            for (is_rx, q) in
                c.rx.iter_mut()
                    .map(|q| (true, q))
                    .chain(c.tx.iter_mut().map(|q| (false, q)))
            {
                let Some(r) = c.regions.get(q.region).map(|r| q.ring.at(r)) else {
                    continue;
                };
                let tail = r.tail().load(Ordering::Acquire);
                q.idx = tail;
                if role == Role::Slave {
                    q.posted = tail;
                    if is_rx {
                        refill(r, q, bsize);
                    } else {
                        r.head().store(tail, Ordering::Release);
                    }
                }
            }
        }
    }

    pub(crate) fn set_down(&mut self, reason: String) {
        if self.conn.take().is_some() {
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
                if let Some(r) = ring_ref(c, q) {
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
        let r = ring_ref(c, q)?;
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
        let role = self.role;
        let Some(c) = self.conn.as_mut() else {
            return 0;
        };
        let Some(q) = c.rx.get_mut(queue) else {
            return 0;
        };
        let Some(region) = c.regions.get(q.region) else {
            return 0;
        };
        let r = q.ring.at(region);
        let n = r.size();
        let counters = &mut self.counters;
        let scratch = &mut self.scratch;
        // The producer's index: head on S2M (master rx), tail on M2S (slave rx).
        let (produced, limit) = match role {
            Role::Master => (r.head().load(Ordering::Acquire), n),
            Role::Slave => (
                r.tail().load(Ordering::Acquire),
                q.posted.wrapping_sub(q.idx).min(n),
            ),
        };
        let mut avail = produced.wrapping_sub(q.idx);
        if avail > limit {
            counters.ring_index_overrun += 1;
            avail = limit;
        }
        let start = q.idx;
        let end = start.wrapping_add(avail);
        let mut cur = start;
        let mut delivered = 0;
        while cur != end && delivered < max {
            scratch.clear();
            let mut bad: Option<Bad> = None;
            loop {
                let d = r.read_desc(cur);
                let slot = cur & (n - 1);
                cur = cur.wrapping_add(1);
                if bad.is_none() {
                    let res = match role {
                        Role::Master => copy_desc_master(&c.regions, c.buffer_size, &d, scratch),
                        Role::Slave => {
                            let own = Desc {
                                region: 0,
                                offset: 0,
                                ..d
                            };
                            let off = q.buf_base + u64::from(slot) * u64::from(c.buffer_size);
                            copy_desc_at(&c.regions, c.buffer_size, &own, off, scratch)
                        }
                    };
                    if let Err(b) = res {
                        bad = Some(b);
                    }
                }
                if d.flags & DESC_FLAG_NEXT == 0 {
                    break;
                }
                if cur == end {
                    bad = Some(Bad::Chain);
                    break;
                }
            }
            match bad {
                Some(b) => {
                    let c = &mut *counters;
                    match b {
                        Bad::Region => c.bad_desc_region += 1,
                        Bad::Offset => c.bad_desc_offset += 1,
                        Bad::Zero => c.bad_desc_zero_length += 1,
                        Bad::TooLong => c.bad_desc_too_long += 1,
                        Bad::Chain => c.bad_desc_chain += 1,
                    }
                }
                None => {
                    counters.rx_packets += 1;
                    counters.rx_bytes += scratch.len() as u64;
                    delivered += 1;
                    f(scratch);
                }
            }
        }
        if cur != start {
            q.idx = cur;
            match role {
                // Release the slots to the slave.
                Role::Master => r.tail().store(cur, Ordering::Release),
                // Post the consumed buffers again (same slots, N indices later).
                Role::Slave => refill(r, q, c.buffer_size),
            }
        }
        delivered
    }

    /// Receive up to `bufs.len()` frames from `queue` into caller-provided vectors (each cleared
    /// and filled with one frame). Returns the number filled.
    pub fn rx_burst_into(&mut self, queue: usize, bufs: &mut [Vec<u8>]) -> usize {
        let mut i = 0;
        let max = bufs.len();
        self.rx_burst(queue, max, &mut |p: &[u8]| {
            if let Some(b) = bufs.get_mut(i) {
                b.clear();
                b.extend_from_slice(p);
            }
            i += 1;
        })
    }

    /// Send frames on `queue`, in order, until the ring is full. Returns how many frames were
    /// taken (sent, or dropped and counted in `tx_dropped`); the caller still owns the rest.
    /// Frames larger than a buffer are split over NEXT-chained descriptors. Empty frames, frames
    /// over [`MAX_FRAME`] or needing more slots than the whole ring, and (master side) frames
    /// that meet a bad posted descriptor are dropped and counted.
    pub fn tx_burst(&mut self, queue: usize, frames: &[&[u8]]) -> usize {
        let role = self.role;
        let Some(c) = self.conn.as_mut() else {
            return 0;
        };
        let Some(q) = c.tx.get_mut(queue) else {
            return 0;
        };
        let Some(region) = c.regions.get(q.region) else {
            return 0;
        };
        let r = q.ring.at(region);
        let n = r.size();
        let counters = &mut self.counters;
        let start = q.idx;
        let mut cur = start;
        // Slots we may fill: slave = free slots (N - in flight); master = buffers posted.
        let avail = match role {
            Role::Slave => {
                let in_flight = cur.wrapping_sub(r.tail().load(Ordering::Acquire));
                if in_flight > n {
                    counters.ring_index_overrun += 1;
                    0
                } else {
                    n - in_flight
                }
            }
            Role::Master => {
                let posted = r.head().load(Ordering::Acquire).wrapping_sub(cur);
                if posted > n {
                    counters.ring_index_overrun += 1;
                    n
                } else {
                    posted
                }
            }
        };
        let end = start.wrapping_add(avail);
        let mut sent = 0;
        'frames: for frame in frames {
            let too_many_slots = role == Role::Slave
                && frame.len().div_ceil(c.buffer_size as usize) > usize::from(n);
            if frame.is_empty() || frame.len() > MAX_FRAME || too_many_slots {
                counters.tx_dropped += 1;
                sent += 1;
                continue;
            }
            let pkt_start = cur;
            let mut rest: &[u8] = frame;
            while !rest.is_empty() {
                if cur == end {
                    let whole_ring = end.wrapping_sub(pkt_start) == n;
                    cur = pkt_start;
                    if whole_ring {
                        // It would not fit even in an empty ring: drop it rather than block.
                        counters.tx_dropped += 1;
                        sent += 1;
                        continue 'frames;
                    }
                    break 'frames;
                }
                let slot = cur & (n - 1);
                match role {
                    Role::Slave => {
                        let take = rest.len().min(c.buffer_size as usize);
                        let off = q.buf_base + u64::from(slot) * u64::from(c.buffer_size);
                        let ok = c
                            .regions
                            .first()
                            .is_some_and(|r0| r0.copy_in(off, &rest[..take]));
                        rest = &rest[take..];
                        r.write_desc(
                            cur,
                            Desc {
                                flags: if rest.is_empty() { 0 } else { DESC_FLAG_NEXT },
                                region: 0,
                                length: if ok { take as u32 } else { 0 },
                                offset: off as u32,
                                metadata: 0,
                            },
                        );
                    }
                    Role::Master => {
                        // The slave posted this buffer: check its copy before writing into it.
                        let d = r.read_desc(cur);
                        let cap = d.length;
                        let dst = c.regions.get(usize::from(d.region));
                        let take = rest.len().min(cap as usize);
                        let ok = take > 0
                            && dst.is_some_and(|reg| {
                                reg.contains(u64::from(d.offset), u64::from(d.length))
                                    && reg.copy_in(u64::from(d.offset), &rest[..take])
                            });
                        if !ok {
                            match dst {
                                None => counters.bad_desc_region += 1,
                                Some(_) if take == 0 => counters.bad_desc_zero_length += 1,
                                Some(_) => counters.bad_desc_offset += 1,
                            }
                            // Release the slot as an empty descriptor; the frame is lost.
                            r.write_flags_len(cur, 0, 0);
                            cur = cur.wrapping_add(1);
                            counters.tx_dropped += 1;
                            sent += 1;
                            continue 'frames;
                        }
                        rest = &rest[take..];
                        let flags = if rest.is_empty() { 0 } else { DESC_FLAG_NEXT };
                        r.write_flags_len(cur, flags, take as u32);
                    }
                }
                cur = cur.wrapping_add(1);
            }
            counters.tx_packets += 1;
            counters.tx_bytes += frame.len() as u64;
            sent += 1;
        }
        if cur != start {
            q.idx = cur;
            match role {
                Role::Slave => r.head().store(cur, Ordering::Release),
                Role::Master => r.tail().store(cur, Ordering::Release),
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            if !r.interrupts_masked() && fd_ready(q.eventfd.as_fd(), PollFlags::POLLOUT) {
                let _ = nix::unistd::write(&q.eventfd, &1u64.to_ne_bytes());
            }
        }
        sent
    }
}

/// Slave receive ring: post every free buffer (slot s always uses buffer s) and publish head.
fn refill(r: RingRef<'_>, q: &mut Queue, buffer_size: u32) {
    let n = r.size();
    let outstanding = q.posted.wrapping_sub(q.idx);
    if outstanding >= n {
        return;
    }
    let mut h = q.posted;
    for _ in 0..(n - outstanding) {
        let slot = h & (n - 1);
        r.write_desc(
            h,
            Desc {
                flags: 0,
                region: 0,
                length: buffer_size,
                offset: (q.buf_base + u64::from(slot) * u64::from(buffer_size)) as u32,
                metadata: 0,
            },
        );
        h = h.wrapping_add(1);
    }
    q.posted = h;
    r.head().store(h, Ordering::Release);
}

fn fd_ready(fd: BorrowedFd<'_>, what: PollFlags) -> bool {
    let mut p = [PollFd::new(fd, what)];
    matches!(nix::poll::poll(&mut p, PollTimeout::ZERO), Ok(1))
        && p[0].revents().is_some_and(|r| r.intersects(what))
}

/// Validate a (private copy of a) descriptor against the peer's regions and append its bytes.
fn copy_desc_master(
    regions: &[Region],
    max_len: u32,
    d: &Desc,
    out: &mut Vec<u8>,
) -> Result<(), Bad> {
    copy_desc_at(regions, max_len, d, u64::from(d.offset), out)
}

fn copy_desc_at(
    regions: &[Region],
    max_len: u32,
    d: &Desc,
    offset: u64,
    out: &mut Vec<u8>,
) -> Result<(), Bad> {
    let region = regions.get(usize::from(d.region)).ok_or(Bad::Region)?;
    if d.length == 0 {
        return Err(Bad::Zero);
    }
    if d.length > max_len || out.len() + d.length as usize > MAX_FRAME {
        return Err(Bad::TooLong);
    }
    if !region.contains(offset, u64::from(d.length)) {
        return Err(Bad::Offset);
    }
    let old = out.len();
    out.resize(old + d.length as usize, 0);
    if !region.copy_out(offset, &mut out[old..]) {
        out.truncate(old);
        return Err(Bad::Offset);
    }
    Ok(())
}
