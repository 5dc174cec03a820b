//! Receive queues an input node has stopped polling because they were idle, woken by their
//! descriptors (VPP's adaptive receive mode): one epoll set per input node, asked at most every
//! [`CHECK_INTERVAL_US`] µs, so any number of idle queues costs a pass about as much as none.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// How often (at most) the sleeping queues' descriptors are asked, in µs: a sleeping queue's
/// first frame waits up to this long (or one idle sleep of the worker, if longer).
pub const CHECK_INTERVAL_US: u64 = 10;

/// The epoll set of one input node's sleeping queues.
pub(super) struct Sleepers {
    epoll: Option<OwnedFd>,
    /// TSC cycles between checks.
    interval: u64,
    /// When the set was last asked (TSC).
    last: u64,
}

impl Sleepers {
    /// An empty set (the epoll descriptor is made when a queue first sleeps).
    pub(super) fn new() -> Sleepers {
        Sleepers {
            epoll: None,
            interval: 0,
            last: 0,
        }
    }

    /// Watches `fd` for interface `interface`'s queue; false when that cannot be done (the
    /// queue stays polled).
    pub(super) fn add(&mut self, fd: RawFd, interface: u32) -> bool {
        if self.epoll.is_none() {
            // SAFETY: epoll_create1 takes flags and returns a new descriptor or -1.
            let e = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if e < 0 {
                return false;
            }
            // SAFETY: `e` is a new descriptor nothing else owns.
            self.epoll = Some(unsafe { OwnedFd::from_raw_fd(e) });
            self.interval = crate::cycles::tsc_hz() / 1_000_000 * CHECK_INTERVAL_US;
        }
        let Some(epoll) = &self.epoll else {
            return false;
        };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: u64::from(interface),
        };
        // SAFETY: both descriptors are open; `ev` is a valid event the call only reads.
        let r = unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        r == 0
    }

    /// Stops watching `fd`.
    pub(super) fn remove(&mut self, fd: RawFd) {
        if let Some(epoll) = &self.epoll {
            let mut ev = libc::epoll_event { events: 0, u64: 0 };
            // SAFETY: both descriptors are open (the queue holding `fd` is alive); the event
            // argument is ignored for a delete but must be non-null on old kernels.
            unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
        }
    }

    /// Whether it is time to ask the set again.
    #[inline]
    pub(super) fn due(&mut self) -> bool {
        let now = crate::cycles::now();
        if now.wrapping_sub(self.last) < self.interval {
            return false;
        }
        self.last = now;
        true
    }

    /// The interfaces whose queues have something to read now (without waiting), at most
    /// `out.len()`; returns how many.
    pub(super) fn ready(&mut self, out: &mut [u32]) -> usize {
        let Some(epoll) = &self.epoll else {
            return 0;
        };
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 32];
        let max = events.len().min(out.len()) as libc::c_int;
        // SAFETY: `events` has room for `max` entries; a timeout of 0 never blocks.
        let n = unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), max, 0) };
        let n = n.max(0) as usize;
        for (o, e) in out.iter_mut().zip(&events[..n]) {
            *o = e.u64 as u32;
        }
        n
    }
}
