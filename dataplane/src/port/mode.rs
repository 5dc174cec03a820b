//! How an input node serves a receive queue (VPP's receive modes), and a cell through which a
//! driver publishes it to the control side (`show interfaces`) without locks.

use std::sync::atomic::{AtomicU8, Ordering};

/// How a receive queue is served, as [`super::PortsInput`] tells the queue through
/// [`super::RxQueue::set_mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum RxMode {
    /// On the poll list: polled every loop pass.
    #[default]
    Polling = 0,
    /// Asleep: off the poll list, waited on through its wake descriptor
    /// ([`super::RxQueue::wake_fd`]) until it has frames again.
    Interrupt = 1,
}

impl RxMode {
    /// Its name as `show interfaces` prints it: `polling` or `interrupt`.
    pub fn name(self) -> &'static str {
        match self {
            RxMode::Polling => "polling",
            RxMode::Interrupt => "interrupt",
        }
    }
}

impl std::fmt::Display for RxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A queue's [`RxMode`], written by the worker that owns the queue (one relaxed store, only
/// when the mode changes) and read by anyone.
#[derive(Debug, Default)]
pub struct RxModeCell(AtomicU8);

impl RxModeCell {
    /// Records `mode`.
    #[inline]
    pub fn set(&self, mode: RxMode) {
        self.0.store(mode as u8, Ordering::Relaxed);
    }

    /// The mode last recorded ([`RxMode::Polling`] until one is).
    pub fn get(&self) -> RxMode {
        match self.0.load(Ordering::Relaxed) {
            1 => RxMode::Interrupt,
            _ => RxMode::Polling,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_holds_the_last_mode_set() {
        let c = RxModeCell::default();
        assert_eq!(c.get(), RxMode::Polling);
        c.set(RxMode::Interrupt);
        assert_eq!(c.get(), RxMode::Interrupt);
        assert_eq!(c.get().to_string(), "interrupt");
        c.set(RxMode::Polling);
        assert_eq!(c.get().name(), "polling");
    }
}
