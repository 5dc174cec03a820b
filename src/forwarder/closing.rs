//! What a change leaves to close that may wait in the kernel: a kernel port (TAP, AF_PACKET,
//! AF_XDP) and its queues. Closing a TAP device's descriptor or an AF_PACKET socket waits for
//! RCU grace periods (`synchronize_net`, `rcu_barrier`), 15 to 30 ms each on a loaded machine:
//! an NSM KERNEL connection's two TAPs take 35 ms. Closed on the configuration owner's thread,
//! that time held up every other client's change. When the owner asks for it
//! ([`Forwarder::defer_closing`]), the forwarder keeps them instead, and the owner has them
//! closed on threads of their own before it answers the change that left them (its caller
//! still finds them gone when answered).

use super::*;

/// Something to close (dropped) off the owner's thread.
pub type Closing = Box<dyn Send>;

impl Forwarder {
    /// From now on, what a change leaves to close that may wait in the kernel is kept for
    /// [`Forwarder::take_closing`] instead of closed at once.
    pub fn defer_closing(&mut self) {
        self.closing.get_or_insert_with(Vec::new);
    }

    /// What changes left to close since the last call (empty unless
    /// [`Forwarder::defer_closing`] was called).
    pub fn take_closing(&mut self) -> Vec<Closing> {
        self.closing
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Closes `item` now, or keeps it for the owner when closing is deferred.
    pub(crate) fn dispose(&mut self, item: Closing) {
        match &mut self.closing {
            Some(kept) => kept.push(item),
            None => drop(item),
        }
    }

    /// [`Forwarder::dispose`] of each of `items` (nothing for none).
    pub(super) fn dispose_all<T: Send + 'static>(&mut self, items: Vec<T>) {
        if !items.is_empty() {
            self.dispose(Box::new(items));
        }
    }
}

/// Whether closing a port of this kind (or its queues) may wait in the kernel.
pub(super) fn closes_slowly(section: &PortSection) -> bool {
    matches!(
        section,
        PortSection::Tap(_) | PortSection::AfPacket(_) | PortSection::AfXdp(_)
    )
}
