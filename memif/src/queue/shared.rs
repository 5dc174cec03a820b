//! The memory and rings of a live connection as the data path sees them: [`Queue`] (one ring
//! as used by this side), [`Shared`] (the connection's regions, shared with detached queues),
//! the slave's posting of its own receive buffers ([`refill`]), and [`Segment`], a checked piece
//! of a received frame.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::region::Region;
use crate::ring::{Desc, Ring, RingRef};

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

/// The memory of a live connection: shared by the interface and every queue detached from it,
/// so a mapping outlives the connection until the last queue using it is dropped.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) regions: Vec<Region>,
    pub(crate) buffer_size: u32,
    /// Cleared when the connection goes down: detached queues stop using it.
    live: AtomicBool,
}

impl Shared {
    pub(crate) fn new(regions: Vec<Region>, buffer_size: u32) -> Arc<Shared> {
        Arc::new(Shared {
            regions,
            buffer_size,
            live: AtomicBool::new(true),
        })
    }

    pub(crate) fn set_dead(&self) {
        self.live.store(false, Ordering::Release);
    }

    pub(super) fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    pub(super) fn ring<'a>(&'a self, q: &Queue) -> Option<RingRef<'a>> {
        self.regions.get(q.region).map(|r| q.ring.at(r))
    }
}

/// Slave receive ring: post every free buffer (slot s always uses buffer s) and publish head.
pub(crate) fn refill(r: RingRef<'_>, q: &mut Queue, buffer_size: u32) {
    let consumed = q.idx;
    refill_upto(r, q, buffer_size, consumed);
}

/// [`refill`] where the slots from `consumed` on are not free yet (held frames).
pub(super) fn refill_upto(r: RingRef<'_>, q: &mut Queue, buffer_size: u32, consumed: u16) {
    let n = r.size();
    let outstanding = q.posted.wrapping_sub(consumed);
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

pub(crate) fn fd_ready(fd: BorrowedFd<'_>, what: PollFlags) -> bool {
    let mut p = [PollFd::new(fd, what)];
    matches!(nix::poll::poll(&mut p, PollTimeout::ZERO), Ok(1))
        && p[0].revents().is_some_and(|r| r.intersects(what))
}

/// A validated piece of a received frame in the peer's memory.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Segment {
    pub(super) region: u16,
    pub(super) offset: u64,
    pub(super) len: u32,
}
